"""GRPO against TRL's ``GRPOTrainer``, same run: held-out accuracy, wall time and tokens/s.

Both start from the same supervised warm start (one per seed) of the same small Llama built
from a config, with the same character tokenizer, training prompts, exact-answer reward,
group size, batch (prompts × group per update), completion length, temperature, lr
(constant), Adam, KL coefficient, clipping, token-level loss ("dapo") and number of updates.
Then workbench runs the same GRPO inline and coarse (a 2-worker LocalCluster, started
before the clock). For each: the final held-out accuracy (greedy, on prompts never trained
on), the wall time of training, completion tokens generated per second, and the time
workbench took to first reach TRL's final held-out accuracy (measured every ``eval_every``
updates). Medians over seeds.

    pip install -e ".[bench]"          # trl
    python benchmarks/bench_llm_rl.py --seeds 1 2 3 --updates 40
    python benchmarks/bench_llm_rl.py --device cuda --size 100m   # on a GPU host

The two sides can run apart (another process, another call on a device host whose carry
cannot hold both sides' wheels) and be put together after::

    python benchmarks/bench_llm_rl.py --only trl --json trl.json ...
    python benchmarks/bench_llm_rl.py --only workbench --json wb.json ...
    python benchmarks/bench_llm_rl.py --merge trl.json wb.json       # the table, reach times included

On a host with no registry, ``--wheels DIR`` installs the wheels `llm_wheels.py` built into
a private folder first (as ``device_check.py --wheels``).

The goal on a 2-core CPU: workbench reaches TRL's final held-out accuracy in ≤ 0.5× TRL's
wall time. ``--device cuda`` runs both on the GPU (TRL through accelerate, workbench under
GPUOnly: every fragment on the GPU) and ``--size 100m`` builds a ~113M-parameter Llama
(hidden 768, 12 layers, 12 heads) from a config instead of the small one; the warm start
then runs on the GPU too, at ``--warm-start-lr``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import statistics
import sys
import tempfile
import time

if __name__ == "__main__" and "--wheels" in sys.argv:  # before the imports the wheels bring
    from device_check import rerun_with_wheels

    rerun_with_wheels(sys.argv)

import torch

from workbench.algorithms import grpo
from workbench.llm import heldout_accuracy, warm_start


#: ``--size``: the model's sizes (hidden, layers, heads); ``100m`` is ~113M parameters
SIZES = {"small": {}, "100m": {"hidden": 768, "layers": 12, "heads": 12}}


def warm_model(cfg, seed: int, device: str = "cpu", lr: float = 3e-3):
    model = grpo.make_model(cfg, grpo.tokenizer).to(device)
    warm_start(model, grpo.tokenizer, grpo.task, steps=cfg.warm_start_steps, seed=seed, lr=lr)
    return model


def run_trl(cfg, model, seed: int, device: str = "cpu") -> dict:
    """TRL's GRPOTrainer with cfg's settings; returns accuracy, wall time, tokens."""
    from datasets import Dataset
    from trl import GRPOConfig as TRLConfig, GRPOTrainer

    generated = [0]

    def exact_answer(prompts, completions, completion_ids=None, **_):
        generated[0] += sum(len(ids) for ids in completion_ids)
        return [grpo.reward_fn(p, c) for p, c in zip(prompts, completions)]

    batch = cfg.prompts_per_step * cfg.group_size
    with tempfile.TemporaryDirectory() as out:
        # a directory, not the object: with a KL term TRL loads its reference from the path
        model.save_pretrained(f"{out}/start")
        args = TRLConfig(
            output_dir=out, per_device_train_batch_size=batch, num_generations=cfg.group_size,
            steps_per_generation=1, num_iterations=1, max_completion_length=cfg.max_new_tokens,
            temperature=cfg.temperature, top_p=cfg.top_p, learning_rate=cfg.learning_rate,
            lr_scheduler_type="constant", optim="adamw_torch", weight_decay=0.0, adam_epsilon=1e-8,
            beta=cfg.kl_coef, epsilon=cfg.clip_coef, loss_type="dapo", scale_rewards="group",
            max_grad_norm=cfg.max_grad_norm, max_steps=cfg.iterations, seed=seed, use_cpu=device == "cpu",
            bf16=False, gradient_checkpointing=False, report_to="none", save_strategy="no",
            logging_steps=cfg.iterations, disable_tqdm=True)
        trainer = GRPOTrainer(model=f"{out}/start", reward_funcs=[exact_answer], args=args,
                              train_dataset=Dataset.from_dict({"prompt": grpo.task.train}),
                              processing_class=grpo.tokenizer)
        started = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - started
    trained = trainer.model.eval()
    return {"accuracy": heldout_accuracy(trained, grpo.tokenizer, grpo.task), "wall_s": wall,
            "tokens_per_s": generated[0] / wall, "reach_s": wall}


def run_workbench(cfg, model, policy: str, client) -> dict:
    fdg = grpo.build_fdg(dict(vars(grpo), cfg=dataclasses.replace(cfg, model=model)))
    started = time.perf_counter()
    run = fdg.run(iterations=cfg.iterations, steps=1, policy=policy, progress=False,
                  cluster=client if policy != "inline" else None)
    wall = time.perf_counter() - started
    final = heldout_accuracy(run.state.fragments["learner"][0]["model"], grpo.tokenizer, grpo.task)
    metrics = run.metrics
    # measured every cfg.eval_every updates (none in a run shorter than that)
    measured = metrics.get("charts/heldout_accuracy", metrics.iloc[:0, :0]).dropna()
    return {"accuracy": final, "wall_s": wall,
            "curve": [[float(metrics.loc[i, "time_s"]), float(v)] for i, v in measured.items()],
            "tokens_per_s": float(metrics["perf/generated_tokens"].sum() / wall)}


def time_to_reach(curve, target: float, final_accuracy: float, wall: float) -> float | None:
    """Seconds into the run at the first measurement (``curve``: [seconds, held-out
    accuracy] pairs) at or above ``target`` (the final accuracy, at the end of the run,
    counts too); None if never reached.

    >>> time_to_reach([[1.0, 0.2], [2.0, 0.5]], 0.4, 0.5, 3.0), time_to_reach([], 0.4, 0.3, 3.0)
    (2.0, None)
    """
    hits = [seconds for seconds, accuracy in curve if accuracy >= target]
    if hits:
        return hits[0]
    return wall if final_accuracy >= target else None


def print_table(rows: dict[str, list[dict]], meta: dict) -> None:
    """The medians over seeds, each workbench row's reach time against TRL's accuracy on
    the same seed (when TRL's row is there)."""
    trl = rows.get("TRL GRPOTrainer")
    for name, results in rows.items():
        for k, result in enumerate(results):
            if name != "TRL GRPOTrainer":
                result["reach_s"] = None if not trl else time_to_reach(
                    result.get("curve", []), trl[k]["accuracy"], result["accuracy"], result["wall_s"])
    trl_wall = statistics.median(r["wall_s"] for r in trl) if trl else None
    print(f"\nGRPO, {meta['updates']} updates of {grpo.GRPOConfig.prompts_per_step} prompts × "
          f"{grpo.GRPOConfig.group_size} completions, a {meta['parameters'] / 1e6:.1f}M-parameter model on "
          f"{meta['device']}, medians over seeds {meta['seeds']}:")
    print(f"{'':18} {'held-out acc':>12} {'wall s':>8} {'gen tok/s':>10} {'reach TRL acc s':>16} {'÷ TRL wall':>10}")
    for name, results in rows.items():
        reach = [r["reach_s"] for r in results]
        reached = None if any(x is None for x in reach) else statistics.median(reach)
        ratio = "—" if reached is None or not trl_wall else f"{reached / trl_wall:.2f}×"
        print(f"{name:18} {statistics.median(r['accuracy'] for r in results):>12.3f} "
              f"{statistics.median(r['wall_s'] for r in results):>8.1f} "
              f"{statistics.median(r['tokens_per_s'] for r in results):>10.0f} "
              f"{('—' if reached is None else f'{reached:.1f}'):>16} {ratio:>10}")


def merge(paths: list[str]) -> tuple[dict, dict]:
    """Rows and settings from ``--json`` files of one comparison (refused if their settings
    differ: the sides must have run the same seeds, updates, model and device)."""
    rows, meta = {}, None
    for path in paths:
        with open(path) as f:
            saved = json.load(f)
        if meta is not None and saved["meta"] != meta:
            raise SystemExit(f"--merge: {path} ran other settings ({saved['meta']}) than the files "
                             f"before it ({meta}); merge the files of one comparison")
        meta = saved["meta"]
        rows.update(saved["rows"])
    return rows, meta


def run_seeds(options, policies: tuple[str, ...], rows: dict[str, list[dict]], client) -> None:
    """Each seed's warm start, then TRL (when in ``rows``) and workbench under ``policies``
    from it, the results appended to ``rows``."""
    warm_lr = options.warm_start_lr or (3e-3 if options.size == "small" else 3e-4)
    for seed in options.seeds:
        cfg = dataclasses.replace(grpo.GRPOConfig(), seed=seed, iterations=options.updates,
                                  warm_start_steps=options.warm_start_steps, **SIZES[options.size])
        start = warm_model(cfg, seed, options.device, warm_lr)
        before = heldout_accuracy(start, grpo.tokenizer, grpo.task)
        if "TRL GRPOTrainer" in rows:
            torch.manual_seed(seed)
            rows["TRL GRPOTrainer"].append(run_trl(cfg, start, seed, options.device))
        for policy in policies:
            rows[f"workbench {policy}"].append(run_workbench(cfg, start, policy, client))
        for results in rows.values():
            results[-1]["warm_start_accuracy"] = before
        print(f"seed {seed}: warm start {before:.3f}; " + "; ".join(
            f"{name} {r[-1]['accuracy']:.3f} in {r[-1]['wall_s']:.1f} s" for name, r in rows.items()),
            flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--updates", type=int, default=grpo.GRPOConfig.iterations)
    parser.add_argument("--warm-start-steps", type=int, default=grpo.GRPOConfig.warm_start_steps)
    parser.add_argument("--warm-start-lr", type=float, default=None,
                        help="the warm start's Adam lr (default: 3e-3 for small, 3e-4 for 100m)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: TRL on the GPU, workbench under GPUOnly")
    parser.add_argument("--size", choices=sorted(SIZES), default="small", help="the model built from a config")
    parser.add_argument("--only", choices=("trl", "workbench"), help="run one side only (see --merge)")
    parser.add_argument("--json", help="also write the rows and settings to this file")
    parser.add_argument("--merge", nargs="+", metavar="FILE", help="print the table of --json files, run nothing")
    parser.add_argument("--wheels", metavar="DIR", help="install DIR's wheels privately first (llm_wheels.py)")
    options = parser.parse_args()
    if options.merge:
        print_table(*merge(options.merge))
        return
    if options.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA GPU here")
    policies = () if options.only == "trl" else ("inline", "coarse") if options.device == "cpu" else ("gpuonly",)
    rows: dict[str, list[dict]] = {**({} if options.only == "workbench" else {"TRL GRPOTrainer": []}),
                                   **{f"workbench {p}": [] for p in policies}}
    if policies:
        from distributed import Client

        from workbench.cluster.patient import PatientLocalCluster

        # on a GPU host one worker holds the GPU (GPUOnly places every fragment there)
        workers = 2 if options.device == "cpu" else 1
        with PatientLocalCluster(n_workers=workers, threads_per_worker=2 // workers, processes=True,
                                 host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                 silence_logs=logging.ERROR) as cluster, \
                Client(cluster, set_as_default=False) as client:
            # warm-up: the workers import transformers and torch once (about 10 s here), as a
            # notebook's cluster would have done before the run that matters
            warm_cfg = dataclasses.replace(grpo.GRPOConfig(), iterations=1, **SIZES[options.size])
            run_workbench(warm_cfg, grpo.make_model(warm_cfg, grpo.tokenizer), policies[-1], client)
            run_seeds(options, policies, rows, client)
    else:  # TRL alone: no cluster (nor Dask's wheels on a device host)
        run_seeds(options, policies, rows, None)

    cfg = dataclasses.replace(grpo.GRPOConfig(), **SIZES[options.size])
    meta = {"updates": options.updates, "device": options.device, "size": options.size, "seeds": options.seeds,
            "warm_start_steps": options.warm_start_steps,
            "parameters": grpo.count_parameters(grpo.make_model(cfg, grpo.tokenizer))}
    if options.json:
        with open(options.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print_table(rows, meta)


if __name__ == "__main__":
    main()
