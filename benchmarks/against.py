"""Run one benchmark on the working tree and on an older revision, interleaved.

A busy machine drifts over minutes, so "before" and "after" are taken in turns (before,
after, before, after, ...) rather than one after the other. The older revision is checked
out into a temporary git worktree; each run imports ``workbench`` from its own tree
(``PYTHONPATH``; the spawned Dask workers inherit it) and the benchmark, this checkout's,
from here (a revision from before a benchmark has no copy of it). The benchmark's own
output is printed as it comes, each block headed by its tree and turn; lines with
``--grep`` only.

    python -m benchmarks against d92a6e4 --repeats 2 --grep '^\\|' -- \\
        bench_policies --scaling --sizes 8 16 32 --policies coarse --no-bare --pairs 1
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import harness
from benchmarks.harness import ROOT


def run_in(tree: Path, benchmarks: Path, benchmark: list[str], pattern: re.Pattern | None) -> int:
    """``python -m benchmarks BENCHMARK …`` started in ``benchmarks`` (a folder holding only
    this checkout's ``benchmarks``: it comes first on the path), workbench from ``tree``."""
    path = os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    out = subprocess.run(
        harness.module_command("benchmarks", *benchmark), cwd=benchmarks, env=env, capture_output=True, text=True
    )
    for line in out.stdout.splitlines():
        if pattern is None or pattern.search(line):
            print(line, flush=True)
    if out.returncode:
        print(f"(exit {out.returncode}) {out.stderr[-1500:]}", flush=True)
    return out.returncode


def main() -> None:
    parser = harness.parser(__doc__, repeats=2)
    parser.add_argument("revision", help="the git revision to run beside the working tree")
    parser.add_argument("--grep", help="print only the benchmark's lines matching this regex")
    parser.usage = "%(prog)s REVISION [--repeats N] [--grep REGEX] -- BENCHMARK [ARGS ...]"
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args, benchmark = parser.parse_args(argv[:split]), argv[split + 1 :]
    if not benchmark:
        parser.error("give the benchmark to run after --")
    pattern = re.compile(args.grep) if args.grep else None
    with tempfile.TemporaryDirectory(prefix="workbench-against-") as tmp:
        before, benchmarks = Path(tmp) / "tree", Path(tmp) / "benchmarks"
        benchmarks.mkdir()
        (benchmarks / "benchmarks").symlink_to(ROOT / "benchmarks")
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(before), args.revision], cwd=ROOT, check=True)
        try:
            failed = 0
            for turn in range(1, args.repeats + 1):
                for name, tree in ((args.revision, before), ("working tree", ROOT)):
                    print(f"== {name}, turn {turn}", flush=True)
                    failed += bool(run_in(tree, benchmarks, benchmark, pattern))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, check=False)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
