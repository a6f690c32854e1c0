"""What a stretch of a run starts from and ends with.

A run is a sequence of stretches (:mod:`workbench.trainer`); between two, the whole state
moves. This module lays a state out over a plan's replicas, collects it back, and settles
the stretch's env-step count from its source: the env replicas' own counters
(docs/counting.md), which hold every step the envs took — also those of iterations a stop
left unfinished, which no iteration's record holds.

Example:
    >>> from workbench.runtime.state.counting import ENV_STEPS_KEY
    >>> counts_in({("env", 0): {"env": {ENV_STEPS_KEY: 120}}, ("learner", 0): {"learner": {}}})
    {'env[0]': 120, 'learner[0]': 0}
"""

from __future__ import annotations

from workbench.fdg.plan import Plan
from workbench.runtime.state.counting import REBUILT_KEY, counter_of
from workbench.runtime.state.run import Run
from workbench.runtime.state.replica_state import RunState

__all__ = ["states_for", "collect_state", "snapshot_state", "say_left_out", "counts_in", "settle_counts"]


def snapshot_state(plan: Plan, book) -> RunState | None:
    """The newest complete snapshot in ``book`` as a state to resume from (None: none)."""
    if book is None:
        return None
    found = book.latest()
    if found is None:
        return None
    from workbench.runtime.state.snapshots import state_from

    return state_from(plan, found[0], found[1])


def states_for(plan: Plan, resume: RunState | None) -> dict[tuple[str, int], dict] | None:
    """Lay a resumed state out over this plan's replicas: (group, index) → fragment states."""
    if resume is None:
        return None
    counts = {f: g.replicas for g in plan.policy.groups for f in g.fragments}
    layout = resume.layout(counts)
    out: dict[tuple[str, int], dict] = {}
    for group in plan.policy.groups:
        for index in range(group.replicas):
            out[(group.name, index)] = {f: layout[f][index] for f in group.fragments if layout[f][index] is not None}
    return out


def collect_state(plan: Plan, exported: dict, iteration: int) -> RunState:
    """The replicas' exported states as one :class:`RunState` at ``iteration``."""
    fragments: dict[str, list] = {}
    for group in plan.policy.groups:
        for frag in group.fragments:
            fragments[frag] = [exported[(group.name, i)][frag] for i in range(group.replicas)]
    stepping = frozenset(n for n, f in plan.fdg.fragments.items() if "step" in f.cells)
    return RunState(iteration, fragments, stepping)


def say_left_out(run: Run) -> None:
    """Say (once per run) which state the final export left out because it does not
    pickle — snapshots said it already when there were any."""
    for frag, replicas in run.state.fragments.items():
        for values in replicas:
            for name, label in (values.get(REBUILT_KEY) or {}).items() if isinstance(values, dict) else ():
                said = f"fragment {frag!r} keeps {name!r} in its state"
                if not any(e.kind == "state left out" and e.message.startswith(said) for e in run.events):
                    run.note(
                        "state left out",
                        f"{said}, which cannot be pickled ({label}): the run's final "
                        "state leaves it out, and a resume runs the fragment's init cell to build it "
                        "again.",
                        run.state.iteration,
                    )


def counts_in(states: dict[tuple[str, int], dict] | None) -> dict[str, int]:
    """Each replica's env-step counter in the states a stretch deploys ("group[index]" →
    steps counted before it)."""
    return {
        f"{group}[{index}]": sum(counter_of(values) for values in frags.values())
        for (group, index), frags in (states or {}).items()
    }


def settle_counts(run: Run, backend, at_start: dict[str, int], recorded_before: dict[str, int]) -> None:
    """Once a stretch's loops have stopped: count, from each env replica's own counter, the
    steps its envs took that no recorded iteration holds (``run.record_unfinished``).
    ``at_start``: the counters the stretch began with (:func:`counts_in`);
    ``recorded_before``: ``run.replica_env_steps`` as the stretch began. A backend that
    cannot read its replicas' counters (a worker gone) leaves the recorded count."""
    read = getattr(backend, "env_step_counts", None)
    try:
        counts = read() if read is not None else None
    except Exception:  # a worker that cannot be asked: the recorded count is what there is
        counts = None
    if not counts:
        return
    left = {}
    for label, total in counts.items():
        recorded = run.replica_env_steps.get(label, 0) - recorded_before.get(label, 0)
        if total - at_start.get(label, 0) > recorded:
            left[label] = total - at_start.get(label, 0) - recorded
    if left:
        run.record_unfinished(left, base=sum(at_start.values()))
