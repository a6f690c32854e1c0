"""Where GRPO's first iteration goes: each piece of the init cells and of the first
iterations' cells timed alone (the device synchronised before and after), then a short
inline run's per-fragment split of its first iterations.

Why: on the H200 (2026-11-27, docs/llm.md) workbench inline's first iteration of the 113M
model ended 0.7–1.2 s into the run against 71 ms for each later one: a third or more of its
wall time at 20 updates, and what kept it above half of TRL's. The run's own metrics fold the
init cells into the first iteration's compute; this script splits them. Its first run there
found the learner's copy of the reference's weights to host memory (313 ms) and their load
back (76 ms); ``weights_copy`` keeps a small model's copy on its GPU since.

Run (a GPU: the 113M model; here: the small one on the CPU, a check of the script)::

    python -m benchmarks bench_llm_first_iteration --device cuda --size 100m
    python -m benchmarks bench_llm_first_iteration            # small model, CPU

Prints one line per piece (``piece  ms``; the iterations' pieces once per iteration), then
each inline run's table (``--runs``).
"""

from __future__ import annotations

import dataclasses
import gc
import time
from contextlib import contextmanager

import torch

import workbench as wb
from workbench.algorithms import grpo
from workbench.llm import AdditionTask, warm_start
from workbench.llm.generation import model_device
from workbench.llm.models import load_weights, weights_copy
from workbench.llm.tasks import decode_completions, encode_prompts, score_completions

from benchmarks import harness
from benchmarks.bench_llm_rl import SIZES  # --size: the model's sizes, as the comparison's


class Clock:
    """Named wall-clock pieces, the device synchronised on both sides of each."""

    def __init__(self, device: str) -> None:
        self.cuda, self.rows = device.startswith("cuda"), []

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    @contextmanager
    def piece(self, name: str):
        self.sync()
        began = time.perf_counter()
        yield
        self.sync()
        self.rows.append((name, (time.perf_counter() - began) * 1e3))

    def print(self) -> None:
        for name, ms in self.rows:
            print(f"{name:<48} {ms:9.1f} ms", flush=True)


def pieces(cfg, task: AdditionTask, device: str, iterations: int) -> Clock:
    """GRPO's cells as the inline run executes them, in its order, each piece timed."""
    clock, tok = Clock(device), grpo.tokenizer
    with clock.piece("learner init: make_model (a copy of cfg.model)"):
        model = grpo.make_model(cfg, tok).to(device)
    with clock.piece("learner init: adam"):
        optimizer = grpo.adam(model.parameters(), cfg.learning_rate, eps=1e-8, device=device)
    with clock.piece("learner init: weights_copy"):
        reference_weights = weights_copy(model)
    where = next(iter(reference_weights.values())).device  # DEVICE_COPY_SHARE decides
    clock.rows[-1] = (f"{clock.rows[-1][0]} (to {where})", clock.rows[-1][1])
    with clock.piece("generate init: make_model"):
        policy = grpo.make_model(cfg, tok).to(device)
    with clock.piece("generate init: load_weights (device to device)"):
        load_weights(policy, model.state_dict())
    with clock.piece("reference init: make_model + frozen"):
        reference = grpo.frozen(grpo.make_model(cfg, tok)).to(device)
    with clock.piece(f"reference init: load_weights (from {where})"):
        load_weights(reference, reference_weights)
    rng = __import__("numpy").random.default_rng(cfg.seed)
    for i in range(1, iterations + 1):
        prompts = grpo.prompt_batch(task, rng, cfg)
        with clock.piece(f"it {i} encode_prompts"):
            ids, mask = encode_prompts(
                tok, prompts, task.prompt_width, max_new_tokens=cfg.max_new_tokens, context=grpo.context_length(policy)
            )
        with clock.piece(f"it {i} generate_completions"):
            tokens, cmask, logp = grpo.generate_completions(policy, tok, ids, mask, cfg)
        with clock.piece(f"it {i} reward (decode + score)"):
            rewards = score_completions(grpo.reward_fn, prompts, decode_completions(tok, tokens))
        with clock.piece(f"it {i} reference_logp"):
            ref_logp = grpo.reference_logp(reference, ids, mask, tokens, cmask, cfg)
        batch = [x[None] for x in (ids, mask, tokens, cmask, logp, ref_logp)]
        with clock.piece(f"it {i} grpo_update"):
            grpo.grpo_update(model, optimizer, cfg, *batch, rewards[None])
        with clock.piece(f"it {i} generate: load_weights (device to device)"):
            load_weights(policy, model.state_dict())
    with clock.piece("gc.collect()"):
        gc.collect()
    if clock.cuda:  # what torch.cuda.graph does before each capture
        cached = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
        with clock.piece(f"torch.cuda.empty_cache() ({cached / 2**20:,.0f} MiB cached, unused)"):
            torch.cuda.empty_cache()
    return clock


def inline_split(cfg, device: str, iterations: int) -> None:
    """A short inline run (``wb.Inline(device="gpu")`` on a GPU, as bench_llm_rl's): each
    of its first iterations' end and every fragment's compute (its init cells in the first)."""
    fdg = grpo.build_fdg(dict(vars(grpo), cfg=dataclasses.replace(cfg, eval_every=10**9)))
    spec = wb.Inline(device="gpu") if device.startswith("cuda") else "inline"
    began = time.perf_counter()
    run = fdg.run(iterations=iterations, steps=1, policy=spec, progress=False)
    wall = time.perf_counter() - began
    metrics = run.metrics
    fragments = [c for c in metrics.columns if c.startswith("time/") and c.endswith("_compute_s") and "[" not in c]
    print(
        f"\ninline run, {iterations} iterations, {wall:.2f} s; per iteration (ms): ended at, then each "
        "fragment's cells",
        flush=True,
    )
    print(f"{'it':>3} {'ended':>8} " + " ".join(f"{c[5:-10]:>10}" for c in fragments))
    for i in range(min(iterations, 6)):
        row = metrics.iloc[i]
        print(f"{i:>3} {row['time_s'] * 1e3:>8.0f} " + " ".join(f"{row[c] * 1e3:>10.1f}" for c in fragments))
    later = metrics["time_s"].diff().iloc[3:]
    print(f"later iterations: {harness.median(later) * 1e3:.0f} ms (median)", flush=True)


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--iterations", type=int, default=4, help="iterations of the piece-by-piece pass")
    parser.add_argument("--run-iterations", type=int, default=8, help="iterations of the inline run")
    parser.add_argument("--runs", type=int, default=2, help="inline runs after the pieces")
    parser.add_argument(
        "--warm-start-steps",
        type=int,
        default=20,
        help="supervised steps first: the forward and backward kernels loaded, as a notebook's warm start leaves them",
    )
    options = parser.parse_args()
    cfg = dataclasses.replace(grpo.GRPOConfig(), **SIZES[options.size])
    task = AdditionTask(cfg.max_operand, heldout_fraction=cfg.heldout_fraction, seed=cfg.seed)
    start = grpo.make_model(cfg, grpo.tokenizer).to(options.device)
    began = time.perf_counter()
    warm_start(
        start,
        grpo.tokenizer,
        task,
        steps=options.warm_start_steps,
        seed=cfg.seed,
        lr=3e-4 if options.size == "100m" else 3e-3,
    )
    print(
        f"{grpo.count_parameters(start):,} parameters on {model_device(start)}; warm start "
        f"{time.perf_counter() - began:.1f} s",
        flush=True,
    )
    cfg = dataclasses.replace(cfg, model=start)
    pieces(cfg, task, options.device, options.iterations).print()
    for _ in range(options.runs):
        inline_split(cfg, options.device, options.run_iterations)


if __name__ == "__main__":
    main()
