"""What the device check (``device_check.py``) picks on an accelerator host: the test files
its ``tests`` part runs, found by their text (collecting the whole suite would need its
every extra, which such a host does not have), and the package versions its ``facts`` part
lists.
"""

from __future__ import annotations

import re

from benchmarks.harness import ROOT

__all__ = ["gpu_test_files", "gpu_aware_test_files", "package_versions"]


#: how a test module says it needs a GPU: the marker, or tests.gpu's ON_GPU / ON_TORCH_GPU
GPU_MARKED = re.compile(r"mark\.gpu\b|\bON_(?:TORCH_)?GPU\b")


def _test_files_saying(pattern: re.Pattern) -> list[str]:
    """The test files whose text matches ``pattern``, relative to the repository."""
    return sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py") if pattern.search(p.read_text())
    )


def gpu_test_files() -> list[str]:
    """The test files that hold gpu-marked tests, found by their text: collecting the whole
    suite would need its every extra, which an accelerator host does not have."""
    return _test_files_saying(GPU_MARKED)


#: how a CPU test finds out whether its host has a GPU (such a test behaves otherwise on one)
GPU_AWARE = re.compile(r"host_gpus|gpu_available|cuda_usable|cuda\.is_available")


def gpu_aware_test_files() -> list[str]:
    """The test files whose CPU tests look for a GPU (issue 27: two of them once failed on a
    GPU host, asserting there was none)."""
    return _test_files_saying(GPU_AWARE)


#: packages whose versions decide what a session must carry (llm_wheels.py): the LLM sides' and
#: what TRL's side would take from the image if it has them (pyarrow is its biggest wheel)
PACKAGES = (
    "dask",
    "distributed",
    "transformers",
    "tokenizers",
    "peft",
    "trl",
    "accelerate",
    "datasets",
    "pyarrow",
    "dask-cuda",
)


def package_versions(names=PACKAGES) -> str:
    """``name version`` of each, where this Python finds it (wheels carried onto the path
    included), else ``name -``.

        >>> package_versions(("numpy", "no-such-package")).split(", ")[1]
        'no-such-package -'
    """
    from importlib import metadata

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "-"

    return ", ".join(f"{name} {version(name)}" for name in names)
