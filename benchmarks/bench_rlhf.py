"""RLHF against a learned reward model (``notebooks/rlhf.ipynb``), over seeds: does GRPO
against the reward model raise held-out accuracy, and how does it compare with GRPO
against the exact answer it stands in for?

Per seed, in one process: the warm start (until 0.6 training accuracy, as
``bench_llm_rl.py``), a reward model from it trained on ``--pairs`` preference pairs for
``--rm-steps`` steps (``policy_preferences``: the answer over the policy's wrong sample),
its held-out pair accuracy (prompts never trained on, fresh samples), then three GRPO runs
of ``--iterations`` from the same warm start, inline: against the reward model at the
notebook's KL coefficient (0.2) and at GRPO's default (0.02), and against the exact answer
(0.02, the GRPO notebook). Held-out accuracy (greedy, exact answers on prompts never
trained on) before and after each, and its highest during the run (every ``eval_every``
updates). Medians over seeds.

    python -m benchmarks bench_rlhf --seeds 1 2 3 4 5
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import numpy as np

from benchmarks import harness


def one_seed(seed: int, pairs: int, rm_steps: int, iterations: int) -> dict:
    from workbench.algorithms import grpo, rlhf
    from workbench.llm import heldout_accuracy, warm_start
    from workbench.llm.reward_model import (
        policy_preferences,
        preference_accuracy,
        reward_model_from,
        train_reward_model,
    )

    tok, task = grpo.tokenizer, grpo.task
    base = dataclasses.replace(grpo.GRPOConfig(), seed=seed, iterations=iterations)
    start = grpo.make_model(base, tok)
    warm_start(start, tok, task, steps=base.warm_start_steps, seed=seed, until=base.warm_until)
    before = heldout_accuracy(start, tok, task)
    clock = time.perf_counter()
    prompts = task.sample(np.random.default_rng(seed), pairs)
    chosen, rejected = policy_preferences(start, tok, task, prompts, max_new_tokens=base.max_new_tokens, seed=seed)
    reward_model = reward_model_from(start, tok)
    train_reward_model(reward_model, prompts, chosen, rejected, steps=rm_steps, seed=seed)
    held = policy_preferences(start, tok, task, task.heldout, max_new_tokens=base.max_new_tokens, seed=seed + 1)
    row = {
        "seed": seed,
        "before": before,
        "rm_s": time.perf_counter() - clock,
        "rm_pairs_right": preference_accuracy(reward_model, task.heldout, *held),
    }
    runs = {"rm, kl 0.2": (rlhf, 0.2), "rm, kl 0.02": (rlhf, 0.02), "exact, kl 0.02": (grpo, 0.02)}
    for name, (module, kl) in runs.items():
        cfg = dataclasses.replace(base, kl_coef=kl, model=start)
        namespace = dict(vars(module), cfg=cfg, reward_model=reward_model)
        run = module.build_fdg(namespace).run(iterations=iterations, steps=1, unit="completions", progress=False)
        logged = run.metrics.get("charts/heldout_accuracy")  # none in a run shorter than eval_every
        curve = [] if logged is None else logged.dropna().tolist()
        row[name] = heldout_accuracy(run.state.fragments["learner"][0]["model"], tok, task)
        row[f"{name} best"] = max(curve) if curve else float("nan")
    return row


def main() -> None:
    parser = harness.parser(__doc__, json_output=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--pairs", type=int, default=4096)
    parser.add_argument("--rm-steps", type=int, default=800)
    parser.add_argument("--iterations", type=int, default=40)
    args = parser.parse_args()
    rows = []
    for seed in args.seeds:
        rows.append(one_seed(seed, args.pairs, args.rm_steps, args.iterations))
        r = rows[-1]
        print(
            f"seed {seed}: reward model ranks {r['rm_pairs_right']:.3f} of held-out pairs right "
            f"({r['rm_s']:.0f} s); held-out {r['before']:.3f} → rm/kl 0.2 {r['rm, kl 0.2']:.3f}, "
            f"rm/kl 0.02 {r['rm, kl 0.02']:.3f}, exact {r['exact, kl 0.02']:.3f}",
            flush=True,
        )
    names = ["rm, kl 0.2", "rm, kl 0.02", "exact, kl 0.02"]
    print(
        "\n| seed | reward model: held-out pairs ranked right | held-out before | "
        + " | ".join(f"after GRPO, {n} (best)" for n in names)
        + " |"
    )
    print("|---:|---:|---:|" + "---:|" * len(names))
    for r in rows + [{"seed": "median", **{k: statistics.median(x[k] for x in rows) for k in rows[0] if k != "seed"}}]:
        cells = [f"{r[n]:.3f} ({r[f'{n} best']:.3f})" for n in names]
        print(f"| {r['seed']} | {r['rm_pairs_right']:.3f} | {r['before']:.3f} | " + " | ".join(cells) + " |")
    harness.write_json(args.json, rows)


if __name__ == "__main__":
    main()
