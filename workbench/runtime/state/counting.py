"""Env steps, counted where environments step.

The rule (docs/counting.md, "Env steps are counted where envs step"):

1. **By hand is authoritative.** When any fragment's step cell calls
   ``wb.count_env_steps(n)``, exactly those fragments count, exactly the ``n``s they pass;
   no other fragment adds automatic counts on top.
2. Otherwise the **candidates** are the fragments with a step cell that are named ``env…``
   (``env``, ``envs``, ``env_cartpole``: the names ``SingleLearnerFine`` takes for env
   fragments) or write ``reward``/``rewards`` in their step cell.
3. A candidate whose step cell reads a value an *earlier* candidate (in step order) writes
   in its step cell works on that env's output of the same step — a reward shaper, a
   normaliser, a replay buffer — and does not count. Candidates that do not read each
   other (two environments stepped by two fragments) all count, and add up.
4. When no fragment fits, the last fragment in step order counts (a loop without envs
   still counts its steps).

Each replica of an env fragment counts, per step, its **batch**: the leading size of the
``reward`` it writes (1 for a scalar: one plain env), else of a ``…_reward`` it writes
(``raw_reward``), else of the first array its step cell writes, else 1.

So a replay-buffer fragment after the env, a reward shaper, or a learner that stacks
nothing never changes the count.

Example:
    >>> import workbench as wb
    >>> fdg = wb.FDG()
    >>> _ = fdg.add_fragment("sim", "r = 0", rate="init")
    >>> _ = fdg.add_fragment("sim", "obs = r; reward = np.zeros(4)", rate="step")
    >>> _ = fdg.add_fragment("buffer", "kept = reward", rate="step")
    >>> env_fragments(fdg)
    ('sim',)
    >>> _ = fdg.add_fragment("env", "obs2, raw_reward = obs, reward", rate="step")
    >>> _ = fdg.add_fragment("shaper", "rewards = raw_reward - 1", rate="step")
    >>> env_fragments(fdg)
    ('sim',)
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "env_fragments",
    "batch_of",
    "one_plain_env",
    "RESERVED",
    "ENV_STEPS_KEY",
    "REBUILT_KEY",
    "RANDOM_KEY",
    "RETURN_METRIC",
]

#: the metric fragments log finished episodes' returns under (CleanRL's name)
RETURN_METRIC = "charts/episodic_return"

#: names the runtime keeps in a fragment replica's exported state (never a user name:
#: fragment code cannot bind names starting with ``_wb_`` without meaning to)
ENV_STEPS_KEY = "_wb_env_steps"
#: the names a snapshot left out because they do not pickle (a lock, a socket): a replica
#: restored from it runs its init cell to build them again, then lays the rest over
REBUILT_KEY = "_wb_rebuilt"
#: the replica's random streams (workbench.runtime.state.randomness), with the layout they belong
#: to: a replica of the same group and count continues them on resume
RANDOM_KEY = "_wb_random"
RESERVED = (ENV_STEPS_KEY, REBUILT_KEY, RANDOM_KEY)

_REWARD_NAMES = ("reward", "rewards")
#: other names a step's reward goes by (``raw_reward``, ``env_rewards``): read for an env
#: fragment's batch only, never to make a fragment an env fragment
_REWARD_LIKE = re.compile(r"_rewards?$")


def explicit(code: str) -> bool:
    """True when a cell counts its env steps itself (``wb.count_env_steps(n)``)."""
    return re.search(r"\bcount_env_steps\s*\(", code) is not None


def named_env(name: str) -> bool:
    """A fragment named as an env fragment: ``env``, ``envs``, ``env_…`` (the names
    ``SingleLearnerFine`` takes for its env fragments)."""
    return name.startswith("env")


def env_fragments(fdg) -> tuple[str, ...]:
    """The fragments whose replicas count env steps, by the rule above (in the FDG's order)."""
    stepping = {name: frag for name, frag in fdg.fragments.items() if "step" in frag.cells}
    by_hand = tuple(name for name, frag in stepping.items() if explicit(frag.cells["step"].code))
    if by_hand:  # 1. authoritative: nothing counted automatically on top
        return by_hand
    candidates = [
        name
        for name, frag in stepping.items()
        if named_env(name) or any(n in frag.writes_at("step") for n in _REWARD_NAMES)
    ]
    order = fdg.schedule().step_order if stepping and len(candidates) != 1 else ()
    if len(candidates) > 1:  # 3. one that works on an earlier one's output of the step
        ranked = sorted(candidates, key=order.index)
        downstream = {
            later
            for i, later in enumerate(ranked)
            if any(
                set(fdg[later].external_inputs("step")) & set(fdg[earlier].writes_at("step")) for earlier in ranked[:i]
            )
        }
        candidates = [name for name in candidates if name not in downstream]
    if candidates:
        return tuple(candidates)
    return (order[-1],) if order else ()


def _reward_name(ns: dict[str, Any], writes: tuple[str, ...]) -> str | None:
    """The value a step's reward is read from: ``reward``/``rewards``, else another
    reward-named value written (``raw_reward``: the env before a shaper)."""
    for name in _REWARD_NAMES:
        if name in writes and name in ns:
            return name
    for name in writes:
        if _REWARD_LIKE.search(name) and name in ns:
            return name
    return None


def batch_of(ns: dict[str, Any], writes: tuple[str, ...]) -> int:
    """Envs one replica stepped in one step: the leading size of ``reward`` (1 for a
    scalar reward: one plain env), else of a ``…_reward`` it writes, else of the first
    array written, else 1.

    >>> import numpy as np
    >>> batch_of({"obs": np.zeros(4), "reward": 1.0}, ("obs", "reward"))
    1
    >>> batch_of({"obs": np.zeros((8, 4)), "reward": np.zeros(8)}, ("obs", "reward"))
    8
    >>> batch_of({"obs": np.zeros(4), "raw_reward": 1.0}, ("obs", "raw_reward"))
    1
    """
    reward = _reward_name(ns, writes)
    if reward is not None:
        # the reward decides when there is one: a scalar is one env's (a plain gymnasium
        # env), however long its observation
        shape = getattr(ns[reward], "shape", None)
        return int(shape[0]) if shape is not None and len(shape) >= 1 else 1
    for name in writes:
        shape = getattr(ns.get(name), "shape", None)
        if shape is not None and len(shape) >= 1:
            return int(shape[0])
    return 1


def one_plain_env(ns: dict[str, Any], writes: tuple[str, ...]) -> bool:
    """The step wrote its reward as a number: the replica steps one plain env, so its step
    values have no batch axis (``obs`` of shape (4,) is one env's features).

    >>> import numpy as np
    >>> one_plain_env({"reward": 1.0}, ("reward",)), one_plain_env({"reward": np.ones(2)}, ("reward",))
    (True, False)
    """
    reward = _reward_name(ns, writes)
    return reward is not None and len(getattr(ns[reward], "shape", ())) == 0


def counter_of(values: Any) -> int:
    """The env steps a fragment replica's exported (or checkpointed) state has counted."""
    if not isinstance(values, dict):
        return 0
    return int(values.get(ENV_STEPS_KEY, 0) or 0)


def without_counters(values: dict) -> tuple[dict, bool]:
    """``values`` without the runtime's reserved names (same type: a checkpoint's
    ``PortableState`` stays one), and whether only reserved names were there — such a
    state seeds the counters and lets the init cell run (a re-laid-out env, a snapshot
    that holds only the learners' state)."""
    kept = type(values)((k, v) for k, v in values.items() if k not in RESERVED)
    return kept, len(kept) < len(values) and not kept
