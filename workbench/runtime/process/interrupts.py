"""Teardown that a second Ctrl-C does not cut short.

A user who interrupts a run often presses Ctrl-C again while it stops. Cutting the
teardown there would leave the run's replicas deployed on the workers (they keep their
threads, and loops that never saw the stop flag look stuck to the next run, whose
teardown then restarts their workers): the interrupt that was meant to stop one run
would cost the cluster. So the stop and the teardown run :func:`shielded`: a Ctrl-C during
them is held until they end (they are bounded: a loop gets ``STOP_GRACE_S``), with one
line saying so; a further Ctrl-C abandons the teardown, as a user insisting expects.

Only the main thread receives SIGINT, so off it (a background run) this does nothing.

Example::

    with shielded("stopping the run's replicas"):
        backend.teardown()
"""

from __future__ import annotations

import _thread
import contextlib
import gc
import signal
import sys
import threading
from collections.abc import Iterator

__all__ = ["shielded", "first_interrupt_stops"]


@contextlib.contextmanager
def shielded(
    what: str,
    *,
    if_abandoned: str = "the workers may then keep the run's replicas until they are restarted",
    reraise: bool = True,
) -> Iterator[None]:
    """Run the block with Ctrl-C held back: the first one during it prints that ``what`` is
    under way and is raised (as KeyboardInterrupt) once the block ends — unless an interrupt
    is already on its way out, which it then joins, or ``reraise`` is False (the block was
    the last thing to do); a second one is raised at once (``if_abandoned`` says what that
    leaves behind).

    >>> with shielded("nothing much"):
    ...     1 + 1
    2
    """
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not (
        previous is signal.default_int_handler or getattr(previous, "stops_the_run", False)
    ):
        # a background thread, or a host that handles SIGINT itself (it decides)
        yield
        return
    # entered from a `finally` that an interrupt is passing through: that one is the stop
    already_interrupted = isinstance(sys.exc_info()[1], KeyboardInterrupt)
    held = 0

    def hold(signum, frame) -> None:
        nonlocal held
        held += 1
        if held > 1:  # insisting: let it through now
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        print(
            f"workbench: {what}; this takes a few seconds at most. Ctrl-C again abandons it ({if_abandoned}).",
            file=sys.stderr,
            flush=True,
        )

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        # what it held back: Python's own, or a run's first-press stop (between stretches)
        signal.signal(
            signal.SIGINT, previous if signal.getsignal(signal.SIGINT) is hold else signal.default_int_handler
        )
    if held and reraise and not already_interrupted:
        raise KeyboardInterrupt


class _Pressed:
    """Whether the run's first Ctrl-C came (see :func:`first_interrupt_stops`)."""

    pressed = False


@contextlib.contextmanager
def first_interrupt_stops(stop) -> Iterator[_Pressed]:
    """A foreground run's first Ctrl-C calls ``stop()`` — the run ends at its next iteration
    boundary, as ``%fdg stop`` ends a background one, with its state and its final
    checkpoint — and says so; a second one interrupts at once, as Ctrl-C always did.
    Before 2026-12-01 the first one interrupted at once: the run so far was the cell's
    result, but without its state (``run.checkpoint`` refused) and without the checkpoint
    promised at the end. The caller raises KeyboardInterrupt after the run returns when
    ``pressed``. Off the main thread, or where the host handles SIGINT itself, nothing
    changes.

    >>> with first_interrupt_stops(lambda: None) as ctrl_c:
    ...     pass
    >>> ctrl_c.pressed
    False
    """
    state = _Pressed()
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield state
        return

    def second(signum, frame) -> None:
        # at once, as Ctrl-C always did — but not inside a gc callback (Dask's GC diagnosis
        # runs Python there), where Python can only print the KeyboardInterrupt and drop it
        if _in_gc_callback(frame):
            threading.Timer(0.01, _thread.interrupt_main).start()  # again, just after
            return
        signal.signal(signal.SIGINT, signal.default_int_handler)
        raise KeyboardInterrupt

    def first(signum, frame) -> None:
        state.pressed = True
        signal.signal(signal.SIGINT, second)  # the next one interrupts
        stop()
        # stdout: the cell's own line, as its result's (a notebook shows stderr as a warning)
        print(
            "workbench: Ctrl-C: stopping at the end of this iteration, keeping what it trained "
            "(Ctrl-C again interrupts at once).",
            flush=True,
        )

    first.stops_the_run = second.stops_the_run = True  # shielded() holds a Ctrl-C back over them too
    signal.signal(signal.SIGINT, first)
    try:
        yield state
    finally:
        if signal.getsignal(signal.SIGINT) in (first, second):
            signal.signal(signal.SIGINT, signal.default_int_handler)


def _in_gc_callback(frame) -> bool:
    """Whether ``frame`` (where a signal landed) runs inside one of ``gc.callbacks``."""
    codes = {getattr(getattr(cb, "__func__", cb), "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False
