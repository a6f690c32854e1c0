"""Wheels for `bench_llm_rl.py` on a GPU host with no registry, in carries that fit.

A device call carries at most 64 MiB. workbench's side of the LLM benchmark (Dask, Jupyter's
pieces, transformers) and TRL's side (transformers, TRL, accelerate, datasets and pyarrow,
a 55 MB wheel) do not fit in one, so they are built as two wheel folders, each for one
call, and the benchmark runs its sides apart (``--only``, ``--json``, then ``--merge``)::

    pip install -e ".[bench]"                                    # here: the versions to carry
    python -m benchmarks llm_wheels --workbench .whl-llm --trl .whl-trl --python-version 3.12
    # call 1 (carry .whl-llm and the code), there:
    python3 -m benchmarks bench_llm_rl --wheels ../.whl-llm --device cuda --size 100m \
        --only workbench --json $OUT/wb.json
    # call 2 (carry .whl-trl and the code): the same with --wheels ../.whl-trl --only trl
    python -m benchmarks bench_llm_rl --merge trl.json wb.json    # here, the table

``--both DIR`` is the two sides in one folder that fits one call (~46 MiB), for the device
check's ``llm_both`` part (both sides in one process, one warm start a seed): it leaves out
what TRL's side can take from the accelerator image (`FROM_THE_IMAGE`: pyarrow above all),
so it works where the image's pyarrow is one datasets accepts (the check's ``facts`` part
prints its version); where it is not, TRL's side stops at ``import datasets`` and the two
folders above are the way.

What a host image already has (torch, NumPy, pandas…: `device_wheels.HOST_HAS`) is never
carried. pyarrow is carried without the parts datasets never loads (Arrow Flight, the S3
filesystem, C++ tests and headers: 55 → ~35 MB); `--check` loads the trimmed pyarrow the way
datasets does, here, from a build for this machine's Python.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from benchmarks import device_wheels, harness

#: what each side imports (their installed closures are carried)
SIDES = {"workbench": ["transformers"], "trl": ["transformers", "trl", "accelerate", "datasets"]}
#: pyarrow's files that datasets never loads
PYARROW_UNUSED = (
    "libarrow_flight",
    "libarrow_python_flight",
    "_flight.",
    "libarrow_s3",
    "_s3fs.",
    "_pyarrow_cpp_tests",
    "pyarrow/include/",
    "pyarrow/tests/",
    "pyarrow/src/",
)


#: what TRL's side needs that the accelerator image had on 2026-11-17 (/work/.library's KINDS.md)
FROM_THE_IMAGE = ("pyarrow", "accelerate", "xxhash")


def both_names() -> list[str]:
    """Both sides' distributions for one folder, less what TRL's side takes from the image."""
    return sorted((set(side_names("workbench")) | set(side_names("trl"))) - set(FROM_THE_IMAGE))


def side_names(side: str) -> list[str]:
    """The distributions a side needs that a host image lacks: the installed closure of its
    packages' declared requirements (optional imports such as boto3 are guarded by the
    libraries and left out)."""
    names = device_wheels._closure(SIDES[side])
    return [n for n in device_wheels.carried(names) if n not in ("hf-xet", "workbench-rl")]


def trim_pyarrow(wheel: Path) -> Path:
    """The wheel without `PYARROW_UNUSED` (its RECORD rewritten to match), in place."""
    out = wheel.with_suffix(".trimmed")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            if any(part in item.filename for part in PYARROW_UNUSED):
                continue
            data = src.read(item)
            if item.filename.endswith(".dist-info/RECORD"):
                data = (
                    "\n".join(
                        line for line in data.decode().splitlines() if not any(part in line for part in PYARROW_UNUSED)
                    ).encode()
                    + b"\n"
                )
            dst.writestr(item, data)
    out.replace(wheel)
    return wheel


def download(names: list[str], directory: str, python_version: str) -> None:
    """`device_wheels.download_pinned`, then pyarrow trimmed (`trim_pyarrow`), and the size."""
    pins = device_wheels.download_pinned(names, directory, python_version)
    for wheel in Path(directory).glob("pyarrow-*.whl"):
        trim_pyarrow(wheel)
    size = sum(p.stat().st_size for p in Path(directory).glob("*.whl")) / 2**20
    print(f"{directory}: {len(pins)} wheels, {size:.1f} MiB (a call carries 64 MiB in all)")


def check_trimmed() -> None:
    """pyarrow trimmed as above, for this Python, loaded as datasets loads it."""
    with tempfile.TemporaryDirectory() as tmp:
        download(["pyarrow"], tmp, f"{sys.version_info.major}.{sys.version_info.minor}")
        target = Path(tmp, "site-packages")  # as device_wheels.install_wheels installs
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--target",
                str(target),
                *map(str, Path(tmp).glob("*.whl")),
            ],
            check=True,
        )
        code = (
            "import pyarrow, datasets; assert pyarrow.__file__.startswith(%r); "
            "d = datasets.Dataset.from_dict({'prompt': ['1+1=', '2+2=']}); "
            "print('trimmed pyarrow', pyarrow.__version__, 'loads datasets:', d)" % str(target)
        )
        subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": str(target)})


def main() -> None:
    parser = harness.parser(__doc__, json_output=False)
    parser.add_argument("--workbench", metavar="DIR", help="the workbench side's wheels (with workbench's own)")
    parser.add_argument("--trl", metavar="DIR", help="TRL's side's wheels")
    parser.add_argument("--both", metavar="DIR", help="both sides in one folder (pyarrow from the image)")
    parser.add_argument("--python-version", default="3.12")
    parser.add_argument("--check", action="store_true", help="load a trimmed pyarrow here with datasets")
    options = parser.parse_args()
    if options.check:
        check_trimmed()
    if options.workbench:
        device_wheels.download_wheels(options.workbench, options.python_version)
        download(side_names("workbench"), options.workbench, options.python_version)
    if options.trl:
        download(side_names("trl"), options.trl, options.python_version)
    if options.both:
        device_wheels.download_wheels(options.both, options.python_version)
        download(both_names(), options.both, options.python_version)


if __name__ == "__main__":
    main()
