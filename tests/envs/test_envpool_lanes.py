"""EnvPool's env under lanes (``lanes=True``): two continuous-PPO actor+env replicas in one
process, stepped in one thread, each acting while the other's EnvPool threads step. The
run's numbers are those of the same run without lanes: the learner's weights bit for bit,
every episode's return, the env steps (EnvPool's own counters)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("envpool", reason="EnvPool is optional: pip install 'workbench-rl[envpool]'")
pytest.importorskip("greenlet", reason="lanes run on greenlet: pip install greenlet")

from workbench.algorithms import ppo_continuous  # noqa: E402
from workbench.envs import EnvPoolVectorEnv  # noqa: E402
from workbench.fdg.policy import Group, Policy  # noqa: E402
from workbench.fdg.vocabulary import IN_PROCESS  # noqa: E402


def run_two_actors(lanes: bool):
    cfg = dataclasses.replace(
        ppo_continuous.cfg,
        env_id="Pendulum-v1",
        env_backend="envpool",
        seed=3,
        num_envs=4,
        num_steps=100,
        iterations=3,
        num_minibatches=4,
        update_epochs=2,
    )
    fdg = ppo_continuous.build_fdg({**vars(ppo_continuous), "cfg": cfg})
    acting = fdg.schedule().step_order
    policy = Policy(
        "two actors in one process",
        (
            Group(acting, 2, (IN_PROCESS, IN_PROCESS)),
            Group(tuple(n for n in fdg.fragments if n not in acting), 1, (IN_PROCESS,)),
        ),
    )
    run = fdg.run(
        iterations=cfg.iterations, steps=cfg.num_steps, policy=policy, lanes=lanes, keep_state=True, progress=False
    )
    assert run.status == "finished", run.error
    return run


def test_two_envpool_replicas_in_lanes_learn_what_they_learn_in_threads():
    with_lanes, without = run_two_actors(True), run_two_actors(False)
    weights = [
        np.concatenate([t.numpy().ravel() for t in r.state.fragments["learner"][0]["agent"].state_dict().values()])
        for r in (with_lanes, without)
    ]
    assert np.array_equal(*weights)
    assert with_lanes.episode_returns == without.episode_returns and with_lanes.episode_returns
    assert with_lanes.env_steps == without.env_steps == 3 * 100 * 4  # Pendulum ends each episode at 200 steps


def test_envpool_steps_hand_the_thread_over_between_send_and_recv(monkeypatch):
    """The hand-off point: ``step`` calls ``wb.step_elsewhere`` after ``send``, before ``recv``."""
    import workbench.envs.envpool_env as envpool_env

    order = []
    env = EnvPoolVectorEnv("Pendulum-v1", 2, seed=0, threads=1)
    env.reset()
    send, recv = env.send, env.recv
    monkeypatch.setattr(env, "send", lambda a: (order.append("send"), send(a))[1])
    monkeypatch.setattr(env, "recv", lambda: (order.append("recv"), recv())[1])
    monkeypatch.setattr(envpool_env, "step_elsewhere", lambda: order.append("elsewhere"))
    env.step(np.zeros((2, 1), dtype=np.float32))
    env.close()
    assert order == ["send", "elsewhere", "recv"]
