"""The in-process backend: every replica of a run in the calling process, one thread each.

The inline policy (and any policy that places every group here) runs on it. Values are
handed over by reference; it implements the :class:`~workbench.runtime.engine.backend.Backend`
contract as the Dask backend does, and runs each replica's loop with the same
:func:`~workbench.runtime.engine.backend.run_replica`, so the driver cannot tell the two apart.

Example:
    >>> import workbench as wb
    >>> fdg = wb.FDG()
    >>> _ = fdg.add_fragment("counter", "n = 0", rate="init")
    >>> _ = fdg.add_fragment("counter", "n += 1", rate="step")
    >>> fdg.run(iterations=2, steps=3, policy="inline", progress=False).completed_iterations
    2
"""

from __future__ import annotations

import ctypes
import linecache
import pickle
import sys
import threading
import time
from typing import Any

from workbench.fdg.plan import Plan
from workbench.runtime.process import exit_guard
from workbench.runtime.engine.backend import Backend, Events, StreamSpec, run_replica
from workbench.runtime.transport.channels import LocalPostman, Mailbox, dumps_state
from workbench.runtime.replicas.env_objects import close_envs, is_env
from workbench.runtime.replicas.fence import Fence, decide
from workbench.runtime.replicas.lanes import join_lanes
from workbench.runtime.process.malloc import RELEASE_ABOVE_BYTES, release_free_memory, resident_bytes, tune_malloc
from workbench.runtime.state.randomness import GeneratorTurns
from workbench.runtime.replicas.replica import GroupProgram, GroupReplica
from workbench.runtime.state.snapshots import DRIVER, SnapshotBook
from workbench.runtime.process.stall import thread_cpu_seconds
from workbench.runtime.process.threads import limit_threads

__all__ = ["CarriedEnvs", "InlineBackend", "ThreadReclaimed", "reclaim", "left_running_notice", "RECLAIM_WAIT_S"]

#: how long a stop waits for a stuck cell's thread to end once told to (a pure-Python loop
#: ends within milliseconds; one blocked outside Python does not end at all)
RECLAIM_WAIT_S = 1.0
#: what to do about a cell whose thread a stop could not end (said by the stop and by
#: every later run while the thread lives)
LEFT_RUNNING_ADVICE = (
    "Restart the kernel to end it, or run cells that may not return under a cluster "
    'policy (policy="coarse"), where a stop restarts the worker process instead.'
)


class ThreadReclaimed(BaseException):
    """Raised into a replica's thread whose cell did not return after a stop, to end it.

    A BaseException, so that a cell's ``except Exception`` does not swallow it; a cell that
    catches everything, or a call blocked outside Python (a sleep, a lock, native code),
    keeps its thread, and the stop says so (:meth:`InlineBackend.teardown`)."""


class CarriedEnvs:
    """The envs one in-process stretch of a run leaves open for the next: those it handed
    on by reference (an env that does not pickle: the next stretch steps the very object)
    and the notebook values it read (the same objects, where they cannot be copied). Each is
    closed once nothing will step it: when the next stretch deployed without it, or when
    the run ends (:meth:`close`). One per run, shared by its stretches' backends.

        >>> class Env:
        ...     closed = False
        ...     def reset(self): ...
        ...     def step(self, action): ...
        ...     def close(self): self.closed = True
        >>> carried, kept, dropped = CarriedEnvs(), Env(), Env()
        >>> carried.keep([kept, dropped])
        >>> carried.settle([kept])  # the next stretch deployed holding one of them
        >>> kept.closed, dropped.closed
        (False, True)
    """

    def __init__(self) -> None:
        self._envs: dict[int, Any] = {}

    def keep(self, envs) -> None:
        """A stretch ended handing ``envs`` on: open until the next one has deployed."""
        self._envs.update((id(env), env) for env in envs)

    def settle(self, taken) -> None:
        """A stretch deployed holding ``taken``: those are its own now (its teardown closes
        or keeps them); the rest nothing steps any more."""
        held = {id(env) for env in taken}
        close_envs({key: env for key, env in self._envs.items() if key not in held})
        self._envs.clear()

    def close(self) -> None:
        """The run has ended (finished, stopped, failed or interrupted)."""
        self.settle(())


class InlineBackend(Backend):
    """Runs every replica in the calling process: one thread per replica loop, values
    handed over by reference.

    ``carried``: the run's :class:`CarriedEnvs`, when a stretch may follow this one; without
    it teardown closes every env."""

    #: a loop's reports reach the driver before its exit (one queue, one thread)
    reports_before_exits = True
    #: every replica waits at one fence in this process: exact boundaries, paced iterations
    fenced = True

    def __init__(self, carried: CarriedEnvs | None = None) -> None:
        self._carried = carried
        #: what export handed on and the notebook values deployed (id → env): teardown
        #: leaves these open, for a next stretch that steps the same objects
        self._passed_on: dict[int, Any] = {}
        self.replicas: dict[tuple[str, int], GroupReplica] = {}
        self._stop = threading.Event()
        self._threads: dict[tuple[str, int], threading.Thread] = {}
        self.snapshots: SnapshotBook | None = None
        self._fence = Fence()
        self._asynchronous = False
        #: set when a stop already waited its grace for a stuck cell (teardown then doesn't)
        self.overdue = False
        self._resident_at_start = 0  # this process's size when the run started (see teardown)

    def deploy(
        self,
        plan: Plan,
        programs: dict[str, GroupProgram],
        notebook: dict[str, Any],
        states: dict[tuple[str, int], dict] | None = None,
    ) -> None:
        turns = GeneratorTurns()  # every replica is in this process: they take turns with its RNGs
        lanes: dict = {}
        self._passed_on.update((id(v), v) for v in notebook.values() if is_env(v))
        try:
            for name, group in plan.groups.items():
                for index in range(group.replicas):
                    # a copy: the replicas train what they restore, and a kept run.state
                    # (``resume=first.state``, twice) must stay as it was
                    restored = (states or {}).get((name, index))
                    self.replicas[(name, index)] = GroupReplica(
                        programs[name],
                        index,
                        group.replicas,
                        "local",
                        notebook,
                        group.device,
                        None if restored is None else _copy_of(restored),
                        turns,
                    )
                    # lanes=True: every replica is here, one thread steps them
                    join_lanes(lanes, name, self.replicas[(name, index)], list(range(group.replicas)))
        finally:  # the envs the last stretch left open are this one's now, or nobody's
            if self._carried is not None:
                self._carried.settle(_envs_held(self.replicas))

    def export(self) -> dict[tuple[str, int], dict[str, dict[str, Any]]]:
        for thread in self._threads.values():
            thread.join()
        out = {key: _outliving(replica.export_state()) for key, replica in self.replicas.items()}
        self._passed_on.update(
            (id(v), v) for state in out.values() for values in state.values() for v in values.values() if is_env(v)
        )
        return out

    def check(self) -> None:
        pass  # the calling process cannot lose itself

    def failure(self, exc: BaseException) -> BaseException:
        return exc

    def start(self, plan: Plan, stream: StreamSpec, events: Events) -> None:
        self._restore_threads = limit_threads(1)
        tune_malloc()  # once per process: the learner's temporaries reused, not mapped afresh
        self._resident_at_start = resident_bytes() or 0
        self._asynchronous = plan.policy.asynchronous
        if stream.lockstep:  # no replica begins an iteration before the driver released it
            self._fence.gate(stream.start)
        boxes = {key: Mailbox(r.program.arrival_keys) for key, r in self.replicas.items()}
        postman = LocalPostman(boxes)
        counts = {name: g.replicas for name, g in plan.groups.items()}
        if stream.snapshot_every or stream.full_snapshot_every or stream.clip_every:
            self.snapshots = boxes[DRIVER] = SnapshotBook(counts, on_complete=events.on_snapshot)

        def loop(key: tuple[str, int]) -> None:
            try:  # reports, the error and the exit go straight onto the driver's queue
                run_replica(
                    self.replicas[key],
                    plan,
                    stream,
                    boxes[key],
                    postman,
                    counts,
                    events.report,
                    stopping=self._stop.is_set,
                    stop=self._stop.set,
                    fence=None if self._asynchronous else self._fence,
                    on_error=events.error,
                    on_exit=lambda: events.exit(*key),
                    passes=(ThreadReclaimed,),
                )
            except ThreadReclaimed:
                pass  # the stop's teardown ended this thread: its cell had not returned

        self._threads = {
            key: threading.Thread(target=loop, args=(key,), name=f"workbench-{key[0]}-{key[1]}", daemon=True)
            for key in self.replicas
        }
        for thread in self._threads.values():
            thread.start()

    def stop(self) -> None:
        self._stop.set()

    def fence(self, at_least: int) -> int | None:
        """Close every replica at one exact iteration boundary ≥ ``at_least``; return it
        (None under an asynchronous policy, whose replicas have no common iteration)."""
        if self._asynchronous:
            return None
        return decide([self._fence], at_least)

    def release(self, iteration: int) -> None:
        """Under lockstep: the replicas may begin ``iteration`` (the driver decided the one
        before it)."""
        self._fence.release(iteration)

    def activity(self) -> dict[str, tuple[int, float | None]]:
        """Per replica: steps finished and its loop thread's CPU seconds
        (:mod:`workbench.runtime.process.stall`)."""
        return {
            f"{key[0]}[{key[1]}]": (replica.steps_done, thread_cpu_seconds(self._threads.get(key)))
            for key, replica in list(self.replicas.items())
        }

    def env_step_counts(self) -> dict[str, int]:
        """Each replica's own count of the env steps its envs took in the run."""
        return {
            f"{key[0]}[{key[1]}]": sum(replica.env_steps_taken.values()) for key, replica in list(self.replicas.items())
        }

    def busy_cells(self) -> list[str]:
        """What each replica's cell is doing when a stop is overdue."""
        return [text for replica in self.replicas.values() if (text := replica.describe_busy())]

    def teardown(self) -> None:
        from workbench.runtime.engine.driver import STOP_GRACE_S  # read now: tests shorten it

        self._stop.set()
        deadline = time.monotonic() + (1.0 if self.overdue else STOP_GRACE_S)
        stuck = []
        for key, thread in self._threads.items():
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():  # a cell that does not return
                stuck.append(key)
        left_running = self._end_stuck(stuck) if stuck else []
        getattr(self, "_restore_threads", lambda: None)()
        # a next stretch of this run steps what was handed on (the very objects): those
        # stay open in the run's CarriedEnvs; this stretch's others nothing steps any more
        envs = _envs_held({k: r for k, r in self.replicas.items() if k not in left_running})
        kept = self._passed_on if self._carried is not None else {}
        if kept:
            self._carried.keep(env for env in envs if id(env) in kept)
        close_envs(dict(enumerate(env for env in envs if id(env) not in kept)))
        self.replicas.clear()
        self._passed_on.clear()
        # what the run's replicas held, back to the OS, when the run grew this process by a
        # GiB (a big model's): a kernel big on its own data is not collected after every run
        release_free_memory(above=self._resident_at_start + RELEASE_ABOVE_BYTES)

    def _end_stuck(self, stuck: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """End the threads of ``stuck`` replicas, whose cells did not return after a stop,
        and say what became of them; return the keys of those still running. Python
        cannot kill a thread, but it can raise into one (:func:`reclaim`): a loop that
        never returns (``while True: pass``) ends there. Those it cannot end run on in this
        process (until their call returns, if ever): registered
        (:mod:`workbench.runtime.process.exit_guard`), so the process's exit and every later run know
        of them."""
        threads = {key: self._threads[key] for key in stuck}
        # named before the attempt: once told to end, a thread's frames are its unwinding
        seen = {
            key: (
                self.replicas[key].describe_busy() or f"replica {key[1]} of {key[0]} has not returned",
                _cell_named(self.replicas[key], key),
                _cell_line(threads[key]),
            )
            for key in stuck
        }
        survivors = reclaim(list(threads.values()), RECLAIM_WAIT_S)
        left_running = [key for key in stuck if threads[key] in survivors]
        ended = [f"{busy}{where}" for key, (busy, _, where) in seen.items() if key not in left_running]
        if ended:
            print(
                f"workbench: {'; '.join(ended)}; workbench ended its thread as the run stopped (an "
                "exception raised into it), so nothing of the run keeps running in this kernel, and the FDG "
                "is free.",
                flush=True,
            )
        if left_running:
            for key in left_running:
                _, name, where = seen[key]
                exit_guard.abandon(threads[key], f"{name}{where}")  # the exit and later runs know of it
            cells = "; ".join(f"{seen[k][0]}{seen[k][2]}" for k in left_running)
            print(
                f"workbench: {cells}, and cannot be stopped: its thread did not end when told to (a call "
                "blocked outside Python, or a cell that catches every exception), so it keeps running in "
                "this kernel, taking CPU from every later run here while it computes (each says so at its "
                f"start). {LEFT_RUNNING_ADVICE} The FDG is free.",
                flush=True,
            )
        return left_running


def reclaim(threads: list[threading.Thread], wait: float) -> list[threading.Thread]:
    """Raise :class:`ThreadReclaimed` into each of ``threads`` and wait up to ``wait``
    seconds for them to end; return those still alive.

    CPython raises it at the thread's next Python instruction: a thread blocked outside
    Python (a sleep, a lock, a long native call) raises it only when that call returns, and
    ends then. ``PyThreadState_SetAsyncExc`` is CPython's; elsewhere nothing is raised.

        >>> spinning = threading.Event()
        >>> def cell():
        ...     spinning.set()
        ...     while True: pass
        >>> def loop():  # as a replica's loop calls its cells
        ...     try:
        ...         cell()
        ...     except ThreadReclaimed:
        ...         pass
        >>> thread = threading.Thread(target=loop, daemon=True)
        >>> thread.start(); _ = spinning.wait()
        >>> reclaim([thread], wait=5.0), thread.is_alive()
        ([], False)
    """
    raise_in = getattr(getattr(ctypes, "pythonapi", None), "PyThreadState_SetAsyncExc", None)
    for thread in threads:
        if raise_in is not None and thread.ident is not None and thread.is_alive():
            hit = raise_in(ctypes.c_ulong(thread.ident), ctypes.py_object(ThreadReclaimed))
            if hit > 1:  # CPython's documented guard: more than one thread state changed, undo
                raise_in(ctypes.c_ulong(thread.ident), None)
    deadline = time.monotonic() + wait
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [thread for thread in threads if thread.is_alive()]


def left_running_notice() -> str | None:
    """What a run starting now says of the cells earlier runs in this process could not
    stop (their threads still alive, :func:`exit_guard.abandoned`), or None when there are
    none: such a thread shares the process's CPU with every run, unseen otherwise."""
    alive = exit_guard.abandoned()
    if not alive:
        return None
    cells = "; ".join(what for _, what in alive)
    return (
        f"a cell an earlier run could not stop still runs in this kernel, beside this run ({cells}): "
        f"while it computes it takes CPU from this run. {LEFT_RUNNING_ADVICE}"
    )


def _cell_named(replica: GroupReplica, key: tuple[str, int]) -> str:
    """``the env step cell (replica 0 of env)``: the cell ``replica`` is in, for good (no
    duration, which would go stale in a later run's notice)."""
    cell = replica.running_cell
    where = f"replica {key[1]} of {key[0]}"
    return f"the {cell[0]} {cell[1]} cell ({where})" if cell is not None else where


def _cell_line(thread: threading.Thread) -> str:
    """``, at cell line 2: `while True: pass` ``: where in a fragment's cell ``thread`` is now
    (its innermost cell frame: a function the cell called is named by the cell's line that
    called it), or '' when it is in none."""
    frame = sys._current_frames().get(thread.ident)
    while frame is not None and not frame.f_code.co_filename.startswith("<fragment "):
        frame = frame.f_back
    if frame is None:
        return ""
    text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return f", at cell line {frame.f_lineno}" + (f": `{text}`" if text else "")


def _envs_held(replicas: dict[tuple[str, int], GroupReplica]) -> list:
    """Every env ``replicas`` hold, once each: in their namespaces, and in the kept state an
    init cell has yet to lay over (:attr:`GroupReplica.overlays`)."""
    found = {}
    for replica in replicas.values():
        spaces = [*replica.namespaces.values(), *(v for v in replica.overlays.values() if type(v) is dict)]
        found.update((id(value), value) for ns in spaces for value in ns.values() if is_env(value))
    return list(found.values())


def _copy_of(state: dict) -> dict:
    """A copy of a replica's state sharing nothing with it: a pickle round trip, or the
    objects themselves when something will not pickle."""
    try:
        return pickle.loads(dumps_state(state))
    except Exception:
        return state


def _outliving(state: dict) -> dict:
    """A replica's exported state as the run's result: its values themselves (the replica is
    torn down next and never runs again), but a copy of each env, whose original teardown
    closes; an env that cannot be copied is handed on itself (and left open for the next
    stretch: :class:`CarriedEnvs`).
    Copying everything doubled a big model's memory at the end of every run: GRPO with a
    64 MB model peaked at 2.35 GB and kept 1.42 GB after it; 1.74 and 1.09 GB so."""
    return {
        frag: {name: _copy_of(value) if is_env(value) else value for name, value in values.items()}
        for frag, values in state.items()
    }
