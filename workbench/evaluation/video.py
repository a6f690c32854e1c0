"""Frames → a video a notebook shows inline: an HTML5 ``<video>`` holding an H.264 mp4
(through imageio-ffmpeg, the ``video`` extra), or an animated GIF where it is missing.

    >>> import numpy as np
    >>> frames = np.zeros((4, 32, 48, 3), np.uint8)
    >>> video = Video.from_frames(frames, fps=25)
    >>> video.mime in ("video/mp4", "image/gif"), video.frames, video.size
    (True, 4, (48, 32))
"""

from __future__ import annotations

import base64
import html
import itertools
import os
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Video", "encode", "MP4_HINT"]

#: what gives the mp4 (``<video>``) instead of the GIF fallback
MP4_HINT = "pip install 'workbench-rl[video]' (imageio-ffmpeg)"


def _have_ffmpeg() -> bool:
    try:
        import imageio_ffmpeg  # noqa: F401  (ships its own ffmpeg binary)
    except ImportError:
        return False
    return True


def encode(frames, fps: float) -> tuple[bytes, str]:
    """``frames`` (``[H, W, 3]`` uint8 arrays, one after another) as (bytes, MIME type): an
    H.264 mp4 in yuv420p (what every browser plays), fed to ffmpeg a frame at a time (500
    CartPole frames would be 360 MB stacked), or a looping GIF without imageio-ffmpeg."""
    frames = iter(frames)
    first = next(frames)
    height, width = first.shape[0] // 2 * 2, first.shape[1] // 2 * 2  # yuv420p needs even sizes
    if _have_ffmpeg():
        import imageio_ffmpeg

        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "clip.mp4")
            writer = imageio_ffmpeg.write_frames(
                path,
                (width, height),
                fps=fps,
                codec="libx264",
                pix_fmt_out="yuv420p",
                macro_block_size=2,
                output_params=["-preset", "veryfast", "-movflags", "+faststart"],
            )
            writer.send(None)  # start ffmpeg
            try:
                for frame in itertools.chain([first], frames):
                    writer.send(np.ascontiguousarray(frame[:height, :width, :3]))
            finally:
                writer.close()
            with open(path, "rb") as clip:
                return clip.read(), "video/mp4"
    import imageio.v3 as iio

    stacked = np.stack([first, *frames])[..., :3]
    return iio.imwrite("<bytes>", stacked, extension=".gif", duration=1000 / fps, loop=0), "image/gif"


@dataclass(frozen=True)
class Video:
    """An encoded clip: shown inline in a notebook (``_repr_html_``), saved with ``save``.
    ``result``: the evaluation of the episodes it shows (``run.show()``'s)."""

    data: bytes
    mime: str
    frames: int
    fps: float
    size: tuple[int, int]  # (width, height)
    result: Any = None

    @classmethod
    def from_frames(cls, frames, fps: float = 50, result: Any = None) -> "Video":
        """Encode ``frames``: an ``[N, H, W, 3]`` array or a list of ``[H, W, 3]`` uint8 arrays."""
        frames = [np.asarray(f, dtype=np.uint8) for f in frames] if len(frames) else []
        if not frames or any(f.ndim != 3 or f.shape[-1] not in (3, 4) or f.shape != frames[0].shape for f in frames):
            shapes = sorted({f.shape for f in frames}) if frames else "none"
            raise ValueError(f"a video needs frames [N, H, W, 3] (N ≥ 1, all one size), got frames of shape {shapes}")
        data, mime = encode(frames, fps)
        return cls(data, mime, len(frames), fps, (int(frames[0].shape[1]), int(frames[0].shape[0])), result)

    @property
    def seconds(self) -> float:
        return self.frames / self.fps

    def data_uri(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"

    def save(self, path: str) -> str:
        """Write the clip (``.mp4`` or ``.gif``, as encoded) to ``path``; return it."""
        with open(path, "wb") as out:
            out.write(self.data)
        return path

    def to_html(self) -> str:
        width = self.size[0]
        if self.mime.startswith("video/"):
            player = f"<video controls autoplay loop muted playsinline width='{width}' src='{self.data_uri()}'></video>"
        else:
            player = f"<img width='{width}' src='{self.data_uri()}'/>"
        caption = f"{self.frames} frames, {self.seconds:.1f} s"
        if self.result is not None:
            caption += f" — {self.result.summary()}"
        return f"<figure style='margin:0'>{player}<figcaption>{html.escape(caption)}</figcaption></figure>"

    def _repr_html_(self) -> str:
        return self.to_html()

    def __repr__(self) -> str:
        kind = "mp4" if self.mime == "video/mp4" else "GIF"
        return (
            f"<Video {kind}, {self.frames} frames at {self.fps:g} fps, {self.size[0]}×{self.size[1]}, "
            f"{len(self.data):,} bytes>"
        )
