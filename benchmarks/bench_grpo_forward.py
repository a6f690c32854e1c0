"""One GRPO iteration's parts on the CPU with ``workbench.llm.llama_fast`` on and off, A/B in one process.

The notebook's cells (prompts, generate, reward, reference, learner, the weight sync), their
functions called directly on the notebook's model and batch (16 prompts × 8 completions):
iterations alternate between the fast Llama forward with the learner's fused Adam and
transformers' forward with ``torch.optim.Adam``, so that a busy moment of the machine
falls on both alike. Prints the median milliseconds of each part and their ratio.

    python -m benchmarks bench_grpo_forward                  # 300 iterations, 1 torch thread
    python -m benchmarks bench_grpo_forward --hidden 256 --layers 4
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import numpy as np
import torch

from workbench.algorithms import grpo
from workbench.algorithms.optim import adam
from workbench.llm import llama_fast
from workbench.llm.models import context_length, frozen, weights_copy
from workbench.llm.tasks import decode_completions, encode_prompts, score_completions

from benchmarks import harness

PARTS = ("generate", "reward", "reference", "learner", "sync")


def iteration(cfg, models, optimizer, rng) -> list[float]:
    """One iteration's parts, as the cells run them; their seconds."""
    policy, reference, model = models
    tok, task = grpo.tokenizer, grpo.task
    marks = [time.perf_counter()]
    texts = grpo.prompt_batch(task, rng, cfg)
    ids, mask = encode_prompts(
        tok, texts, task.prompt_width, max_new_tokens=cfg.max_new_tokens, context=context_length(policy)
    )
    tokens, completion_mask, logp = grpo.generate_completions(policy, tok, ids, mask, cfg)
    marks.append(time.perf_counter())
    rewards = score_completions(grpo.reward_fn, texts, decode_completions(tok, tokens))
    marks.append(time.perf_counter())
    ref_logp = grpo.reference_logp(reference, ids, mask, tokens, completion_mask, cfg)
    marks.append(time.perf_counter())
    batch = (ids, mask, tokens, completion_mask, logp, ref_logp)
    grpo.grpo_update(model, optimizer, cfg, *(x[None] for x in batch), np.asarray(rewards, dtype=np.float32)[None])
    marks.append(time.perf_counter())
    policy.load_state_dict(model.state_dict())
    marks.append(time.perf_counter())
    return list(np.diff(marks))


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (a workbench replica has 1)")
    parser.add_argument("--hidden", type=int, default=grpo.cfg.hidden)
    parser.add_argument("--layers", type=int, default=grpo.cfg.layers)
    options = parser.parse_args()
    torch.set_num_threads(options.threads)
    cfg = dataclasses.replace(grpo.cfg, hidden=options.hidden, layers=options.layers)
    sides = {}
    for fast in (True, False):  # each side its own models, the same start
        model = grpo.make_model(cfg, grpo.tokenizer)
        models = (
            grpo.make_model(cfg, grpo.tokenizer, model.state_dict()),
            frozen(grpo.make_model(cfg, grpo.tokenizer, weights_copy(model))),
            model,
        )
        optimizer = (
            adam(model.parameters(), cfg.learning_rate, eps=1e-8)
            if fast
            else torch.optim.Adam(model.parameters(), lr=cfg.learning_rate)
        )
        sides[fast] = (models, optimizer, np.random.default_rng(cfg.seed), [])
    for index in range(options.iterations + 20):
        fast = index % 2 == 0
        models, optimizer, rng, times = sides[fast]
        with llama_fast.fast_path(fast):
            parts = iteration(cfg, models, optimizer, rng)
        if index >= 20:  # warm-up: allocations, first-use imports
            times.append(parts)
    print(
        f"GRPO iteration parts, {grpo.count_parameters(sides[True][0][2]):,}-parameter Llama "
        f"(hidden {cfg.hidden}, {cfg.layers} layers), {cfg.prompts_per_step} prompts × {cfg.group_size}, "
        f"{options.threads} torch thread(s), {options.iterations // 2} iterations a side, medians (ms):"
    )
    print(f"{'':34}" + "".join(f"{p:>10}" for p in PARTS) + f"{'total':>10}")
    medians = {}
    for fast, label in ((False, "transformers' forward, torch Adam"), (True, "llama_fast, fused Adam")):
        rows = np.array(sides[fast][3]) * 1e3
        medians[fast] = [statistics.median(rows[:, i]) for i in range(len(PARTS))] + [statistics.median(rows.sum(1))]
        print(f"{label:34}" + "".join(f"{m:10.2f}" for m in medians[fast]))
    print(f"{'ratio':34}" + "".join(f"{a / b:9.2f}×" for a, b in zip(medians[True], medians[False])))


if __name__ == "__main__":
    main()
