"""PPO on CartPole-v1: configurations × seeds, env steps and time to solve, one markdown table.

The record of how ``PPOConfig``'s defaults were chosen (issue 29; docs/performance.md,
"How PPO's defaults were chosen"):

    python -m benchmarks ppo_sweep                                   # the defaults, seeds 1-10
    python -m benchmarks ppo_sweep -c "" -c "num_envs=8,update_epochs=20"
    python -m benchmarks ppo_sweep --ablation --jobs 2               # the ablation table
    python -m benchmarks ppo_sweep --throughput 1024                 # env-steps/s at 1,024 envs

Each ``-c`` is a comma-separated list of overrides on top of the defaults ("" = the
defaults): ``PPOConfig`` fields (``num_envs=16,learning_rate=3e-3,norm_obs=false``), and
these variants, which are not part of workbench's PPO and exist here to measure them:

- ``preset=zoo``: rl-baselines3-zoo's PPO settings for CartPole-v1 as SB3 runs them (8 envs
  × 32 steps, 20 full-batch epochs, γ 0.98, λ 0.8, lr 1e-3 and clip 0.2 both annealed over
  1e5 steps, value loss without the ½, truncated episodes bootstrapped, no observation
  normalisation); later overrides change single settings of it;
- ``clip_schedule=linear``: the clip range annealed to 0 as the learning rate (SB3's zoo);
- ``norm_reward=true``: rewards scaled by the running std of the discounted return, clip ±10;
- ``init=torch``: torch's default layer init instead of orthogonal;
- ``tanh=torch``: ``torch.tanh`` on the CPU instead of ``ppo.tanh`` (the same function; to
  time it).

Every run is the measurement the docs use: the quickstart's cells under ``inline``, until
solved by workbench's rule (docs/counting.md) or ``cfg.iterations``. For each solved run the
table also says when SB3's rule (the mean of the last 20 episodes ≥ 475, no burn-in) was
first met in that same run, at an iteration's end.

``--jobs N`` runs N runs at a time, each process on its own: a run's env steps depend only
on its configuration and seed, so the env-step columns are the same for any N, but the
times are not comparable across configurations unless ``--jobs 1`` on a quiet machine.
Runs are interleaved seed-major (every config's seed 1, then seed 2, …), medians reported.
``--throughput N`` instead times ``--iterations`` iterations (no target) of each config at
N envs, interleaved ``--repeats`` times, with the learner's, the actor's and the env's ms per
iteration.
"""

from __future__ import annotations

import copy
import dataclasses
import multiprocessing
import statistics
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from benchmarks import harness

#: rl-baselines3-zoo hyperparams/ppo.yml, CartPole-v1, as workbench overrides
ZOO = (
    "num_envs=8,num_steps=32,num_minibatches=1,update_epochs=20,gamma=0.98,gae_lambda=0.8,"
    "learning_rate=1e-3,anneal_lr=true,iterations=391,ent_coef=0,vf_coef=1.0,clip_coef=0.2,"
    "max_grad_norm=0.5,norm_adv=true,clip_vloss=false,norm_obs=false,"
    "clip_schedule=linear,bootstrap_truncated=true"
)
#: the quickstart's defaults before issue 29 (32 envs × 32 steps, 10 full-batch epochs,
#: 200 iterations, a time limit ending the return)
OLD_DEFAULTS = (
    "num_envs=32,num_steps=32,update_epochs=10,num_minibatches=1,norm_obs=false,"
    "bootstrap_truncated=false,iterations=200"
)

#: (label, overrides): the ablation table of docs/performance.md
ABLATION = [
    ("SB3 rl-zoo settings, in workbench", "preset=zoo"),
    ("zoo, truncation ends the return (no bootstrap)", "preset=zoo,bootstrap_truncated=false"),
    ("zoo, constant clip range", "preset=zoo,clip_schedule=constant"),
    ("zoo, value loss ½·MSE (vf_coef 0.5)", "preset=zoo,vf_coef=0.5"),
    ("zoo, GAE λ 0.95", "preset=zoo,gae_lambda=0.95"),
    ("zoo, γ 0.99", "preset=zoo,gamma=0.99"),
    ("zoo, constant learning rate", "preset=zoo,anneal_lr=false"),
    ("zoo, lr 3e-3", "preset=zoo,learning_rate=3e-3"),
    ("zoo, 10 epochs", "preset=zoo,update_epochs=10"),
    ("zoo, no advantage normalisation", "preset=zoo,norm_adv=false"),
    ("zoo, value clipping", "preset=zoo,clip_vloss=true"),
    ("zoo, torch's default init", "preset=zoo,init=torch"),
    ("zoo, observation normalisation", "preset=zoo,norm_obs=true"),
    ("zoo, reward normalisation", "preset=zoo,norm_reward=true"),
    ("zoo, lr 3e-3, observation normalisation", "preset=zoo,learning_rate=3e-3,norm_obs=true"),
    ("old defaults (32 × 32, 10 epochs, lr 3e-3)", OLD_DEFAULTS),
    ("old defaults, observation normalisation", OLD_DEFAULTS + ",norm_obs=true"),
    ("old defaults, time limits bootstrapped", OLD_DEFAULTS + ",bootstrap_truncated=true"),
    ("defaults (now: 16 × 16, 10 epochs, lr 3e-3, obs norm, bootstrap)", ""),
    ("defaults, no observation normalisation", "norm_obs=false"),
    ("defaults, truncation ends the return (no bootstrap)", "bootstrap_truncated=false"),
    ("defaults, 20 epochs", "update_epochs=20"),
    ("defaults, γ 0.98, λ 0.8", "gamma=0.98,gae_lambda=0.8"),
    ("defaults, 8 envs (8 × 32)", "num_envs=8"),
    ("defaults, 32 envs (32 × 16)", "num_envs=32"),
]

VARIANTS = {
    "preset": ("zoo",),
    "clip_schedule": ("constant", "linear"),
    "norm_reward": (False, True),
    "init": ("orthogonal", "torch"),
    "tanh": ("ppo", "torch"),
}


# ============================================================================ configurations
def parse_overrides(text: str) -> dict:
    """``"num_envs=16,norm_obs=false,preset=zoo"`` -> typed overrides (a preset expanded in
    place, so what follows it overrides it)."""
    from workbench.algorithms import ppo

    fields = {f.name: f for f in dataclasses.fields(ppo.PPOConfig) if not f.name.startswith("_")}
    out: dict = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, _, value = (part.strip() for part in item.partition("="))
        if key == "preset":
            if value != "zoo":
                raise SystemExit(f"unknown preset {value!r}; known: zoo")
            out.update(parse_overrides(ZOO))
            continue
        if key in VARIANTS:
            kinds = VARIANTS[key]
            out[key] = harness.typed(value, kinds[0]) if isinstance(kinds[0], bool) else value
            if out[key] not in kinds:
                raise SystemExit(f"{key}={value!r}: one of {', '.join(map(str, kinds))}")
            continue
        if key not in fields:
            raise SystemExit(
                f"unknown setting {key!r}; PPOConfig fields: {', '.join(fields)}; variants: {', '.join(VARIANTS)}"
            )
        out[key] = harness.typed(value, getattr(ppo.PPOConfig(), key))
    return out


def make_config(overrides: dict, seed: int):
    """A fresh ``PPOConfig`` (not ``dataclasses.replace`` of the defaults: a ruled field
    given the value the rule gave it would go on following the rule)."""
    from workbench.algorithms import ppo

    fields = {k: v for k, v in overrides.items() if k not in VARIANTS}
    return ppo.PPOConfig(**fields, seed=seed)


def build(overrides: dict, cfg):
    """The quickstart FDG for ``cfg`` with the variants in ``overrides`` applied."""
    import workbench as wb
    from workbench.algorithms import ppo

    variant = {k: overrides.get(k, kinds[0]) for k, kinds in VARIANTS.items() if k != "preset"}
    namespace = {**vars(ppo), "cfg": cfg}
    cells = list(ppo.FRAGMENT_CELLS)
    if variant != {k: kinds[0] for k, kinds in VARIANTS.items() if k != "preset"}:
        namespace["ActorCritic"] = _network(variant)
        namespace["ppo_update"] = _update(variant, ppo.ppo_update)
    fdg = wb.FDG(namespace=namespace)
    for line, body in cells:
        fdg.add_cell(line, body)
    return fdg


def _network(variant: dict):
    from torch import nn

    from workbench.algorithms import ppo

    class Variant(ppo.ActorCritic):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            for seq in (self.actor, self.critic):
                for i, layer in enumerate(seq):
                    if variant["init"] == "torch" and isinstance(layer, nn.Linear):
                        layer.reset_parameters()
                    if variant["tanh"] == "torch" and isinstance(layer, nn.Tanh):
                        seq[i] = nn.Tanh()  # ppo.forward calls torch.tanh for a plain nn.Tanh

    return Variant


def _update(variant: dict, ppo_update):
    def update(
        agent, optimizer, cfg, update, state, action, logp, value, reward, starts, last_obs, last_done, **bootstrap
    ):
        reward = np.asarray(reward, np.float32)
        if variant["norm_reward"]:
            reward = _scale_rewards(agent, cfg, reward, starts, last_done)
        if variant["clip_schedule"] == "linear":
            cfg = copy.copy(cfg)
            cfg.clip_coef = cfg.clip_coef * max(0.0, 1.0 - update / cfg.iterations)
        return ppo_update(
            agent, optimizer, cfg, update, state, action, logp, value, reward, starts, last_obs, last_done, **bootstrap
        )

    return update


class _RunningVar:
    def __init__(self) -> None:
        self.mean, self.var, self.count = 0.0, 1.0, 1e-4

    def update(self, x: np.ndarray) -> None:
        m, v, n = float(x.mean()), float(x.var()), x.size
        delta, total = m - self.mean, self.count + n
        self.mean += delta * n / total
        self.var = (self.var * self.count + v * n + delta**2 * self.count * n / total) / total
        self.count = total


def _scale_rewards(agent, cfg, reward, starts, last_done):
    """gymnasium's NormalizeReward over the rollout (each env's discounted return's running
    std), then clipped to ±10; the state lives on the learner's network object."""
    T, N = reward.shape
    if not hasattr(agent, "_sweep_ret"):
        agent._sweep_ret, agent._sweep_var = np.zeros(N), _RunningVar()
    ended = np.concatenate([np.asarray(starts[1:], bool), np.asarray(last_done, bool)[None]])
    out = np.empty_like(reward)
    for t in range(T):
        agent._sweep_ret = agent._sweep_ret * cfg.gamma + reward[t]
        agent._sweep_var.update(agent._sweep_ret)
        out[t] = np.clip(reward[t] / np.sqrt(agent._sweep_var.var + 1e-8), -10, 10)
        agent._sweep_ret[ended[t]] = 0.0
    return out


# ============================================================================ runs
def sb3_rule_steps(run, window: int = 20, target: float = 475.0) -> int | None:
    """Env steps at the first iteration's end where the mean of the last ``window``
    episodes reached ``target`` (SB3's callback in bench_peers.py, no burn-in), or None."""
    returns = run.episode_returns
    for row in run.rows:
        n = row["charts/episodes"]
        if n >= window and sum(returns[n - window : n]) / window >= target:
            return row["env_steps"]
    return None


_WARM: list[bool] = []


def _warm_up() -> None:
    """One untimed iteration per process: the first ``torch.optim`` optimizer in a process
    imports ``torch._dynamo`` (~1-1.5 s), which would otherwise land on the first run."""
    if not _WARM:
        build({}, make_config({}, 0)).run(iterations=1, steps=16, progress=False)
        _WARM.append(True)


def solve_once(job: tuple) -> dict:
    """One run to the target; what the table needs from it."""
    _warm_up()
    text, seed, target, iterations = job
    overrides = parse_overrides(text)
    cfg = make_config(overrides, seed)
    fdg = build(overrides, cfg)
    started = time.perf_counter()
    run = fdg.run(iterations=iterations or cfg.iterations, steps=cfg.num_steps, target_return=target, progress=False)
    wall = time.perf_counter() - started
    s = run.solved_at
    return {
        "config": text,
        "seed": seed,
        "solved": s is not None,
        "env_steps": s["env_steps"] if s else run.env_steps,
        "time_s": s["time_s"] if s else run.wall_time,
        "sb3_rule_steps": sb3_rule_steps(run),
        "all_steps": run.env_steps,
        "wall_s": wall,
    }


def throughput_once(job: tuple) -> dict:
    text, num_envs, iterations = job
    overrides = {**parse_overrides(text)}
    overrides.setdefault("num_envs", num_envs)
    cfg = make_config(overrides, 1)
    fdg = build(overrides, cfg)
    fdg.run(iterations=2, steps=cfg.num_steps, progress=False)  # imports, first calls: untimed
    run = fdg.run(iterations=iterations, steps=cfg.num_steps, progress=False)
    m = run.metrics.iloc[1:]
    ms = {k: 1e3 * m[f"time/{k}_compute_s"].mean() for k in ("learner", "actor", "env") if f"time/{k}_compute_s" in m}
    return {
        "config": text,
        "sps": run.steps_per_second,
        "ms": ms,
        "shape": f"{cfg.num_envs} × {cfg.num_steps}, {cfg.update_epochs} × {cfg.num_minibatches}",
    }


def _pool(jobs: int):
    return ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) if jobs > 1 else None


def _map(pool, fn, jobs):
    return pool.map(fn, jobs) if pool is not None else map(fn, jobs)


def _fmt_steps(values: list[float]) -> str:
    finite = [v for v in values if np.isfinite(v)]
    return f"{statistics.median(values):,.0f}" if len(finite) > len(values) / 2 else "-"


def solve_table(
    configs: list[tuple[str, str]], seeds: list[int], target: float, iterations: int | None, jobs: int, verbose: bool
) -> None:
    work = [(text, seed, target, iterations) for seed in seeds for _, text in configs]
    results: dict[str, list[dict]] = {text: [] for _, text in configs}
    with _pool(jobs) or _NoPool() as pool:
        for r in _map(pool if jobs > 1 else None, solve_once, work):
            results[r["config"]].append(r)
            if verbose:
                print(
                    f"  [{r['config'] or 'defaults'}] seed {r['seed']}: "
                    f"{'solved' if r['solved'] else 'NOT solved'} at {r['env_steps']:,} env steps "
                    f"(SB3's rule: {r['sb3_rule_steps'] or '-'}), {r['time_s']:.2f} s",
                    flush=True,
                )
    print(f"\nseeds {seeds[0]}–{seeds[-1]}, {jobs} run(s) at a time; medians (a run that did not solve counts as ∞)\n")
    print(
        "| configuration | solved | env steps to solve | worst seed | by SB3's rule, same runs "
        "| time to solve (s) | env-steps/s |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, text in configs:
        rows = results[text]
        steps = [r["env_steps"] if r["solved"] else np.inf for r in rows]
        sb3 = [r["sb3_rule_steps"] if r["sb3_rule_steps"] else np.inf for r in rows]
        times = [r["time_s"] if r["solved"] else np.inf for r in rows]
        sps = sum(r["all_steps"] for r in rows) / max(1e-9, sum(r["wall_s"] for r in rows))
        worst = max(steps)
        name = f"{label} (`{text}`)" if label != text else f"`{text or 'defaults'}`"
        print(
            f"| {name} | {sum(r['solved'] for r in rows)}/{len(rows)} | {_fmt_steps(steps)} | "
            f"{'∞' if not np.isfinite(worst) else f'{worst:,.0f}'} | {_fmt_steps(sb3)} | "
            f"{statistics.median(times):.2f} | {sps:,.0f} |",
            flush=True,
        )


def throughput_table(configs: list[tuple[str, str]], num_envs: int, iterations: int, reps: int) -> None:
    results: dict[str, list[dict]] = {text: [] for _, text in configs}
    shapes = {}
    for _ in range(reps):  # interleaved, each in this process (one at a time)
        for _, text in configs:
            r = throughput_once((text, num_envs, iterations))
            results[text].append(r)
            shapes[text] = r["shape"]
    print(f"\n{num_envs} envs, {iterations} iterations × {reps} interleaved; medians\n")
    print(
        "| configuration | envs × steps, epochs × minibatches | env-steps/s | learner ms/it | actor ms/it | env ms/it |"
    )
    print("|---|---|---|---|---|---|")
    for label, text in configs:
        rows = results[text]
        med = {k: statistics.median(r["ms"].get(k, np.nan) for r in rows) for k in ("learner", "actor", "env")}
        print(
            f"| `{text or 'defaults'}` | {shapes[text]} | {statistics.median(r['sps'] for r in rows):,.0f} | "
            f"{med['learner']:.1f} | {med['actor']:.1f} | {med['env']:.1f} |",
            flush=True,
        )


class _NoPool:
    def __enter__(self):
        return None

    def __exit__(self, *exc) -> None:
        pass


def main() -> None:
    ap = harness.parser(__doc__, repeats=3)
    ap.add_argument("-c", "--config", action="append", help='overrides (repeatable; "" = the defaults)')
    ap.add_argument("--ablation", action="store_true", help="the ablation table (docs/performance.md)")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(1, 11)))
    ap.add_argument("--target", type=float, default=475.0)
    ap.add_argument("--iterations", type=int, default=None, help="override cfg.iterations' run length only")
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time (separate processes)")
    ap.add_argument("--throughput", type=int, metavar="ENVS", help="time each config at ENVS envs instead")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every run as it finishes")
    args = ap.parse_args()
    configs = [(label, text) for label, text in ABLATION] if args.ablation else []
    configs += [(c, c) for c in (args.config or ([] if args.ablation else [""]))]
    for _, text in configs:
        parse_overrides(text)  # a typo fails now, not after an hour of runs
    if args.throughput:
        throughput_table(configs, args.throughput, args.iterations or 20, args.repeats)
    else:
        solve_table(configs, args.seeds, args.target, args.iterations, args.jobs, args.verbose)


if __name__ == "__main__":
    main()
