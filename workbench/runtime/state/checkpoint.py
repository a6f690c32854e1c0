"""Checkpoint files: a run's state on disk, loadable anywhere, written atomically.

A checkpoint directory holds one sub-directory per saved iteration and a ``LATEST``
pointer::

    ckpt/
      LATEST                    "iteration-000120"
      iteration-000100/
        manifest.json           the FDG's cells, the policy, the iteration, what was saved
        state.pt                every fragment replica's state: tensors and plain values
      iteration-000120/ …

Safety: ``manifest.json`` is JSON (no pickle), ``state.pt`` loads with
``torch.load(weights_only=True)`` (see :mod:`workbench.runtime.state.portable` for what that can
hold). Atomicity: each checkpoint is written into a hidden temporary directory, flushed to
disk, and renamed into place; ``LATEST`` is replaced by an atomic rename afterwards. A
crash at any moment leaves every earlier checkpoint loadable: :func:`load_checkpoint`
follows ``LATEST`` and falls back to the newest complete directory.

Resuming under another policy or worker count works like an in-memory resume
(:class:`~workbench.runtime.state.replica_state.RunState`): learners carry their weights and optimiser
state into any replica count; actors and envs keep their state when their replica count
is unchanged and start fresh episodes otherwise.

Example:
    >>> import tempfile, workbench as wb
    >>> fdg = wb.FDG()
    >>> _ = fdg.add_fragment("counter", "n = 0", rate="init")
    >>> _ = fdg.add_fragment("counter", "n += 1", rate="step")
    >>> run = fdg.run(iterations=2, steps=3, progress=False)
    >>> path = run.checkpoint(tempfile.mkdtemp())
    >>> ckpt = load_checkpoint(path)
    >>> ckpt.iteration, ckpt.state.fragments["counter"][0]["n"]
    (2, 6)
"""

from __future__ import annotations

import datetime
import io
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from workbench.errors import CheckpointError
from workbench.fdg.policy import Policy
from workbench.runtime.state.portable import PortableState, encode_state, unsaved_data
from workbench.runtime.state.resume_checks import EDITED_KEY, mark_edited
from workbench.runtime.state.replica_state import RunState

__all__ = ["Checkpoint", "save_checkpoint", "load_checkpoint", "newest_loadable", "unsaved_message"]

FORMAT = "workbench-checkpoint"
VERSION = 1
LATEST = "LATEST"


@dataclass
class Checkpoint:
    """A loaded checkpoint: the state to resume from, and the FDG and policy it came from."""

    path: Path
    iteration: int
    state: RunState
    manifest: dict

    @property
    def policy(self) -> Policy:
        """The policy the checkpoint was written under."""
        return Policy.from_dict(self.manifest["policy"])

    @property
    def fragments(self) -> list[str]:
        return list(self.manifest["fragments"])

    @property
    def cells(self) -> list[dict]:
        """The cells of the FDG the checkpoint was written from (``fragment``, ``code``,
        ``rate``, …); ``wb.FDG.from_checkpoint(checkpoint)`` rebuilds the FDG from them."""
        return list(self.manifest["cells"])

    def check_fits(self, fdg) -> None:
        """Raise :class:`CheckpointError` unless ``fdg`` has the checkpoint's fragments; mark
        the saved names whose init cell binding ``fdg`` changed since, which restoring then
        checks against the edited cell's first values (:mod:`workbench.runtime.state.resume_checks`)."""
        mine, theirs = set(self.fragments), set(fdg.fragments)
        if mine != theirs:
            missing = ", ".join(sorted(mine - theirs)) or "none"
            extra = ", ".join(sorted(theirs - mine)) or "none"
            raise CheckpointError(
                f"checkpoint {self.path} was written from an FDG with fragments "
                f"{', '.join(self.fragments)}; this FDG has {', '.join(fdg.fragments) or 'none'} "
                f"(missing here: {missing}; not in the checkpoint: {extra}). Resume it with the FDG "
                f"it came from (wb.FDG.from_checkpoint(DIR) rebuilds it), or start a new run."
            )
        mark_edited(self.cells, fdg, self.state)

    def leave_out(self, fragment: str, *names: str) -> Checkpoint:
        """Resume without ``names`` of ``fragment``: its init cell's first values stay for
        them, everything else resumes. Changes this loaded checkpoint, not its files.

        >>> import tempfile, workbench as wb
        >>> fdg = wb.FDG()
        >>> _ = fdg.add_fragment("counter", "n = 0\\nscale = 1.0", rate="init")
        >>> _ = fdg.add_fragment("counter", "n += 1", rate="step")
        >>> ckpt = load_checkpoint(fdg.run(iterations=1, steps=2, progress=False).checkpoint(tempfile.mkdtemp()))
        >>> [n for n in ckpt.leave_out("counter", "scale").state.fragments["counter"][0] if n in ("n", "scale")]
        ['n']
        """
        replicas = self.state.fragments.get(fragment)
        if replicas is None:
            raise CheckpointError(
                f"checkpoint {self.path} has no fragment {fragment!r} (it has {', '.join(self.fragments) or 'none'})."
            )
        saved = sorted({n for values in replicas for n in values if not n.startswith("_wb_")})
        unknown = [n for n in names if n not in saved]
        if unknown:
            raise CheckpointError(
                f"checkpoint {self.path} saved no {', '.join(map(repr, unknown))} of fragment "
                f"{fragment!r} (it saved {', '.join(saved) or 'nothing'})."
            )
        for values in replicas:
            for name in names:
                values.pop(name, None)
        return self


def save_checkpoint(
    directory: str | os.PathLike,
    state: RunState,
    fdg,
    policy: Policy,
    *,
    keep: int | None = 3,
    warn: Callable[[str], None] | None = None,
) -> Path:
    """Write ``state`` (taken under ``policy``) as a new checkpoint in ``directory``;
    return the checkpoint's own directory. ``keep``: how many checkpoints to leave (None:
    all). ``warn`` is called with :func:`unsaved_message` when state that holds data is
    not saved (the manifest lists it under ``recreated_by_init`` either way)."""
    import torch

    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    name = f"iteration-{state.iteration:06d}"
    tmp = root / f".tmp-{name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        tensors, described, unsaved = {}, {}, {}
        for frag, replicas in state.fragments.items():
            encoded, saved_names, recreated = [], [], []
            for values in replicas:
                portable, skipped = _portable(values)
                encoded.append(dict(portable))  # a plain dict: weights_only loads it
                saved_names.append(sorted(portable))
                recreated.append(sorted(skipped))
                for what in unsaved_data(values, skipped):
                    unsaved.setdefault(f"{frag}.{what}", None)
            tensors[frag] = encoded
            described[frag] = {
                "replicas": len(replicas),
                "stepping": frag in state.stepping,
                "saved": saved_names,
                "recreated_by_init": recreated,
            }
        buffer = io.BytesIO()
        torch.save({"format": FORMAT, "version": VERSION, "fragments": tensors}, buffer)
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "iteration": state.iteration,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "torch": torch.__version__,
            "policy": policy.to_dict(),
            "fragments": described,
            "cells": _cells(fdg),
        }
        _write(tmp / "state.pt", buffer.getvalue())
        _write(tmp / "manifest.json", json.dumps(manifest, indent=1).encode())
        _fsync_dir(tmp)
        final = root / name
        if final.exists():  # the same iteration again (a re-run): replace it whole
            shutil.rmtree(final)
        os.replace(tmp, final)
        _write_atomic(root / LATEST, name.encode())
        _fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if keep is not None:
        _prune(root, keep, protect=name)
    if unsaved and warn is not None:
        warn(unsaved_message(list(unsaved)))
    return final


def unsaved_message(names: list[str]) -> str:
    """What a run says (once) when its checkpoints leave out state that holds data.

    >>> print(unsaved_message(["learner.buffer (a __main__.Buffer)"]))  # doctest: +ELLIPSIS
    checkpoints do not save learner.buffer (a __main__.Buffer): a resume builds it again with its fragment's init cell, ...
    """
    one = len(names) == 1
    return (
        f"checkpoints do not save {', '.join(names)}: a resume builds {'it' if one else 'them'} "
        f"again with {'its' if one else 'their'} fragment's init cell, without what {'it' if one else 'they'} "
        "held. To save one, give its class state_dict() and load_state_dict(), or keep its data in "
        "arrays, numbers, lists or dicts (an object whose attributes are only such values is saved "
        'by them; see docs/reliability.md, "What is saved").'
    )


def load_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Load the newest complete checkpoint in ``path`` (or the one ``path`` names)."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}: the path does not exist.")
    target = path if (path / "manifest.json").exists() else _newest(path)
    try:
        return _read(target)
    except CheckpointError as exc:
        raise CheckpointError(f"{exc}{_earlier(target)}") from None


def _damaged(file: Path, exc: BaseException) -> CheckpointError:
    """The error for a checkpoint file that does not load, naming the file inside."""
    return CheckpointError(
        f"checkpoint {file.parent} cannot be read ({file.name}: {type(exc).__name__}: "
        f"{_gist(exc)}): its {file.name} is damaged, or holds what workbench never "
        "writes (nothing in it was run)."
    )


def _read(target: Path) -> Checkpoint:
    """Load one checkpoint directory; its errors say nothing of the others, and name the
    file inside (``manifest.json`` or ``state.pt``) that does not load."""
    import torch

    manifest = _read_manifest(target / "manifest.json")
    try:
        data = torch.load(target / "state.pt", weights_only=True, map_location="cpu")
    except Exception as exc:
        raise _damaged(target / "state.pt", exc) from None
    _check_data(target / "state.pt", data, manifest)
    fragments = {frag: [PortableState(values) for values in replicas] for frag, replicas in data["fragments"].items()}
    stepping = frozenset(f for f, d in manifest["fragments"].items() if d["stepping"])
    state = RunState(int(manifest["iteration"]), fragments, stepping)
    return Checkpoint(target, state.iteration, state, manifest)


def _read_manifest(file: Path) -> dict:
    try:
        manifest = json.loads(file.read_text())
    except Exception as exc:  # not JSON, not UTF-8, unreadable
        raise _damaged(file, exc) from None
    _check_manifest(file, manifest)
    return manifest


def _intact(path: Path) -> bool:
    """Whether a complete checkpoint looks loadable, cheaply (what pruning asks, at every
    save): the manifest passes :func:`_read`'s checks, and ``state.pt`` is a whole zip
    archive (its central directory is read, every member lies inside the file, and the
    small pickle that indexes the tensors reads with a good CRC). The tensors' bytes are
    neither read nor unpickled, so a big state costs no more than a small one."""
    import zipfile

    try:
        _read_manifest(path / "manifest.json")
        state = path / "state.pt"
        size = state.stat().st_size
        with zipfile.ZipFile(state) as archive:
            members = archive.infolist()
            if any(m.header_offset + m.compress_size > size for m in members):
                return False
            pickles = [m for m in members if m.filename.endswith("/data.pkl") or m.filename == "data.pkl"]
            if len(pickles) != 1:
                return False
            archive.read(pickles[0])  # raises BadZipFile on a CRC mismatch
        return True
    except Exception:
        return False


def _gist(exc: BaseException) -> str:
    """The line of an error that says what is wrong (torch's unpickling errors are long).
    torch's advice to retry with ``weights_only=False`` is left out: that would run
    whatever the file holds, and does not mend a corrupt file either."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        if line.startswith("WeightsUnpickler error"):
            return line
    lines = [line for line in lines if "weights_only" not in line]
    return lines[0] if lines else "the file is damaged or not a checkpoint's state"


def _earlier(target: Path) -> str:
    """What to try instead of an unreadable checkpoint: the earlier ones that do load (each
    is tried), or the plain fact that none does."""
    root = target.parent
    others = sorted((p for p in root.glob("iteration-*") if p != target and _complete(p)), reverse=True)
    loading = []
    for other in others:
        try:
            _read(other)
        except Exception:  # damaged too: not worth naming as a way out
            continue
        loading.append(other.name)
    if loading:
        return (
            f" Earlier checkpoints in {root} that load: {', '.join(loading)}; resume from one "
            f"by passing its directory ({root / loading[0]})."
        )
    if others:
        return f" The earlier checkpoints in {root} ({', '.join(p.name for p in others)}) cannot be read either."
    return f" There is no earlier checkpoint in {root}."


#: the manifest's fields: (type, what it must be) — checked before any is used, so a file
#: edited by hand fails naming the file and the field, not as an AttributeError
_MANIFEST_FIELDS = {
    "format": (str, f"the string {FORMAT!r}"),
    "version": (int, "a whole number"),
    "iteration": (int, "a whole number ≥ 0"),
    "policy": (dict, "an object (the policy's JSON)"),
    "fragments": (dict, 'an object: fragment name → {"replicas": N, "stepping": true|false, …}'),
    "cells": (list, 'a list of {"fragment": …, "rate": …, "code": …}'),
}


def _check_manifest(file: Path, manifest: Any) -> None:
    """Raise :class:`CheckpointError` naming ``file`` and the field that has a wrong type."""

    def bad(field: str, what: str, got: Any) -> CheckpointError:
        return CheckpointError(
            f"checkpoint manifest {file}: {field} must be {what}, got "
            f"{type(got).__name__} {got!r:.60}. The file was changed or damaged."
        )

    if not isinstance(manifest, dict):
        raise bad("the manifest", "a JSON object", manifest)
    if manifest.get("format") != FORMAT:
        raise CheckpointError(f"{file.parent} is not a workbench checkpoint (its manifest has no format {FORMAT!r}).")
    version = manifest.get("version", 0)
    if isinstance(version, int) and version > VERSION:
        raise CheckpointError(
            f"{file.parent} was written by a newer workbench (format version "
            f"{version}; this one reads ≤ {VERSION}). Upgrade workbench."
        )
    for field, (kind, what) in _MANIFEST_FIELDS.items():
        value = manifest.get(field)
        if not isinstance(value, kind) or isinstance(value, bool) or (field == "iteration" and value < 0):
            raise bad(repr(field), what, value)
    for frag, described in manifest["fragments"].items():
        if not isinstance(described, dict) or not isinstance(described.get("stepping"), bool):
            raise bad(f"fragments[{frag!r}]", 'an object with "stepping": true or false', described)
    for i, cell in enumerate(manifest["cells"]):
        if not isinstance(cell, dict) or not all(isinstance(cell.get(k), str) for k in ("fragment", "rate", "code")):
            raise bad(f"cells[{i}]", 'an object with string "fragment", "rate" and "code"', cell)


def _check_data(file: Path, data: Any, manifest: dict) -> None:
    """``state.pt``'s layout: fragment → list of per-replica dicts, the manifest's fragments."""
    fragments = data.get("fragments") if isinstance(data, dict) else None
    if not isinstance(fragments, dict) or not all(
        isinstance(r, list) and all(isinstance(v, dict) for v in r) for r in fragments.values()
    ):
        raise CheckpointError(
            f"checkpoint state {file} does not hold fragment states (fragment → a "
            f"list of one dict per replica). The file was changed or damaged."
        )
    if set(fragments) != set(manifest["fragments"]):
        raise CheckpointError(
            f"checkpoint {file.parent}: state.pt holds fragments "
            f"{', '.join(sorted(fragments)) or 'none'} but manifest.json lists "
            f"{', '.join(sorted(manifest['fragments'])) or 'none'}: the two files do "
            f"not belong together."
        )


def _portable(values: Any) -> tuple[PortableState, list[str]]:
    if isinstance(values, PortableState):  # resumed from a checkpoint and not yet run
        return PortableState((k, v) for k, v in values.items() if k != EDITED_KEY), []
    return encode_state(values)


def _cells(fdg) -> list[dict]:
    cells = []
    for frag in fdg.fragments.values():
        for rate, cell in frag.cells.items():
            cells.append(
                {
                    "fragment": frag.name,
                    "rate": rate,
                    "code": cell.code,
                    "replicas": frag.replicas,
                    "device": frag.device,
                    "reads": list(cell.declared_reads),
                    "writes": list(cell.declared_writes),
                }
            )
    return cells


def _newest(root: Path) -> Path:
    pointer = root / LATEST
    if pointer.exists():
        candidate = root / pointer.read_text().strip()
        if _complete(candidate):
            return candidate
    complete = sorted(p for p in root.glob("iteration-*") if _complete(p))
    if not complete:
        raise CheckpointError(
            f"no complete checkpoint in {root} (a checkpoint directory holds "
            f"iteration-NNNNNN/ folders with manifest.json and state.pt)."
        )
    return complete[-1]


def newest_loadable(root: str | os.PathLike) -> Path | None:
    """The newest checkpoint in ``root`` that looks loadable (:func:`_intact`), or None."""
    root = Path(root)
    done = sorted((p for p in root.glob("iteration-*") if _complete(p)), reverse=True)
    return next((p for p in done if _intact(p)), None)


def _complete(path: Path) -> bool:
    return (path / "manifest.json").is_file() and (path / "state.pt").is_file()


def _prune(root: Path, keep: int, protect: str) -> None:
    """Leave the newest ``keep`` checkpoints that load (and ``protect``, just written).
    One that does not load (:func:`_intact`) is not counted, so it never costs a loadable
    one its place; it stays while it is newer than the oldest one kept (to be looked at,
    or replaced when its iteration is written again) and goes with the old ones after."""
    done = sorted(p for p in root.glob("iteration-*") if _complete(p))
    loadable = [p for p in done if p.name == protect or _intact(p)]
    kept = loadable[-keep:] if keep > 0 else []
    oldest = kept[0].name if kept else None
    for old in done:
        if old.name != protect and old not in kept and (oldest is None or old.name < oldest):
            shutil.rmtree(old, ignore_errors=True)
    for tmp in root.glob(".tmp-*"):  # left by a crash mid-write (one writer at a time)
        shutil.rmtree(tmp, ignore_errors=True)


def _write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    _write(tmp, data)
    os.replace(tmp, path)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # platforms without directory fds: the rename is still atomic
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
