"""Env steps, counted where environments step.

The rule (docs/counting.md):

- An **env fragment** is a fragment with a step cell that either calls
  ``wb.count_env_steps(n)`` (it then counts exactly what it says), is named ``env`` or
  ``envs``, or writes ``reward``/``rewards`` in its step cell. When no fragment fits, the
  last fragment in step order counts (a loop without envs still counts its steps).
- Each replica of an env fragment counts, per step, its **batch**: the leading size of the
  ``reward`` (``rewards``) it writes, else of the first array its step cell writes, else 1
  — or the sum of its ``wb.count_env_steps(n)`` calls that step.

So a replay-buffer fragment after the env, or a learner that stacks nothing, never
changes the count (it used to be the batch of whatever the last step fragment sent).

Example:
    >>> import workbench as wb
    >>> fdg = wb.FDG()
    >>> _ = fdg.add_fragment("sim", "r = 0", rate="init")
    >>> _ = fdg.add_fragment("sim", "reward = np.zeros(4)", rate="step")
    >>> _ = fdg.add_fragment("buffer", "kept = reward", rate="step")
    >>> env_fragments(fdg)
    ('sim',)
"""
from __future__ import annotations

import re
from typing import Any

__all__ = ["env_fragments", "batch_of", "one_plain_env", "RESERVED", "ENV_STEPS_KEY", "REBUILT_KEY", "RANDOM_KEY", "RETURN_METRIC"]

#: the metric fragments log finished episodes' returns under (CleanRL's name)
RETURN_METRIC = "charts/episodic_return"

#: names the runtime keeps in a fragment replica's exported state (never a user name:
#: fragment code cannot bind names starting with ``_wb_`` without meaning to)
ENV_STEPS_KEY = "_wb_env_steps"
#: the names a snapshot left out because they do not pickle (a lock, a socket): a replica
#: restored from it runs its init cell to build them again, then lays the rest over
REBUILT_KEY = "_wb_rebuilt"
#: the replica's random streams (workbench.runtime.randomness), with the layout they belong
#: to: a replica of the same group and count continues them on resume
RANDOM_KEY = "_wb_random"
RESERVED = (ENV_STEPS_KEY, REBUILT_KEY, RANDOM_KEY)

_ENV_NAMES = ("env", "envs")
_REWARD_NAMES = ("reward", "rewards")


def explicit(code: str) -> bool:
    """True when a cell counts its env steps itself (``wb.count_env_steps(n)``)."""
    return re.search(r"\bcount_env_steps\s*\(", code) is not None


def env_fragments(fdg) -> tuple[str, ...]:
    """The fragments whose replicas count env steps, by the rule above."""
    found = []
    for name, frag in fdg.fragments.items():
        cell = frag.cells.get("step")
        if cell is None:
            continue
        if explicit(cell.code) or name in _ENV_NAMES or any(n in cell.writes for n in _REWARD_NAMES):
            found.append(name)
    if found:
        return tuple(found)
    order = fdg.schedule().step_order
    return (order[-1],) if order else ()


def batch_of(ns: dict[str, Any], writes: tuple[str, ...]) -> int:
    """Envs one replica stepped in one step: the leading size of ``reward`` (1 for a
    scalar reward: one plain env), else of the first array written, else 1.

    >>> import numpy as np
    >>> batch_of({"obs": np.zeros(4), "reward": 1.0}, ("obs", "reward"))
    1
    >>> batch_of({"obs": np.zeros((8, 4)), "reward": np.zeros(8)}, ("obs", "reward"))
    8
    """
    for name in (n for n in _REWARD_NAMES if n in writes and n in ns):
        # the reward decides when there is one: a scalar is one env's (a plain gymnasium
        # env), however long its observation
        shape = getattr(ns[name], "shape", None)
        return int(shape[0]) if shape is not None and len(shape) >= 1 else 1
    for name in (n for n in writes if n not in _REWARD_NAMES):
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
    for name in (n for n in _REWARD_NAMES if n in writes and n in ns):
        return len(getattr(ns[name], "shape", ())) == 0
    return False


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
