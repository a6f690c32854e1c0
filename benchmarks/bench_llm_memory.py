"""GRPO's peak memory against TRL's ``GRPOTrainer``, same model, batch and updates.

Each side runs in a fresh process (a process's allocator keeps what it once held, so two
runs in one would measure each other), several times; the table gives the median peak above
what the process held once the starting model was built, in MB and in units of the model's
parameters (fp32 bytes: what one more copy of the model costs). On the CPU the peak is the
resident set, sampled every half millisecond; with ``--device cuda`` it is torch's
``max_memory_allocated`` on the GPU (TRL through accelerate; workbench inline on this
process's GPU, ``wb.Inline(device="gpu")``).

What the sides hold, by design: TRL trains one model and keeps a reference — the model, its
gradients, Adam's two moments and the reference, ~5 model sizes. workbench's fragments each
hold their own: the learner's model, gradients and Adam state, the generate replica's policy
and the reference's model (a replica is handed a copy of the learner's weights, whatever
the policy), and the learner's copy of the reference's starting weights, kept in host memory
for checkpoints.

    pip install -e ".[bench]"                      # trl
    python -m benchmarks bench_llm_memory          # a 33.6M-parameter Llama (128 MB), CPU
    python -m benchmarks bench_llm_memory --device cuda --hidden 768 --layers 12 --heads 12
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import threading
import time

import torch

from workbench.algorithms import grpo

from benchmarks import harness


class PeakMemory:
    """The peak above this moment of the process's resident set (CPU, sampled by a thread)
    or of torch's allocated CUDA memory."""

    def __init__(self, device: str) -> None:
        self.device = device
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.start = torch.cuda.memory_allocated()
            return
        import psutil

        self.process = psutil.Process()
        self.start = self.top = self.process.memory_info().rss
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.stopped.is_set():
            self.top = max(self.top, self.process.memory_info().rss)
            time.sleep(0.0005)

    def peak(self) -> int:
        if self.device == "cuda":
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() - self.start
        self.stopped.set()
        self.thread.join()
        return max(self.top, self.process.memory_info().rss) - self.start


def one_side(side: str, cfg, device: str) -> dict:
    """Build the model, start measuring, run ``cfg.iterations`` GRPO updates on ``side``."""
    torch.set_num_threads(1)
    model = grpo.make_model(cfg, grpo.tokenizer).to(device)
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    task = grpo.AdditionTask(cfg.max_operand, heldout_fraction=cfg.heldout_fraction, seed=cfg.seed)
    if side == "trl":
        from benchmarks.bench_llm_rl import run_trl

        meter = PeakMemory(device)
        run_trl(cfg, model, task, cfg.seed, device, evaluate=False)  # workbench's side measures none
    else:
        import workbench as wb

        # the cells build their models from the config, as the notebook's do (a model object in
        # cfg would be copied once more when the run deploys: the run's own values, docs/llm.md)
        namespace = dict(vars(grpo), task=task, cfg=dataclasses.replace(cfg, eval_every=10**9))
        meter = PeakMemory(device)
        grpo.build_fdg(namespace).run(
            iterations=cfg.iterations,
            steps=1,
            progress=False,
            policy=wb.Inline(device="gpu") if device == "cuda" else "inline",
        )
    return {"peak_bytes": meter.peak(), "model_bytes": model_bytes}


SIDES = {"trl": "TRL GRPOTrainer", "workbench": "workbench inline"}


def main() -> None:
    parser = harness.parser(__doc__, repeats=3)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--only", choices=sorted(SIDES), help="one side only")
    parser.add_argument("--side", choices=sorted(SIDES), help=argparse.SUPPRESS)  # a child process's
    options = parser.parse_args()
    cfg = dataclasses.replace(
        grpo.GRPOConfig(),
        hidden=options.hidden,
        layers=options.layers,
        heads=options.heads,
        context=16,
        prompts_per_step=4,
        group_size=4,
        iterations=options.updates,
    )
    if options.side:
        print(json.dumps(one_side(options.side, cfg, options.device)))
        return
    if options.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA GPU here")
    rows: dict[str, list[dict]] = {}
    for repeat in range(options.repeats):
        for side in [options.only] if options.only else list(SIDES):
            child = harness.module_command("benchmarks.bench_llm_memory", "--side", side, *sys.argv[1:])
            done = subprocess.run(child, capture_output=True, text=True, check=False, env=harness.child_env())
            if done.returncode:
                sys.exit(f"{side} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
            rows.setdefault(side, []).append(json.loads(done.stdout.strip().splitlines()[-1]))
    model_bytes = next(iter(rows.values()))[0]["model_bytes"]
    print(
        f"GRPO peak memory above the starting model, {model_bytes / 4 / 1e6:.1f}M parameters "
        f"({model_bytes / 2**20:.0f} MB), {options.updates} updates of {cfg.prompts_per_step} prompts × "
        f"{cfg.group_size} completions, {options.device}, median of {options.repeats} processes a side"
    )
    print(f"{'':22s}{'peak MB':>10s}{'× model':>10s}")
    for side, results in rows.items():
        peak = statistics.median(r["peak_bytes"] for r in results)
        print(f"{SIDES[side]:22s}{peak / 2**20:10.0f}{peak / model_bytes:9.1f}×")


if __name__ == "__main__":
    main()
