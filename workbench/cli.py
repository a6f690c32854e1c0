"""``workbench run NOTEBOOK.ipynb``: train a notebook's FDG headless, no Jupyter server.

Options on the command line override the notebook's own ``%fdg run`` line.

    $ workbench run notebooks/quickstart.ipynb --policy coarse
"""
from __future__ import annotations

import argparse
import sys

from workbench.fdg.errors import WorkbenchError

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="workbench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train the FDG a notebook defines")
    run.add_argument("notebook", help="path to a .ipynb with %%fragment cells")
    run.add_argument("--iterations", type=int, help="training iterations (default: the notebook's)")
    run.add_argument("--steps", type=int, help="steps per iteration, T (default: the notebook's)")
    run.add_argument("--policy", help="inline | coarse | fine | multilearner | gpuonly | async | auto | FILE.json")
    run.add_argument("--scheduler", help="Dask scheduler address (default: an embedded local cluster)")
    run.add_argument("--target-return", type=float, dest="target_return",
                     help="stop once the mean of the last 20 episode returns reaches this")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except WorkbenchError as exc:
        print(f"workbench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("workbench: interrupted; every worker was released.", file=sys.stderr)
        return 130
    finally:
        if "workbench.cluster.connect" in sys.modules:  # a run started the embedded cluster
            sys.modules["workbench.cluster.connect"].shutdown_embedded()


def _run(args) -> int:
    from workbench.notebook import load_notebook

    fdg, options = load_notebook(args.notebook)
    for name in ("iterations", "steps", "policy", "target_return"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    if args.scheduler:
        options["cluster"] = args.scheduler
    run = fdg.run(**options)
    print(run.summary())
    if run.target_return is not None and not run.solved_at:
        print(f"workbench: the target return {run.target_return:g} was not reached.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
