"""A replica's loop: walk the wired task stream, run this group's tasks, pass values on.

The same loop runs in the notebook process (inline policy, one thread per replica) and on a
Dask worker (one long-running task per replica). It blocks only on the inputs it needs,
so replicas are synchronised by their data and nothing else — the way MSRL's generated
interfaces work.
"""

from __future__ import annotations

import time
from dataclasses import replace
from collections.abc import Callable

from workbench.fdg.wiring import WiredTask, receivers_for, senders_for
from workbench.runtime.transport.channels import Mailbox, Peers, Stopped
from workbench.runtime.replicas.fence import Fence
from workbench.runtime.transport.mailbox import Arrival
from workbench.runtime.replicas.replica import GroupReplica, TaskReport
from workbench.runtime.state.snapshot_pacing import PACED, CheckpointPacer, SnapshotPacer
from workbench.runtime.state.state_size import state_nbytes

__all__ = ["run_loop"]


def run_loop(
    replica: GroupReplica,
    tasks: list[WiredTask],
    mailbox: Mailbox,
    postman,
    replica_counts: dict[str, int],
    report: Callable[[int, TaskReport], None],
    stopped: Callable[[], bool],
    snapshot: Callable[[int, bool], int | None] | None = None,
    snapshot_every: int = 0,
    full_snapshot_every: int = 0,
    fence: Fence | None = None,
    paced: bool = False,
    clip_every: int = 0,
) -> int:
    """Run this replica's tasks in order; return how many ran (fewer if stopped).

    With ``fence``, the replica asks it before it begins each iteration, and ends its loop
    at the fence's boundary (see :mod:`workbench.runtime.replicas.fence`).

    With ``snapshot``, the replica calls ``snapshot(i, full)`` as it enters iteration
    ``i`` — every ``snapshot_every``-th (``full`` False: the fragments without step cells,
    what a lost worker needs back) and every ``full_snapshot_every``-th (``full`` True:
    every fragment, what a checkpoint holds). Its state then is the state every replica
    has between iterations ``i - 1`` and ``i``, so the snapshots of all replicas for one
    ``i`` make a consistent state to resume from. It is taken before the replica waits for
    inputs, while other replicas compute, so it costs the critical path little — unless the
    task opens with cells of iteration ``i - 1`` (fine's learner update before the actor's
    steps): then after those, between cells, so that it holds them. ``paced``
    (the run did not set ``snapshot_every``): the light snapshots keep to a share of the
    iterations' time instead (:mod:`workbench.runtime.state.snapshot_pacing`). ``full_snapshot_every``
    = :data:`~workbench.runtime.state.snapshot_pacing.PACED` (a checkpoint directory without
    ``checkpoint_every``): the full ones every 5–10 s of training, within the same share.
    ``clip_every``: a full one every ``clip_every``-th iteration too (what ``--video-every``
    plays its clips from).
    """
    group = replica.program.group
    replica.peers = Peers(group, replica.index, mailbox, postman, replica_counts, stopped)
    done = 0
    last = None
    pacer = SnapshotPacer(estimate=lambda: _nbytes(replica, False)) if paced and snapshot is not None else None
    checkpoints = (
        CheckpointPacer(estimate=lambda: _nbytes(replica, True))
        if full_snapshot_every == PACED and snapshot is not None
        else None
    )
    snap = None
    try:
        for task in tasks:
            if task.spec.group != group:
                continue
            if stopped():
                break
            if task.iteration is not None:
                if (
                    fence is not None
                    and (last is None or task.iteration > last)
                    and not fence.enter((group, replica.index), task.iteration, stopped)
                ):
                    _run_head(replica, task, fence.boundary, mailbox, replica_counts, stopped)
                    break
                if snapshot is not None and last is not None and task.iteration > last:
                    full = (
                        checkpoints.due(task.iteration)
                        if checkpoints is not None
                        else bool(full_snapshot_every) and task.iteration % full_snapshot_every == 0
                    ) or (bool(clip_every) and task.iteration % clip_every == 0)
                    light = bool(snapshot_every) and (
                        pacer.due(task.iteration) if pacer is not None else task.iteration % snapshot_every == 0
                    )
                    if full or light:
                        snap = _snapshotter(snapshot, task.iteration, full, pacer, checkpoints)
                last = task.iteration
            arrivals = [w for w in task.inputs if w.arrival]
            if snap is not None and (arrivals or not _opens_with_last_iteration(task)):
                snap, _ = None, snap()  # now, before it waits for inputs: off the critical path
            if arrivals:  # asynchronous: once per producer replica's value, as each arrives
                for _ in range(replica_counts[arrivals[0].producer_group]):
                    _run_task(replica, task, mailbox, postman, replica_counts, report, stopped, arrivals)
            else:  # a snapshot still due is taken inside, after the last iteration's cells
                _run_task(replica, task, mailbox, postman, replica_counts, report, stopped, [], snap)
            snap = None
            done += 1
    except Stopped:
        pass
    finally:
        if replica.lanes is not None:  # its siblings no longer wait for it to step with them
            replica.lanes.leave(replica.index)
    return done


def _snapshotter(
    snapshot, iteration: int, full: bool, pacer: SnapshotPacer | None, checkpoints: CheckpointPacer | None = None
):
    """``snapshot(iteration, full)`` as a call to make later, timed for ``pacer`` (a light
    one) or ``checkpoints`` (a full one)."""

    def take() -> None:
        began = time.perf_counter()
        size = snapshot(iteration, full)  # its bytes (None: not said)
        if full and checkpoints is not None:
            checkpoints.took(time.perf_counter() - began)
        elif pacer is not None and not full:
            pacer.took(time.perf_counter() - began, size)

    return take


def _opens_with_last_iteration(task: WiredTask) -> bool:
    """Whether ``task`` opens with cells of an earlier iteration than its own: a fine
    policy's actor+learner task runs iteration ``i - 1``'s learner update, then iteration
    ``i``'s steps. Its snapshot of ``i`` must come after that update, or it holds the learner
    one update behind the iteration a lost worker's run continues from."""
    return any(i.iteration is not None and i.iteration < task.iteration for i in task.spec.items)


def _nbytes(replica: GroupReplica, full: bool) -> int | None:
    """About the bytes of the replica's light (or ``full``) snapshot (None: not known; the
    first snapshot then measures them)."""
    try:
        return state_nbytes(replica.export_state(replica.snapshotted(full), streams=False))
    except Exception:  # noqa: BLE001 - a value that does not pickle: the snapshot says what
        return None


def _run_head(
    replica: GroupReplica, task: WiredTask, boundary: int, mailbox: Mailbox, counts: dict[str, int], stopped
) -> None:
    """At a fence: run the items of ``task`` that belong to iterations before the boundary.

    A task may open with the last iteration's closing cells (an actor loading the learner's
    new weights) before the next iteration's steps; those cells belong before the boundary.
    They receive what they bind from other groups (produced before the boundary, so it
    comes); what they would send goes only to tasks past the boundary, so nothing is sent,
    and nothing is reported (the driver does not count tasks past the boundary)."""
    head = tuple(i for i in task.spec.items if i.iteration is not None and i.iteration < boundary)
    if not head:
        return
    wanted = {
        b.key
        for item in head
        for frag in item.fragments
        for b in replica.program.bindings.get((frag, item.rate), ())
        if b.source == "inbox"
    }
    try:
        inputs = {}
        for wired in task.inputs:
            if wired.key in wanted and not wired.arrival:
                senders = senders_for(wired.spatial, replica.index, counts[wired.producer_group])
                values = mailbox.take_all(wired.key, wired.producer_task, senders, stopped)
                inputs[wired.key] = (wired.spatial, wired.axis, values)
        replica.run(head, inputs, ())
    except Stopped:
        pass


def _run_task(replica, task, mailbox, postman, counts, report, stopped, arrivals, entering=None) -> None:
    """Receive the task's inputs, run its items, send its outputs, report."""
    waited = started = time.perf_counter()
    step_waited, step_sent = replica.step_wait_seconds, replica.step_send_seconds
    step_sent_cpu = replica.step_send_cpu_seconds
    bytes_before = postman.bytes_sent
    inputs, sender, tag, items = {}, None, task.index, task.spec.items
    if arrivals:
        tag, sender, (iteration, value) = mailbox.take_next(arrivals[0].key, stopped)
        inputs[arrivals[0].key] = ("one-to-one", arrivals[0].axis, [value])
        for wired in arrivals[1:]:  # the same replica's other values of that iteration
            inputs[wired.key] = ("one-to-one", wired.axis, [mailbox.take(wired.key, tag, sender, stopped)[1]])
        # this run answers the sender's iteration: account it (and its metrics) there
        items = tuple(replace(item, iteration=iteration) for item in items)
    for wired in task.inputs:
        if wired.arrival:
            continue
        senders = senders_for(wired.spatial, replica.index, counts[wired.producer_group])
        values = mailbox.take_all(wired.key, wired.producer_task, senders, stopped)  # wakes once
        inputs[wired.key] = (wired.spatial, wired.axis, values)
    waited = time.perf_counter() - waited
    emit_keys = tuple(dict.fromkeys(e.key for e in task.emits))
    outbox, task_report = replica.run(items, inputs, emit_keys, entering)
    sending, sending_cpu = time.perf_counter(), time.thread_time()
    sends = []
    for emit in task.emits:
        if emit.reply and sender is not None:
            # the answer goes to the replica that asked, tagged with its message's task
            sends.append(((emit.consumer_group, sender), emit.key, tag, outbox[emit.key]))
            continue
        value = Arrival(task.iteration, outbox[emit.key]) if emit.arrival else outbox[emit.key]
        for target in receivers_for(emit.spatial, replica.index, counts[emit.consumer_group]):
            sends.append(((emit.consumer_group, target), emit.key, task.index, value))
    for target, key, task_index, value in remote_first(sends, postman):
        postman.send(target, key, task_index, replica.index, value)
    ended, ended_cpu = time.perf_counter(), time.thread_time()
    # per-step channels (a fine-grained policy) wait and send inside the steps: count them
    task_report.wait_seconds = waited + replica.step_wait_seconds - step_waited
    task_report.send_seconds = ended - sending + replica.step_send_seconds - step_sent
    task_report.send_cpu_seconds = ended_cpu - sending_cpu + replica.step_send_cpu_seconds - step_sent_cpu
    # the rest of the task (binding, stacking, emitting): its span less what is accounted
    task_report.other_seconds = max(
        0.0,
        ended
        - started
        - task_report.wait_seconds
        - task_report.send_seconds
        - sum(task_report.compute_seconds.values()),
    )
    task_report.sent_bytes = postman.bytes_sent - bytes_before
    report(task.index, task_report)


def remote_first(sends: list[tuple], postman) -> list[tuple]:
    """``sends`` (target first in each) with the targets in other processes before those
    in this one, each side in its order: a replica in this process starts computing on its
    value at once, and the sending thread would then share the interpreter with it for the
    sends left (a coarse learner's weights reached the other worker's actor 2.5 ms later
    than its own worker's; 0.4 ms in this order).

    >>> class Postman: local = {("actor", 0): None}
    >>> [t for t, *_ in remote_first([(("actor", 0), 1), (("actor", 1), 2)], Postman())]
    [('actor', 1), ('actor', 0)]
    """
    local = getattr(postman, "local", None) or {}
    return sorted(sends, key=lambda send: send[0] in local)
