"""One run's folder in a run store: what :func:`write_run` writes and :func:`read_run` reads.

::

    20261207-103800-quickstart-3f2a/
      summary.json     id, name, status, solved, started, wall_s, env_steps, seed, policy, returns, …
      config.json      {"run": the RunConfig's options, "notebook": {"cfg.lr": 0.00025, "cfg.seed": 1, …}}
      metrics.jsonl    the run's per-iteration rows (run.metrics), one JSON object a line
      events.jsonl     what happened to the run (re-placements, lost workers, edits)
      returns.json     every finished episode's return, in order
      cells.json       the FDG's cells (fragment, rate, code, replicas, device)
      checkpoint/      the final state (a workbench checkpoint), when the run kept one

The folder is written whole into a hidden ``.tmp-…`` folder and renamed into place, so a
store never shows a half-written run if the process dies. The JSON files are not fsynced
(that would cost more than the rest of the write): after a power cut the newest record
may be damaged, and listings skip it with a warning; the checkpoint is fsynced as every
checkpoint is. A run read back is a :class:`StoredRun`: a real
:class:`~workbench.runtime.state.run.Run` with its rows, returns, events and final state.

    >>> import tempfile
    >>> from workbench.runtime.state.run import IterationRecord, Run
    >>> run = Run(policy_name="inline", iterations=1, steps=4)
    >>> run.record(IterationRecord(0, env_steps=4, metrics={"charts/episodic_return": [3.0]}))
    >>> run.status = "finished"
    >>> folder = write_run(run, tempfile.mkdtemp(), name="demo", notebook={"cfg.seed": 3})
    >>> back = read_run(folder)
    >>> back.name, back.seed, back.status, back.mean_return(), list(back.metrics.columns[:2])
    ('demo', 3, 'finished', 3.0, ['time_s', 'env_steps'])
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import numbers
import os
import re
import shutil
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.fdg.graph import Graph
from workbench.run_store.store import RunStoreError, open_store
from workbench.runtime.state.run import RETURN_METRIC, Run, RunEvent

__all__ = [
    "StoredRun",
    "KeptGraph",
    "RecordedError",
    "write_run",
    "read_run",
    "notebook_config",
    "RECORD_FORMAT",
    "CHECKPOINT_LIMIT_BYTES",
]

RECORD_FORMAT = "workbench-run"
RECORD_VERSION = 1
#: a final state bigger than this is not copied into the store (a language model's weights):
#: the run's own checkpoint_dir keeps it, and the summary says so
CHECKPOINT_LIMIT_BYTES = 256 * 2**20


class RecordedError(Exception):
    """The error a stored run failed with, as the store kept it (its type's name and text)."""


@dataclass(repr=False)
class StoredRun(Run):
    """A run read back from a run store: a :class:`~workbench.runtime.state.run.Run` (rows,
    returns, events, status; its state, policy and FDG when it kept a checkpoint) plus where
    it is kept and how it was configured. Resume it with
    ``fdg.run(resume=stored.checkpoint_path, policy=…)``."""

    #: the run's id (its folder's name) and folder
    id: str = ""
    path: Path | None = None
    #: the notebook's or script's name (``run_name``)
    name: str = ""
    #: ``{"run": RunConfig options, "notebook": {"cfg.lr": …}}`` as the run started
    config: dict = field(default_factory=dict)
    #: summary.json as written
    info: dict = field(default_factory=dict)

    @property
    def checkpoint_path(self) -> Path | None:
        """The folder of the run's final checkpoint (``resume=`` takes it), or None."""
        return Path(self.checkpoints[-1]) if self.checkpoints else None

    @property
    def seed(self):
        """The notebook's seed (a ``seed`` name or a ``….seed`` field), or None."""
        return self.info.get("seed")


class KeptGraph(Graph):
    """A kept run's FDG: its cells, and the ``namespace`` they read (given when loaded)."""

    def __init__(self, fragments=(), namespace=None) -> None:
        super().__init__(fragments)
        self.namespace = namespace

    def copy(self) -> "KeptGraph":
        return KeptGraph(self.fragments.values(), self.namespace)


def notebook_config(fdg, namespace) -> dict[str, Any]:
    """The notebook values ``fdg``'s cells read that are settings, flattened to JSON
    scalars: a number, string or bool by its name, a dataclass's or dict's such fields as
    ``name.field``. Taken when a run starts (a later ``fdg.update`` is in its events).

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Cfg:
    ...     lr: float = 1e-3
    ...     seed: int = 1
    >>> from workbench.fdg.graph import Graph
    >>> g = Graph()
    >>> _ = g.add_fragment("learner", "w = cfg.lr * scale + len(np.zeros(2))")
    >>> notebook_config(g, {"cfg": Cfg(), "scale": 2, "np": __import__("numpy")})
    {'cfg.lr': 0.001, 'cfg.seed': 1, 'scale': 2}
    """
    values: dict[str, Any] = {}
    namespace = namespace or {}
    for name in fdg.notebook_names():
        if name not in namespace:
            continue
        value = namespace[name]
        if _scalar(value):
            values[name] = _plain(value)
            continue
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            items = ((f.name, getattr(value, f.name, None)) for f in dataclasses.fields(value))
        elif isinstance(value, dict):
            items = ((k, v) for k, v in value.items() if isinstance(k, str))
        else:
            continue
        values.update((f"{name}.{key}", _plain(item)) for key, item in items if _scalar(item))
    return values


def write_run(run: Run, store, *, config=None, notebook: dict | None = None, name: str | None = None) -> Path:
    """Write ``run`` as a new run folder in the run store ``store`` (made a store when new);
    return the folder. ``config``: the run's :class:`~workbench.config.RunConfig`;
    ``notebook``: :func:`notebook_config`'s settings; ``name``: the notebook's or script's.
    The folder appears whole (written aside, then renamed) or not at all."""
    store = open_store(store, create=True)
    name = name or "fdg"
    started = time.time() - max(0.0, time.perf_counter() - run.started)
    run_id = f"{time.strftime('%Y%m%d-%H%M%S', time.localtime(started))}-{_slug(name)}-{uuid.uuid4().hex[:4]}"
    tmp = store / f".tmp-{run_id}"
    tmp.mkdir()
    try:
        notebook = dict(notebook or {})
        summary = _summary(run, run_id, name, started, notebook)
        summary["checkpoint"], summary["checkpoint_notes"] = _keep_checkpoint(run, config, tmp)
        _write(
            tmp / "config.json",
            json.dumps({"run": _run_options(config), "notebook": notebook}, indent=1, default=_plain),
        )
        _write(tmp / "metrics.jsonl", "".join(json.dumps(row, default=_plain) + "\n" for row in run.rows))
        _write(
            tmp / "events.jsonl", "".join(json.dumps(dataclasses.asdict(e), default=_plain) + "\n" for e in run.events)
        )
        _write(tmp / "returns.json", json.dumps(run.episode_returns, default=_plain))
        _write(tmp / "cells.json", json.dumps(_cells(run.fdg), indent=1))
        _write(tmp / "summary.json", json.dumps(summary, indent=1, default=_plain))
        final = store / run_id
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def read_run(folder, *, state: bool = False, namespace=None) -> StoredRun:
    """The run kept in ``folder`` (a run store's sub-folder) as a :class:`StoredRun`;
    ``state``: also load its final checkpoint (state, policy). Its ``fdg`` is rebuilt from
    its cells, reading ``namespace`` (a run keeps its cells, not the notebook's functions,
    classes and modules they use: pass the notebook's ``globals()`` to play it again). A
    folder that is not a whole run raises :class:`~workbench.run_store.store.RunStoreError`."""
    folder = Path(folder)
    info = read_summary(folder)
    config = _read_json(folder / "config.json", {"run": {}, "notebook": {}})
    rows = [json.loads(line) for line in _read_text(folder / "metrics.jsonl", "").splitlines() if line.strip()]
    events = [
        RunEvent(**json.loads(line)) for line in _read_text(folder / "events.jsonl", "").splitlines() if line.strip()
    ]
    run = StoredRun(
        policy_name=info.get("policy") or "",
        iterations=int(info.get("iterations_asked") or 0),
        steps=int(info.get("steps") or 0),
        target_return=info.get("target_return"),
        window=int(info.get("window") or 20),
        unit=info.get("unit") or "env steps",
        status=info.get("status") or "finished",
        rows=rows,
        events=events,
        episode_returns=list(_read_json(folder / "returns.json", [])),
        env_steps=int(info.get("env_steps") or 0),
        env_steps_base=int(info.get("env_steps_base") or 0),
        solved_at=info.get("solved_at"),
        id=info.get("id") or folder.name,
        path=folder,
        name=info.get("name") or "",
        config=config,
        info=info,
    )
    run.replica_env_steps = dict(info.get("replica_env_steps") or {})
    run.replica_episodes = dict(info.get("replica_episodes") or {})
    if info.get("error"):
        run.error = RecordedError(info["error"])
    if info.get("checkpoint"):
        run.checkpoints = [str((folder / info["checkpoint"]).resolve())]
    cells = _read_json(folder / "cells.json", [])
    if cells:
        run.fdg = KeptGraph(namespace=namespace)
        for cell in cells:
            run.fdg.add_fragment(
                cell["fragment"],
                cell["code"],
                rate=cell["rate"],
                replicas=cell.get("replicas"),
                device=cell.get("device") or "cpu",
                reads=cell.get("reads", ()),
                writes=cell.get("writes", ()),
            )
    if state and run.checkpoint_path is not None:
        from workbench.runtime.state.checkpoint import load_checkpoint

        checkpoint = load_checkpoint(run.checkpoint_path)
        run.state, run.policy = checkpoint.state, checkpoint.policy
    return run


def read_summary(folder: Path) -> dict:
    """``folder``'s summary.json, checked to be a run's; else a RunStoreError saying why."""
    file = folder / "summary.json"
    if not file.is_file():
        raise RunStoreError(
            f"{str(folder)!r} is not a whole run: it has no summary.json (a run folder holds "
            "summary.json, config.json, metrics.jsonl, events.jsonl)."
        )
    try:
        info = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise RunStoreError(f"{str(file)!r} is damaged ({exc}); the run cannot be read.") from None
    if not isinstance(info, dict) or info.get("format") != RECORD_FORMAT:
        raise RunStoreError(f"{str(file)!r} is not a workbench run's summary (no format {RECORD_FORMAT!r}).")
    return info


# -- what is written ----------------------------------------------------------------------
def _summary(run: Run, run_id: str, name: str, started: float, notebook: dict) -> dict:
    window_column = "charts/mean_return_last_%d" % run.window
    windowed = [row[window_column] for row in run.rows if row.get(window_column) is not None]
    returns = [row[RETURN_METRIC] for row in run.rows if RETURN_METRIC in row]
    error = run.error
    return {
        "format": RECORD_FORMAT,
        "version": RECORD_VERSION,
        "id": run_id,
        "name": name,
        "status": run.status,
        "solved": bool(run.solved_at),
        "solved_at": run.solved_at,
        "error": f"{type(error).__name__}: {error}" if error is not None else None,
        "started": datetime.datetime.fromtimestamp(started, datetime.timezone.utc).isoformat(timespec="seconds"),
        "started_unix": started,
        "wall_s": run.wall_time,
        "iterations": run.completed_iterations,
        "iterations_asked": run.iterations,
        "steps": run.steps,
        "env_steps": run.env_steps,
        "env_steps_base": run.env_steps_base,
        "unit": run.unit,
        "seed": _seed(notebook),
        "policy": run.policy_name,
        "placed": getattr(run.policy, "name", None),
        "target_return": run.target_return,
        "window": run.window,
        "episodes": len(run.episode_returns),
        "final_return": windowed[-1] if windowed else None,
        "best_return": max(windowed) if windowed else None,
        "final_episodic_return": returns[-1] if returns else None,
        "replica_env_steps": run.replica_env_steps,
        "replica_episodes": run.replica_episodes,
    }


def _keep_checkpoint(run: Run, config, folder: Path) -> tuple[str | None, list[str]]:
    """Where the run's final state is: copied into ``folder/checkpoint`` (relative), or the
    run's own checkpoint_dir (absolute), or None with why in the notes."""
    if run.state is None or run.fdg is None or run.policy is None:
        return None, ["the run kept no state (keep_state=False, or it failed before its first iteration)"]
    own = getattr(config, "checkpoint_dir", None)
    if own is not None and run.checkpoints:
        return str(Path(own).resolve()), []  # written there already: not copied
    if "torch" not in sys.modules:  # then the state holds no tensors, and importing torch costs seconds
        return None, [
            "not written: checkpoints are written with torch, which this run's process never imported "
            "(importing it takes seconds); a run that uses torch, or checkpoint_dir=…, keeps one"
        ]
    from workbench.runtime.state.checkpoint import save_checkpoint
    from workbench.runtime.state.state_size import state_nbytes

    size = state_nbytes(run.state.fragments)
    if size > CHECKPOINT_LIMIT_BYTES:
        return None, [
            f"the final state ({size / 2**20:,.0f} MB) is bigger than the store keeps "
            f"({CHECKPOINT_LIMIT_BYTES / 2**20:,.0f} MB); pass checkpoint_dir=… to keep it"
        ]
    notes: list[str] = []
    save_checkpoint(folder / "checkpoint", run.state, run.fdg, run.policy, keep=1, warn=notes.append)
    return "checkpoint", notes


def _run_options(config) -> dict:
    if config is None:
        return {}
    return {f.name: _option_value(getattr(config, f.name)) for f in dataclasses.fields(config)}


def _option_value(value):
    if value is None or _scalar(value):
        return _plain(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "to_dict"):  # a wb.Policy
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [type(v).__name__ for v in value]  # loggers
    return f"<{type(value).__name__}>"  # a Client, a progress factory, a RunState


def _cells(fdg) -> list[dict]:
    if fdg is None:
        return []
    return [
        {
            "fragment": frag.name,
            "rate": rate,
            "code": cell.code,
            "replicas": frag.replicas,
            "device": frag.device,
            "reads": list(cell.declared_reads),
            "writes": list(cell.declared_writes),
        }
        for frag in fdg.fragments.values()
        for rate, cell in frag.cells.items()
    ]


def _seed(notebook: dict):
    if "seed" in notebook:
        return notebook["seed"]
    return next((value for key, value in notebook.items() if key.endswith(".seed")), None)


def _scalar(value) -> bool:
    return isinstance(value, (str, numbers.Number)) and not isinstance(value, complex)


def _plain(value):
    """A JSON value for ``value`` (NumPy numbers as Python ones; anything else as text)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        return value if math.isfinite(value) else str(value)
    if hasattr(value, "item") and getattr(value, "size", None) == 1:  # a 0-d array, a 1-element tensor
        return _plain(value.item())
    return str(value)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")[:40] or "run"


def _write(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def _read_text(path: Path, missing: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return missing
    except (OSError, UnicodeDecodeError) as exc:
        raise RunStoreError(f"{str(path)!r} cannot be read ({exc}).") from None


def _read_json(path: Path, missing):
    text = _read_text(path, "")
    if not text:
        return missing
    try:
        return json.loads(text)
    except ValueError as exc:
        raise RunStoreError(f"{str(path)!r} is damaged ({exc}).") from None
