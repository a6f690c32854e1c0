"""Each replica's own random streams, in a process that holds several replicas.

torch's default generator, NumPy's global ``RandomState`` (``np.random.rand`` and friends)
and Python's ``random`` module are one per process. Replicas that share a process (two
actor replicas on one worker, an actor beside the learner, every replica of an in-process
run) drew from one stream in whatever order their threads happened to run, so the same
seed gave other numbers on every run, and which replicas shared a process changed the
results (DESIGN.md, contract 1).

So each replica owns its streams. Replicas of one run in one process take **turns**: one
cell runs at a time, and while it runs the process's generators hold that replica's
state; when another replica's cell takes the turn, the states are swapped (torch: ~1 µs;
NumPy's global state, ~70 µs to read and write, and Python's ``random``, ~11 µs, are
compared first, in place, ~1 µs each, and copied only when a draw changed them). A process
with one replica never swaps. A cell that waits for other replicas (``wb.allreduce``,
``wb.env_steps``) gives the turn up while it waits, so replicas that meet inside a cell
never wait on each other. A cell that waits some other way (a gate of your own) keeps the
turn; a replica that waits more than :data:`PATIENCE_S` for it runs its cell without one,
and says so in the run's events, since its draws are then no longer its own. A cell that
keeps the turn longer while its thread computes (an import, building a language model, a
long forward pass: its thread's CPU time grows) is not waiting for anyone, so the others
wait on for it, up to :data:`BUSY_PATIENCE_S` (on Linux, which counts a thread's CPU time).

Every replica's streams start from the process's as they were when the run was deployed
there: a replica that seeds in its init cell (``torch.manual_seed(cfg.seed + replica.index)``)
draws the same numbers under every placement. For NumPy's global generator and Python's
``random`` the start is mixed with the replica's group and index (:meth:`Streams.set_apart`),
so replicas that do not seed draw apart from each other, as replicas in separate fresh
processes do (each seeds those from the OS): four actor replicas on one worker once drew the
same ``np.random`` numbers and collected the same episodes four times. The mix is a pure
function of the process's state, so a seeded notebook still gives the same numbers run after
run. torch's default seed is fixed in every process, so replicas that do not seed torch
start alike wherever they run, as torch's own processes do.

Not covered: CuPy's global generator; and Python's ``random`` on a Dask worker, which Dask
itself draws from (connection back-off), so only in-process replicas keep it apart. Use a
generator of your own there (``random.Random(seed)``, ``np.random.default_rng(seed)``):
those live in the fragment's state and are per replica already.

A run with ``own_random=False`` gives its replicas :data:`SHARED_STREAMS` instead: no
turns, no swaps; replicas of one process overlap their cells and share the process's
generators, as before this module (faster where replicas of one worker wait on their
envs; the draws then depend on thread timing).

    >>> import numpy as np
    >>> turns = GeneratorTurns()
    >>> mine, theirs = turns.streams(), turns.streams()
    >>> with turns.turn(mine, stopped=lambda: False):
    ...     np.random.seed(1)
    >>> with turns.turn(theirs, stopped=lambda: False):
    ...     np.random.seed(2); _ = np.random.rand()   # another replica's draws in between
    >>> with turns.turn(mine, stopped=lambda: False):
    ...     first = np.random.rand()
    >>> first == np.random.RandomState(1).rand()
    True
"""

from __future__ import annotations

import copy
import ctypes
import hashlib
import os
import pickle
import random
import struct
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any

from workbench.loaded_modules import loaded
from workbench.runtime.transport.channels import Stopped

__all__ = [
    "GeneratorTurns",
    "Streams",
    "SharedStreams",
    "SHARED_STREAMS",
    "PATIENCE_S",
    "BUSY_PATIENCE_S",
    "INIT_PATIENCE_S",
]

#: how often a replica waiting for its turn looks at the run's stop flag (seconds)
_STOP_POLL_S = 0.05
#: how long a cell waits for the turn before it runs without one: a cell that holds the
#: turn that long may be waiting for this replica (a gate of the user's, a file, a queue),
#: and two replicas waiting on each other must not hang the run
PATIENCE_S = 1.0
#: the longest a cell waits while the cell holding the turn computes (its thread's CPU time
#: grows by at least :data:`_BUSY_SHARE` of the time waited): it cannot be waiting for this
#: replica then, and running beside it would cost both their own draws. A busy loop that
#: polls for this replica would look the same, hence the bound.
BUSY_PATIENCE_S = 120.0
_BUSY_SHARE = 0.1
#: how long a cell waits for a turn held by another replica's *init* cell, computing or not:
#: an init cell imports and builds (envpool, torch, a model), which on a loaded machine or a
#: cold worker can take seconds at well under a tenth of a core (reading files), and it has
#: no other replica's value to wait for. A fresh cluster's first run once said "random
#: streams shared" nearly every time for an Acrobot env beside a torch learner.
INIT_PATIENCE_S = 30.0


#: bytes of NumPy's MT19937 state in memory: ``uint32 key[624]`` then ``int pos``
_MT_STATE_BYTES = 624 * 4 + 4


def numpy_fingerprint(numpy) -> bytes | None:
    """NumPy's global generator's whole MT19937 state (key and position) as bytes, read in
    place (~0.5 µs, against ~33 µs for ``get_state``); None where the global generator runs
    another bit generator (``np.random.set_bit_generator``). Equal bytes mean an equal
    state: a draw moves the position (and, every 624 words, the key), seeding rewrites both.
    (The legacy cache of one Gaussian is not in these bytes; it only changes with a draw or
    a ``set_state`` that gives it explicitly.)

    >>> import numpy as np
    >>> before = numpy_fingerprint(np)
    >>> before == numpy_fingerprint(np), (np.random.rand(), before == numpy_fingerprint(np))[1]
    (True, False)
    """
    generator = getattr(getattr(numpy.random, "mtrand", None), "_rand", None)
    bits = getattr(generator, "_bit_generator", None)
    if type(bits) is not numpy.random.MT19937:
        return None
    return ctypes.string_at(bits.ctypes.state_address, _MT_STATE_BYTES)


def python_fingerprint() -> tuple | None:
    """Python's ``random`` module's whole state as (bytes, Gaussian cache), read in place
    (~1 µs, against ~8 µs for ``random.getstate()`` and ~3 µs for ``setstate``); None where
    the interpreter lays its generator out otherwise (checked once against ``getstate``).

    CPython's ``_random.Random`` is ``{PyObject_HEAD; int index; uint32_t state[624]}``;
    the module's functions are the methods of one hidden instance, ``random._inst``, whose
    ``gauss_next`` (the cached second Gaussian) is the rest of ``getstate()``.

    >>> before = python_fingerprint()
    >>> before == python_fingerprint(), (random.random(), before == python_fingerprint())[1]
    (True, False)
    """
    inst = random._inst
    raw = ctypes.string_at(id(inst) + _PY_STATE_OFFSET, _MT_STATE_BYTES) if _python_layout_ok() else None
    return None if raw is None else (raw, inst.gauss_next)


#: where the generator's ``index`` lies in a CPython ``_random.Random``: after PyObject_HEAD
_PY_STATE_OFFSET = object.__basicsize__
_PY_LAYOUT: list[bool] = []  # [whether the in-place read matches getstate()], once known


def _python_layout_ok() -> bool:
    if not _PY_LAYOUT:
        ok = False
        if sys.implementation.name == "cpython" and type(random._inst).__mro__[1].__module__ == "_random":
            probe = random.Random(12345)
            raw = ctypes.string_at(id(probe) + _PY_STATE_OFFSET, _MT_STATE_BYTES)
            internal = probe.getstate()[1]  # 624 words, then the index
            ok = raw == struct.pack("i624I", internal[-1], *internal[:-1])
        _PY_LAYOUT.append(ok)
    return _PY_LAYOUT[0]


class Streams:
    """One replica's saved random states."""

    __slots__ = ("torch", "cuda", "numpy", "numpy_print", "python", "python_print", "holding")

    def __init__(self) -> None:
        self.torch = self.cuda = self.numpy = self.python = None
        self.numpy_print: bytes | None = None  # numpy_fingerprint of the state in self.numpy
        self.python_print: tuple | None = None  # python_fingerprint of the state in self.python
        self.holding = False  # whether its replica has the turn now

    def save(self) -> None:
        """Keep the process's generators' states as this replica's."""
        torch = loaded("torch")
        if torch is not None:
            self.torch = torch.get_rng_state()
            self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            now = numpy_fingerprint(numpy)
            if now is None or now != self.numpy_print or self.numpy is None:  # drawn from: copy it
                self.numpy = numpy.random.get_state()
            self.numpy_print = now
        now = python_fingerprint()
        if now is None or now != self.python_print or self.python is None:  # drawn from: copy it
            self.python = random.getstate()
        self.python_print = now

    def set_apart(self, who: Hashable) -> None:
        """Make this replica's NumPy and Python streams its own: seeded from the saved
        states mixed with ``who`` (its group and index), the same ``who`` and states always
        giving the same streams.

            >>> import numpy as np
            >>> a, b, again = Streams(), Streams(), Streams()
            >>> for streams, who in ((a, ("actor", 0)), (b, ("actor", 1)), (again, ("actor", 0))):
            ...     streams.save(); streams.set_apart(who)
            >>> bool(a.numpy[1][0] != b.numpy[1][0]), bool(a.numpy[1][0] == again.numpy[1][0])
            (True, True)
        """
        numpy = sys.modules.get("numpy")
        if numpy is not None and self.numpy is not None:
            self.numpy = numpy.random.RandomState(_mixed_seed(self.numpy, who, 4)).get_state()
            self.numpy_print = None  # not known until installed
        if self.python is not None:
            self.python = random.Random(_mixed_seed(self.python, who, 32)).getstate()
            self.python_print = None

    def states(self) -> dict[str, Any]:
        """The saved states as plain values (arrays and tuples: a checkpoint holds them).
        torch's come as NumPy byte arrays, so that the notebook that receives a run's
        states (or reads its checkpoint) need not import torch for them (~2.5 s)."""
        cuda = None if self.cuda is None else [_bytes_array(s) for s in self.cuda]
        return {"torch": _bytes_array(self.torch), "cuda": cuda, "numpy": self.numpy, "python": self.python}

    def load(self, states: dict[str, Any]) -> None:
        """Take ``states`` (from :meth:`states`, perhaps through a checkpoint) as this
        replica's; a kind that is missing keeps what it had."""
        for kind in ("torch", "cuda", "numpy", "python"):
            if states.get(kind) is not None:
                setattr(self, kind, states[kind])
        if states.get("numpy") is not None:
            self.numpy_print = None  # not known for a loaded state: the next install writes it
        if states.get("python") is not None:
            self.python_print = None

    def install(self) -> None:
        """Put this replica's states into the process's generators."""
        torch = loaded("torch")
        if torch is not None and self.torch is not None:
            if not isinstance(self.torch, torch.Tensor):  # loaded as bytes (states()): once
                self.torch = torch.from_numpy(self.torch)
            torch.set_rng_state(self.torch)
            if self.cuda is not None and torch.cuda.is_initialized():
                if self.cuda and not isinstance(self.cuda[0], torch.Tensor):  # as bytes: once
                    self.cuda = [torch.from_numpy(s) for s in self.cuda]
                torch.cuda.set_rng_state_all(self.cuda)
        numpy = sys.modules.get("numpy")
        if numpy is not None and self.numpy is not None:
            now = numpy_fingerprint(numpy)
            if now is None or self.numpy_print is None or now != self.numpy_print:  # another state there
                numpy.random.set_state(self.numpy)
                self.numpy_print = numpy_fingerprint(numpy)
        if self.python is not None:
            now = python_fingerprint()
            if now is None or self.python_print is None or now != self.python_print:  # another state there
                random.setstate(self.python)
                self.python_print = python_fingerprint()


def _bytes_array(state: Any) -> Any:
    """A torch generator's state (a CPU byte tensor) as a NumPy array of the same bytes;
    None, or an array already, as it is."""
    if state is None or type(state).__module__.startswith("numpy"):
        return state
    return state.numpy().copy()


def _mixed_seed(state: Any, who: Hashable, size: int) -> int:
    """A seed of ``size`` bytes from a generator's state and a replica's name."""
    digest = hashlib.blake2b(pickle.dumps((state, who), protocol=5), digest_size=size).digest()
    return int.from_bytes(digest, "little")


class GeneratorTurns:
    """The replicas of one run in one process, taking turns with the process's generators.

    ``take(streams, stopped)`` … ``give(streams)`` (or ``with turn(streams, stopped)``)
    around each cell; ``released(streams, wait, stopped)`` around a wait inside a cell for
    other replicas."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holder: Streams | None = None  # whose states the generators hold now
        self._holder_thread: int | None = None  # the native id of the thread holding the turn
        self._holder_init = False  # whether it holds it for an init cell
        self._start = Streams()
        self._start.save()

    def streams(self, who: Hashable | None = None) -> Streams:
        """A new replica's streams: the process's as they were when these turns began,
        NumPy's and Python's set apart by ``who`` (the replica's group and index) when
        given."""
        mine = copy.copy(self._start)  # the states are only read (installed), never changed
        if who is not None:
            mine.set_apart(who)
        return mine

    @contextmanager
    def turn(self, streams: Streams, stopped: Callable[[], bool]) -> Iterator[None]:
        """Run the body with ``streams`` in the process's generators, one replica at a time.
        Raises :class:`Stopped` if the run stops while this replica waits for its turn
        (another replica's cell may be stuck)."""
        self.take(streams, stopped)
        try:
            yield
        finally:
            self.give(streams)

    def give(self, streams: Streams) -> None:
        """End this replica's turn, if it has it (a wait inside the cell that saw the stop
        did not take it back). Its states stay in the generators until another replica's
        turn saves them."""
        if streams.holding:
            streams.holding = False
            self._lock.release()

    def released(self, streams: Streams, wait: Callable[..., Any], stopped: Callable[[], bool]) -> Callable[..., Any]:
        """``wait`` (called inside a cell) with the turn given up while it runs: the other
        replicas of this process it waits for can run their cells meanwhile."""

        def call(*args, **kwargs):
            held = streams.holding  # called outside a cell (a thread of the user's): no turn
            self.give(streams)
            try:
                return wait(*args, **kwargs)
            finally:
                if held:
                    self.take(streams, stopped)

        return call

    def states_of(self, streams: Streams, stopped: Callable[[], bool]) -> dict[str, Any]:
        """A replica's streams as they are now (to save them: a snapshot, a checkpoint), taken
        between its cells."""
        if self._take_between_cells(streams, stopped):
            try:
                streams.save()  # its turn: the process's generators hold its states
            finally:
                self.give(streams)
        return streams.states()  # else as its last turn left them

    def restore(self, streams: Streams, states: dict[str, Any], stopped: Callable[[], bool]) -> None:
        """Make ``states`` a replica's streams from here on (a resumed replica continues the
        draws it saved), taken between its cells."""
        taken = self._take_between_cells(streams, stopped)
        try:
            streams.load(states)
            if taken:
                streams.install()  # its turn: the generators hold its states
        finally:
            self.give(streams)

    def _take_between_cells(self, streams: Streams, stopped: Callable[[], bool]) -> bool:
        """:meth:`take`, for work that must not fail when the run stops while another
        replica's cell (a stuck one) keeps the turn: False then."""
        try:
            return self.take(streams, stopped)
        except Stopped:
            return False

    def take(
        self, streams: Streams, stopped: Callable[[], bool], patience: float = PATIENCE_S, init: bool = False
    ) -> bool:
        """Begin a turn of the replica whose streams these are (see :meth:`turn`), for an
        ``init`` cell or another. False when another replica's cell kept the turn for
        ``patience`` seconds without computing (its thread's CPU time still; up to
        :data:`BUSY_PATIENCE_S` while it computes; :data:`INIT_PATIENCE_S` at least for an
        init cell's turn): the cell then runs beside it without a turn (it may be waiting
        for this replica), and its draws are no longer its own."""
        if not self._lock.acquire(blocking=False):  # free, the usual case: no clock reads
            start = time.monotonic()
            if self._holder_init:
                patience = max(patience, INIT_PATIENCE_S)
            deadline, watched = start + patience, None
            while not self._lock.acquire(timeout=_STOP_POLL_S):
                if stopped():
                    raise Stopped()
                now = time.monotonic()
                if watched is None and now > deadline - patience / 2:  # a long wait: watch the holder
                    watched = (now, self._holder_thread, _thread_cpu_s(self._holder_thread))
                if now > deadline and watched is not None:
                    watched = self._computed_since(watched, now)
                    if watched is None or now - start > BUSY_PATIENCE_S:
                        return False  # the holder waits (maybe for this replica): run beside it
                    deadline = now + patience  # it computes: wait on
        self._holder_thread, self._holder_init = threading.get_native_id(), init
        if self._holder is not streams:  # another replica ran since: swap (lazily, so a
            try:  # process with one replica never pays for it)
                if self._holder is not None:
                    self._holder.save()
                streams.install()
            except BaseException:
                self._lock.release()
                raise
            self._holder = streams
        streams.holding = True
        return True

    def _computed_since(self, watched: tuple, now: float) -> tuple | None:
        """``(now, holder's thread, its CPU seconds)`` when the thread holding the turn used a
        tenth of a core or more since ``watched`` (over 0.2 s or more), or the turn changed
        hands; None when it did not, or cannot be told (no /proc; a lane of this thread)."""
        since, was, cpu = watched
        holder = self._holder_thread
        busy = _thread_cpu_s(holder)
        if busy is None or cpu is None or holder == threading.get_native_id():
            return None
        if holder == was and (now - since < 0.2 or busy - cpu < _BUSY_SHARE * (now - since)):
            return None
        return now, holder, busy


def _thread_cpu_s(native_id: int | None) -> float | None:
    """CPU seconds the thread ``native_id`` of this process has used, from
    ``/proc/self/task/ID/stat`` (Linux; None elsewhere, or once the thread has ended)."""
    if native_id is None:
        return None
    try:
        with open(f"/proc/self/task/{native_id}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime + stime, in ticks
    except (OSError, IndexError, ValueError):
        return None


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class SharedStreams:
    """:class:`GeneratorTurns`' interface for a run whose replicas share the process's generators
    (``RunConfig.own_random`` off): every turn is granted at once, nothing is swapped.

    >>> streams = SHARED_STREAMS.streams()
    >>> SHARED_STREAMS.take(streams, stopped=lambda: False)
    True
    """

    def streams(self, who: Hashable | None = None) -> Streams:
        return Streams()

    @contextmanager
    def turn(self, streams: Streams, stopped: Callable[[], bool]) -> Iterator[None]:
        yield

    def give(self, streams: Streams) -> None:
        pass

    def released(self, streams: Streams, wait: Callable[..., Any], stopped: Callable[[], bool]) -> Callable[..., Any]:
        return wait

    def take(
        self, streams: Streams, stopped: Callable[[], bool], patience: float = PATIENCE_S, init: bool = False
    ) -> bool:
        return True

    def states_of(self, streams: Streams, stopped: Callable[[], bool]) -> None:
        return None  # the process's streams are no replica's own: nothing to save

    def restore(self, streams: Streams, states: dict[str, Any], stopped: Callable[[], bool]) -> None:
        pass


#: the one :class:`SharedStreams` (it holds nothing)
SHARED_STREAMS = SharedStreams()
