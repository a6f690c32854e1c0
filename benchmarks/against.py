"""Run one benchmark on the working tree and on an older revision, interleaved.

A busy machine drifts over minutes, so "before" and "after" are taken in turns (before,
after, before, after, ...) rather than one after the other. The older revision is checked
out into a temporary git worktree, and each run imports ``workbench`` from its own tree
(``PYTHONPATH``; the spawned Dask workers inherit it). The benchmark's own output is
printed as it comes, each block headed by its tree and turn; lines with ``--grep`` only.

    python benchmarks/against.py d92a6e4 --reps 2 --grep '^\\|' -- \\
        benchmarks/bench_policies.py --scaling --sizes 8 16 32 --policies coarse --no-bare --pairs 1
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_in(tree: Path, script: list[str], pattern: re.Pattern | None) -> int:
    path = os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    out = subprocess.run([sys.executable, *script], cwd=tree, env=env, capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if pattern is None or pattern.search(line):
            print(line, flush=True)
    if out.returncode:
        print(f"(exit {out.returncode}) {out.stderr[-1500:]}", flush=True)
    return out.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revision", help="the git revision to run beside the working tree")
    parser.add_argument("--reps", type=int, default=2, help="turns per tree")
    parser.add_argument("--grep", help="print only the benchmark's lines matching this regex")
    parser.usage = "%(prog)s REVISION [--reps N] [--grep REGEX] -- BENCHMARK [ARGS ...]"
    argv = sys.argv[1:]
    if "--" not in argv:
        parser.error("give the benchmark to run after --")
    split = argv.index("--")
    args, script = parser.parse_args(argv[:split]), argv[split + 1:]
    if not script:
        parser.error("give the benchmark to run after --")
    pattern = re.compile(args.grep) if args.grep else None
    with tempfile.TemporaryDirectory(prefix="workbench-against-") as tmp:
        before = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(before), args.revision],
                       cwd=ROOT, check=True)
        try:
            failed = 0
            for turn in range(1, args.reps + 1):
                for name, tree in ((args.revision, before), ("working tree", ROOT)):
                    print(f"== {name}, turn {turn}", flush=True)
                    failed += bool(run_in(tree, script, pattern))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, check=False)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
