"""How PPO's rollout and update follow the number of envs (issue 27 item 3).

With a few envs, the fewest env steps and the best wall time on CartPole came from a
256-sample rollout and 10 full-batch Adam steps per iteration (``benchmarks/ppo_sweep.py``;
docs/performance.md). Kept as they are with thousands of envs, those settings make the
learner the bound (10 passes over 16k+ samples per iteration) and need ever more env steps.
The rule:

- ``num_steps`` (T) = 256 // num_envs, within [16, 128]: a batch of ~256 samples while
  the envs are few; with many envs, a short rollout (16 steps), so the learner sees fresh
  data often;
- up to 1,024 samples per iteration: 10 epochs of one full-batch minibatch (the tuned
  small-batch setting);
- above: 2 epochs of 8 minibatches — 16 Adam steps per iteration, as many as the small
  batch takes, while the learner's cost per sample stays at 2 passes, so it keeps pace
  with the envs however many there are. Measured on CartPole (2-core CPU, 1,024 envs,
  T = 16, seeds 1–2): 2 × 8 solved in 51–52 iterations like 4 × 4 and 10 × 1 at 1.5–2.5×
  their env-steps/s; 2 × 2 and 1 × 8 (4 and 8 Adam steps) needed 2–3× the env steps.

A field given a value keeps it; one left ``None`` follows the rule, also when
``num_envs`` changes later (``cfg.num_envs = 4096`` in a cell, ``--set cfg.num_envs=…``).

Example:
    >>> batch_rule(16)
    {'num_steps': 16, 'update_epochs': 10, 'num_minibatches': 1}
    >>> batch_rule(8)
    {'num_steps': 32, 'update_epochs': 10, 'num_minibatches': 1}
    >>> batch_rule(4096)
    {'num_steps': 16, 'update_epochs': 2, 'num_minibatches': 8}
"""

from __future__ import annotations

from typing import Any

__all__ = ["batch_rule", "minibatch_slices", "ScalesWithBatch", "RULED"]

#: the fields the rule sets (when left None)
RULED = ("num_steps", "update_epochs", "num_minibatches")
#: the samples per iteration a rollout aims at while the envs are few
ROLLOUT_SAMPLES = 256
#: the batch up to which 10 full-batch epochs keep pace with the envs
SMALL_BATCH = 1024


def batch_rule(num_envs: int, num_steps: int | None = None) -> dict[str, int]:
    """``num_steps``, ``update_epochs`` and ``num_minibatches`` for ``num_envs`` envs (the
    epochs and minibatches for ``num_steps`` steps when it is given).

    >>> batch_rule(32, num_steps=128)["update_epochs"]
    2
    """
    steps = num_steps or max(16, min(128, ROLLOUT_SAMPLES // max(1, int(num_envs))))
    if int(num_envs) * steps <= SMALL_BATCH:
        return {"num_steps": steps, "update_epochs": 10, "num_minibatches": 1}
    return {"num_steps": steps, "update_epochs": 2, "num_minibatches": 8}


def minibatch_slices(size: int, count: int) -> list[slice]:
    """``count`` minibatches that cover ``size`` samples once each, their sizes differing
    by at most one (the first ``size % count`` are one larger). ``range(0, size, size //
    count)`` instead made a last minibatch of the remainder: 4,000 samples in 31 gave 31 of
    129 and one of 1, whose normalised advantages are NaN.

    >>> [s.stop - s.start for s in minibatch_slices(10, 3)]
    [4, 3, 3]
    >>> sizes = [s.stop - s.start for s in minibatch_slices(4000, 31)]
    >>> len(sizes), min(sizes), max(sizes), sum(sizes)
    (31, 129, 130, 4000)
    >>> minibatch_slices(3, 2)
    Traceback (most recent call last):
    ...
    ValueError: num_minibatches=2 splits a batch of 3 samples into minibatches of 1: each needs at least 2 (advantages are normalised per minibatch); use num_minibatches ≤ 1, or more envs or steps
    """
    size, count = int(size), int(count)
    if count < 1:
        raise ValueError(f"num_minibatches={count}: at least 1")
    if size < 2 * count and count > 1:
        raise ValueError(
            f"num_minibatches={count} splits a batch of {size} samples into minibatches of "
            f"{size // count}: each needs at least 2 (advantages are normalised per "
            f"minibatch); use num_minibatches ≤ {max(1, size // 2)}, or more envs or steps"
        )
    base, larger = divmod(size, count)
    bounds = [0]
    for i in range(count):
        bounds.append(bounds[-1] + base + (i < larger))
    return [slice(start, stop) for start, stop in zip(bounds, bounds[1:])]


class ScalesWithBatch:
    """Mixin for a config dataclass with ``num_envs``, the `RULED` fields (default None)
    and an ``_auto`` field (default ``()``): the fields left None follow `batch_rule`, now
    and whenever ``num_envs`` changes. ``_auto`` records (field, value the rule gave), so
    ``dataclasses.replace`` keeps a field following the rule unless the replace gives it
    another value, and pickles keep it too."""

    def __post_init__(self) -> None:
        given = dict(getattr(self, "_auto", ()))
        # a field follows the rule if left None, or if it still holds what the rule gave it
        auto = [f for f in RULED if getattr(self, f) is None or (f in given and getattr(self, f) == given[f])]
        object.__setattr__(self, "_auto", tuple((f, None) for f in auto))
        self._follow_rule()

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if "_auto" not in self.__dict__:  # still in __init__: __post_init__ applies the rule
            return
        if name in RULED:
            auto = dict(self._auto)
            if value is None:
                auto[name] = None
            else:
                auto.pop(name, None)  # given a value: it keeps it
            object.__setattr__(self, "_auto", tuple(auto.items()))
        if name in ("num_envs", "num_steps") or (name in RULED and value is None):
            self._follow_rule()

    def _follow_rule(self) -> None:
        if self._auto:
            auto = dict(self._auto)
            ruled = batch_rule(self.num_envs, None if "num_steps" in auto else self.num_steps)
            object.__setattr__(self, "_auto", tuple((f, ruled[f]) for f, _ in self._auto))
            for name, value in self._auto:
                object.__setattr__(self, name, value)
