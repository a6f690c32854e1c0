"""Can it cross processes? Name what cannot, where it comes from, and the fix — in one message.

Under a cluster policy three kinds of things are serialised: the notebook names fragments
read (sent with each replica when it is deployed), the values on routes between groups
(sent after the cell that writes them runs: from the first iteration on), and fragment
state (snapshots and exports of the names a fragment binds). A lock, a generator, an open
file or a lambda among them fails deep in Dask or pickle (``Could not serialize object of
type …``), and which replica fails first decided what the user saw. Here each kind is
checked where it is first serialised, and the error names the value, its fragment and the
fix, the same text from whichever replica meets it:

- :func:`check_notebook` before anything is deployed;
- :func:`value_error` for a route value that does not pickle (at its first send);
- fragment state that does not pickle (a lock, a socket the fragment never sends) does not
  fail the run: :func:`unpicklable` finds it, snapshots leave it out, and
  :func:`left_out_note` is the warning the run gives once (a restore builds it again by
  running the fragment's init cell). :func:`state_error` remains for a state that fails
  as a whole although each of its values pickles on its own.

Example:
    >>> import threading
    >>> try:
    ...     check_notebook({"lock": threading.Lock()}, {"lock": ["actor"]})
    ... except SerialisationError as exc:
    ...     print(str(exc).split(":")[0])
    the notebook name 'lock' that fragment actor reads cannot be sent to the workers (a _thread.lock cannot be pickled)
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import cloudpickle

from workbench.errors import WorkbenchError
from workbench.runtime.transport.mailbox import Arrival

__all__ = [
    "SerialisationError",
    "check_notebook",
    "quiet_dask_serialisation",
    "value_error",
    "state_error",
    "culprit",
    "unpicklable",
    "left_out_note",
]


class SerialisationError(WorkbenchError):
    """Something a run must send between processes cannot be serialised."""


#: what to do, per kind of thing that must cross processes
_FIX_NOTEBOOK = (
    "Define it in the fragment's --init cell instead (it is then built on each "
    "replica, never sent), or run with policy inline."
)
_FIX_VALUE = (
    "Write plain data there (arrays, tensors, numbers, dicts/lists of them); a function "
    "must be a module-level function (def in a module, not a lambda or a closure); keep "
    "locks, generators and open files in the fragment's own names, not in values other "
    "fragments read."
)
_FIX_STATE = (
    "Keep it out of the fragment's state: build it inside a function (so the cell does not "
    "bind it), or make it picklable; the fragment's state is what snapshots send and "
    "checkpoints keep."
)


def culprit(
    value: Any, dump: Callable[[Any], bytes] = cloudpickle.dumps, path: str = "", depth: int = 4
) -> tuple[str, str]:
    """(where inside ``value``, what type) of the innermost part that does not serialise:
    ``("['info'].lock", "_thread.lock")``. Looks into dicts, lists, tuples and attributes."""
    parts: list[tuple[str, Any]] = []
    if depth > 0:
        if isinstance(value, Mapping):
            parts = [(f"[{k!r}]", v) for k, v in list(value.items())[:100]]
        elif isinstance(value, (list, tuple)):
            parts = [(f"[{i}]", v) for i, v in enumerate(value[:100])]
        elif getattr(value, "dtype", None) == object and hasattr(value, "flat"):  # noqa: E721 (NumPy's dtype('O') == object)
            # a step value stacked over T steps: NumPy's object array of what each step wrote
            parts = [(f"[{i}]", v) for i, v in zip(range(100), value.flat)]
        elif hasattr(value, "__dict__") and not isinstance(value, type) and not callable(value):
            parts = [(f".{k}", v) for k, v in list(vars(value).items())[:100]]
    for where, part in parts:
        try:
            dump(part)
        except Exception:
            return culprit(part, dump, path + where, depth - 1)
    kind = type(value)
    module = kind.__module__
    return path, (kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}")


def _what(value: Any, dump) -> str:
    where, kind = culprit(value, dump)
    return f"{where} is a {kind}" if where else f"a {kind} cannot be pickled"


def check_notebook(notebook: Mapping[str, Any], readers: Mapping[str, list[str]]) -> None:
    """Raise :class:`SerialisationError` for the first notebook name (in ``readers``'
    order: name → fragments that read it) that cloudpickle cannot serialise."""
    for name, fragments in readers.items():
        if name not in notebook:
            continue
        try:
            cloudpickle.dumps(notebook[name])
        except Exception as exc:
            who = ", ".join(fragments)
            raise SerialisationError(
                f"the notebook name {name!r} that fragment{'s' if len(fragments) > 1 else ''} {who} "
                f"read{'' if len(fragments) > 1 else 's'} cannot be sent to the workers "
                f"({_what(notebook[name], cloudpickle.dumps)}): {type(exc).__name__}: {_short(exc)}. "
                f"{_FIX_NOTEBOOK}"
            ) from exc


#: the loggers Dask reports a value it could not serialise on, each with its traceback
#: chained three deep (pickle, then cloudpickle): ~420 lines before workbench's own
#: one-line error for one lock read from the notebook
_DASK_SERIALISATION_LOGGERS = ("distributed.protocol.pickle", "distributed.protocol.core", "distributed.comm.utils")


class _SerialisationFailures(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        return not (
            message.startswith(("Failed to serialize", "Failed to Serialize", "Unserializable Message"))
            or "Could not serialize" in message
            or "Could not serialize" in str(record.args)
        )


@contextmanager
def quiet_dask_serialisation() -> Iterator[None]:
    """While a deploy sends the notebook's names, Dask's own reports of a value it cannot
    serialise are dropped (the deploy's caller says which name, where and what to do:
    :func:`check_notebook`); every other record of those loggers passes.

        >>> with quiet_dask_serialisation():
        ...     logging.getLogger("distributed.protocol.pickle").error("Failed to serialize %r", 1)
    """
    drop = _SerialisationFailures()
    loggers = [logging.getLogger(name) for name in _DASK_SERIALISATION_LOGGERS]
    for logger in loggers:
        logger.addFilter(drop)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(drop)


def value_error(key: str, value: Any, exc: BaseException) -> SerialisationError:
    """The error for a route value (channel ``key``: ``[stacked:|step:]PRODUCER.NAME``)
    that did not pickle. ``value`` may be in the runtime's :class:`~workbench.runtime.transport.mailbox.Arrival`
    envelope (an asynchronous hand-off): the error names places inside what the cell wrote.

    >>> import threading
    >>> grads = {"g": 1.0, "lock": threading.Lock()}
    >>> str(value_error("stacked:actor.grads", Arrival(3, grads), TypeError("no"))).split(": ")[0]
    "fragment 'actor' writes 'grads', which another group of this policy reads, but it cannot be sent between processes (['lock'] is a _thread.lock)"
    """
    if isinstance(value, Arrival):  # the runtime's envelope, not part of what the cell wrote
        value = value.value
    producer, _, name = key.split(":")[-1].partition(".")
    return SerialisationError(
        f"fragment {producer!r} writes {name!r}, which another group of this policy reads, but it "
        f"cannot be sent between processes ({_what(value, pickle.dumps)}): {type(exc).__name__}: "
        f"{_short(exc)}. {_FIX_VALUE}"
    )


def state_error(
    states: Mapping[str, Mapping[str, Any]], dump: Callable[[Any], bytes], exc: BaseException
) -> SerialisationError:
    """The error for fragment state (fragment → name → value) that did not serialise:
    names the first fragment and name that fail on their own."""
    for fragment, values in states.items():
        for name, value in values.items():
            try:
                dump(value)
            except Exception:
                return SerialisationError(
                    f"fragment {fragment!r} keeps {name!r} in its state, which cannot be serialised "
                    f"for a snapshot ({_what(value, dump)}): {type(exc).__name__}: {_short(exc)}. "
                    f"{_FIX_STATE}"
                )
    return SerialisationError(
        f"a fragment's state cannot be serialised for a snapshot: {type(exc).__name__}: {_short(exc)}. {_FIX_STATE}"
    )


def unpicklable(states: Mapping[str, Mapping[str, Any]], dump: Callable[[Any], bytes]) -> dict[str, dict[str, str]]:
    """Fragment → name → what is wrong, for each value of fragment state (fragment → name
    → value) that does not serialise on its own.

    >>> import threading
    >>> unpicklable({"learner": {"n": 3, "lock": threading.Lock()}}, pickle.dumps)
    {'learner': {'lock': 'a _thread.lock cannot be pickled'}}
    """
    found: dict[str, dict[str, str]] = {}
    for fragment, values in states.items():
        for name, value in values.items():
            try:
                dump(value)
            except Exception:
                found.setdefault(fragment, {})[name] = _what(value, dump)
    return found


def left_out_note(fragment: str, name: str, what: str) -> str:
    """What a run says (once) about fragment state that snapshots leave out."""
    return (
        f"fragment {fragment!r} keeps {name!r} in its state, which cannot be pickled ({what}): "
        "snapshots and checkpoints leave it out, and a recovery or resume runs the fragment's "
        "init cell to build it again. If the run needs its contents back, keep them in arrays "
        "or numbers, or give its class state_dict()/load_state_dict()."
    )


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


def readers_of(fdg, names) -> dict[str, list[str]]:
    """name → the fragments that read it (for :func:`check_notebook`)."""
    return {
        name: [f.name for f in fdg.fragments.values() if any(name in f.external_inputs(rate) for rate in f.rates)]
        for name in names
    }
