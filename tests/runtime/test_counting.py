"""Env steps counted where envs step, ``wb.env_steps()``/``replica.iteration`` for schedules,
and "solved" that luck cannot reach — the same under every policy, across resume."""

from __future__ import annotations

import numpy as np
import pytest

import workbench as wb
from workbench.runtime.engine.driver import IterationRecord
from workbench.runtime.state.run import RETURN_METRIC, Run

N = 4  # envs, all replicas together


def buffer_fdg(**namespace) -> wb.FDG:
    """env → actor ring, a replay-buffer fragment after the env that hands on only a scalar,
    and a learner that reads the buffer's size (nothing stacked)."""
    fdg = wb.FDG(namespace={"np": np, "wb": wb, "N": N, **namespace})
    fdg.add_fragment("env", "obs = np.zeros(N // replica.count)", rate="init")
    fdg.add_fragment("actor", "action = obs + 1", rate="step")
    fdg.add_fragment("env", "obs = obs + action\nreward = np.ones_like(obs)", rate="step")
    fdg.add_fragment("buffer", "memory = []", rate="init")
    fdg.add_fragment("buffer", "memory.append(reward)\nsize = len(memory)", rate="step")
    fdg.add_fragment("learner", "seen = size", rate="iteration")
    return fdg


def silent_learner_fdg() -> wb.FDG:
    """The learner reads nothing per step; the env's batch never leaves its fragment."""
    fdg = wb.FDG(namespace={"np": np, "N": N})
    fdg.add_fragment("env", "state = np.zeros(N // replica.count)\nk = 0.0", rate="init")
    fdg.add_fragment("env", "state = state + k\nreward = state.copy()", rate="step")
    fdg.add_fragment("learner", "k = 1.0", rate="init")
    fdg.add_fragment("learner", "k = k * 0.5", rate="iteration")
    return fdg


def plain_env_fdg(reward: str) -> wb.FDG:
    """One plain (not vectorised) env per replica, as ``gymnasium.make`` gives: a
    3-number observation and a scalar reward. Each replica steps N envs' worth only if
    the reward says so: here one env per replica, whatever the observation's length."""
    fdg = wb.FDG(namespace={"np": np})
    fdg.add_fragment("env", "obs = np.zeros(3)", rate="init")
    fdg.add_fragment("actor", "action = int(obs[0] > 0)", rate="step")
    fdg.add_fragment("env", f"obs = obs + action\nreward = {reward}", rate="step")
    fdg.add_fragment("learner", "total = float(np.sum(reward))", rate="iteration")
    return fdg


@pytest.mark.parametrize("reward", ["1.0", "np.float64(1.0)", "np.array(1.0)"])
@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_a_plain_env_with_a_scalar_reward_counts_one_env_per_step(reward, policy, client):
    run = plain_env_fdg(reward).run(
        iterations=2, steps=5, policy=policy, progress=False, cluster=client if policy != "inline" else None
    )
    replicas = len(run.replica_env_steps)
    assert run.env_steps == 2 * 5 * replicas  # not the observation's length (3) per step
    assert run.envs_per_step == replicas


@pytest.mark.parametrize("make", [buffer_fdg, silent_learner_fdg])
@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_env_steps_are_iterations_by_steps_by_envs(make, policy, client):
    run = make().run(
        iterations=3, steps=5, policy=policy, cluster=client if policy != "inline" else None, progress=False
    )
    assert run.env_steps == 3 * 5 * N
    assert sum(run.replica_env_steps.values()) == 3 * 5 * N
    assert all(n == 3 * 5 * N // len(run.replica_env_steps) for n in run.replica_env_steps.values())


def test_count_env_steps_by_hand_overrides_the_rule():
    fdg = wb.FDG(namespace={"wb": wb})
    fdg.add_fragment("sim", "x = 0", rate="init")
    fdg.add_fragment("sim", "x += 1\nwb.count_env_steps(7)", rate="step")
    assert fdg.run(iterations=2, steps=3, progress=False).env_steps == 2 * 3 * 7


def test_env_steps_continue_across_resume_and_a_new_replica_count(client, tmp_path):
    fdg = buffer_fdg()
    first = fdg.run(iterations=3, steps=5, progress=False, keep_state=True)
    second = fdg.run(
        iterations=2, steps=5, policy="coarse", cluster=client, progress=False, resume=first.state, keep_state=True
    )  # env: 1 replica → 2
    assert second.env_steps == 5 * 5 * N and second.env_steps_base == 3 * 5 * N
    path = second.checkpoint(str(tmp_path))
    third = fdg.run(iterations=1, steps=5, progress=False, resume=path)
    assert third.env_steps == 6 * 5 * N


SCHEDULE_CELLS = {  # what a schedule reads, logged from a step cell and an iteration cell
    ("actor", "step"): "action = obs + 1\nwb.log('at/step', wb.env_steps())\nwb.log('at/iteration', replica.iteration)",
    ("learner", "iteration"): "seen = size\nwb.log('at/learner', wb.env_steps())",
}


def schedule_fdg() -> wb.FDG:
    fdg = buffer_fdg()
    for (frag, rate), code in SCHEDULE_CELLS.items():
        fdg.add_fragment(frag, code, rate=rate)
    return fdg


@pytest.mark.parametrize("policy", ["inline", "coarse", "fine", "async"])
def test_env_steps_and_iteration_are_the_same_under_every_policy(policy, client):
    T = 3
    kwargs = {} if policy == "inline" else {"cluster": client}
    first = schedule_fdg().run(iterations=2, steps=T, policy=policy, progress=False, keep_state=True, **kwargs)
    resumed = schedule_fdg().run(iterations=2, steps=T, policy=policy, progress=False, resume=first.state, **kwargs)
    rows = first.rows + resumed.rows
    assert [r["at/iteration"] for r in rows] == [0, 1, 2, 3]
    # the learner: env steps before its iteration; a step cell: before its step (mean over steps)
    assert [r["at/learner"] for r in rows] == [i * T * N for i in range(4)]
    # each actor replica logs once per step: the mean over steps and replicas
    assert [r["at/step"] for r in rows] == pytest.approx([(i * T + (T - 1) / 2) * N for i in range(4)])


def test_outside_a_run_schedules_read_zero_and_none():
    assert wb.env_steps() == 0
    assert wb.ReplicaInfo("x").iteration is None


# -- "solved" that cannot be luck ---------------------------------------------------------


class GoalEnv:
    """A goal-reaching task, vectorised: each step an episode reaches the goal (return 1,
    ends) with probability ``q + skill``, else it is cut off after ``limit`` steps (return
    0). Untrained (skill 0), about 10% of episodes succeed — but the first episodes to
    finish are all successes, and between the waves of cut-off episodes only successes
    finish, so the last 20 finished are often mostly lucky."""

    def __init__(self, n: int, seed: int, q: float = 0.002, limit: int = 50, gain: float = 1.0) -> None:
        self.rng, self.t, self.q, self.limit = np.random.default_rng(seed), np.zeros(n, int), q, limit
        self.gain = gain

    def step(self, skill: float):
        self.t += 1
        reached = self.rng.random(self.t.size) < self.q + self.gain * skill
        done = reached | (self.t >= self.limit)
        self.t[done] = 0
        return done, reached[done].astype(float)


def goal_fdg(lr: float, envs: int = 256, options_for=None) -> wb.FDG:
    fdg = wb.FDG(
        namespace={
            "np": np,
            "wb": wb,
            "GoalEnv": GoalEnv,
            "lr": lr,
            "ENVS": envs,
            "options_for": options_for or (lambda index: {}),
        }
    )
    fdg.add_fragment(
        "env", "envs = GoalEnv(ENVS // replica.count, replica.index, **options_for(replica.index))", rate="init"
    )
    fdg.add_fragment("actor", "action = skill", rate="step")
    fdg.add_fragment(
        "env",
        "done, returns = envs.step(action)\nreward = done.astype(float)\nwb.log('charts/episodic_return', returns)",
        rate="step",
    )
    fdg.add_fragment("learner", "skill = 0.0", rate="init")
    fdg.add_fragment("learner", "skill = min(1.0, skill + lr)\nfinished = reward.sum()", rate="iteration")
    return fdg


@pytest.mark.filterwarnings("ignore::workbench.fdg.plan.IndependentLearnersWarning")
@pytest.mark.parametrize("policy", ["inline", "coarse", "fine", "multilearner", "gpuonly", "async"])
def test_a_control_that_never_learns_is_never_solved(policy, client):
    kwargs = {} if policy == "inline" else {"cluster": client}
    run = goal_fdg(lr=0.0).run(iterations=30, steps=10, policy=policy, target_return=0.5, progress=False, **kwargs)
    assert run.solved_at is None and run.status == "finished"
    # the old rule (mean of the last 20 finished ≥ target) was fooled by the lucky first finishers
    # (between the waves of cut-off episodes only successes finish; the last 20 are lucky)
    assert any(r["charts/episodes"] >= 20 and r["charts/mean_return_last_20"] >= 0.5 for r in run.rows)
    assert "not solved" in run.summary() and "episodes finished" in run.summary()


@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_a_learner_that_learns_is_solved_and_says_on_what(policy, client):
    kwargs = {} if policy == "inline" else {"cluster": client}
    run = goal_fdg(lr=0.1).run(iterations=40, steps=10, policy=policy, target_return=0.5, progress=False, **kwargs)
    assert run.status == "solved"
    ev = run.solved_at["evidence"]
    assert ev["window"] == 256 and ev["episodes"] >= 2 * 256
    summary = run.summary()
    assert "mean return of the last 256 episodes" in summary and f"with {ev['episodes']} episodes" in summary
    assert "last 20" not in summary  # one window in one line


def test_a_replica_that_finished_too_few_episodes_blocks_the_decision(client):
    # replica 1's episodes never end: replica 0 alone must not decide
    stuck = {"q": 0.0, "gain": 0.0, "limit": 10**9}
    run = goal_fdg(lr=0.1, envs=64, options_for=lambda i: stuck if i == 1 else {}).run(
        iterations=10,
        steps=10,
        policy=wb.SingleLearnerCoarse(actors=2),
        cluster=client,
        target_return=0.5,
        progress=False,
    )
    assert run.solved_at is None
    per_replica = run.evidence()["per_replica"]
    assert sorted(per_replica.values())[0] == 0 and sorted(per_replica.values())[1] > 100


def _record(run: Run, iteration: int, returns: dict[str, list[float]], envs: int = 2) -> None:
    rec = IterationRecord(iteration, env_steps=envs * run.steps * len(returns))
    for who, values in returns.items():
        rec.metrics.setdefault(RETURN_METRIC, []).extend(values)
        rec.replica_env_steps[who] = envs * run.steps
        if values:
            rec.replica_episodes[who] = len(values)
    run.record(rec)


def test_the_rule_needs_a_burn_in_then_a_full_window_from_every_replica():
    run = Run("inline", iterations=10, steps=5, target_return=1.0)
    _record(run, 0, {"a[0]": [1.0] * 20, "a[1]": [1.0] * 10})
    assert not run.is_solved()  # 30 episodes: the first 20 are burn-in
    _record(run, 1, {"a[0]": [1.0] * 10, "a[1]": []})
    assert run.is_solved()  # 40 episodes, each replica ≥ 10
    run = Run("inline", iterations=10, steps=5, target_return=1.0)
    _record(run, 0, {"a[0]": [1.0] * 60, "a[1]": []})
    assert not run.is_solved() and run.evidence()["per_replica"] == {"a[0]": 60, "a[1]": 0}
