"""MPE ``simple_spread_v3`` as one array program over ``N`` envs, for NumPy or CuPy.

A cooperative multi-agent task: ``agents`` agents and as many landmarks on a
plane; every agent is rewarded by how well the team covers the landmarks and
penalised for bumping into other agents. This is mpe2 1.1's
``simple_spread_v3.parallel_env`` with its defaults, re-derived from its source
(``mpe2/_mpe_utils/core.py``, ``simple_env.py``, ``simple_spread/simple_spread.py``):

- **reset**: agent positions, then landmark positions, each uniform in
  ``[-1, 1]^2``; velocities zero. Drawn from one ``numpy.random.default_rng(seed)``
  in mpe2's order, so with ``num_envs=1`` and the same seed the starts (also of
  later episodes) equal mpe2's ``reset(seed=seed)`` / ``reset()``.
- **actions**: discrete (default) ``0..4`` = no-op, -x, +x, -y, +y, a unit
  push scaled by the sensitivity 5.0; continuous ``a`` in ``[0, 1]^5`` pushes
  ``5 * (a[2] - a[1], a[4] - a[3])`` (``a[0]`` is ignored, as in mpe2).
- **physics** (``World.step``, dt 0.1, damping 0.25, mass 1, no speed limit,
  no motor noise): agents (radius 0.15) push each other apart with mpe2's soft
  contact force ``100 * delta / dist * k * log(1 + exp(-(dist - 0.3) / k))``,
  ``k = 1e-3``, on every pair at every step (it is never exactly zero);
  landmarks neither collide nor move. Semi-implicit in mpe2's order:
  ``pos += vel * dt``; ``vel = vel * (1 - damping) + force / mass * dt``.
- **reward** (after the move), per agent:
  ``(1 - local_ratio) * global + local_ratio * local`` with
  ``global = -sum over landmarks of the distance to the nearest agent`` (shared)
  and ``local = -(number of other agents closer than 0.3)``; ``local_ratio``
  defaults to 0.5.
- **observation** per agent, ``6 * agents`` floats for the default layout:
  ``[self_vel (2), self_pos (2), landmark_pos - self_pos (2 per landmark),
  other_pos - self_pos (2 per other agent, in agent order), comm (2 per other
  agent, always zero: the agents are silent)]``, computed in float64 and
  rounded to float32 as mpe2 does.
- **episode end**: truncation after ``max_cycles`` (25) steps for all agents
  at once; never terminated, unless ``terminate_on_success`` (mpe2's option)
  ends an episode once every landmark has an agent within 0.1 (a step that
  reaches ``max_cycles`` is only truncated, as in mpe2).

The expressions are mpe2's, in mpe2's order (collision forces summed over the
other agents in index order, the same float64 arithmetic), so results on NumPy are
bit-identical to mpe2 step for step; the tests check that (on CuPy: close, as CUDA's
sqrt and reductions may round differently).

Not reproduced: mpe2's ``curriculum`` and partial-observability options
(``num_agent_neighbors``, ``num_landmark_neighbors``), rendering, and the
action range assert of its AEC wrapper (discrete actions are taken modulo 5
as mpe2's unwrapped env would, continuous ones are clipped to ``[0, 1]`` like
its ``ClipOutOfBoundsWrapper``).

Batched arrays: ``obs [N, agents, obs_dim]`` float32, ``reward [N, agents]``
float32 (one reward per agent, unlike single-agent envs' ``[N]``),
``terminated``/``truncated`` ``[N]`` bool. ``info["episode_return"]`` is, per
ended episode, the sum over its steps of the MEAN over agents of the reward:
with the shared global term this is the team return a MAPPO/IPPO log reports,
and it stays comparable across agent counts.

**Resets on the device** (``resets="counter"``, what ``make(..., device="cuda:K")`` gives):
``"mpe2"`` (the default) reads which envs ended back to the host every step, to draw their
starts from mpe2's host stream. ``"counter"`` draws them from (seed, env, episode) by
`workbench.envs.counter_rng` and resets by masks on the device; the episode stats are
`EndedEpisodes` there until read, so a step never waits for the GPU. Its NumPy twin draws
the same bits (not mpe2's starts); the dynamics are the same. CI runs the NumPy path and,
for the device branches, NumPy under another module's name (tests/envs/test_device_state.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from workbench.envs import counter_rng
from workbench.envs.base import (
    CONTINUOUS_KINDS,
    DISCRETE_KINDS,
    SavesState,
    StepResult,
    action_error,
    empty_episode_stats,
    ended_envs,
    host_rng,
    to_host,
)
from workbench.envs.episodes import EndedEpisodes

__all__ = ["SimpleSpread"]

# mpe2 _mpe_utils/core.py World / Entity / Agent defaults and simple_spread's make_world.
DT = 0.1
DAMPING = 0.25
CONTACT_FORCE = 1e2
CONTACT_MARGIN = 1e-3
AGENT_SIZE = 0.15
AGENT_MASS = 1.0
SENSITIVITY = 5.0  # simple_env._set_action: agent.accel is None -> 5.0
DIM_C = 2  # comm channel width: observed (as zeros) although agents are silent
NUM_DISCRETE_ACTIONS = 5  # dim_p * 2 + 1
CAPTURE_RADIUS = 0.1  # terminate_on_success: landmark counts as covered
MAX_CYCLES = 25
LOCAL_RATIO = 0.5
RESETS = ("mpe2", "counter")


def _make_rng(xp: Any, seed: int | None) -> np.random.Generator:
    """The env's random stream: on the host for every ``xp`` (see `host_rng`), what
    gymnasium's seeding.np_random(seed) builds for mpe2: the same stream."""
    return host_rng(seed)


class SimpleSpread(SavesState):
    """``N`` MPE simple_spread_v3 envs stepped as arrays of module ``xp`` (NumPy or CuPy).

    Implements `workbench.envs.VectorEnv` with same-step autoreset, for a team of
    agents that act and end their episodes together (see the module docstring
    for the exact dynamics and the shapes).

    Args:
        num_envs: number of envs ``N``.
        agents: agents per env, and landmarks per env (mpe2's ``N``), default 3.
        local_ratio: weight of the per-agent collision term against the shared
            coverage term, in ``[0, 1]`` (mpe2's default 0.5).
        max_cycles: steps per episode before truncation (default 25).
        continuous_actions: ``False`` (default): actions ``[N, agents]`` ints in
            ``0..4``; ``True``: ``[N, agents, 5]`` floats in ``[0, 1]``.
        terminate_on_success: end an episode (``terminated``) once every
            landmark has an agent within 0.1, as mpe2's option of that name.
        seed: seed of this instance's generator (used by resets, including
            autoresets); ``None`` draws fresh entropy.
        xp: ``numpy`` (default) or ``cupy``.
        resets: ``"mpe2"`` (default): starts from mpe2's generator on the host (the
            same starts as mpe2 for one env); ``"counter"``: drawn on the env's device
            from (seed, env, episode), so a CuPy step never reads back to the host.

    Example::

        env = SimpleSpread(num_envs=1024, seed=0)
        obs = env.reset()                                  # [1024, 3, 18] float32
        actions = np.random.randint(0, 5, size=(1024, 3))  # one action per agent
        obs, reward, terminated, truncated, info = env.step(actions)
        reward.shape                                       # (1024, 3)
        info["episode_return"]                             # team returns of ended episodes
    """

    #: what a checkpoint saves (see SavesState)
    _STATE = (
        "_rng",
        "_key",
        "_episodes",
        "_resets",
        "_pos",
        "_vel",
        "_landmarks",
        "_elapsed",
        "_returns",
        "_needs_reset",
    )

    def __init__(
        self,
        num_envs: int,
        *,
        agents: int = 3,
        local_ratio: float = LOCAL_RATIO,
        max_cycles: int = MAX_CYCLES,
        continuous_actions: bool = False,
        terminate_on_success: bool = False,
        seed: int | None = None,
        xp: Any = np,
        resets: str = "mpe2",
    ) -> None:
        if int(num_envs) < 1:
            raise ValueError(f"SimpleSpread needs num_envs >= 1, got {num_envs!r}")
        if int(agents) < 1:
            raise ValueError(f"SimpleSpread needs agents >= 1, got {agents!r}")
        if not 0.0 <= local_ratio <= 1.0:
            raise ValueError(f"local_ratio is a proportion in [0, 1], got {local_ratio!r}")
        if int(max_cycles) < 1:
            raise ValueError(f"max_cycles must be >= 1, got {max_cycles!r}")
        if resets not in RESETS:
            raise ValueError(
                f"resets must be one of {RESETS}, got {resets!r}: 'mpe2' draws "
                "mpe2's starts on the host, 'counter' draws them on the env's device"
            )
        self.num_envs = int(num_envs)
        self.num_agents = int(agents)
        self.num_landmarks = int(agents)
        self.local_ratio = float(local_ratio)
        self.max_cycles = int(max_cycles)
        self.continuous_actions = bool(continuous_actions)
        self.terminate_on_success = bool(terminate_on_success)
        self.xp = xp
        self.agent_ids = [f"agent_{i}" for i in range(self.num_agents)]  # mpe2's names

        a, lm = self.num_agents, self.num_landmarks
        self.obs_dim = 4 + 2 * lm + 2 * (a - 1) + DIM_C * (a - 1)
        self.observation_shape = (a, self.obs_dim)
        self.observation_space = spaces.Box(-np.inf, np.inf, self.observation_shape, np.float32)
        # One env's action is the team's: per instance, as a space carries its own RNG.
        if self.continuous_actions:
            self.action_space: spaces.Space = spaces.Box(0.0, 1.0, (a, 5), np.float32)
        else:
            self.action_space = spaces.MultiDiscrete(np.full(a, NUM_DISCRETE_ACTIONS))

        self._resets = resets
        self._rng, self._key = None, None
        self._seed(seed)
        self._episodes = xp.zeros(self.num_envs, dtype=xp.uint32)  # "counter": each env's episode
        # Coordinate-major state, [2, N, agents] / [2, N, landmarks]: x and y are
        # each one contiguous block, so the per-coordinate arithmetic below runs
        # on contiguous memory, as in CartPole's [4, N].
        self._pos = xp.zeros((2, self.num_envs, a), dtype=xp.float64)
        self._vel = xp.zeros((2, self.num_envs, a), dtype=xp.float64)
        self._landmarks = xp.zeros((2, self.num_envs, lm), dtype=xp.float64)
        self._elapsed = xp.zeros(self.num_envs, dtype=xp.int32)
        self._returns = xp.zeros(self.num_envs, dtype=xp.float64)
        # others[i] = the other agents of agent i, in index order (mpe2's order).
        others = [[j for j in range(a) if j != i] for i in range(a)]
        self._others = xp.asarray(np.array(others, dtype=np.int64).reshape(a, a - 1))
        pair_i, pair_j = np.triu_indices(a, 1)  # unordered agent pairs, i < j
        self._pair_i, self._pair_j = xp.asarray(pair_i), xp.asarray(pair_j)
        members = np.zeros((pair_i.size, a))  # [pairs, agents]: 1 where the agent is in the pair
        members[np.arange(pair_i.size), pair_i] = members[np.arange(pair_i.size), pair_j] = 1.0
        self._pair_members = xp.asarray(members)
        self._needs_reset = True

    # -- protocol ------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> Any:
        """Reset all envs to uniform positions in [-1, 1]^2; return obs ``[N, agents, obs_dim]``."""
        if seed is not None:
            self._seed(seed)
            self._episodes[...] = 0
        elif self._resets == "counter" and not self._needs_reset:
            self._episodes += 1  # every env on to its next episode's start
        self._write_initial_states(slice(None), self.num_envs)
        self._elapsed[...] = 0
        self._returns[...] = 0.0
        self._needs_reset = False
        return self._observe(self._pos, self._vel, self._landmarks)

    def step(self, actions: Any) -> StepResult:
        """Move every agent of every env once; autoreset the envs whose episode ends.

        Returns ``obs [N, agents, obs_dim]`` float32, ``reward [N, agents]``
        float32, ``terminated [N]``, ``truncated [N]`` bool and ``info`` with
        ``final_obs``, ``episode_return`` (mean-over-agents team return) and
        ``episode_length``.
        """
        if self._needs_reset:
            raise RuntimeError("SimpleSpread.step() called before reset(); call env.reset() first")
        xp = self.xp
        force_x, force_y = self._action_force(actions)
        x, y = self._pos  # views: updated in place below
        vx, vy = self._vel

        # Contact forces from the positions BEFORE the move (mpe2 gathers all
        # forces, then integrates), once per unordered pair (i < j): the push
        # on j from i is exactly minus the push on i from j (delta flips sign,
        # dist and penetration are symmetric), so half the transcendentals.
        dx = x[:, self._pair_i] - x[:, self._pair_j]  # [N, pairs]: pos_i - pos_j
        dy = y[:, self._pair_i] - y[:, self._pair_j]
        dist = xp.sqrt(dx * dx + dy * dy)
        k = CONTACT_MARGIN
        penetration = xp.logaddexp(0.0, -(dist - (AGENT_SIZE + AGENT_SIZE)) / k) * k
        # mpe2: contact_force * delta_pos / dist * penetration, left to right.
        fx = CONTACT_FORCE * dx / dist * penetration
        fy = CONTACT_FORCE * dy / dist * penetration
        # push[:, i, j]: on agent i from agent j; the diagonal stays an exact 0.
        push_x = xp.zeros((self.num_envs, self.num_agents, self.num_agents), dtype=xp.float64)
        push_y = xp.zeros_like(push_x)
        push_x[:, self._pair_i, self._pair_j] = fx
        push_x[:, self._pair_j, self._pair_i] = -fx
        push_y[:, self._pair_i, self._pair_j] = fy
        push_y[:, self._pair_j, self._pair_i] = -fy
        # mpe2 adds the pushes onto the action force one other agent at a time,
        # in agent order; a Python loop over AGENTS (not envs) keeps that order,
        # so the float sums round exactly as mpe2's do (x + 0.0 == x on the diagonal).
        for j in range(self.num_agents):
            force_x = force_x + push_x[:, :, j]
            force_y = force_y + push_y[:, :, j]

        # integrate_state: position with the old velocity, then damped velocity.
        x += vx * DT
        y += vy * DT
        vx *= 1 - DAMPING
        vy *= 1 - DAMPING
        vx += (force_x / AGENT_MASS) * DT
        vy += (force_y / AGENT_MASS) * DT

        reward, covered = self._reward()
        self._elapsed += 1
        truncated = self._elapsed >= self.max_cycles
        if self.terminate_on_success:
            terminated = covered & ~truncated  # mpe2 checks truncation first (elif)
        else:
            terminated = xp.zeros(self.num_envs, dtype=bool)
        # float64 accumulation of the team (mean over agents) reward.
        self._returns += reward.mean(axis=1)

        final_obs = self._observe(self._pos, self._vel, self._landmarks)
        obs, episode_return, episode_length = self._autoreset(terminated | truncated, final_obs)
        info = {
            "final_obs": final_obs,
            "episode_return": episode_return,
            "episode_length": episode_length,
        }
        return obs, reward.astype(xp.float32), terminated, truncated, info

    def close(self) -> None:
        """Nothing to release; present for the protocol."""

    # -- state access (tests, debugging, custom starts) ------------------------------

    @property
    def state(self) -> dict[str, Any]:
        """Copies of the float64 state: ``agent_pos``/``agent_vel`` ``[N, agents, 2]``,
        ``landmark_pos`` ``[N, landmarks, 2]``."""
        return {
            "agent_pos": self._pos.transpose(1, 2, 0).copy(),
            "agent_vel": self._vel.transpose(1, 2, 0).copy(),
            "landmark_pos": self._landmarks.transpose(1, 2, 0).copy(),
        }

    @property
    def elapsed_steps(self) -> Any:
        """A copy of the steps taken in each env's current episode, ``[N]`` int32."""
        return self._elapsed.copy()

    def set_state(
        self,
        agent_pos: Any,
        agent_vel: Any,
        landmark_pos: Any,
        elapsed_steps: Any = None,
    ) -> Any:
        """Overwrite the state (shapes as `state`); return the matching obs.

        Running returns restart from zero; ``elapsed_steps`` ``[N]`` (default:
        unchanged) sets how far into their episodes the envs are.

        Example::

            env.set_state(pos, np.zeros_like(pos), landmarks)   # e.g. copied from mpe2
        """
        xp = self.xp
        n, a, lm = self.num_envs, self.num_agents, self.num_landmarks
        for name, value, shape, target in (
            ("agent_pos", agent_pos, (n, a, 2), self._pos),
            ("agent_vel", agent_vel, (n, a, 2), self._vel),
            ("landmark_pos", landmark_pos, (n, lm, 2), self._landmarks),
        ):
            value = xp.asarray(value, dtype=xp.float64)
            if value.shape != shape:
                raise ValueError(f"{name} must have shape {shape}, got {tuple(value.shape)}")
            target[...] = value.transpose(2, 0, 1)
        if elapsed_steps is not None:
            self._elapsed[...] = xp.asarray(elapsed_steps, dtype=xp.int32)
        self._returns[...] = 0.0
        self._needs_reset = False
        return self._observe(self._pos, self._vel, self._landmarks)

    # -- internals -----------------------------------------------------------------

    def _seed(self, seed: int | None) -> None:
        if self._resets == "mpe2":
            self._rng = _make_rng(self.xp, seed)
        else:
            entropy = int(np.random.SeedSequence().entropy) if seed is None else int(seed)
            self._key = counter_rng.seed_key(entropy)

    def _draw_starts(self, index: Any, count: int) -> Any:
        """Start positions ``[2, count, agents + landmarks]`` (agents first) of the envs at
        ``index``, uniform in [-1, 1]^2."""
        xp, shape = self.xp, (count, self.num_agents + self.num_landmarks, 2)
        if self._resets == "mpe2":
            # mpe2's reset_world draws each agent's position, then each landmark's, two
            # uniforms apiece: one draw of this shape consumes the stream in that order.
            draw = xp.asarray(self._rng.uniform(-1.0, 1.0, size=shape), dtype=xp.float64)
        else:
            envs = xp.arange(self.num_envs)[index]
            u = counter_rng.uniforms(self._key, envs, self._episodes[index], shape[1] * 2, xp)
            draw = (-1.0 + 2.0 * u).reshape(shape)
        return draw.transpose(2, 0, 1)

    def _write_initial_states(self, index: Any, count: int) -> None:
        draw = self._draw_starts(index, count)
        a = self.num_agents
        self._pos[:, index] = draw[:, :, :a]
        self._vel[:, index] = 0.0
        self._landmarks[:, index] = draw[:, :, a:]

    def _action_force(self, actions: Any) -> tuple[Any, Any]:
        """The agents' pushes ``(fx, fy)``, each ``[N, agents]`` float64."""
        xp = self.xp
        n, a = self.num_envs, self.num_agents
        actions = xp.asarray(actions)
        if self.continuous_actions:
            if actions.dtype.kind not in CONTINUOUS_KINDS or (actions.shape != (n, a, 5) and actions.size != n * a * 5):
                raise action_error("SimpleSpread", actions, (n, a, 5), CONTINUOUS_KINDS)
            if actions.shape != (n, a, 5):
                actions = actions.reshape(n, a, 5)
            # Clipping is the identity in range, and mpe2's wrapper's fix outside it.
            actions = xp.clip(actions, 0.0, 1.0).astype(actions.dtype, copy=False)
            # mpe2 forms the difference in the action's own dtype (float32 from
            # its Box), then widens it into the float64 push.
            ux = (actions[..., 2] - actions[..., 1]).astype(xp.float64)
            uy = (actions[..., 4] - actions[..., 3]).astype(xp.float64)
            return ux * SENSITIVITY, uy * SENSITIVITY
        if actions.dtype.kind not in DISCRETE_KINDS or (actions.shape != (n, a) and actions.size != n * a):
            raise action_error("SimpleSpread", actions, (n, a), DISCRETE_KINDS)
        if actions.shape != (n, a):
            actions = actions.reshape(n, a)  # e.g. [N * agents] from a flattened policy batch
        # No range check (it costs a device sync per step on CuPy): values are
        # taken modulo 5 as mpe2's unwrapped env does.
        actions = actions % NUM_DISCRETE_ACTIONS
        ux = (actions == 2).astype(xp.float64) - (actions == 1).astype(xp.float64)
        uy = (actions == 4).astype(xp.float64) - (actions == 3).astype(xp.float64)
        return ux * SENSITIVITY, uy * SENSITIVITY

    def _reward(self) -> tuple[Any, Any]:
        """Per-agent float64 rewards ``[N, agents]``; whether all landmarks are covered ``[N]``."""
        xp = self.xp
        x, y = self._pos
        lx, ly = self._landmarks
        # Shared term: distance from each landmark to its nearest agent.
        dx = x[:, :, None] - lx[:, None, :]
        dy = y[:, :, None] - ly[:, None, :]
        nearest = xp.sqrt(dx * dx + dy * dy).min(axis=1)  # [N, landmarks]
        # mpe2 subtracts landmark by landmark from 0; -(a + b) == -a - b exactly.
        total = nearest[:, 0]
        for j in range(1, self.num_landmarks):
            total = total + nearest[:, j]
        global_reward = -total
        # Local term: one penalty per OTHER agent overlapping (dist < 0.3, strict).
        dx = x[:, self._pair_i] - x[:, self._pair_j]
        dy = y[:, self._pair_i] - y[:, self._pair_j]
        overlap = xp.sqrt(dx * dx + dy * dy) < AGENT_SIZE + AGENT_SIZE  # [N, pairs]
        # Each overlapping pair penalises both its agents; small integer sums are exact.
        local_reward = -(overlap.astype(xp.float64) @ self._pair_members)
        reward = global_reward[:, None] * (1 - self.local_ratio) + local_reward * self.local_ratio
        covered = (nearest < CAPTURE_RADIUS).all(axis=1)
        return reward, covered

    def _observe(self, pos: Any, vel: Any, landmarks: Any) -> Any:
        """Observations ``[n, agents, obs_dim]`` float32 of the states given (``[2, n, ...]``)."""
        xp = self.xp
        a, lm = self.num_agents, self.num_landmarks
        x, y = pos
        obs = xp.zeros((x.shape[0], a, self.obs_dim), dtype=xp.float32)  # comm stays 0
        obs[..., 0] = vel[0]
        obs[..., 1] = vel[1]
        obs[..., 2] = x
        obs[..., 3] = y
        # Differences in float64, rounded once on assignment, as mpe2's astype.
        end = 4 + 2 * lm
        obs[..., 4:end:2] = landmarks[0][:, None, :] - x[:, :, None]
        obs[..., 5:end:2] = landmarks[1][:, None, :] - y[:, :, None]
        if a > 1:
            stop = end + 2 * (a - 1)
            obs[..., end:stop:2] = x[:, self._others] - x[:, :, None]
            obs[..., end + 1 : stop : 2] = y[:, self._others] - y[:, :, None]
        return obs

    def _autoreset(self, done: Any, final_obs: Any) -> tuple[Any, Any, Any]:
        """Reset the envs where ``done``; return (obs, episode returns, lengths)."""
        xp = self.xp
        if self._resets == "counter":
            return self._autoreset_by_counter(done, final_obs)
        ended, index = ended_envs(done, xp)
        if ended.size == 0:
            return (final_obs.copy(), *empty_episode_stats())
        lengths, returns = self._elapsed[index], self._returns[index]
        lengths, returns = to_host(lengths), to_host(returns)
        obs = self._reset_at(index, ended.size, final_obs)
        return obs, returns.astype(np.float32), lengths.astype(np.int64)

    def _reset_at(self, index: Any, count: int, final_obs: Any) -> Any:
        """Reset the ``count`` envs at ``index``; the step's obs: theirs fresh, the rest final."""
        self._write_initial_states(index, count)
        self._elapsed[index] = 0
        self._returns[index] = 0.0
        obs = final_obs.copy()
        obs[index] = self._observe(self._pos[:, index], self._vel[:, index], self._landmarks[:, index])
        return obs

    def _autoreset_by_counter(self, done: Any, final_obs: Any) -> tuple[Any, Any, Any]:
        """`_autoreset` for ``resets="counter"``: the episode stats as `EndedEpisodes`; on
        NumPy only the ended envs draw, elsewhere masks reset them without a host read."""
        xp = self.xp
        returns = EndedEpisodes(self._returns.astype(xp.float32), done)
        lengths = EndedEpisodes(self._elapsed.astype(xp.int64), done)
        if xp is np:
            ended = done.nonzero()[0]
            if ended.size == 0:
                return final_obs.copy(), returns, lengths
            self._episodes[ended] += np.uint32(1)
            return self._reset_at(ended, ended.size, final_obs), returns, lengths
        # Every env draws its next start and keeps it only where it ended: a few
        # elementwise kernels, and the GPU never waits for the host to learn which.
        self._episodes += done.astype(xp.uint32)
        draw = self._draw_starts(slice(None), self.num_envs)
        where, a = done[None, :, None], self.num_agents
        self._pos[...] = xp.where(where, draw[:, :, :a], self._pos)
        self._vel[...] = xp.where(where, 0.0, self._vel)
        self._landmarks[...] = xp.where(where, draw[:, :, a:], self._landmarks)
        self._elapsed[...] = xp.where(done, 0, self._elapsed)
        self._returns[...] = xp.where(done, 0.0, self._returns)
        return self._observe(self._pos, self._vel, self._landmarks), returns, lengths
