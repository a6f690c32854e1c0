"""Clips of the agent while a run trains (``--video-every N``): which states become clips, and
the low-priority process that plays and encodes them.

Every ``N`` iterations the replicas send the driver their whole state, as for a checkpoint
(a full snapshot, :mod:`workbench.runtime.state.snapshots`). :class:`ClipMaker` hands each to
a child process (``python -m workbench.training_clips``) that plays one greedy episode from it
with rendering envs (:func:`workbench.evaluation.player.play`) and encodes it
(:class:`~workbench.evaluation.video.Video`; a small GIF too, for TensorBoard). The child runs
at the lowest CPU priority with one thread: it takes what training leaves of the cores, and
being a process of its own it never holds the training's GIL, random streams or torch
threads, so a run trains the same with clips as without. A clip still being made when the
next is due makes the run skip that one (the run's notes count them at the end): clips never
queue up behind training, so their cost stays bounded however slow a frame is to draw. The
child starts with the run (its imports are done by the first clip) and ends after it; the
end of the run waits up to :data:`FINISH_WAIT_S` for the clip being made (training is over:
the cores are free), so it is in ``run.clips`` and TensorBoard when the run returns.
Wire format, both ways: an 8-byte big-endian length, then a pickle (cloudpickle for jobs:
the fragments' notebook names may be the notebook's own classes and functions).

    >>> decision = ClipSchedule(every=50)
    >>> [decision.due(i) for i in (0, 49, 50, 100)]
    [False, False, True, True]
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import queue
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable

__all__ = ["Clip", "ClipMaker", "ClipSchedule", "MAX_CLIP_FRAMES"]

#: a clip draws at most this many frames (5 s at 50 fps; the episode still ends): drawing is
#: most of a clip's cost, and a shorter clip comes more often
MAX_CLIP_FRAMES = 250
#: how long the end of a run waits for the clip being made (one that takes longer is still
#: added to ``run.clips`` when done: :meth:`Run.wait_for_clips`)
FINISH_WAIT_S = 30.0
_LENGTH = struct.Struct(">Q")


@dataclasses.dataclass(frozen=True)
class ClipSchedule:
    """Which iterations a run's clips are played from: every ``every``-th, from ``every``
    on (iteration 0 is an untrained agent)."""

    every: int

    def due(self, iteration: int) -> bool:
        return iteration > 0 and iteration % self.every == 0


@dataclasses.dataclass(frozen=True)
class Clip:
    """One clip of the agent: the state after ``iteration`` iterations (``env_steps`` of
    them), played for one episode. ``video`` is shown inline in a notebook; ``gif`` (a
    smaller, slower-frame copy, when asked for) is what TensorBoard shows; ``seconds``: how
    long the child took, at its low priority."""

    iteration: int
    env_steps: int
    video: Any  # workbench.evaluation.video.Video; its ``result`` is the episode's evaluation
    gif: bytes | None
    gif_size: tuple[int, int] | None
    seconds: float

    @property
    def result(self):
        return self.video.result

    def caption(self) -> str:
        ret = self.result.returns[0] if self.result is not None and self.result.returns else None
        said = f" · return {ret:.0f}" if ret is not None else ""
        return f"iteration {self.iteration:,} · {self.env_steps:,} env steps{said}"

    def _repr_html_(self) -> str:
        return self.video.to_html()

    def __repr__(self) -> str:
        return f"<Clip {self.caption()}: {self.video!r}>"


@dataclasses.dataclass(frozen=True)
class _Job:
    iteration: int
    fragments: list  # the stretch's Fragment objects
    namespace: dict[str, Any]  # the notebook names the fragments read
    #: per replica group, its fragments and its first replica's pickled snapshot
    groups: dict[str, tuple[tuple[str, ...], bytes]]
    stepping: frozenset[str]
    fps: float
    gif: bool


class ClipMaker:
    """Turns the run's due full snapshots into :class:`Clip` s, one at a time, in a child
    process; ``on_clip(clip)`` is called (in this object's thread) for each."""

    def __init__(self, every: int, on_clip: Callable[[Clip], None], *, fps: float = 50, gif: bool = False) -> None:
        self.schedule = ClipSchedule(every)
        self.on_clip, self.fps, self.gif = on_clip, fps, gif
        self.made = 0
        #: clips that were due while the one before was still being made
        self.skipped = 0
        #: why a clip could not be made (the first few; the run goes on)
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._busy = False
        self._broken = False
        self._jobs: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._child: subprocess.Popen | None = None
        self._stderr = None

    @property
    def every(self) -> int:
        return self.schedule.every

    def start(self) -> None:
        """Start the child now, so that its imports are done by the first clip."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="workbench-clips", daemon=True)
            self._thread.start()

    def stretch(self, plan, namespace) -> Callable:
        """The ``on_snapshot`` hook for one stretch of the run (``plan`` placed, ``namespace``
        the notebook values it deployed with). Called in whichever thread filed the last
        snapshot: it only hands the bytes on."""
        fragments = list(plan.fdg.fragments.values())
        needed = {n: namespace[n] for n in plan.fdg.notebook_names() if n in namespace}
        stepping = frozenset(n for n, f in plan.fdg.fragments.items() if "step" in f.cells)
        groups = {name: tuple(group.fragments) for name, group in plan.groups.items()}

        def on_snapshot(iteration: int, pickled) -> None:
            if not pickled.full or not self.schedule.due(iteration) or self._broken:
                return
            with self._lock:
                if self._busy:
                    self.skipped += 1
                    return
                self._busy = True
            firsts = {name: (frags, pickled[(name, 0)]) for name, frags in groups.items()}
            self._jobs.put(_Job(iteration, fragments, needed, firsts, stepping, self.fps, self.gif))

        return on_snapshot

    def notes(self) -> list[tuple[str, str]]:
        """What the run's notes say of its clips at the end (nothing when all went well)."""
        out = []
        if self.skipped:
            out.append(
                (
                    "clips skipped",
                    f"{self.skipped} clip(s) skipped: each was due while the one before was "
                    f"still being made (clips are made at the lowest CPU priority, from what training leaves "
                    f"of the cores); a larger --video-every than {self.every} makes every one",
                )
            )
        if self.failures:
            out.append(("clip failed", f"no clip could be made: {self.failures[0]}"))
        return out

    # -- the sending thread and the child ----------------------------------------------------
    def _spawn(self) -> subprocess.Popen:
        env = dict(os.environ)
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[var] = "1"
        if not env.get("DISPLAY"):  # no screen: draw offscreen
            env.setdefault("SDL_VIDEODRIVER", "dummy")
            env.setdefault("MUJOCO_GL", "egl")
        self._stderr = tempfile.TemporaryFile()
        child = subprocess.Popen(
            [sys.executable, "-m", "workbench.training_clips"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        try:
            os.setpriority(os.PRIO_PROCESS, child.pid, 19)  # after training, never before it
        except (AttributeError, OSError):  # no setpriority (Windows): it still runs apart
            pass
        return child

    def _work(self) -> None:
        try:
            try:
                self._child = self._spawn()
            except Exception as exc:  # noqa: BLE001 — said in the run's notes; training goes on
                self.failures.append(f"the clip process did not start: {type(exc).__name__}: {exc}")
                self._broken = True  # no clip can be made: none is queued
                return
            while True:
                job = self._jobs.get()
                if job is None:
                    return
                try:
                    self._one(job)
                except BaseException as exc:  # noqa: BLE001 — a clip must never end the run
                    self.failures.append(f"{type(exc).__name__}: {exc}")
                finally:
                    with self._lock:
                        self._busy = False
        finally:
            self._end_child()

    def _one(self, job: _Job) -> None:
        import cloudpickle

        from workbench.evaluation.video import Video

        if self._child.poll() is not None:  # it died making the last one: a fresh one
            self._child = self._spawn()
        started = time.perf_counter()
        try:
            _send(self._child.stdin, cloudpickle.dumps(job))
            reply = pickle.loads(_receive(self._child.stdout))
        except (OSError, EOFError) as exc:
            raise RuntimeError(f"the clip process ended ({self._child.poll()}): {self._stderr_tail()}") from exc
        if "error" in reply:
            raise RuntimeError(reply["error"])
        video = Video(reply["data"], reply["mime"], reply["frames"], job.fps, reply["size"], reply["result"])
        clip = Clip(
            job.iteration,
            reply["env_steps"],
            video,
            reply.get("gif"),
            reply.get("gif_size"),
            time.perf_counter() - started,
        )
        self.made += 1
        self.on_clip(clip)

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-600:].strip()

    def close(self, wait: float = FINISH_WAIT_S) -> None:
        """The run ended: no clip is due any more; the one being made is finished (waited for
        up to ``wait`` seconds, else added when done), then the child ends."""
        with self._lock:
            self._busy = True  # a snapshot filed from here on makes no clip
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join(wait)

    def join(self, timeout: float | None = None) -> None:
        """Wait until the clip being made is added and the child has ended."""
        if self._thread is not None:
            self._thread.join(timeout)

    def _end_child(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            try:
                child.stdin.close()  # the child ends at the end of its input
                child.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                child.kill()
                child.wait()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


def _send(stream, data: bytes) -> None:
    stream.write(_LENGTH.pack(len(data)))
    stream.write(data)
    stream.flush()


def _receive(stream) -> bytes:
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        raise EOFError("no reply")
    (size,) = _LENGTH.unpack(head)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("a cut reply")
    return data


# -- the child's side ------------------------------------------------------------------------
def _make(job: _Job) -> dict[str, Any]:
    """Play and encode one clip (in the child)."""
    import numpy as np

    from workbench.evaluation.player import play
    from workbench.evaluation.video import encode
    from workbench.run_store.record import KeptGraph
    from workbench.runtime.state.replica_state import RunState
    from workbench.runtime.state.run import Run

    fragments: dict[str, list] = {}
    for frags, data in job.groups.values():
        values = pickle.loads(data)
        fragments.update({f: [values[f]] for f in frags if f in values})
    state = RunState(job.iteration, fragments, job.stepping)
    run = Run("clip", job.iteration, 1)
    run.fdg, run.status = KeptGraph(job.fragments, job.namespace), "finished"
    played = play(run, 1, render=True, state=state, max_frames=MAX_CLIP_FRAMES)
    data, mime = encode(played.frames, job.fps)
    first = played.frames[0]
    reply = {
        "data": data,
        "mime": mime,
        "frames": len(played.frames),
        "size": (int(first.shape[1]) // 2 * 2, int(first.shape[0]) // 2 * 2),
        "result": played.result,
        "env_steps": state.env_steps,
    }
    if job.gif:  # TensorBoard's: half the size, every other frame
        import imageio.v3 as iio

        small = np.stack([np.asarray(f)[::2, ::2, :3] for f in played.frames[::2]])
        reply["gif"] = iio.imwrite("<bytes>", small, extension=".gif", duration=2000 / job.fps, loop=0)
        reply["gif_size"] = (int(small.shape[2]), int(small.shape[1]))
    return reply


def serve() -> None:
    """The child: one job in, one reply out, until its input ends."""
    import torch

    torch.set_num_threads(1)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a cell's print must not land in the replies
    while True:
        try:
            job = pickle.loads(_receive(stdin))
        except EOFError:
            return
        try:
            reply = _make(job)
        except BaseException as exc:  # noqa: BLE001 — said to the run, which goes on
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        _send(stdout, pickle.dumps(reply))


if __name__ == "__main__":
    serve()
