"""Workbench vs RLlib, whole processes, interleaved seed by seed (issue 58).

Every run is a fresh process started as a user starts it; each seed runs every contender
before the next seed starts (the order rotates from seed to seed), so machine noise hits
all of them alike, and the tables give medians and the ratios of medians from that one run.
RLlib lives in a venv of its own (it is never a workbench dependency): its runs are this
script, started by that venv's python as a child that imports only ray.

solve — PPO on CartPole-v1, time to solve (≥ 475)
    workbench: ``workbench run notebooks/quickstart.ipynb --set cfg.seed=K --policy coarse
    --no-progress``, its summary line (``solved (≥ 475) at iteration N after X s, S env
    steps``: timed from the run's start, after the embedded cluster is up).
    RLlib: its tuned CartPole example (rllib/examples/algorithms/ppo/cartpole_ppo.py: lr 3e-4,
    6 epochs, vf_loss_coeff 0.01, one shared linear hidden layer of 32; the new API stack) with
    2 env runners of 1 env each (the example's command line sets the runners: here one per core),
    ``.debugging(seed=K)``, in ``ray.init(num_cpus=2)``; solved at the first ``train()``
    whose ``env_runners/episode_return_mean`` is ≥ 475, 300k env steps at most. Training time:
    from just before the first ``train()`` (``build_algo()`` excluded, as workbench excludes
    the cluster's start) to the result that solved. Env steps: ``num_env_steps_sampled_lifetime``.
    Whole process: the child's wall time, measured here for both.
    The solved rules: workbench's is the mean of the last 20 episodes (after 20 not counted);
    RLlib's ``episode_return_mean`` is a mean over ``metrics_num_episodes_for_smoothing``
    episodes, set here to the same 20 (``--rllib-window``; RLlib's default, 100, lags more).

throughput — env-steps/s, both at RLlib's settings
    RLlib as above, a fixed 10 ``train()`` iterations of its default 4,000-step batch; rate =
    env steps sampled in iterations 2..10 / their time. workbench: the quickstart FDG
    (``workbench.algorithms.ppo.build_fdg`` with a ``PPOConfig`` set to RLlib's batch: 2 envs
    (one per actor replica under coarse) × 2,000 steps = 4,000 samples, 32 minibatches of 125
    × 6 epochs = 192 Adam steps (RLlib cycles through the batch in minibatches of 128 until
    6 epochs are covered: 188 steps), lr 3e-4 not annealed, vf_coef 0.01, ent_coef 0,
    hidden 32, no observation normalisation), 10 iterations under coarse on the embedded
    cluster, the rate over iterations 2..10 from the run's rows.
    What cannot be matched: workbench's network is two separate tanh MLPs (two hidden layers
    of 32 each, policy and value), RLlib's one shared linear layer of 32 with two heads;
    RLlib steps 2 gymnasium envs in 2 env-runner actors, workbench its NumPy CartPole in 2
    actor replicas. The loss details differ too but not the work per step (RLlib's defaults:
    clip 0.3, GAE λ 1.0, value loss clipped at 10, a KL term; workbench's: 0.2, 0.95, none,
    none, gradient norm clipped at 0.5).

async — RLlib APPO vs workbench A3C, time to solve (≥ 475) and env-steps/s over the run
    RLlib: its tuned example (rllib/tuned_examples/appo/cartpole_appo.py:
    circular_buffer_iterations_per_batch 2, vf_loss_coeff 0.05, entropy_coeff 0, shared
    layers: DefaultModelConfig's 256×256 tanh), 2 env runners, 120 s of training at most
    (reported unsolved past that). Two changes: its learner runs in the driver
    (``num_learners=0``, as PPO's does by default): APPO's default is one remote learner
    actor, which needs a CPU beside the 2 env runners' and, in ``ray.init(num_cpus=2)``,
    waited for one until the 900 s timeout (with ``num_cpus=3`` it ran, no faster); and
    ``min_time_s_per_iteration`` is lowered from IMPALA's 10 s to 1 s so that a solve is seen
    within a second (reporting only: the asynchronous sampling and learning go on as before).
    workbench: ``workbench run notebooks/a3c.ipynb --set cfg.seed=K --no-progress`` (A3C
    under the Async policy, 32 envs × 8 steps, 64×64 tanh MLPs; its solved rule is the mean
    of the last 32 episodes). Neither is deterministic: the order in which asynchronous
    updates land varies from run to run, for one seed.
    env-steps/s: env steps / training time over the whole run (workbench's summary figure,
    which counts the steps of iterations the stop left unfinished).

scaling — a CPU-heavy env, env-steps/s at 1, 2, … workers (``--sizes``; default 1 2)
    The env: CartPole-v1 whose every step also computes for ``--cost-ms`` ms (default 2: a
    physics step of a big simulator), the same class on both sides. Weak scaling: each env
    runner / acting replica steps one env 500 steps per iteration, the learner updates at
    RLlib's settings on the 500·n samples (6 epochs, ≈128-sample minibatches, lr 3e-4, hidden
    32). RLlib: PPO with ``num_env_runners=n``, ``rollout_fragment_length=500``, in
    ``ray.init(num_cpus=max(n, 2))``. workbench: the quickstart FDG under
    ``SingleLearnerCoarse(actors=n)`` on a LocalCluster of n single-thread workers. Rate over
    iterations 2..6; efficiency = rate(n) / (n · rate(1)). On this 2-core box only 1 and 2
    mean anything; a 16-core host runs ``--only scaling --sizes 1 2 4 8 16`` (issue 59).

policies — the paper's policy comparison: the quickstart under ``--policy coarse`` vs
    ``--policy multilearner``, time to solve, env steps and whole process (workbench only).

Getting RLlib (this script installs nothing):

    python -m venv /work/venvs/rllib
    /work/venvs/rllib/bin/pip install torch==2.13.0 'ray[rllib]==2.60.0' gymnasium
    python -m benchmarks bench_rllib                              # seeds 1 2 3, every part
    python -m benchmarks bench_rllib --seeds 1 --only solve --json rllib.json
    python -m benchmarks bench_rllib --only scaling --sizes 1 2 4 8 16   # a 16-core host
    python -m benchmarks bench_rllib --rllib-python ~/rl/bin/python

Without RLlib the RLlib runs are skipped with a line saying so, and their ratios read "n/a".
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks import bench_peers, harness  # the standard library only: the RLlib venv imports them too
from benchmarks.bench_peers import fail, workbench_cmd
from benchmarks.harness import median as med
from benchmarks.harness import spread as span

ROOT = harness.ROOT
MARK = "BENCH_RLLIB "  # a child's one JSON result line
QUICKSTART = ROOT / "notebooks" / "quickstart.ipynb"
A3C = ROOT / "notebooks" / "a3c.ipynb"
DEFAULT_RLLIB_PYTHON = Path("/work/venvs/rllib/bin/python")
RLLIB_VENV_HELP = (
    "python -m venv V && V/bin/pip install torch==2.13.0 'ray[rllib]==2.60.0' gymnasium, "
    "then --rllib-python V/bin/python"
)

PARTS = ("solve", "throughput", "async", "policies", "scaling")
TARGET = 475.0
PPO_MAX_ENV_STEPS = 300_000  # RLlib PPO's cap in solve
APPO_MAX_TRAIN_S = 120.0  # RLlib APPO's cap in async
THROUGHPUT_ITERATIONS = 10  # the rate is taken over iterations 2..10
SCALING_STEPS = 500  # scaling: env steps per runner (acting replica) per iteration
SCALING_ITERATIONS = 6  # scaling: the rate is taken over iterations 2..6

# RLlib's batch (train_batch_size_per_learner 4000, minibatch_size 128) and the tuned
# example's update, as the quickstart's PPOConfig fields; 32 minibatches divide 4,000 evenly
# (31 would leave a last minibatch of one sample, whose advantages normalise to NaN)
WB_AT_RLLIB = dict(
    num_envs=2,
    num_steps=2000,
    num_minibatches=32,
    update_epochs=6,
    learning_rate=3e-4,
    anneal_lr=False,
    vf_coef=0.01,
    ent_coef=0.0,
    hidden=32,
    norm_obs=False,
)

SOLVED_RE = re.compile(r"solved \(≥ [\d.]+\) at iteration (\d+) after ([\d.]+) s, ([\d,]+) env steps")
# "105,984 env steps (22,784 of them in iterations the stop left unfinished) in 6.5 s (16,380 env-steps/s)"
RUN_RE = re.compile(r"([\d,]+) env steps(?: \([^)]*\))? in ([\d.]+) s \(([\d,]+) env-steps/s\)")
NOT_REACHED = "was not reached"  # `workbench run` says so, and exits 1, when a run ends short of its target


def number(text: str) -> int:
    return int(text.replace(",", ""))


# ============================================================================ children
def busy_cartpole(cost_ms: float):
    """CartPole-v1 whose every step also computes for ``cost_ms`` ms (a CPU-heavy env); made
    in the child's ``__main__``, so Ray and Dask ship it by value to their workers."""
    import gymnasium as gym

    class BusyCartPole(gym.Wrapper):
        def step(self, action):
            until = time.perf_counter() + cost_ms / 1000.0
            while time.perf_counter() < until:  # computes, as a simulator's step does: no sleep
                pass
            return self.env.step(action)

    return BusyCartPole(gym.make("CartPole-v1"))


def scaling_minibatches(runners: int) -> int:
    """RLlib's ≈128-sample minibatches over the 500·n-sample batch, as a count."""
    return max(1, round(SCALING_STEPS * runners / 128))


def child_rllib(algo: str, seed: int, mode: str, window: int, runners: int = 2, cost_ms: float = 2.0) -> dict:
    """RLlib in this process (the RLlib venv's python): ``mode`` "solve" trains until
    solved or capped, "throughput" 10 iterations, "scaling" 6 iterations of the busy env on
    ``runners`` env runners. Returns times since the first train()."""
    import functools
    import logging

    import ray
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    ray.init(num_cpus=max(2, runners), include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    if mode == "scaling":
        from ray.rllib.algorithms.ppo import PPOConfig
        from ray.tune.registry import register_env

        register_env("BusyCartPole", lambda _config: busy_cartpole(cost_ms))
        config = (
            PPOConfig()
            .environment("BusyCartPole")
            .training(
                lr=0.0003,
                num_epochs=6,
                vf_loss_coeff=0.01,
                minibatch_size=128,
                train_batch_size_per_learner=SCALING_STEPS * runners,
            )
            .rl_module(
                model_config=DefaultModelConfig(fcnet_hiddens=[32], fcnet_activation="linear", vf_share_layers=True)
            )
            .env_runners(rollout_fragment_length=SCALING_STEPS)
        )
    elif algo == "ppo":  # rllib/examples/algorithms/ppo/cartpole_ppo.py
        from ray.rllib.algorithms.ppo import PPOConfig

        config = (
            PPOConfig()
            .environment("CartPole-v1")
            .training(lr=0.0003, num_epochs=6, vf_loss_coeff=0.01)
            .rl_module(
                model_config=DefaultModelConfig(fcnet_hiddens=[32], fcnet_activation="linear", vf_share_layers=True)
            )
        )
    else:  # rllib/tuned_examples/appo/cartpole_appo.py
        from ray.rllib.algorithms.appo import APPOConfig

        config = (
            APPOConfig()
            .environment("CartPole-v1")
            .training(circular_buffer_iterations_per_batch=2, vf_loss_coeff=0.05, entropy_coeff=0.0)
            .rl_module(model_config=DefaultModelConfig(vf_share_layers=True))
            .reporting(min_time_s_per_iteration=1)  # IMPALA's 10 s would hide a solve for up to 10 s
            .learners(num_learners=0)
        )  # its default remote learner waits forever for a 3rd CPU
    del functools
    config = (
        config.env_runners(num_env_runners=runners)
        .debugging(seed=seed)
        .reporting(metrics_num_episodes_for_smoothing=window)
    )
    trainer = config.build_algo()

    iterations: list[dict] = []
    result: dict = {"solved": False, "ray": ray.__version__}
    started = time.perf_counter()
    while True:
        out = trainer.train()
        now = time.perf_counter() - started
        runners = out.get("env_runners", {})
        steps = int(out["num_env_steps_sampled_lifetime"])  # top level and in env_runners (ray 2.60)
        ret = runners.get("episode_return_mean", math.nan)
        iterations.append({"time_s": now, "env_steps": steps, "return": ret})
        if len(iterations) == 1:  # once, so a run shows what 2.x named its results
            result["result_keys"] = sorted(out)
            result["env_runner_keys"] = sorted(runners)
        if mode in ("throughput", "scaling"):
            if len(iterations) == (THROUGHPUT_ITERATIONS if mode == "throughput" else SCALING_ITERATIONS):
                first, last = iterations[0], iterations[-1]
                result.update(
                    sps=(last["env_steps"] - first["env_steps"]) / (last["time_s"] - first["time_s"]),
                    run_sps=last["env_steps"] / last["time_s"],
                    env_steps=last["env_steps"],
                    time_s=now,
                )
                break
        elif ret >= TARGET:
            result.update(solved=True, time_s=now, env_steps=steps, iteration=len(iterations))
            break
        elif (algo == "ppo" and steps >= PPO_MAX_ENV_STEPS) or (algo == "appo" and now >= APPO_MAX_TRAIN_S):
            result.update(time_s=now, env_steps=steps, iteration=len(iterations))
            break
    result["sps"] = result.get("sps", result["env_steps"] / result["time_s"])
    result["iterations"] = iterations
    trainer.stop()
    ray.shutdown()
    return result


def child_wb_throughput(seed: int) -> dict:
    """The quickstart FDG at RLlib's batch and update, 10 iterations under coarse."""
    from workbench.algorithms import ppo

    cfg = ppo.PPOConfig(seed=seed, iterations=THROUGHPUT_ITERATIONS, **WB_AT_RLLIB)
    fdg = ppo.build_fdg({**vars(ppo), "cfg": cfg})
    run = fdg.run(iterations=cfg.iterations, steps=cfg.num_steps, policy="coarse", progress=False)
    first, last = run.rows[0], run.rows[-1]  # iterations 2..10, as RLlib's
    loop = (last["env_steps"] - first["env_steps"]) / (last["time_s"] - first["time_s"])
    return {"sps": loop, "run_sps": run.steps_per_second, "env_steps": run.env_steps, "time_s": run.wall_time}


def child_wb_scaling(seed: int, workers: int, cost_ms: float) -> dict:
    """The quickstart FDG on the busy env, ``SingleLearnerCoarse(actors=workers)`` on a
    LocalCluster of ``workers`` single-thread workers, 6 iterations."""
    import functools

    from distributed import Client, LocalCluster

    import workbench as wb
    from workbench.algorithms import ppo

    settings = {
        **WB_AT_RLLIB,
        "num_envs": workers,
        "num_steps": SCALING_STEPS,
        "num_minibatches": scaling_minibatches(workers),
    }
    cfg = ppo.PPOConfig(
        seed=seed, iterations=SCALING_ITERATIONS, env_id=functools.partial(busy_cartpole, cost_ms), **settings
    )
    fdg = ppo.build_fdg({**vars(ppo), "cfg": cfg})
    with (
        LocalCluster(n_workers=workers, threads_per_worker=1, host="127.0.0.1", dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        run = fdg.run(
            iterations=cfg.iterations,
            steps=cfg.num_steps,
            policy=wb.SingleLearnerCoarse(actors=workers),
            cluster=client,
            progress=False,
        )
    first, last = run.rows[0], run.rows[-1]  # iterations 2..6, as RLlib's
    loop = (last["env_steps"] - first["env_steps"]) / (last["time_s"] - first["time_s"])
    return {"sps": loop, "run_sps": run.steps_per_second, "env_steps": run.env_steps, "time_s": run.wall_time}


# ============================================================================ the parent
def spawn_session(cmd: list[str], timeout: float, cwd: str) -> tuple[str, float, int]:
    """``bench_peers.spawn`` for a process that starts a Ray node: in a session of its own,
    whose processes (raylet, agents, env runners) are all killed once it exits or times out,
    so a hung or killed run leaves nothing running into the next one."""
    started = time.perf_counter()
    env = harness.child_env(**bench_peers.PEER_ENV)  # finds ``benchmarks`` from any folder, in either venv
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        out, rc = (out or "") + f"\n[timed out after {timeout:.0f} s]", -9
    wall = time.perf_counter() - started
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # whatever of Ray's outlived its driver
    except ProcessLookupError:
        pass
    return out, wall, rc


def run_rllib(algo: str, mode: str, seed: int, args: argparse.Namespace, tmp: str, runners: int = 2) -> dict | None:
    cmd = [
        args.rllib_python,
        "-m",
        "benchmarks.bench_rllib",
        "--child",
        f"rllib-{algo}-{mode}",
        "--seed",
        str(seed),
        "--rllib-window",
        str(args.rllib_window),
        "--workers",
        str(runners),
        "--cost-ms",
        str(args.cost_ms),
    ]
    out, wall, rc = spawn_session(cmd, args.timeout, tmp)
    res = harness.read_result(out, MARK)
    if res is None:
        return fail(f"rllib {algo} {mode} seed {seed}" + (f" {runners} runners" if mode == "scaling" else ""), out, rc)
    return {**res, "process_s": wall}


def run_notebook(notebook: Path, seed: int, policy: str | None, timeout: float, tmp: str) -> dict | None:
    cmd = workbench_cmd() + ["run", str(notebook), "--set", f"cfg.seed={seed}", "--no-progress"]
    if policy:
        cmd += ["--policy", policy]
    out, wall, rc = harness.spawn(cmd, timeout, tmp)
    solved, whole = SOLVED_RE.search(out), RUN_RE.search(out)
    if whole is None or (rc != 0 and NOT_REACHED not in out):  # an unsolved run exits 1: a measurement
        return fail(f"workbench {notebook.stem} {policy or ''} seed {seed}", out, rc)
    res = {
        "solved": bool(solved),
        "sps": float(number(whole.group(3))),
        "run_env_steps": number(whole.group(1)),
        "run_time_s": float(whole.group(2)),
        "process_s": wall,
    }
    if solved:
        return {**res, "time_s": float(solved.group(2)), "env_steps": number(solved.group(3))}
    return {**res, "time_s": float(whole.group(2)), "env_steps": number(whole.group(1))}


def run_wb_scaling(seed: int, workers: int, args: argparse.Namespace, tmp: str) -> dict | None:
    out, wall, rc = harness.spawn(
        harness.module_command(
            "benchmarks.bench_rllib",
            "--child",
            "wb-scaling",
            "--seed",
            str(seed),
            "--workers",
            str(workers),
            "--cost-ms",
            str(args.cost_ms),
        ),
        args.timeout,
        tmp,
    )
    res = harness.read_result(out, MARK)
    if res is None:
        return fail(f"workbench scaling seed {seed} {workers} workers", out, rc)
    return {**res, "process_s": wall}


def run_wb_throughput(seed: int, timeout: float, tmp: str) -> dict | None:
    out, wall, rc = harness.spawn(
        harness.module_command("benchmarks.bench_rllib", "--child", "wb-throughput", "--seed", str(seed)), timeout, tmp
    )
    res = harness.read_result(out, MARK)
    if res is None:
        return fail(f"workbench throughput seed {seed}", out, rc)
    return {**res, "process_s": wall}


# ---------------------------------------------------------------------------- tables
def solve_table(rows_by: dict[str, list[dict]], names: dict[str, str]) -> dict[str, tuple]:
    """Print solved k/n and median (min–max) training s, whole process s, env steps; return the medians."""
    print("| | solved | training time to solve (s) | whole process (s) | env steps to solve |")
    print("|---|---|---|---|---|")
    m = {}
    for who, rows in rows_by.items():
        if not rows:
            continue
        times = [r["time_s"] if r["solved"] else math.inf for r in rows]
        procs = [r["process_s"] for r in rows]
        steps = [r["env_steps"] if r["solved"] else math.inf for r in rows]
        m[who] = (med(times), med(procs), med(steps))
        print(
            f"| {names[who]} | {sum(r['solved'] for r in rows)}/{len(rows)} | {span(times, '{:.2f}')} | "
            f"{span(procs, '{:.1f}')} | {span(steps, '{:,.0f}')} |"
        )
    return m


def scaling_table(rows_by: dict[str, list[dict]], sizes: list[int]) -> str:
    """One row per size: each side's median env-steps/s and efficiency, and their ratio.

    >>> rows = {"workbench@1": [{"sps": 400.0}], "rllib@1": [{"sps": 300.0}],
    ...         "workbench@2": [{"sps": 760.0}], "rllib@2": []}
    >>> print(scaling_table(rows, [1, 2]))
    | workers / env runners | workbench env-steps/s | efficiency | RLlib env-steps/s | efficiency | workbench / RLlib |
    |---|---|---|---|---|---|
    | 1 | 400 (400–400) | 100% | 300 (300–300) | 100% | 1.33× |
    | 2 | 760 (760–760) | 95% | n/a | n/a | n/a |
    """
    base = min(sizes)
    medians = {who: med([r["sps"] for r in rows]) for who, rows in rows_by.items() if rows}
    lines = [
        "| workers / env runners | workbench env-steps/s | efficiency | RLlib env-steps/s | efficiency "
        "| workbench / RLlib |",
        "|---|---|---|---|---|---|",
    ]
    for n in sizes:
        cells = [str(n)]
        for side in ("workbench", "rllib"):
            rows, one = rows_by.get(f"{side}@{n}", []), medians.get(f"{side}@{base}")
            if not rows:
                cells += ["n/a", "n/a"]
                continue
            cells.append(span([r["sps"] for r in rows], "{:,.0f}"))
            cells.append(f"{medians[f'{side}@{n}'] / (one * n / base):.0%}" if one else "n/a")
        both = [medians.get(f"{side}@{n}") for side in ("workbench", "rllib")]
        cells.append(ratio(both[0], both[1]) if all(both) else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratio(a: float, b: float) -> str:
    if math.isinf(a) or math.isinf(b):
        return "n/a (the median run did not solve)"
    return f"{a / b:.2f}×" if b and math.isfinite(a) and math.isfinite(b) else "n/a"


def ratio_lines(m: dict[str, tuple], num: str, den: str, what: str) -> None:
    if num not in m or den not in m:
        print(f"{what}: n/a ({num if num not in m else den} not run or every run failed)")
        return
    print(f"{what}, training time to solve: {ratio(m[num][0], m[den][0])}")
    print(f"{what}, whole process:          {ratio(m[num][1], m[den][1])}")
    print(f"{what}, env steps to solve:     {ratio(m[num][2], m[den][2])}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[1:]),
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="the seeds (default 1 2 3)")
    parser.add_argument(
        "--only",
        choices=PARTS,
        nargs="+",
        metavar="PART",
        help=f"these comparisons only ({', '.join(PARTS)}; default: all)",
    )
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[1, 2],
        metavar="N",
        help="scaling: workers / env runners per step (default 1 2)",
    )
    parser.add_argument(
        "--cost-ms",
        type=float,
        default=2.0,
        metavar="MS",
        help="scaling: the CPU time each env step computes (default 2)",
    )
    parser.add_argument(
        "--rllib-python",
        metavar="PYTHON",
        default=str(DEFAULT_RLLIB_PYTHON) if DEFAULT_RLLIB_PYTHON.exists() else None,
        help=f"the python of a venv with ray[rllib] (default {DEFAULT_RLLIB_PYTHON} if it exists)",
    )
    parser.add_argument(
        "--rllib-window",
        type=int,
        default=20,
        metavar="N",
        help="episodes in RLlib's episode_return_mean (metrics_num_episodes_for_smoothing; "
        "default 20, as workbench's rule; RLlib's own default is 100)",
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds per process (default 900)")
    parser.add_argument(
        "--peer-threads",
        type=int,
        default=1,
        metavar="N",
        help="torch threads of RLlib's process (OMP_NUM_THREADS; default 1, as workbench runs "
        "its small networks; 0 = torch's default)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write every measurement to FILE")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=2, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child and args.child.startswith("rllib-"):
        _, algo, mode = args.child.split("-")
        harness.print_result(child_rllib(algo, args.seed, mode, args.rllib_window, args.workers, args.cost_ms), MARK)
        return
    if args.child == "wb-scaling":
        harness.print_result(child_wb_scaling(args.seed, args.workers, args.cost_ms), MARK)
        return
    if args.child == "wb-throughput":
        harness.print_result(child_wb_throughput(args.seed), MARK)
        return

    if args.peer_threads > 0:
        bench_peers.PEER_ENV.update(OMP_NUM_THREADS=str(args.peer_threads), MKL_NUM_THREADS=str(args.peer_threads))
    rllib = None
    if not args.rllib_python:
        print(f"RLlib: skipped — no venv at {DEFAULT_RLLIB_PYTHON}; make one: {RLLIB_VENV_HELP}")
    elif not os.access(args.rllib_python, os.X_OK):
        print(f"RLlib: skipped — {args.rllib_python} is not an executable python; make a venv: {RLLIB_VENV_HELP}")
    else:
        out, _, rc = harness.spawn([args.rllib_python, "-c", "import ray.rllib, ray; print(ray.__version__)"], 120)
        if rc != 0:
            print(
                f"RLlib: skipped — {args.rllib_python} cannot import ray.rllib "
                f"({out.strip().splitlines()[-1] if out.strip() else f'exit {rc}'}); {RLLIB_VENV_HELP}"
            )
        else:
            rllib = out.strip().splitlines()[-1]

    parts = [p for p in PARTS if args.only is None or p in args.only]
    who = {
        "solve": ["workbench", "rllib"],
        "throughput": ["workbench", "rllib"],
        "async": ["workbench", "rllib"],
        "policies": ["coarse", "multilearner"],
        "scaling": [f"{c}@{n}" for n in args.sizes for c in ("workbench", "rllib")],
    }
    if not rllib:
        who = {part: [c for c in cs if not c.startswith("rllib")] for part, cs in who.items()}
    results: dict[str, dict[str, list[dict]]] = {p: {c: [] for c in who[p]} for p in parts}
    print(
        f"seeds {args.seeds}; {', '.join(parts)}; RLlib: {f'ray {rllib} ({args.rllib_python})' if rllib else 'none'} "
        f"(its torch threads: {args.peer_threads or 'default'})",
        flush=True,
    )

    def measure(part: str, contender: str, seed: int, tmp: str) -> dict | None:
        if part == "solve":
            return (
                run_rllib("ppo", "solve", seed, args, tmp)
                if contender == "rllib"
                else run_notebook(QUICKSTART, seed, "coarse", args.timeout, tmp)
            )
        if part == "throughput":
            return (
                run_rllib("ppo", "throughput", seed, args, tmp)
                if contender == "rllib"
                else run_wb_throughput(seed, args.timeout, tmp)
            )
        if part == "async":
            return (
                run_rllib("appo", "solve", seed, args, tmp)
                if contender == "rllib"
                else run_notebook(A3C, seed, None, args.timeout, tmp)
            )
        if part == "scaling":
            side, size = contender.split("@")
            return (
                run_rllib("ppo", "scaling", seed, args, tmp, runners=int(size))
                if side == "rllib"
                else run_wb_scaling(seed, int(size), args, tmp)
            )
        return run_notebook(QUICKSTART, seed, contender, args.timeout, tmp)

    begun = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_rllib_") as tmp:
        for i, seed in enumerate(args.seeds):
            for part in parts:
                cs = who[part]
                for contender in cs[i % len(cs) :] + cs[: i % len(cs)]:
                    r = measure(part, contender, seed, tmp)
                    if r is None:
                        continue
                    results[part][contender].append({"seed": seed, **r})
                    if part in ("throughput", "scaling"):
                        last = THROUGHPUT_ITERATIONS if part == "throughput" else SCALING_ITERATIONS
                        print(
                            f"  {part:10s} {contender:12s} seed {seed}: {r['sps']:,.0f} env-steps/s "
                            f"(iterations 2..{last}; process {r['process_s']:.1f} s)",
                            flush=True,
                        )
                    else:
                        print(
                            f"  {part:10s} {contender:12s} seed {seed}: "
                            f"{'solved' if r['solved'] else 'NOT solved'} after {r['time_s']:.2f} s, "
                            f"{r['env_steps']:,} env steps, {r['sps']:,.0f} env-steps/s; "
                            f"process {r['process_s']:.1f} s",
                            flush=True,
                        )
    total = time.perf_counter() - begun

    import platform

    print(
        f"\n{time.strftime('%Y-%m-%d %H:%M %Z')}; {platform.node() or 'this machine'}: "
        f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}; "
        f"{len(args.seeds)} seeds interleaved, {total / 60:.1f} min in all"
    )

    if "solve" in results:
        print("\n(solve) PPO on CartPole-v1 to a mean return ≥ 475 — median (min–max) over seeds\n")
        m = solve_table(
            results["solve"],
            {"workbench": "workbench quickstart, coarse", "rllib": "RLlib PPO (tuned cartpole_ppo.py, 2 env runners)"},
        )
        print()
        ratio_lines(m, "rllib", "workbench", "RLlib / workbench")

    if "throughput" in results:
        print(
            f"\n(throughput) env-steps/s at RLlib's settings (4,000-step batch, 6 epochs of ≈128-sample "
            f"minibatches, {THROUGHPUT_ITERATIONS} iterations, rate over 2..{THROUGHPUT_ITERATIONS}) "
            f"— median (min–max)\n"
        )
        print("| | env-steps/s (iterations 2..10) | over the whole run | whole process (s) |")
        print("|---|---|---|---|")
        names = {"workbench": "workbench quickstart FDG, coarse", "rllib": "RLlib PPO, 2 env runners"}
        s = {}
        for contender, rows in results["throughput"].items():
            if not rows:
                continue
            s[contender] = med([r["sps"] for r in rows])
            print(
                f"| {names[contender]} | {span([r['sps'] for r in rows], '{:,.0f}')} | "
                f"{span([r['run_sps'] for r in rows], '{:,.0f}')} | "
                f"{span([r['process_s'] for r in rows], '{:.1f}')} |"
            )
        print()
        if "rllib" in s and "workbench" in s:
            print(f"workbench / RLlib, env-steps/s: {ratio(s['workbench'], s['rllib'])}")
        else:
            print("workbench / RLlib, env-steps/s: n/a")

    if "async" in results:
        print(
            f"\n(async) asynchronous actor-critic on CartPole-v1 to ≥ 475 (RLlib capped at "
            f"{APPO_MAX_TRAIN_S:.0f} s of training) — median (min–max)\n"
        )
        m = solve_table(
            results["async"],
            {
                "workbench": "workbench A3C notebook, Async",
                "rllib": "RLlib APPO (tuned cartpole_appo.py, 2 env runners)",
            },
        )
        print("\n| | env-steps/s over the run |\n|---|---|")
        sps = {}
        for contender, rows in results["async"].items():
            if rows:
                sps[contender] = med([r["sps"] for r in rows])
                print(f"| {contender} | {span([r['sps'] for r in rows], '{:,.0f}')} |")
        print()
        ratio_lines(m, "rllib", "workbench", "RLlib APPO / workbench A3C")
        if "rllib" in sps and "workbench" in sps:
            print(f"workbench A3C / RLlib APPO, env-steps/s: {ratio(sps['workbench'], sps['rllib'])}")

    if "scaling" in results:
        print(
            f"\n(scaling) PPO on CartPole-v1 whose steps compute {args.cost_ms:g} ms each, {SCALING_STEPS} steps "
            f"per runner per iteration, env-steps/s over iterations 2..{SCALING_ITERATIONS} — median (min–max); "
            f"efficiency = rate(n) / (n · rate({min(args.sizes)}) / {min(args.sizes)})\n"
        )
        print(scaling_table(results["scaling"], args.sizes))

    if "policies" in results:
        print("\n(policies) the quickstart under coarse vs multilearner — median (min–max)\n")
        m = solve_table(
            results["policies"],
            {"coarse": "workbench quickstart, coarse", "multilearner": "workbench quickstart, multilearner"},
        )
        print()
        ratio_lines(m, "multilearner", "coarse", "multilearner / coarse")

    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    **results,
                    "seeds": args.seeds,
                    "ray": rllib,
                    "rllib_python": args.rllib_python,
                    "rllib_window": args.rllib_window,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
