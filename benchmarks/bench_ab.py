"""A/B throughput of two variants of the quickstart PPO at CleanRL's settings, interleaved
in fresh processes, so a busy machine's noise hits both alike; prints medians and the ratio.

    python -m benchmarks bench_ab --repeats 5 --iterations 40 [--policy inline]

Variants (what a change to the hot path is measured against), each through workbench's
public surface — the FDG's namespace, or a documented switch:

- ``module-act``: the actor's per-step forward through ``nn.Module.__call__`` (before
  ``ppo.forward``): an ``ActorCritic`` subclass given to the cells in their namespace;
- ``shared-hand-over``: values handed between fragments in one process by reference, not
  copied (``WORKBENCH_HAND_OVER=shared``, ``runtime.values.arrays.handed_over``: the cost
  of the placement-independent rule);
- ``current``: the code as it is.

(The ``fused-adam`` / ``foreach-adam`` variants of torch's Adam are gone: the learner's
optimizer is ``workbench.algorithms.optim.adam`` now, torch's fused kernel on the CPU.)
"""

from __future__ import annotations

import argparse
import sys

import torch

from benchmarks import harness
from benchmarks.bench_peers import CLEANRL
from workbench.algorithms import ppo

VARIANTS = ("module-act", "shared-hand-over", "current")
#: a variant's environment on top of the child's own
VARIANT_ENV = {"shared-hand-over": {"WORKBENCH_HAND_OVER": "shared"}}


class ModuleCallActorCritic(ppo.ActorCritic):
    """``act`` as it was before ``ppo.forward``: every layer through ``nn.Module.__call__``."""

    @torch.inference_mode()
    def act(self, obs):
        x = ppo.on_device(obs, ppo.device_of(self))
        logp_all = torch.log_softmax(self.actor(x), -1)
        action = torch.multinomial(logp_all.exp(), 1)
        logp = logp_all.gather(-1, action).squeeze(-1)
        return ppo.host(action.squeeze(-1)), ppo.host(logp), ppo.host(self.value(x))


def child(variant: str, iterations: int, policy: str) -> dict:
    """One run of ``variant`` in this (fresh) process: env-steps/s and each fragment's ms per iteration."""
    cfg = ppo.PPOConfig(seed=1, iterations=iterations, **CLEANRL)
    namespace = {**vars(ppo), "cfg": cfg}
    if variant == "module-act":
        namespace["ActorCritic"] = ModuleCallActorCritic
    fdg = ppo.build_fdg(namespace)
    fdg.run(iterations=2, steps=cfg.num_steps, policy="inline", progress=False)  # imports, first optimizer
    run = fdg.run(iterations=iterations, steps=cfg.num_steps, policy=policy, progress=False)
    prof = run.profile(skip=2)
    return {
        "sps": run.steps_per_second,
        **{f"{name}_ms": 1e3 * prof.loc[name, "compute_s_per_it"] for name in ("actor", "env", "learner")},
    }


def measure(variant: str, iterations: int, policy: str) -> dict:
    """``variant`` run once in a fresh process (one torch thread)."""
    command = harness.module_command(
        "benchmarks.bench_ab", "--child", variant, "--iterations", str(iterations), "--policy", policy
    )
    env = harness.child_env(OMP_NUM_THREADS="1", **VARIANT_ENV.get(variant, {}))
    out, _, rc = harness.spawn(command, timeout=3600, env=env)
    result = harness.read_result(out)
    if result is None:
        sys.exit(f"{variant} failed (exit {rc}):\n{out[-4000:]}")
    return result


def main() -> None:
    parser = harness.parser(__doc__, repeats=5, json_output=True)
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=VARIANTS,
        default=["module-act", "current"],
        help="the first is the base of the ratios",
    )
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--policy", default="inline")
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        harness.print_result(child(args.child, args.iterations, args.policy))
        return
    results = harness.interleaved(
        {variant: (lambda v=variant: measure(v, args.iterations, args.policy)) for variant in args.variants},
        args.repeats,
        report=lambda variant, turn, result: print(variant, result, flush=True),
    )
    rows = harness.compared(results, base=args.variants[0])
    print("\n" + harness.table(rows, ["contender", "sps", "ratio", "actor_ms", "env_ms", "learner_ms"]))
    harness.write_json(args.json, {"results": results, "medians": rows})


if __name__ == "__main__":
    main()
