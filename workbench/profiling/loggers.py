"""Per-iteration metric loggers: ``log(row)`` with the run's flat row (CleanRL names),
``close()`` at the end. Pass them to ``fdg.run(..., loggers=[...])``. A logger may also
have ``event(kind, message, iteration, env_steps)``: the run calls it with what happened
to it (a lost worker's line, :mod:`workbench.runtime.engine.faults`).

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "m.csv")
    >>> with CSVLogger(path) as log:
    ...     log.log({"iteration": 0, "charts/SPS": 10.0})
    >>> open(path).read().splitlines()[0]
    'iteration,charts/SPS'
"""

from __future__ import annotations

import csv
import math
import numbers
import os
import time
from typing import Any

__all__ = ["CSVLogger", "TensorBoardLogger", "tensorboard_available"]


class _Logger:
    def log(self, row: dict[str, Any]) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def event(self, kind: str, message: str, iteration: int, env_steps: int) -> None:
        """Something that happened to the run (not a metric): ignored unless overridden."""

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class CSVLogger(_Logger):
    """One CSV line per iteration. Columns are the first row's names; a name that shows up
    later (a metric logged only now and then) rewrites the file with the widened header,
    so the file always parses with ``pandas.read_csv``."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        self.columns: list[str] = []
        self.rows: list[dict[str, Any]] = []
        self._file = open(self.path, "w", newline="")
        self._writer: csv.DictWriter | None = None

    def log(self, row: dict[str, Any]) -> None:
        self.rows.append(dict(row))
        new = [c for c in row if c not in self.columns]
        if new or self._writer is None:
            self.columns.extend(new)
            self._file.seek(0)
            self._file.truncate()
            self._writer = csv.DictWriter(self._file, self.columns, restval="")
            self._writer.writeheader()
            self._writer.writerows(self.rows)
        else:
            self._writer.writerow(row)
        self._file.flush()

    @property
    def events_path(self) -> str:
        """Where :meth:`event` writes: ``metrics.csv`` → ``metrics.events.csv``."""
        root, ext = os.path.splitext(self.path)
        return f"{root}.events{ext or '.csv'}"

    def event(self, kind: str, message: str, iteration: int, env_steps: int) -> None:
        """One line of ``events_path`` (time, iteration, env_steps, kind, message): events
        are text, so they get a file of their own beside the metrics' numbers."""
        fresh = not os.path.exists(self.events_path)
        with open(self.events_path, "a", newline="") as fh:
            writer = csv.writer(fh)
            if fresh:
                writer.writerow(["time", "iteration", "env_steps", "kind", "message"])
            writer.writerow([f"{time.time():.3f}", iteration, env_steps, kind, message])

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


def tensorboard_available() -> bool:
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except Exception:  # torch missing, or tensorboard not installed
        return False
    return True


class TensorBoardLogger(_Logger):
    """Every numeric value of a row as a scalar (tag = the flat name), at global step =
    the cumulative ``env_steps`` (CleanRL's convention; ``step="iteration"`` for the
    iteration). Needs ``torch`` and ``pip install tensorboard``."""

    def __init__(self, log_dir: str | os.PathLike, *, step: str = "env_steps") -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except Exception as exc:
            raise ImportError("TensorBoardLogger needs torch and tensorboard: pip install tensorboard") from exc
        self.log_dir = os.fspath(log_dir)
        self.step = step
        self.writer = SummaryWriter(log_dir=self.log_dir)

    def log(self, row: dict[str, Any]) -> None:
        step = int(row.get(self.step, row.get("iteration", 0)))
        for name, value in row.items():
            if name in ("iteration", self.step) and name != "env_steps":
                continue
            if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value):
                self.writer.add_scalar(name, float(value), step)
        self.writer.flush()

    def event(self, kind: str, message: str, iteration: int, env_steps: int) -> None:
        """A text entry under tag ``events/<kind>`` (TensorBoard's Text tab), at the step the
        rows use."""
        step = iteration if self.step == "iteration" else env_steps
        self.writer.add_text(f"events/{kind.replace(' ', '_')}", f"iteration {iteration}: {message}", step)
        self.writer.flush()

    #: clips come with a small GIF for this logger (TensorBoard shows animated GIFs, not mp4s)
    wants_gif = True

    def clip(self, clip) -> None:
        """A clip of the agent (``--video-every``): its GIF as an image summary under tag
        ``videos/agent`` (TensorBoard's Images tab plays it), at the step the rows use, and its
        mp4 in ``clips/`` beside the events."""
        step = clip.iteration if self.step == "iteration" else clip.env_steps
        if clip.gif is not None:
            from tensorboard.compat.proto.summary_pb2 import Summary

            width, height = clip.gif_size
            image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=clip.gif)
            # torch's add_video would need moviepy to make the GIF: the summary is written as add_image writes its own
            summary = Summary(value=[Summary.Value(tag="videos/agent", image=image)])
            self.writer._get_file_writer().add_summary(summary, step)
            self.writer.flush()
        folder = os.path.join(self.log_dir, "clips")
        os.makedirs(folder, exist_ok=True)
        suffix = ".mp4" if clip.video.mime == "video/mp4" else ".gif"
        clip.video.save(os.path.join(folder, f"iteration_{clip.iteration:07d}{suffix}"))

    def close(self) -> None:
        self.writer.close()
