"""A run's state between placements: every fragment replica's own variables, and how to
lay them out again under another policy.

This is what lets ``policy="auto"`` try placements one after another without losing what
was learned, and a run continue under a different policy or number of workers.

Moving state to a new placement, per fragment:

- same replica count: each replica keeps its own state;
- a fragment without step cells (a learner) whose count changes: every new replica starts
  from replica 0's state — learners are kept identical (one learner, or all-reduced);
- a stepping fragment (actor, env) whose count changes: its init cell runs again in the new
  layout (new environments, actors reloading the learner's weights). Episodes restart;
  nothing learned is lost.

Example:
    >>> state = RunState(iteration=3, fragments={"learner": [{"w": 1}], "env": [{"e": 0}, {"e": 1}]},
    ...                  stepping=frozenset({"env"}))
    >>> state.layout({"learner": 2, "env": 1})
    {'learner': [{'w': 1}, {'w': 1}], 'env': [None]}
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

from workbench.runtime.transport.channels import dumps_state
from workbench.runtime.state.counting import ENV_STEPS_KEY, counter_of

__all__ = ["RunState"]


@dataclass
class RunState:
    """Fragment states after ``iteration`` iterations: fragment → one dict per replica."""

    iteration: int
    fragments: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: fragments with step cells (their replicas are not interchangeable)
    stepping: frozenset[str] = frozenset()

    @property
    def env_steps(self) -> int:
        """The run's env steps up to ``iteration``: what its env replicas counted."""
        return sum(counter_of(v) for replicas in self.fragments.values() for v in replicas)

    def layout(self, counts: dict[str, int]) -> dict[str, list[dict[str, Any] | None]]:
        """Per fragment, the state of each new replica (None: run its init cell again)."""
        out: dict[str, list[dict[str, Any] | None]] = {}
        for frag, count in counts.items():
            old = self.fragments.get(frag)
            if not old:
                out[frag] = [None] * count
            elif len(old) == count:
                out[frag] = list(old)
            elif frag in self.stepping:
                # fresh envs, but the env steps they took still count: the first new
                # replica carries the old replicas' total (only that, so its init runs)
                taken = sum(counter_of(values) for values in old)
                out[frag] = [{ENV_STEPS_KEY: taken} if taken else None] + [None] * (count - 1)
            else:
                # independent copies: replicas in one process must not share objects
                out[frag] = [old[0]] + [_copy(old[0]) for _ in range(count - 1)]
        return out


def _copy(value: Any) -> Any:
    return pickle.loads(dumps_state(value))
