"""PPO's CUDA graphs on a real GPU (skipped without CUDA): a replayed update makes the same
weights as the eager one from the same batch and permutations; a replayed actor step draws
fresh random actions each time; a change of the update's constants captures again; a
schedule's learning rate reaches the replayed Adam step."""

from __future__ import annotations

import copy


from tests.gpu import ON_GPU


pytestmark = ON_GPU


def _rollout(n=2048, t=16, seed=0):
    import cupy

    from workbench.algorithms import ppo
    from workbench.envs import FusedCartPole

    import torch

    torch.manual_seed(seed)
    policy = ppo.ActorCritic(4, 2).to("cuda:0")
    policy.cuda_graphs = False
    env = FusedCartPole(n, seed=seed, xp=cupy)
    obs, done = env.reset(), cupy.zeros(n, bool)
    rows = []
    for _ in range(t):
        action, logp, value = policy.act(obs)
        rows.append((obs, done, action, logp, value))
        obs, reward, term, trunc, _ = env.step(action)
        done = term | trunc
        rows[-1] += (reward,)
    stacked = [cupy.stack([r[i] for r in rows]) for i in range(6)]
    return stacked, obs, done


def _updates(graphs: bool, cfg, batches, seed=0):
    import torch

    from workbench.algorithms import ppo

    torch.manual_seed(seed)
    agent = ppo.ActorCritic(4, 2).to("cuda:0")
    # capturable in both: the graphed update makes Adam capturable (its bias corrections
    # float32 on the GPU, not Python floats), so the eager one must run the same arithmetic
    optimizer = torch.optim.Adam(agent.parameters(), lr=cfg.learning_rate, eps=1e-5, capturable=True)
    cfg = copy.copy(cfg)
    cfg.cuda_graphs = graphs
    torch.cuda.manual_seed(123)
    losses = []
    for update, ((state, starts, action, logp, value, reward), obs, done) in enumerate(batches):
        losses.append(
            ppo.ppo_update(agent, optimizer, cfg, update, state, action, logp, value, reward, starts, obs, done)
        )
    return agent, losses


def test_a_replayed_update_makes_the_eager_updates_weights():
    import torch

    from workbench.algorithms import ppo, ppo_graphs

    cfg = ppo.PPOConfig(num_envs=2048, iterations=10)
    batches = [_rollout(seed=s) for s in range(5)]  # 1 eager update (then the capture), 4 replays
    eager, eager_losses = _updates(False, cfg, batches)
    graphed, graphed_losses = _updates(True, cfg, batches)
    assert ppo_graphs._UPDATE[graphed].graph is not None and not ppo_graphs._UPDATE[graphed].failed
    # not bit for bit: the replay's learning rate is a float32 device scalar where the eager
    # Adam multiplies by a Python float (with non-capturable eager Adam, H100 runs were 3.5e-5
    # and, with observation normalisation, 3.2e-4 apart after 80 Adam steps)
    for a, b in zip(eager.parameters(), graphed.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=2e-4)
    for a, b in zip(eager_losses, graphed_losses):
        assert a["charts/learning_rate"] == b["charts/learning_rate"]  # the schedule reached Adam
        assert abs(a["losses/value_loss"] - b["losses/value_loss"]) <= 1e-3 * max(1.0, abs(a["losses/value_loss"]))


def test_new_constants_capture_again():
    from workbench.algorithms import ppo, ppo_graphs

    cfg = ppo.PPOConfig(num_envs=2048, iterations=10)
    batch = _rollout()
    agent, _ = _updates(True, cfg, [batch] * 3)
    first, old_graph = ppo_graphs._UPDATE[agent].key, ppo_graphs._UPDATE[agent].graph
    cfg.clip_coef = 0.1
    import torch

    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3)
    (state, starts, action, logp, value, reward), obs, done = batch
    ppo.ppo_update(agent, optimizer, cfg, 0, state, action, logp, value, reward, starts, obs, done)
    slot = ppo_graphs._UPDATE[agent]
    # a fresh slot: this update ran eagerly (UPDATE_WARMUP = 1), then the new work was captured
    assert slot.key != first and slot.calls == ppo_graphs.UPDATE_WARMUP
    assert slot.graph is not None and slot.graph is not old_graph


def test_a_replayed_actor_step_draws_fresh_actions():
    import cupy
    import torch

    from workbench.algorithms import ppo
    from workbench.kernels.cuda_graphs import captured_graphs

    torch.manual_seed(0)
    policy = ppo.ActorCritic(4, 2).to("cuda:0")
    obs = cupy.zeros((4096, 4), cupy.float32)
    draws = [policy.act(obs) for _ in range(8)]
    assert captured_graphs(policy) == 1
    actions = [cupy.asnumpy(a) for a, _, _ in draws]
    assert all(isinstance(a, cupy.ndarray) for a, _, _ in draws)
    assert len({a.tobytes() for a in actions[3:]}) == len(actions[3:])  # every replay draws anew
    assert 0.3 < float(actions[-1].mean()) < 0.7  # from the policy's ~50/50 distribution
    with torch.no_grad():
        policy.actor[-1].bias.copy_(torch.tensor([10.0, -10.0]))  # weights load in place: seen
    assert float(cupy.asnumpy(policy.act(obs)[0]).mean()) < 0.01
