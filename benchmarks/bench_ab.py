"""A/B throughput of two variants of the quickstart PPO at CleanRL's settings, interleaved
in fresh processes, so a busy machine's noise hits both alike; prints medians and the ratio.

    python benchmarks/bench_ab.py --reps 5 --iterations 40 [--policy inline]

Variants (what a change to the hot path is measured against):

- ``module-act``: the actor's per-step forward through ``nn.Module.__call__`` (before
  ``ppo.forward``);
- ``fused-adam`` / ``foreach-adam``: the learner's Adam with ``fused=True`` /
  ``foreach=True`` (measured, not adopted: see docs/performance.md);
- ``shared-hand-over``: values handed between fragments in one process by reference, not
  copied (``runtime.arrays.handed_over``: the cost of the placement-independent rule);
- ``current``: the code as it is.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def child(variant: str, iterations: int, policy: str) -> dict:
    import torch

    from bench_peers import CLEANRL
    from workbench.algorithms import ppo

    if variant == "module-act":
        @torch.inference_mode()
        def act(self, obs):
            x = ppo.on_device(obs, ppo.device_of(self))
            logp_all = torch.log_softmax(self.actor(x), -1)
            action = torch.multinomial(logp_all.exp(), 1)
            logp = logp_all.gather(-1, action).squeeze(-1)
            return ppo.host(action.squeeze(-1)), ppo.host(logp), ppo.host(self.value(x))

        ppo.ActorCritic.act = act
    if variant == "shared-hand-over":
        from workbench.runtime.transport import channels
        from workbench.runtime.replicas import replica

        replica.handed_over = channels.handed_over = lambda value: value
    cfg = ppo.PPOConfig(seed=1, iterations=iterations, **CLEANRL)
    fdg = ppo.build_fdg({**vars(ppo), "cfg": cfg})
    adam = {"fused-adam": ", fused=True", "foreach-adam": ", foreach=True"}.get(variant)
    if adam is not None:
        init = fdg.fragments["learner"].cells["init"].code
        assert "eps=1e-5)" in init, "the learner's Adam line changed: update this benchmark"
        fdg.add_fragment("learner", init.replace("eps=1e-5)", f"eps=1e-5{adam})"), rate="init")
    fdg.run(iterations=2, steps=cfg.num_steps, policy="inline", progress=False)  # imports, first optimizer
    run = fdg.run(iterations=iterations, steps=cfg.num_steps, policy=policy, progress=False)
    prof = run.profile(skip=2)
    return {"sps": run.steps_per_second,
            **{f"{name}_ms": 1e3 * prof.loc[name, "compute_s_per_it"] for name in ("actor", "env", "learner")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", nargs="+", default=["module-act", "current"])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--policy", default="inline")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.iterations, args.policy)))
        return
    results: dict[str, list[dict]] = {v: [] for v in args.variants}
    for rep in range(args.reps):
        order = args.variants[rep % len(args.variants):] + args.variants[:rep % len(args.variants)]
        for variant in order:
            out = subprocess.run([sys.executable, __file__, "--child", variant, "--iterations", str(args.iterations),
                                  "--policy", args.policy], capture_output=True, text=True,
                                 env={**os.environ, "OMP_NUM_THREADS": "1"})
            line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
            if line is None:
                sys.exit(f"{variant} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
            results[variant].append(json.loads(line[7:]))
            print(variant, results[variant][-1], flush=True)
    base = statistics.median(r["sps"] for r in results[args.variants[0]])
    print(f"\n{'variant':14s} {'env-steps/s':>12s} {'ratio':>6s} {'actor ms/it':>12s} {'env ms/it':>10s} {'learner ms/it':>14s}")
    for variant, rs in results.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(f"{variant:14s} {med['sps']:12,.0f} {med['sps'] / base:6.2f} {med['actor_ms']:12.1f} "
              f"{med['env_ms']:10.1f} {med['learner_ms']:14.1f}")


if __name__ == "__main__":
    main()
