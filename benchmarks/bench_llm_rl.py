"""GRPO against TRL's ``GRPOTrainer``, same run: held-out accuracy, wall time and tokens/s.

Both start from the same supervised warm start (one per seed, trained until greedy accuracy
on training prompts reaches ``--warm-until``) of the same small Llama built from a config,
with the same character tokenizer, training prompts (sums of operands up to
``--max-operand``: 49 gives 2,000 training pairs and 500 held out), exact-answer reward,
group size, batch (prompts × group per update), completion length, temperature, lr
(constant), Adam, KL coefficient, clipping, token-level loss ("dapo") and number of updates.
Then workbench runs the same GRPO inline, coarse and pipelined (a 2-worker LocalCluster,
started before the clock), going on past TRL's update count (``--workbench-updates``, 2× by
default): the goal is a time to an accuracy. For each: held-out accuracy (greedy, on prompts
never trained on) at TRL's update count, the wall time to it, completion tokens generated
per second, and the time workbench took to first reach TRL's final held-out accuracy on
that seed ("reaches") and to stay there ("and holds"). workbench's held-out curve comes from
the learner's weights saved every ``eval_every`` updates and measured after the run, off the
clock as TRL's final measurement is. Medians over seeds.

    pip install -e ".[bench]"          # trl
    python -m benchmarks bench_llm_rl --seeds 1 2 3 4 5 --updates 20
    python -m benchmarks bench_llm_rl --device cuda --size 100m   # on a GPU host

Where TRL's final accuracy lies decides what "reaches" can resolve: 20 updates end on the
rising part of the curve (~+0.004 a update against ±0.01 between measurements: the update
it is reached at is known to ±3); 40 end on its flat top (~+0.001 a update: ±10 updates),
where two runs that learn the same per update cross each other's level by chance
(docs/llm.md has both).

The two sides can run apart (another process, another call on a device host whose carry
cannot hold both sides' wheels) and be put together after::

    python -m benchmarks bench_llm_rl --only trl --json trl.json ...
    python -m benchmarks bench_llm_rl --only workbench --json wb.json ...
    python -m benchmarks bench_llm_rl --merge trl.json wb.json       # the table, reach times included

On a host with no registry, ``--wheels DIR`` installs the wheels `llm_wheels.py` built into
a private folder first (as ``device_check.py --wheels``).

The goal on a 2-core CPU: workbench reaches TRL's final held-out accuracy in ≤ 0.5× TRL's
wall time. ``--device cuda`` runs both on the GPU (TRL through accelerate; workbench inline on this
process's GPU, ``wb.Inline(device="gpu")``, and under GPUOnly on a worker's: every
fragment on the GPU) and ``--size 100m`` builds a ~113M-parameter Llama
(hidden 768, 12 layers, 12 heads) from a config instead of the small one; the warm start
then runs on the GPU too, at ``--warm-start-lr``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __name__ == "__main__" and "--wheels" in sys.argv:  # before the imports the wheels bring
    from benchmarks.device_wheels import rerun_with_wheels

    rerun_with_wheels(__spec__.name, sys.argv)

import torch

import workbench as wb
from workbench.algorithms import grpo
from workbench.llm import AdditionTask, heldout_accuracy, warm_start

from benchmarks import harness


#: ``--size``: the model's sizes (hidden, layers, heads) and GRPO's lr for it; ``100m`` is
#: ~113M parameters, whose GRPO lr is 10× below the small model's as its warm start's is
#: (at 1e-4 its KL to the reference passed 1 within 3 updates and held-out accuracy fell,
#: docs/llm.md), and whose weights are saved for the held-out curve every 10 updates, not
#: 5 (450 MB a time)
SIZES = {"small": {}, "100m": {"hidden": 768, "layers": 12, "heads": 12, "learning_rate": 1e-5, "eval_every": 10}}


def _sizes(options) -> dict:
    """The size's GRPOConfig fields, with ``--learning-rate`` and ``--eval-every`` when given."""
    given = {"learning_rate": options.learning_rate, "eval_every": options.eval_every}
    return {**SIZES[options.size], **{k: v for k, v in given.items() if v is not None}}


def make_task(cfg) -> AdditionTask:
    """The comparison's task: ``cfg.max_operand`` (the benchmark's 49: 2,000 training pairs,
    500 held out) split as GRPO's module splits its own."""
    return AdditionTask(cfg.max_operand, heldout_fraction=cfg.heldout_fraction, seed=grpo.cfg.seed)


def warm_model(cfg, task: AdditionTask, seed: int, device: str = "cpu", lr: float = 3e-3, until: float | None = None):
    """A model built from ``cfg``, trained supervised until ``until`` (at most
    ``cfg.warm_start_steps`` steps): every seed's GRPO starts with a reward that is often 1."""
    model = grpo.make_model(cfg, grpo.tokenizer).to(device)
    warm_start(model, grpo.tokenizer, task, steps=cfg.warm_start_steps, seed=seed, lr=lr, until=until)
    return model


class RecordingUpdate:
    """``grpo_update`` as the benchmark's workbench runs call it: the update, then after
    every ``every``-th one the learner's weights and the wall-clock time saved to
    ``directory``, so that held-out accuracy is measured after the run, off the clock, as
    TRL's final one is (measuring 500 prompts in the loop would cost
    workbench ~40 ms each time, which TRL's side does not pay). The saves' own seconds are
    kept too (each file: those before it; ``saving_s``: all of them), and taken off
    workbench's times: the small model's 0.5 MB take ~1 ms, a 113M-parameter model's 450 MB
    0.5–1 s on this CPU, which is the benchmark's cost, not workbench's."""

    def __init__(self, directory: str, every: int, also: int | None = None) -> None:
        self.directory, self.every, self.also, self.count, self.saving_s = directory, every, also, 0, 0.0

    def __call__(self, model, *args, **kwargs):
        stats = grpo.grpo_update(model, *args, **kwargs)
        self.count += 1
        if self.count % self.every == 0 or self.count == self.also:  # also: TRL's update count
            began, stamp = time.perf_counter(), time.time()
            weights = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            torch.save(
                {"time": stamp, "update": self.count, "weights": weights, "saving_s": self.saving_s},
                f"{self.directory}/{self.count:06d}.pt",
            )
            self.saving_s += time.perf_counter() - began
            Path(self.directory, "saving_s").write_text(repr(self.saving_s))
        return stats


def recorded_curve(
    directory: str, cfg, task: AdditionTask, started: float, device: str
) -> tuple[list[list[float]], float]:
    """``[seconds into the run, update, held-out accuracy]`` of each weights file
    :class:`RecordingUpdate` saved, the seconds of the saves before it taken off, and the
    seconds all the saves took."""
    model, curve = grpo.make_model(cfg, grpo.tokenizer).to(device), []
    for path in sorted(Path(directory).glob("*.pt")):
        saved = torch.load(path)
        model.load_state_dict(saved["weights"])
        curve.append(
            [
                saved["time"] - started - saved["saving_s"],
                saved["update"],
                heldout_accuracy(model, grpo.tokenizer, task),
            ]
        )
    total = Path(directory, "saving_s")
    return curve, float(total.read_text()) if total.exists() else 0.0


def run_trl(cfg, model, task: AdditionTask, seed: int, device: str = "cpu", evaluate: bool = True) -> dict:
    """TRL's GRPOTrainer with cfg's settings; returns accuracy (None unless ``evaluate``),
    wall time, tokens."""
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
            output_dir=out,
            per_device_train_batch_size=batch,
            num_generations=cfg.group_size,
            steps_per_generation=1,
            num_iterations=1,
            max_completion_length=cfg.max_new_tokens,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            learning_rate=cfg.learning_rate,
            lr_scheduler_type="constant",
            optim="adamw_torch",
            weight_decay=0.0,
            adam_epsilon=1e-8,
            beta=cfg.kl_coef,
            epsilon=cfg.clip_coef,
            loss_type="dapo",
            scale_rewards="group",
            max_grad_norm=cfg.max_grad_norm,
            max_steps=cfg.iterations,
            seed=seed,
            use_cpu=device == "cpu",
            bf16=False,
            gradient_checkpointing=False,
            report_to="none",
            save_strategy="no",
            logging_steps=cfg.iterations,
            disable_tqdm=True,
        )
        built = time.perf_counter()
        trainer = GRPOTrainer(
            model=f"{out}/start",
            reward_funcs=[exact_answer],
            args=args,
            train_dataset=Dataset.from_dict({"prompt": task.train}),
            processing_class=grpo.tokenizer,
        )
        started = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - started
    trained = trainer.model.eval()
    # wall: train() alone; building the trainer (the model and its reference loaded from
    # disk onto the device) is setup_s, which workbench's wall holds (its deploy)
    return {
        "accuracy": heldout_accuracy(trained, grpo.tokenizer, task) if evaluate else None,
        "wall_s": wall,
        "setup_s": started - built,
        "tokens_per_s": generated[0] / wall,
        "reach_s": wall,
    }


def run_workbench(
    cfg, model, task: AdditionTask, policy: str, client, device: str = "cpu", updates: int | None = None
) -> dict:
    """GRPO under ``policy`` for ``cfg.iterations`` updates (the accuracy and wall TRL's are
    compared with), then on to ``updates`` (reaching TRL's accuracy may take longer): the
    held-out curve from the weights saved every ``cfg.eval_every`` updates, measured after."""
    updates = max(updates or 0, cfg.iterations)
    with tempfile.TemporaryDirectory(prefix="workbench-grpo-") as kept:
        namespace = dict(
            vars(grpo),
            task=task,
            grpo_update=RecordingUpdate(kept, cfg.eval_every, cfg.iterations),
            # no held-out measure in the loop: RecordingUpdate's, after the run
            cfg=dataclasses.replace(cfg, model=model, eval_every=10**9, iterations=updates),
        )
        fdg = grpo.build_fdg(namespace)
        # inline on a GPU host: the whole loop in this process on its GPU, as TRL runs
        spec = wb.Inline(device="gpu") if policy == "inline" and device == "cuda" else policy
        started, epoch = time.perf_counter(), time.time()
        run = fdg.run(
            iterations=updates, steps=1, policy=spec, progress=False, cluster=client if policy != "inline" else None
        )
        wall = time.perf_counter() - started
        curve, saving = recorded_curve(kept, cfg, task, epoch, device)
    final = heldout_accuracy(run.state.fragments["learner"][0]["model"], grpo.tokenizer, task)
    metrics = run.metrics
    # at TRL's update count: RecordingUpdate saved the weights then
    at = [point for point in curve if point[1] == cfg.iterations]
    # where an iteration's time goes: each fragment's cells, median over the iterations
    split = {
        c[len("time/") : -len("_compute_s")]: float(metrics[c].median())
        for c in metrics.columns
        if c.startswith("time/") and c.endswith("_compute_s") and "[" not in c
    }
    return {
        "accuracy": at[0][2] if at else final,
        "wall_s": at[0][0] if at else wall,
        "final_accuracy": final,
        "final_wall_s": wall - saving,
        "updates": updates,
        "saving_s": saving,
        "curve": [[seconds, accuracy] for seconds, _, accuracy in curve],
        "tokens_per_s": float(metrics["perf/generated_tokens"].sum() / (wall - saving)),
        "first_iteration_s": float(metrics["time_s"].iloc[0]),
        "iteration_s": float(metrics["time_s"].diff().median()),
        "split_s": split,
        # on a GPU: the graphs replaying at the end (generate's, by shape; the update's 0/1)
        "cuda_graphs": {
            name: float(metrics[f"perf/{name}"].iloc[-1])
            for name in ("generate_cuda_graphs", "update_cuda_graph")
            if f"perf/{name}" in metrics
        },
    }


def time_to_reach(curve, target: float, final_accuracy: float, wall: float, hold: bool = False) -> float | None:
    """Seconds into the run at the first measurement (``curve``: [seconds, held-out
    accuracy] pairs) at or above ``target`` (the final accuracy, at the end of the run,
    counts too); None if never reached. With ``hold``: the first from which every later
    measurement, the final one included, stays at or above it (a spike that falls back
    does not count: an 80-prompt held-out accuracy moves by ±0.04 between measurements).

    >>> curve = [[1.0, 0.2], [2.0, 0.5], [3.0, 0.3], [4.0, 0.45]]
    >>> time_to_reach(curve, 0.4, 0.45, 5.0), time_to_reach(curve, 0.4, 0.45, 5.0, hold=True)
    (2.0, 4.0)
    >>> time_to_reach([], 0.4, 0.3, 3.0), time_to_reach(curve, 0.4, 0.3, 5.0, hold=True)
    (None, None)
    """
    points = [*curve, [wall, final_accuracy]]
    for k, (seconds, accuracy) in enumerate(points):
        if accuracy >= target and (not hold or all(a >= target for _, a in points[k:])):
            return seconds
    return None


def median_reach(reach: list[float | None]) -> float | None:
    """The median time to reach the target over seeds, a seed that never reached it
    counting as infinitely late (None when that is the median).

    >>> median_reach([1.0, None, 2.0]), median_reach([1.0, None, None]), median_reach([3.0, 1.0])
    (2.0, None, 2.0)
    """
    median = statistics.median(float("inf") if x is None else x for x in reach)
    return None if median == float("inf") else median


def print_table(rows: dict[str, list[dict]], meta: dict) -> None:
    """The medians over seeds, each workbench row's reach time against TRL's accuracy on
    the same seed (when TRL's row is there). Over the seeds every side finished (a run cut
    at a device call's limit saves the seeds it finished)."""
    finished = min((len(results) for results in rows.values()), default=0)
    seeds = meta["seeds"][:finished]
    rows = {name: results[:finished] for name, results in rows.items()}
    trl = rows.get("TRL GRPOTrainer")
    for name, results in rows.items():
        for k, result in enumerate(results):
            if name != "TRL GRPOTrainer":
                for key, hold in (("reach_s", False), ("hold_s", True)):
                    result[key] = (
                        None
                        if not trl
                        else time_to_reach(
                            result.get("curve", []),
                            trl[k]["accuracy"],
                            result.get("final_accuracy", result["accuracy"]),
                            result.get("final_wall_s", result["wall_s"]),
                            hold,
                        )
                    )
    trl_wall = statistics.median(r["wall_s"] for r in trl) if trl else None
    print(
        f"\nGRPO, {meta['updates']} updates of {grpo.GRPOConfig.prompts_per_step} prompts × "
        f"{grpo.GRPOConfig.group_size} completions, a {meta['parameters'] / 1e6:.1f}M-parameter model on "
        f"{meta['device']}{' (TF32 matmuls, both sides)' if meta.get('tf32') and meta['device'] == 'cuda' else ''}, medians over seeds {seeds}"
        + (
            f"; addition up to {meta['max_operand']}, warm start to {meta['warm_until']} train accuracy; workbench's "
            "held-out and wall at that many updates, its runs going on to "
            f"{max(r.get('updates', 0) for rs in rows.values() for r in rs)} to reach TRL's accuracy:"
            if "max_operand" in meta
            else ":"
        )
    )
    print(
        f"{'':20} {'held-out acc':>12} {'vs warm':>8} {'wall s':>7} {'gen tok/s':>9} {'reaches TRL acc s':>17} "
        f"{'÷ TRL wall':>10} {'and holds s':>11} {'÷ TRL wall':>10}"
    )
    for name, results in rows.items():
        cells = []
        for key in ("reach_s", "hold_s"):
            reached = median_reach([r.get(key, r["reach_s"]) for r in results])
            cells += [
                "—" if reached is None else f"{reached:.1f}",
                "—" if reached is None or not trl_wall else f"{reached / trl_wall:.2f}×",
            ]
        print(
            f"{name:20} {statistics.median(r['accuracy'] for r in results):>12.3f} "
            f"{statistics.median(_gain(r) for r in results):>+8.3f} "
            f"{statistics.median(r['wall_s'] for r in results):>7.1f} "
            f"{statistics.median(r['tokens_per_s'] for r in results):>9.0f} "
            f"{cells[0]:>17} {cells[1]:>10} {cells[2]:>11} {cells[3]:>10}"
        )
    print(
        "vs warm: held-out accuracy less the warm start's, same seed. TRL's wall is train() alone; "
        "workbench's wall and reach include its deploy. Reaches: the first held-out measurement at or above "
        "TRL's final accuracy on the same seed; and holds: the first from which every later one stays there. "
        "Medians over the seeds, a seed that never did counting as never"
        + (
            " ("
            + "; ".join(
                f"{name} reached it on {sum(r['reach_s'] is not None for r in results)}, held it on "
                f"{sum(r.get('hold_s') is not None for r in results)} of {len(results)}"
                for name, results in rows.items()
                if name != "TRL GRPOTrainer"
            )
            + ")."
            if trl
            else "; no TRL row: --merge it with TRL's side for the reach times."
        )
    )
    if trl and any("setup_s" in r for r in trl):
        built = statistics.median(r.get("setup_s", 0.0) + r["wall_s"] for r in trl)
        print(
            f"TRL's trainer took {statistics.median(r.get('setup_s', 0.0) for r in trl):.1f} s more "
            f"to build (median): its model and reference loaded onto the device. Counting it, as "
            f"workbench's deploy is counted ({built:.1f} s): "
            + ", ".join(
                f"{name} {median_reach([r['reach_s'] for r in results]) / built:.2f}×"
                for name, results in rows.items()
                if name != "TRL GRPOTrainer" and median_reach([r["reach_s"] for r in results]) is not None
            )
        )
    for name, results in rows.items():
        if results and "split_s" in results[0]:
            split = {
                frag: statistics.median(r["split_s"].get(frag, 0.0) for r in results) for frag in results[0]["split_s"]
            }
            print(
                f"{name}: the first iteration ended {statistics.median(r['first_iteration_s'] for r in results):.1f} s "
                f"into the run, then {statistics.median(r['iteration_s'] for r in results) * 1e3:.0f} ms an "
                "iteration; cells: "
                + ", ".join(f"{f} {v * 1e3:.0f} ms" for f, v in split.items())
                + (
                    f"; saving weights for the held-out curve took {statistics.median(r['saving_s'] for r in results):.2f} s, "
                    "taken off its times"
                    if "saving_s" in results[0]
                    else ""
                )
            )
            graphs = results[-1].get("cuda_graphs")
            if graphs:  # 0 graphs on a GPU: capturing failed (the worker's log says why) or warming up
                print(
                    f"{name}: CUDA graphs at the end of the last run: "
                    + ", ".join(f"{k} {v:.0f}" for k, v in graphs.items())
                )
    if trl and statistics.median(_gain(r) for r in trl) <= 0:
        print(
            "note: TRL's runs did not raise held-out accuracy over the warm start (median): reaching "
            "its accuracy then says nothing about learning; lower the learning rate or run longer."
        )


def _gain(result: dict) -> float:
    return result["accuracy"] - result.get("warm_start_accuracy", result["accuracy"])


def merge(paths: list[str]) -> tuple[dict, dict]:
    """Rows and settings from ``--json`` files of one comparison (refused if their settings
    differ: the sides must have run the same seeds, updates, model and device)."""
    rows, meta = {}, None
    for path in paths:
        with open(path) as f:
            saved = json.load(f)
        if meta is not None and saved["meta"] != meta:
            raise SystemExit(
                f"--merge: {path} ran other settings ({saved['meta']}) than the files "
                f"before it ({meta}); merge the files of one comparison"
            )
        meta = saved["meta"]
        rows.update(saved["rows"])
    return rows, meta


def run_seeds(options, policies: tuple[str, ...], rows: dict[str, list[dict]], client, after_seed=lambda: None) -> None:
    """Each seed's warm start, then TRL (when in ``rows``) and workbench under ``policies``
    from it, the results appended to ``rows``; ``after_seed()`` after each (saves the rows
    so far: a device call cut at its limit keeps the seeds it finished)."""
    warm_lr = options.warm_start_lr or (3e-3 if options.size == "small" else 3e-4)
    for seed in options.seeds:
        cfg = dataclasses.replace(
            grpo.GRPOConfig(),
            seed=seed,
            iterations=options.updates,
            warm_start_steps=options.warm_start_steps,
            max_operand=options.max_operand,
            **_sizes(options),
        )
        task = make_task(cfg)
        began = time.perf_counter()
        start = warm_model(cfg, task, seed, options.device, warm_lr, options.warm_until)
        warm_s = time.perf_counter() - began
        before = heldout_accuracy(start, grpo.tokenizer, task)
        if "TRL GRPOTrainer" in rows:
            torch.manual_seed(seed)
            rows["TRL GRPOTrainer"].append(run_trl(cfg, start, task, seed, options.device))
        for policy in policies:
            rows[f"workbench {policy}"].append(
                run_workbench(
                    cfg, start, task, policy, client, options.device, options.workbench_updates or 2 * options.updates
                )
            )
        for results in rows.values():
            results[-1]["warm_start_accuracy"] = before
        print(
            f"seed {seed}: warm start {before:.3f}; "
            + "; ".join(f"{name} {r[-1]['accuracy']:.3f} in {r[-1]['wall_s']:.1f} s" for name, r in rows.items())
            # what a device session's plan needs: where a seed's minutes go
            + f" (the seed took {time.perf_counter() - began:.0f} s, its warm start {warm_s:.0f} s)",
            flush=True,
        )
        after_seed()


def allow_tf32() -> None:
    """Float32 matmuls and convolutions in TF32 in this process (``--tf32``)."""
    import torch as process_torch  # a name of its own: cloudpickle sends the function to workers by value

    process_torch.backends.cuda.matmul.allow_tf32 = process_torch.backends.cudnn.allow_tf32 = True


def main() -> None:
    parser = harness.parser(__doc__, json_output=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--updates", type=int, default=grpo.GRPOConfig.iterations)
    parser.add_argument(
        "--warm-start-steps", type=int, default=800, help="the most supervised steps before GRPO (see --warm-until)"
    )
    parser.add_argument(
        "--warm-until", type=float, default=0.6, help="stop the warm start at this greedy accuracy on training prompts"
    )
    parser.add_argument(
        "--max-operand",
        type=int,
        default=49,
        help="prompts a+b= with a, b ≤ this; a fifth of the pairs held out (49: 500)",
    )
    parser.add_argument(
        "--eval-every",
        type=int,
        default=None,
        help="workbench's weights saved for its held-out curve every this many updates "
        "(default: 5; 10 for --size 100m, whose 450 MB saves cost more)",
    )
    parser.add_argument(
        "--workbench-updates",
        type=int,
        default=None,
        help="workbench's runs go on to this many updates (default 2 × --updates): "
        "reaching TRL's accuracy may take more than its count",
    )
    parser.add_argument(
        "--warm-start-lr",
        type=float,
        default=None,
        help="the warm start's Adam lr (default: 3e-3 for small, 3e-4 for 100m)",
    )
    parser.add_argument(
        "--learning-rate", type=float, default=None, help="GRPO's Adam lr, both sides (default: the size's, SIZES)"
    )
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="cuda: TRL on the GPU, workbench under GPUOnly"
    )
    parser.add_argument("--size", choices=sorted(SIZES), default="small", help="the model built from a config")
    parser.add_argument("--only", choices=("trl", "workbench"), help="run one side only (see --merge)")
    parser.add_argument(
        "--policies",
        nargs="+",
        choices=("inline", "coarse", "pipelined", "gpuonly"),
        help="workbench's policies (default: inline, coarse, pipelined on the CPU; inline, "
        "gpuonly on a GPU); inline alone starts no cluster",
    )
    parser.add_argument(
        "--tf32",
        action="store_true",
        help="on a GPU, float32 matmuls and convolutions in TF32 for the whole process: "
        "both sides alike (torch's default, and this script's, is full float32)",
    )
    parser.add_argument("--merge", nargs="+", metavar="FILE", help="print the table of --json files, run nothing")
    parser.add_argument("--wheels", metavar="DIR", help="install DIR's wheels privately first (llm_wheels.py)")
    options = parser.parse_args()
    if options.merge:
        print_table(*merge(options.merge))
        return
    if options.eval_every is not None and options.eval_every < 1:
        parser.error(f"--eval-every {options.eval_every}: save workbench's weights every 1 or more updates")
    if options.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA GPU here")
    if options.tf32:  # process-wide: TRL's trainer and workbench inline's cells alike (workers: below)
        allow_tf32()
    cfg = dataclasses.replace(grpo.GRPOConfig(), **_sizes(options))
    meta = {
        "updates": options.updates,
        "device": options.device,
        "size": options.size,
        "seeds": options.seeds,
        "tf32": options.tf32,
        "warm_start_steps": options.warm_start_steps,
        "learning_rate": cfg.learning_rate,
        "warm_until": options.warm_until,
        "max_operand": options.max_operand,
        "eval_every": cfg.eval_every,
        "parameters": grpo.count_parameters(grpo.make_model(cfg, grpo.tokenizer)),
    }

    def save() -> None:
        if options.json:
            with open(options.json, "w") as f:
                json.dump({"meta": meta, "rows": rows}, f, indent=1)

    # on a GPU: inline (this process's GPU, nothing copied to a worker) and gpuonly (a worker's)
    default = ("inline", "coarse", "pipelined") if options.device == "cpu" else ("inline", "gpuonly")
    policies = () if options.only == "trl" else tuple(options.policies or default)
    rows: dict[str, list[dict]] = {
        **({} if options.only == "workbench" else {"TRL GRPOTrainer": []}),
        **{f"workbench {p}": [] for p in policies},
    }
    if policies and policies != ("inline",):
        from distributed import Client

        from workbench.cluster.restart_tolerant import PatientLocalCluster

        # on a GPU host one worker holds the GPU (GPUOnly places every fragment there)
        workers = 2 if options.device == "cpu" else 1
        with (
            PatientLocalCluster(
                n_workers=workers,
                threads_per_worker=2 // workers,
                processes=True,
                host="127.0.0.1",
                dashboard_address="127.0.0.1:0",
                silence_logs=logging.ERROR,
            ) as cluster,
            Client(cluster, set_as_default=False) as client,
        ):
            if options.tf32:  # workbench's other policies compute in the workers' processes
                client.run(allow_tf32)
            # warm-up: the workers import transformers and torch once (about 10 s here), as a
            # notebook's cluster would have done before the run that matters
            warm_cfg = dataclasses.replace(
                grpo.GRPOConfig(), iterations=1, max_operand=options.max_operand, **SIZES[options.size]
            )
            run_workbench(
                warm_cfg,
                grpo.make_model(warm_cfg, grpo.tokenizer).to(options.device),
                make_task(warm_cfg),
                policies[-1],
                client,
                options.device,
            )
            run_seeds(options, policies, rows, client, save)
    else:  # TRL, or inline, alone: no cluster (nor Dask's wheels on a device host)
        run_seeds(options, policies, rows, None, save)

    print_table(rows, meta)


if __name__ == "__main__":
    main()
