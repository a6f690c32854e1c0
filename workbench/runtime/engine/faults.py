"""The one line a run says when it loses a worker: which worker, what happened to it, where
its fragments went, and how many finished iterations run again.

A worker that dies, freezes or is cut off ends the stretch it was in (a
:class:`~workbench.errors.WorkerLostError`); the trainer rewinds to the newest snapshot and
places the next stretch on the workers left. Only then is everything known that a user
asks first — *was my run re-placed, and what did it cost?* — so the line is written at
that moment, once, and goes everywhere the run speaks: printed (``workbench: …``), into
``run.events`` (kind ``"worker lost"``, so the run report and the live view list it), to
each logger with an ``event`` method (CSV: a ``*.events.csv`` beside the metrics;
TensorBoard: a text entry), and to the dashboard page (the new stretch's scheduler topic).

Example:
    >>> from workbench.errors import WorkerLostError
    >>> from workbench.fdg.policy import Group
    >>> before = [Group(("learner",), 1, ("w2",)), Group(("actor",), 2, ("w1", "w2"))]
    >>> after = [Group(("learner",), 1, ("w1",)), Group(("actor",), 2, ("w1", "w1"))]
    >>> fault_line(WorkerLostError(["w2"], iteration=5), before, after, resume_at=4, redone=1)
    'worker w2 left the cluster mid-run (at iteration 5); re-placed learner w2 → w1, actor[1] w2 → w1; 1 finished iteration run again (continuing from iteration 4)'
"""

from __future__ import annotations

from typing import Any, Iterable

__all__ = ["fault_line", "moves", "announce"]


def moves(before: Iterable[Any], after: Iterable[Any], lost: Iterable[str]) -> list[str]:
    """``"group[replica] old → new"`` for every replica that was on a ``lost`` worker
    (``before``/``after``: the two placements' groups, matched by their first fragment,
    which fusing keeps together); a group gone from the new placement says so, and one on a
    worker that came back under its name (a nanny's restart) says that.

    >>> from workbench.fdg.policy import Group
    >>> moves([Group(("learner",), 1, ("0",))], [Group(("learner",), 1, ("0",))], ["0"])
    ['learner back on 0 (restarted under the same name)']
    """
    lost = set(lost)
    placed = {fragment: g for g in after for fragment in g.fragments}
    said = []
    for group in before:
        if not set(group.workers) & lost:
            continue
        new = placed.get(group.fragments[0])
        for index, worker in enumerate(group.workers):
            if worker not in lost:
                continue
            label = group.name if group.replicas == 1 else f"{group.name}[{index}]"
            if new is None or not new.workers:
                said.append(f"{label} {worker} → (placed afresh)")
            else:  # a group may have fewer replicas now (fewer workers): its last takes over
                target = new.workers[min(index, len(new.workers) - 1)]
                # a nanny restarts a worker under its old name: "0 → 0" would read as no move
                said.append(
                    f"{label} {worker} → {target}"
                    if target != worker
                    else f"{label} back on {worker} (restarted under the same name)"
                )
    return said


def fault_line(lost, before, after, *, resume_at: int, redone: int) -> str:
    """The line for ``lost`` (a WorkerLostError): the error's own words, the moves from
    placement ``before`` to ``after`` (their groups), and what it cost."""
    moved = moves(before, after, lost.workers)
    where = f"re-placed {', '.join(moved)}" if moved else "none of the run's fragments were on it (nothing re-placed)"
    cost = (
        f"{redone} finished iteration{'s' if redone != 1 else ''} run again"
        if redone
        else "no finished iteration run again"
    )
    return f"{lost}; {where}; {cost} (continuing from iteration {resume_at})"


def announce(run, line: str, iteration: int, loggers=(), backend=None) -> None:
    """Say ``line`` everywhere: printed and in ``run.events`` (kind "worker lost"), to the
    loggers that take events, and to the dashboard through ``backend`` (its ``announce``)."""
    run.note("worker lost", line, iteration)
    env_steps = run.rows[-1]["env_steps"] if run.rows else run.env_steps
    for logger in loggers:
        event = getattr(logger, "event", None)
        if callable(event):
            try:
                event("worker lost", line, iteration, env_steps)
            except Exception as exc:  # a logger's trouble must not cost the recovery
                print(f"workbench: logger {type(logger).__name__} could not record the event: {exc}", flush=True)
    say = getattr(backend, "announce", None)
    if callable(say):
        say("worker lost", line, iteration)
