"""One replica of a group of fused fragments: their namespaces and the loop that runs them.

A :class:`GroupProgram` (:mod:`workbench.runtime.replicas.program`) is the plain-data part; a
:class:`GroupReplica` holds the live state (namespaces, step buffers) in whichever process
it was deployed to (the notebook kernel for inline, a Dask worker otherwise). Fragments in
one group hand values to each other by reference: no serialisation inside a process."""

from __future__ import annotations

import linecache
import time
import traceback
from typing import Any

from workbench.context import ReplicaContext, ReplicaInfo, activate, deactivate
from workbench.errors import FragmentRuntimeError, on_worker
from workbench.fdg.plan import Item
from workbench.runtime.values.arrays import ReplicasDisagree, Unbatched, gather, handed_over, lists_marked, unwrapped
from workbench.runtime.process.cell_exit import install as catch_process_exits, is_cell_error
from workbench.runtime.transport.channels import Stopped, dumps_state
from workbench.deferred_metrics import DeferredMetricError
from workbench.runtime.replicas.env_objects import close_envs
from workbench.runtime.replicas.lanes import Lanes, run_as_lane
from workbench.runtime.replicas.on_arrival import acts_on_arrival, step_on_arrival
from workbench.runtime.state.counting import (
    ENV_STEPS_KEY,
    RANDOM_KEY,
    REBUILT_KEY,
    batch_of,
    counter_of,
    explicit,
    one_plain_env,
    without_counters,
)
from workbench.runtime.transport.process_group import allreduce_for
from workbench.runtime.state.portable import PortableState, decode_value, restore_into, type_label
from workbench.runtime.replicas.program import Binding, Emit, GroupProgram, StepSend, TaskReport, group_program
from workbench.runtime.state.randomness import PATIENCE_S, SHARED_STREAMS, GeneratorTurns
from workbench.runtime.replicas.cell_errors import CellErrors
from workbench.runtime.replicas.step_sends import send_step_values

# the program's types are imported from here too (their home before the split)
__all__ = ["GroupProgram", "GroupReplica", "TaskReport", "group_program", "Binding", "Emit", "StepSend"]

#: time each cell's execution (``compute_seconds``); False skips the clock reads (per process)
TIMING = True


class GroupReplica(CellErrors):
    """The live state of one replica of a group, and the loop that runs its items."""

    #: steps its step loop has finished: progress the stall detector reads (a long
    #: iteration steps, a stuck one does not; workbench.runtime.process.stall)
    steps_done = 0

    def __init__(
        self,
        program: GroupProgram,
        index: int,
        count: int,
        worker: str,
        notebook: dict[str, Any],
        device: str = "cpu",
        state: dict[str, dict[str, Any]] | None = None,
        turns: GeneratorTurns | None = None,
    ) -> None:
        self.program = program
        #: the run's replicas in this process take turns with its random generators, each
        #: drawing from its own streams (workbench.runtime.state.randomness): pass every replica of
        #: a run in one process the same GeneratorTurns (none when the run shares them: own_random off)
        self.turns = SHARED_STREAMS if not program.own_random else turns if turns is not None else GeneratorTurns()
        self.streams = self.turns.streams((program.group, index))
        self.index, self.count, self.worker, self.device = index, count, worker, device
        catch_process_exits()  # os._exit in a cell: its error, not a dead kernel or worker
        fragments = dict.fromkeys(f for f, _ in program.code)
        self.namespaces: dict[str, dict[str, Any]] = {}
        for frag in fragments:
            ns = dict(notebook)
            ns["replica"] = ReplicaInfo(frag, index, count, worker, device)
            self.namespaces[frag] = ns
        #: fragments resumed from an exported state: their init cells do not run again
        self.restored: set[str] = set()
        #: fragments resumed from a checkpoint file (a PortableState) or from a snapshot that
        #: left out what does not pickle: their init cells run, then these saved values are
        #: laid over what the cells built (networks get their weights…)
        self.overlays: dict[str, dict[str, Any]] = {}
        #: env steps each env fragment of this replica has taken in the whole run (its
        #: share of the count; it travels with the fragment's state)
        self.env_steps_taken = {f: 0 for f in program.counted}
        #: env fragments stepping one plain env (a number for reward): step values, no batch axis
        self.unbatched: set[str] = set()
        #: per fragment, names of its state that do not pickle: snapshots leave them out
        self.left_out: dict[str, dict[str, str]] = {}
        #: warnings for the driver, sent with the next task's report: (event kind, message)
        self.notes: list[tuple[str, str]] = []
        self._said_no_turn = False  # a cell ran without its turn (said once, in notes)
        #: the co-located replicas of its group it steps with in one thread (lanes=True;
        #: workbench.runtime.replicas.lanes), set where it is deployed; seconds spent in the others
        self.lanes: Lanes | None = None
        self.lane_away, self.lane_waiting = 0.0, False
        #: the streams this replica saved, when it resumes in the layout that saved them
        #: (same group, same count): installed now, and again after any init cell runs
        #: (one that seeds would start them over)
        self._resumed_streams = self._saved_streams(state or {})
        if self._resumed_streams is not None:
            self.streams.load(self._resumed_streams)
        for frag, values in list((state or {}).items()):
            if frag in self.env_steps_taken:
                self.env_steps_taken[frag] = counter_of(values)
            rebuilt = isinstance(values, dict) and bool(values.get(REBUILT_KEY))
            values, seed_only = without_counters(values)
            if seed_only:
                continue  # only the count: the init cell builds the fragment afresh
            if isinstance(values, PortableState) or rebuilt:
                # a checkpoint's values, or a snapshot that left out what does not pickle:
                # the init cell builds the fragment, then the saved values are laid over
                self.overlays[frag] = values
            else:
                self.restored.add(frag)
                self.namespaces[frag].update(values)
        self.buffers: dict[str, dict[str, list]] = {f: {} for f in fragments}
        self.compiled = {key: self._compile(key, src) for key, src in program.code.items()}
        for frag in [f for f in self.overlays if (f, "init") not in self.compiled]:
            self._overlay(frag, None)  # no init cell to wait for
        #: channels to other replicas, lent by the loop that runs this replica
        self.peers = None
        self._sent: dict[str, int] = {}  # per-step key → messages sent so far
        self._read: dict[tuple[str, str], int] = {}  # (per-step key, reader) → messages read
        self._sends = {f: [s for s in program.step_sends if s.producer == f] for f in fragments}
        #: the (fragment, rate) cell running now, and since when its task item started (a
        #: stop that finds a cell stuck names it)
        self.running_cell: tuple[str, str] | None = None
        self.running_since = 0.0
        #: (fragment, rate) cells that have run at least once (to blame the right cell for a missing name)
        self._ran: set[tuple[str, str]] = set()
        #: seconds in per-step channels so far (receiving / sending / the sending's CPU
        #: time on this thread, which its wall time less is waiting), read by the loop
        self.step_wait_seconds = self.step_send_seconds = self.step_send_cpu_seconds = 0.0
        # wb.env_steps(): this replica's share before the stretch, its envs per step, the
        # stretch's first iteration, and the run's totals once every env replica told them
        self._base = sum(self.env_steps_taken.values())
        self._batch: int | None = None
        self._start: int | None = None
        self._totals: dict[str, int] = {}

    @property
    def peers(self):
        """Channels to the other replicas, lent by the loop that runs this replica."""
        return self._peers

    @peers.setter
    def peers(self, peers) -> None:
        # the moment a loop starts this replica: tell every other replica this replica's
        # count before the stretch (wb.env_steps() adds them up, wherever it is called)
        self._peers = peers
        if peers is not None and self.program.counted:
            self._announce("base", self._base)

    def _announce(self, what: str, value: int) -> None:
        key = f"wb:env_{what}:{self.program.group}"
        for group, count in self.peers.counts.items():
            for index in range(count):
                if (group, index) != (self.program.group, self.index):
                    self.peers.postman.send((group, index), key, 0, self.index, value)

    def _total(self, what: str) -> int:
        """The sum over every env replica of its base (``"base"``) or envs per step
        (``"batch"``), waiting for the replicas that have not said yet."""
        if what not in self._totals:
            mine = self._base if what == "base" else self._batch
            total = 0
            for group in self.program.env_groups:
                for index in range(self.peers.counts[group] if self.peers is not None else 1):
                    if group == self.program.group and index == self.index:
                        total += mine or 0
                    elif self.peers is not None:
                        total += self.peers.mailbox.take(f"wb:env_{what}:{group}", 0, index, self.peers.stopped)
            if mine is not None or not self.program.counted:  # known for good: keep it
                self._totals[what] = total
            return total
        return self._totals[what]

    def _env_steps_now(self, ctx: ReplicaContext) -> int:
        """``wb.env_steps()``: the run's env steps before this iteration (and step)."""
        base = self._total("base")
        if ctx.iteration is None or self._start is None:
            return base
        done = (ctx.iteration - self._start) * self.program.steps + (ctx.step or 0)
        return base + done * self._total("batch") if done > 0 else base

    @staticmethod
    def _compile(key: tuple[str, str], source: str):
        filename = f"<fragment {key[0]}:{key[1]}>"
        # register the source so tracebacks show the user's cell lines
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        return compile(source, filename, "exec")

    # -- the loop ----------------------------------------------------------------------
    def run(
        self,
        items: tuple[Item, ...],
        inputs: dict[str, tuple[str, int, list]],
        emit_keys: tuple[str, ...] = (),
        entering=None,
    ) -> tuple[dict[str, Any], TaskReport]:
        """Run ``items`` in order with ``inputs`` from other groups (key → (spatial, axis,
        one value per sending replica)); return the outbox (values for other groups, by
        route key) and a small report. ``entering()``: called before the first item of the
        task's own iteration, after the last one's cells it may open with (its snapshot)."""
        inbox = {}
        for key, (spatial, axis, values) in inputs.items():
            try:
                inbox[key] = gather(values, axis) if spatial == "gather" else unwrapped(values[0])
            except ReplicasDisagree as exc:
                raise self._disagree(key, exc, items) from None
        report = TaskReport(
            self.program.group,
            self.index,
            self.worker,
            iterations=sorted({i.iteration for i in items if i.iteration is not None}),
        )
        report.notes = self.notes  # from the snapshot taken before this task, and from its own cells
        ctx = ReplicaContext(ReplicaInfo(self.program.group, self.index, self.count, self.worker, self.device))
        if self.peers is not None and self.count > 1:  # waits for the others: not in a turn
            ctx.reducer = self.turns.released(self.streams, allreduce_for(self), self._stopped)
        ctx.env_steps = self.turns.released(self.streams, lambda: self._env_steps_now(ctx), self._stopped)
        token = activate(ctx)
        try:
            for item in items:
                if entering is not None and item.iteration == report.iterations[-1]:
                    entering, _ = None, entering()
                self.running_since = time.monotonic()
                ctx.iteration = item.iteration
                if self._start is None and item.iteration is not None:
                    self._start = item.iteration
                if item.rate == "step":
                    self._run_steps(item, inbox, report, ctx)
                else:
                    for frag in item.fragments:
                        self._run_cell(frag, item.rate, inbox, report, item.iteration)
            if ctx.deferred:  # device values logged in the cells: read them now, in one copy
                self._read_deferred(ctx)
        finally:
            deactivate(token)
            self.running_cell = None
            if report.iterations:  # an init-only task's report joins no iteration: its notes wait for one
                self.notes = []
        report.metrics, report.shown = ctx.metrics, ctx.shown
        outbox = {e.key: self._emit(e, ctx.iteration) for e in self.program.emits if e.key in emit_keys}
        return outbox, report

    def _run_steps(self, item: Item, inbox: dict, report: TaskReport, ctx: ReplicaContext) -> None:
        if self.peers is not None and acts_on_arrival(self.program, self.peers.counts):  # act_on_arrival=True
            return step_on_arrival(self, item, inbox, report, ctx)
        if self.lanes is None:
            return self._step_loop(item, inbox, report, ctx)
        run_as_lane(self, lambda: self._step_loop(item, inbox, report, ctx), ctx)

    def _step_loop(self, item: Item, inbox: dict, report: TaskReport, ctx: ReplicaContext) -> None:
        for frag in item.fragments:
            self.buffers[frag] = {name: [] for name in self.program.recorded[frag]}
        plan = [
            (
                frag,
                self.namespaces[frag],
                self.compiled[(frag, "step")],
                self.program.bindings[(frag, "step")],
                self.buffers[frag],
                self._sends[frag],
            )
            for frag in item.fragments
        ]
        clock = {frag: 0.0 for frag in item.fragments}
        counting = {
            f: (self.program.counted[f], explicit(self.program.code[(f, "step")]))
            for f in item.fragments
            if f in self.program.counted
        }
        taken = 0
        turns, streams, stopped = self.turns, self.streams, self._stopped
        for t in range(self.program.steps):
            ctx.step = t
            for frag, ns, code, bindings, buffers, sends in plan:
                if bindings:
                    self._bind(frag, "step", ns, bindings, inbox, item.iteration)
                ctx.counted = None
                self.running_cell = (frag, "step")  # named if a stop finds it stuck
                if not turns.take(streams, stopped):
                    self._ran_without_turn(frag, "step")
                start, away = (time.perf_counter(), self.lane_away) if TIMING else (0.0, 0.0)
                try:
                    exec(code, ns)
                except Stopped:  # the run is stopping while a cell waits on a channel
                    raise
                except BaseException as exc:  # sys.exit and os._exit too: the cell's error
                    if not is_cell_error(exc):
                        raise
                    raise self._error(frag, "step", exc, item.iteration) from None
                finally:
                    turns.give(streams)
                if TIMING:  # less the time it spent in other lanes (lanes=True)
                    clock[frag] += time.perf_counter() - start - (self.lane_away - away)
                if frag in counting:  # an env fragment: count its envs where they step
                    writes, by_hand = counting[frag]
                    n = (ctx.counted or 0) if by_hand else batch_of(ns, writes)
                    if n == 0 and not by_hand:  # an empty batch: this replica has no envs to step
                        raise self._no_envs(frag, item.iteration)
                    self.env_steps_taken[frag] += n
                    taken += n
                    if n == 1 and self.count > 1 and one_plain_env(ns, writes):  # values of no batch axis
                        self.unbatched.add(frag)
                self._ran.add((frag, "step"))
                for name, buf in buffers.items():  # as it is now: a later step may write into it
                    buf.append(handed_over(self._written(frag, "step", ns, name, item.iteration)))
                if sends:
                    self._send_step_values(frag, ns, sends, item.iteration)
            self.steps_done += 1
            if t == 0 and counting and self._batch is None:
                # envs per step, known after the stretch's first step: tell the others
                self._batch = taken
                report.env_steps_base = self._base
                if self.peers is not None:
                    self._announce("batch", taken)
        ctx.step = None
        for frag, seconds in clock.items():
            report.compute_seconds[frag] = report.compute_seconds.get(frag, 0.0) + seconds
        if counting:
            report.env_steps[item.iteration] = report.env_steps.get(item.iteration, 0) + taken

    def _run_cell(self, frag: str, rate: str, inbox: dict, report: TaskReport, iteration) -> None:
        key = (frag, rate)
        if key not in self.compiled:
            return
        ns = self.namespaces[frag]
        if rate == "init" and frag in self.restored:
            # resumed: the state is here already; hand on its first values as init would
            self._send_step_values(frag, ns, [s for s in self._sends[frag] if s.at_init], iteration)
            return
        self._bind(frag, rate, ns, self.program.bindings[key], inbox, iteration)
        self.running_cell = key
        if not self.turns.take(self.streams, self._stopped, init=rate == "init"):
            self._ran_without_turn(frag, rate)
        start = time.perf_counter() if TIMING else 0.0
        try:
            exec(self.compiled[key], ns)
        except Stopped:  # the run is stopping while a cell waits on a channel (allreduce)
            raise
        except BaseException as exc:  # sys.exit and os._exit too: the cell's error
            if not is_cell_error(exc):
                raise
            raise self._error(frag, rate, exc, iteration) from None
        finally:
            self.turns.give(self.streams)
        if TIMING:
            report.compute_seconds[frag] = report.compute_seconds.get(frag, 0.0) + time.perf_counter() - start
        self._ran.add(key)
        if rate == "init" and frag in self.overlays:
            self._overlay(frag, iteration)
        if rate == "init" and self._resumed_streams is not None:  # it may have seeded: continue
            self.turns.restore(self.streams, self._resumed_streams, self._stopped)
        if rate == "init":  # first values of per-step channels (the loop carries them)
            self._send_step_values(frag, ns, [s for s in self._sends[frag] if s.at_init], iteration)

    def _overlay(self, frag: str, iteration) -> None:
        values = self.overlays.pop(frag)
        if not isinstance(values, PortableState):  # a snapshot's own objects: lay them over
            ns = self.namespaces[frag]  # the envs the init cell just built for names kept: closed
            close_envs({n: ns[n] for n, kept in values.items() if n in ns and ns[n] is not kept})
            ns.update(values)
            return
        try:
            self.notes.extend(("edit overridden", note) for note in restore_into(self.namespaces[frag], values))
        except Exception as exc:
            raise FragmentRuntimeError(
                fragment=frag,
                rate="init",
                replica=self.index,
                worker=self.worker,
                line=None,
                source_line=None,
                iteration=iteration,
                error=f"restoring its checkpointed state failed: {type(exc).__name__}: "
                + (
                    str(exc)
                    if "init cell" in str(exc)
                    # it says what to do already
                    else f"{str(exc).rstrip('.')}. The init cell must build the same objects (network "
                    "shapes, optimiser) as the run that wrote the checkpoint."
                ),
                traceback_text=""
                if type(exc) is ValueError and exc.__cause__ is None
                # a check's own
                else "".join(traceback.format_exception(exc)),
                advice="Resume as it says; the checkpoint is unchanged.",
            ) from None

    def _layout_tag(self) -> list:
        """Which replica of which layout saved a state: its streams continue only there."""
        return [self.program.group, sorted({f for f, _ in self.program.code}), self.index, self.count]

    def _saved_streams(self, state: dict[str, Any]) -> dict[str, Any] | None:
        """The streams in a resumed state, if this replica's layout saved them."""
        for values in state.values():
            saved = values.get(RANDOM_KEY) if isinstance(values, dict) else None
            if saved is None:
                continue
            if isinstance(values, PortableState):  # a checkpoint's: encoded
                saved = decode_value(saved)
            if list(saved.get("layout", ())) == self._layout_tag():
                return saved["streams"]
        return None

    def _ran_without_turn(self, frag: str, rate: str) -> None:
        """Say once that a cell of this replica ran beside another replica's long cell."""
        if not self._said_no_turn:
            self._said_no_turn = True
            self.notes.append(
                (
                    "random streams shared",
                    f"the {frag} {rate} cell of replica {self.index} of {self.program.group} (on {on_worker(self.worker)}) "
                    f"waited over {PATIENCE_S:g} s for another replica's cell in its process and ran beside it: "
                    "from here its random numbers (torch, np.random, random) may differ from run to run. "
                    "Give each replica its own worker, or keep cells from waiting on other replicas "
                    "(or run with own_random=False, --no-own-random, to let them share streams).",
                )
            )

    def _stopped(self) -> bool:
        """The run's stop flag (False before a loop lends this replica its channels)."""
        return self.peers is not None and self.peers.stopped()

    def describe_busy(self) -> str | None:
        """Which cell this replica is running, and for how long (None when idle)."""
        cell = self.running_cell
        if cell is None:
            return None
        seconds = time.monotonic() - self.running_since
        waits = " (it waits for its turn in its lane: another replica's cell holds the thread)"
        return (
            f"the {cell[0]} {cell[1]} cell (replica {self.index} of {self.program.group}, "
            f"on {on_worker(self.worker)}) has not returned for {seconds:.0f} s" + (waits if self.lane_waiting else "")
        )

    def export_state(self, fragments=None, streams: bool = True) -> dict[str, dict[str, Any]]:
        """Each fragment's own state (the names it binds), to resume elsewhere (only
        ``fragments``, when given), with the replica's random streams (``streams``)."""
        out = {
            frag: {n: ns[n] for n in self.program.state_names.get(frag, ()) if n in ns}
            for frag, ns in self.namespaces.items()
            if fragments is None or frag in fragments
        }
        states = self.turns.states_of(self.streams, self._stopped) if out and streams else None
        if states is not None:  # with each saved fragment: a resume in this layout continues them
            saved = {"layout": self._layout_tag(), "streams": states}
            for values in out.values():
                values[RANDOM_KEY] = saved
        for frag, taken in self.env_steps_taken.items():
            # an env fragment's count travels with it (resume continues the run's count);
            # a light snapshot holds the count alone, which seeds a fresh env on recovery
            out.setdefault(frag, {})[ENV_STEPS_KEY] = taken
        return out

    def snapshot_bytes(self, full: bool) -> bytes:
        """This replica's state, pickled: every fragment's (``full``), or only those without
        step cells — learners, whose weights and optimiser state a lost worker must not
        take with it; actors and envs start new episodes instead (cheap every iteration)."""
        # not the streams in the light ones: 12 KB more every iteration was seconds per
        # iteration on a slow link (a 32 kbit/s host in tests/hosts); a learner recovered
        # from one draws anew, as an actor re-placed does
        return self.state_bytes(self.snapshotted(full), streams=full)

    def snapshotted(self, full: bool) -> list[str] | None:
        """The fragments a snapshot holds: all (``full``) or those without step cells."""
        return None if full else [f for f in self.namespaces if (f, "step") not in self.program.code]

    def state_bytes(self, fragments=None, streams: bool = True) -> bytes:
        """:meth:`export_state`, pickled. A value that does not pickle (a lock, a socket the
        fragment never sends) is left out — found once, said once (:attr:`notes`), and
        listed under ``REBUILT_KEY`` so that a restore runs the init cell to build it."""
        states = self.export_state(fragments, streams)
        for frag, names in self.left_out.items():
            values = states.get(frag)
            if values is not None and names:
                states[frag] = {n: v for n, v in values.items() if n not in names}
                states[frag][REBUILT_KEY] = dict(names)  # name → its type_label
        try:
            return dumps_state(states)
        except Exception as exc:
            from workbench.runtime.transport.serialisable import left_out_note, state_error, unpicklable

            found = unpicklable(states, dumps_state)
            if not found:  # each value pickles alone, the whole does not: name what we can
                raise state_error(states, dumps_state, exc) from None
            for frag, names in found.items():
                self.left_out.setdefault(frag, {}).update((n, type_label(states[frag][n])) for n in names)
                self.notes.extend(("state left out", left_out_note(frag, n, what)) for n, what in names.items())
            return self.state_bytes(fragments, streams)

    def _send_step_values(self, frag: str, ns: dict, sends, iteration) -> None:
        send_step_values(self, frag, ns, sends, iteration)

    def _bind(self, frag, rate, ns, bindings, inbox, iteration) -> None:
        for b in bindings:
            # Every value from another fragment is the consumer's own copy (handed_over),
            # whatever the placement: in one process it would otherwise be the producer's
            # object. A stack is built fresh for its reader, and a step value arrives copied
            # by the postman (per target), so those need none here.
            if b.source == "inbox":
                ns[b.name] = handed_over(inbox[b.key])
            elif b.source == "step":
                count = self._read.get((b.key, frag), 0)
                start = time.perf_counter()
                try:
                    received = self.peers.receive(b.producer_group, b.spatial, b.key, count + b.offset)
                except ReplicasDisagree as exc:
                    raise self._disagree(b.key, exc, (), frag, "step", iteration) from None
                self.step_wait_seconds += time.perf_counter() - start
                ns[b.name] = received
                self._read[(b.key, frag)] = count + 1
            elif b.stacked:
                values = self.buffers[b.producer].get(b.name)
                if not values:
                    raise self._missing(frag, rate, b, iteration, "has not run a step yet")
                ns[b.name] = self._stack(b.producer, b.name, values, iteration)
            else:
                try:
                    value = self.namespaces[b.producer][b.name]
                except KeyError:
                    if (b.producer, rate) in self._ran:  # it ran, and did not bind it: its fault
                        raise self._unbound(b.producer, rate, b.name, frag, iteration) from None
                    raise self._missing(frag, rate, b, iteration, "has not written it yet") from None
                ns[b.name] = handed_over(value)

    def _written(self, frag, rate, ns, name, iteration):
        try:
            return ns[name]
        except KeyError:
            raise self._unbound(frag, rate, name, "other fragments", iteration) from None

    def _emit(self, e: Emit, iteration=None) -> Any:
        if e.stacked:  # a plain env's steps, or lists, [T, …] with no batch axis: say so to the gather
            steps = self.buffers[e.producer][e.name]
            value = self._stack(e.producer, e.name, steps, iteration)
            return Unbatched(value) if e.producer in self.unbatched else lists_marked(value, steps[0])
        # a copy: in one process the reader gets this object, and the producer's next
        # iteration may write into its own before the reader binds it (never bound: named)
        return handed_over(
            self._written(
                e.producer, "init" if iteration is None else "iteration", self.namespaces[e.producer], e.name, iteration
            )
        )

    def _read_deferred(self, ctx: ReplicaContext) -> None:
        try:
            ctx.read_deferred()
        except DeferredMetricError as exc:
            raise exc.as_fragment_error(self.program.group, self.index, self.worker, ctx.iteration) from None
