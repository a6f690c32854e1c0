"""CPU per step of the array CartPole at small N, against an older revision, side by side.

Small N is where a latency-bound replica lives (16 envs behind a remote simulator): there
the step's cost is NumPy's per-call overhead, not arithmetic. With ``--against REV`` the
CartPole (and its ``envs/base.py``) of that git revision is loaded beside today's and the
two are timed in alternation, median of ``--repeats``, so a busy host moves both alike.

    python -m benchmarks bench_env_step --against 39fb8a7     # before the 2026-11-23 cuts
"""

from __future__ import annotations

import subprocess
import sys
import time
import types

import numpy as np

from benchmarks import harness
from benchmarks.harness import ROOT


def cartpole_at(revision: str):
    """The ``CartPole`` class of ``revision``, wired to that revision's ``envs/base.py``."""

    def show(path: str) -> str:
        return subprocess.run(
            ["git", "show", f"{revision}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout

    base = types.ModuleType(f"base_{revision}")
    exec(compile(show("workbench/envs/base.py"), f"{revision}:base.py", "exec"), base.__dict__)
    sys.modules[base.__name__] = base
    module = types.ModuleType(f"cartpole_{revision}")
    source = show("workbench/envs/cartpole.py").replace(
        "from workbench.envs.base import", f"from {base.__name__} import"
    )
    exec(compile(source, f"{revision}:cartpole.py", "exec"), module.__dict__)
    return module.CartPole


def cpu_per_step(cls, num_envs: int, steps: int, actions: str) -> float:
    """µs of CPU per step: the benchmark actor's expression (``angle``) or random actions."""
    env = cls(num_envs, seed=0)
    obs, rng = env.reset(), np.random.default_rng(0)
    start = time.process_time()
    for _ in range(steps):
        act = (obs[:, 2] > 0.0).astype(np.int64) if actions == "angle" else rng.integers(0, 2, num_envs)
        obs = env.step(act)[0]
    return (time.process_time() - start) / steps * 1e6


def main() -> None:
    parser = harness.parser(__doc__, repeats=7)
    parser.add_argument("--against", help="a git revision to time beside the working tree")
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--steps", type=int, default=4000)
    args = parser.parse_args()
    from workbench.envs.cartpole import CartPole

    classes = {"now": CartPole}
    if args.against:
        classes[args.against] = cartpole_at(args.against)
    print(
        "| envs | actions | "
        + " | ".join(f"{name} µs/step" for name in classes)
        + (" | ratio |" if args.against else " |")
    )
    print("|---:|---|" + "---:|" * (len(classes) + bool(args.against)))
    for n in args.envs:
        for actions in ("angle", "random"):
            times = harness.interleaved(
                {name: (lambda cls=cls: cpu_per_step(cls, n, args.steps, actions)) for name, cls in classes.items()},
                args.repeats,
            )
            med = {name: harness.median(t) for name, t in times.items()}
            ratio = f" | {med[args.against] / med['now']:.2f}x |" if args.against else " |"
            print(f"| {n} | {actions} | " + " | ".join(f"{m:.0f}" for m in med.values()) + ratio, flush=True)


if __name__ == "__main__":
    main()
