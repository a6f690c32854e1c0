"""Cells that end their own process: ``sys.exit``, ``os._exit``, ``raise KeyboardInterrupt``.

A replica runs in a thread of the notebook kernel (inline) or of a Dask worker. A cell
that calls ``sys.exit(1)`` raises ``SystemExit``, which is not an ``Exception``; one
that calls ``os._exit(1)`` ends the whole process at once — the notebook's kernel, or a
worker that Dask restarts and the run re-places and retries until it gives up with "5
workers were lost". Both are the cell's own doing, so the runtime reports them as the
cell's error, at its line, the first time:

- :func:`is_cell_error` says which exceptions out of a cell are the cell's error
  (``SystemExit`` is; ``KeyboardInterrupt`` is too off the main thread, where no Ctrl-C
  is ever delivered — replicas always run off it);
- :func:`install` wraps ``os._exit`` so that, called from a thread running a replica's
  cell (one with an active replica context), it raises :class:`ProcessExit` there
  instead of ending the process. Everywhere else (Dask's own shutdown, a plain script)
  ``os._exit`` is untouched.

Example:
    >>> install()
    >>> is_cell_error(SystemExit(1)), is_cell_error(ProcessExit(1))
    (True, True)
    >>> import os
    >>> os._exit.__name__                # the wrapper; outside a replica it exits as always
    '_exit'
"""

from __future__ import annotations

import functools
import os
import threading

from workbench import context

__all__ = ["ProcessExit", "install", "is_cell_error", "describe"]


class ProcessExit(BaseException):
    """``os._exit(status)`` called from a replica's cell: raised instead of ending the
    process (a BaseException, like ``SystemExit``, so ``except Exception`` in the cell
    does not swallow it)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"os._exit({status}) was called")
        self.status = status


def is_cell_error(exc: BaseException) -> bool:
    """True for what a cell raised that is its own error (not the run stopping)."""
    if isinstance(exc, (Exception, SystemExit, ProcessExit)):
        return True
    # a real Ctrl-C reaches only the main thread; anywhere else the code raised it
    return isinstance(exc, KeyboardInterrupt) and threading.current_thread() is not threading.main_thread()


def describe(exc: BaseException) -> str:
    """The error line of a cell's exception, with what to do instead for the exits.

    >>> describe(ZeroDivisionError("division by zero"))
    'ZeroDivisionError: division by zero'
    >>> describe(SystemExit(1)).split(";")[0]
    'SystemExit: 1'
    """
    text = _text_of(exc)
    head = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    if isinstance(exc, (SystemExit, ProcessExit)):
        return (
            f"{head}; a cell must not exit its process (it runs inside the notebook's kernel "
            "or a Dask worker): raise an exception to stop the run with an error, or stop it "
            "with %fdg stop / fdg.stop()."
        )
    if isinstance(exc, KeyboardInterrupt):
        return (
            f"{head}, raised by the cell itself; raise an exception to stop the run with an "
            "error, or stop it with %fdg stop / fdg.stop()."
        )
    return head


def _text_of(exc: BaseException) -> str:
    """``str(exc)``, or what can be said when the exception's own ``__str__`` fails (a
    user's class with a bug in it must not hide the error it reports)."""
    try:
        return str(exc)
    except Exception as broken:  # noqa: BLE001
        try:
            args = repr(exc.args)
        except Exception:  # noqa: BLE001
            args = "(unprintable)"
        return f"{args} (its __str__ raised {type(broken).__name__})"


_lock = threading.Lock()


def install() -> None:
    """Wrap ``os._exit`` once per process (idempotent)."""
    with _lock:
        if getattr(os._exit, "_workbench", False):
            return
        real = os._exit

        @functools.wraps(real)
        def _exit(status: int) -> None:
            if context.current() is not None:  # a replica's cell is running in this thread
                raise ProcessExit(status)
            real(status)

        _exit._workbench = True
        os._exit = _exit
