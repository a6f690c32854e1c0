"""The wheels an accelerator host with no package registry needs, and their private install
(`device_check.py --download-wheels` / `--wheels`, `llm_wheels.py`, `bench_llm_rl.py
--wheels`).

    python -m benchmarks device_check --download-wheels .whl --python-version 3.12   # here
    python -m benchmarks device_check --wheels .whl                                  # there

``install_wheels`` puts every wheel of a folder (no index, no dependency resolution) into a
private ``site-packages``; ``rerun_with_wheels`` runs a script again with it on the path.
Nothing is installed into the host's Python.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import ROOT

#: what an accelerator image is expected to have already (never carried as wheels)
HOST_HAS = {
    "torch",
    "numpy",
    "cupy",
    "triton",
    "pandas",
    "psutil",
    "msgpack",
    "pyyaml",
    "jinja2",
    "markupsafe",
    "cloudpickle",
    "toolz",
    "sortedcontainers",
    "tqdm",
    "packaging",
    "pytest",
    "contourpy",
    "pillow",
    "typing-extensions",
    "urllib3",
    "pygments",
    "python-dateutil",
    "six",
    "tzdata",
    "pytz",
    "filelock",
    "fsspec",
    "sympy",
    "mpmath",
    "networkx",
    "setuptools",
    "click",
    "zipp",
    "pluggy",
    "iniconfig",
    "attrs",
    "certifi",
    "idna",
    "requests",
    "charset-normalizer",
}
#: workbench's requirements the check leaves out: it runs no notebook server
NOT_NEEDED = {"jupyterlab"}


# ----------------------------------------------------------------------------- wheels
def _closure(names) -> set[str]:
    """The installed distributions ``names`` need, transitively (extras left out)."""
    import re
    from importlib import metadata

    seen, todo = set(), [n.lower() for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in HOST_HAS:  # the image's own: what it needs came with it (torch 2.13's cuda-toolkit…)
            continue
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        for req in requires:
            if "extra ==" in req:
                continue
            if ";" in req and not _marker_holds(req.split(";", 1)[1]):
                continue
            todo.append(re.split(r"[\s;<>=!~\[(]", req, maxsplit=1)[0].lower().replace("_", "-"))
    return seen


def _marker_holds(marker: str) -> bool:
    try:
        from packaging.markers import Marker

        return Marker(marker).evaluate()
    except Exception:  # noqa: BLE001  (an unreadable marker: keep the requirement)
        return True


def download_wheels(directory: str, python_version: str) -> None:
    """Download, as wheels for ``python_version`` on manylinux x86-64, every installed
    distribution the check needs that an accelerator image does not have (`HOST_HAS`), at
    the versions installed here."""
    import re
    from importlib import metadata

    core = [
        re.split(r"[\s;<>=!~\[(]", r, maxsplit=1)[0]
        for r in metadata.requires("workbench-rl") or []
        if "extra ==" not in r
    ]
    download_pinned(
        carried(_closure([c for c in core if c.lower() not in NOT_NEEDED])) + list(FOR_THE_GPU_TESTS),
        directory,
        python_version,
    )


#: what the GPU tests use that workbench does not need: dask-cuda (its LocalCUDACluster tests,
#: tests/gpu/test_dask_cuda.py, skip without it). 26.10.0 imports with distributed 2026.8 given
#: cuda-core and nvidia-ml-py, which the image has; workbench imports it only where asked to.
FOR_THE_GPU_TESTS = ("dask-cuda==26.10.0",)


#: distributions of the GPU stack an accelerator image brings with its torch and CuPy
IMAGE_PREFIXES = ("nvidia-", "cuda-", "cupy", "torch", "triton")


def carried(names) -> list[str]:
    """Of ``names``, those to carry as wheels: not the image's (`HOST_HAS`, the GPU stack).

    >>> carried(["torch", "cuda-bindings", "nvidia-nccl-cu13", "dask", "numpy"])
    ['dask']
    """
    return sorted(n for n in names if n not in HOST_HAS and not n.startswith(IMAGE_PREFIXES))


def download_pinned(names: list[str], directory: str, python_version: str) -> list[str]:
    """Wheels of ``names`` for ``python_version`` on manylinux x86-64 into ``directory``,
    at the versions installed here (the newest where that version has no such wheel);
    returns the pins."""
    from importlib import metadata

    pins = []
    for name in names:
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pins.append(name)
    platforms = [
        f"--platform={p}"
        for p in (
            "manylinux_2_28_x86_64",
            "manylinux_2_27_x86_64",
            "manylinux_2_17_x86_64",
            "manylinux2014_x86_64",
            "manylinux1_x86_64",
            "any",
        )
    ]
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        f"--python-version={python_version}",
        "--implementation=cp",
        *platforms,
        "-d",
        directory,
    ]
    print(f"downloading {len(pins)} wheels for Python {python_version} into {directory}", flush=True)
    for pin in pins:  # one at a time: a version with no wheel for that Python falls back to the newest
        if subprocess.run(command + [pin], capture_output=True).returncode != 0:
            subprocess.run(command + [pin.split("==")[0]], check=True, capture_output=True)
    print(f"done: {', '.join(pins)}")
    return pins


def install_wheels(directory: str) -> str:
    """Install every wheel in ``directory`` into a private folder; returns the folder."""
    # a folder named site-packages: dill (datasets' fingerprints, TRL's side) pickles the
    # classes of modules from any other path by value, and pyarrow's cannot be
    target = str(Path(tempfile.mkdtemp(prefix="workbench-wheels-"), "site-packages"))
    wheels = sorted(str(p) for p in Path(directory).glob("*.whl"))
    if not wheels:
        raise SystemExit(f"--wheels {directory}: no .whl files there (build them with --download-wheels)")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--disable-pip-version-check",
            "--target",
            target,
            *wheels,
        ],
        check=True,
    )
    return target


def rerun_with_wheels(module: str, argv: list[str]) -> None:
    """For a benchmark run as ``python -m MODULE --wheels DIR …``: install DIR's wheels
    (`install_wheels`) and run ``MODULE …`` again with them and the repository on its path
    (never returns)."""
    at = argv.index("--wheels")
    target = install_wheels(argv[at + 1])
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([target, str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    )
    os.execve(sys.executable, [sys.executable, "-m", module, *argv[1:at], *argv[at + 2 :]], env)
