"""``workbench run NOTEBOOK.ipynb``: train a notebook's FDG headless, no Jupyter server.

Options on the command line override the notebook's own ``%fdg run`` line.

    $ workbench run notebooks/quickstart.ipynb --policy coarse
    $ workbench run notebooks/quickstart.ipynb --checkpoint-dir ckpt --checkpoint-every 20
    $ workbench run notebooks/quickstart.ipynb --policy fine --resume ckpt
    $ workbench run notebooks/quickstart.ipynb --policy coarse --cluster tls://10.0.0.5:8786 \
          --tls-ca-file ca.pem --tls-cert client.pem --tls-key client-key.pem
    $ workbench run notebooks/quickstart.ipynb --set cfg.seed=3 --set cfg.learning_rate=1e-3

The run options are :class:`workbench.config.RunConfig`'s fields (the same as ``%fdg run``'s);
``--set NAME.FIELD=VALUE`` changes a field of one of the notebook's config objects before
the FDG runs, so a seed sweep needs no copied notebooks.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
import threading
from pathlib import Path

from workbench.cluster.quiet_workers import WORKERS_OVERRIDE
from workbench.config import DEFAULT_STEPS, RunConfig, add_run_arguments, options_from
from workbench.errors import RunConfigError, WorkbenchError
from workbench.fdg.policy import needs_cluster
from workbench.sweep.command import add_sweep_arguments, sweep_command

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="workbench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train the FDG a notebook defines")
    run.add_argument("notebook", help="path to a .ipynb with %%fragment cells")
    add_run_arguments(run, "cli")
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME.FIELD=VALUE",
        dest="overrides",
        help="change a field of a notebook config object before running, e.g. "
        "--set cfg.seed=3 (VALUE is a Python literal; repeat for more)",
    )
    run.add_argument("--verbose", action="store_true", help="print the full traceback of an error")
    tls = run.add_argument_group(
        "TLS",
        "for a scheduler started with TLS (dask scheduler --tls-ca-file … --tls-cert … "
        "--tls-key …); the connection then requires encryption. See docs/security.md.",
    )
    tls.add_argument("--tls-ca-file", metavar="FILE", help="CA certificate(s) that signed the scheduler's")
    tls.add_argument("--tls-cert", metavar="FILE", help="this client's certificate")
    tls.add_argument("--tls-key", metavar="FILE", help="its private key (if not in the --tls-cert file)")
    run.add_argument(
        "--connect-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long to try to reach --scheduler (default 10)",
    )
    run.add_argument(
        "--evaluate",
        type=int,
        metavar="N",
        help="after training, play the final state N episodes without learning (greedy, "
        "held-out env seeds) and print their returns' mean, std and IQM (docs/evaluation.md)",
    )
    run.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="workers of the embedded cluster (default: one per core, at least 2; the same as WORKBENCH_WORKERS=N)",
    )
    add_sweep_arguments(
        sub.add_parser(
            "sweep",
            help="train the notebook's FDG as many trials (settings × seeds) at once on the cluster; docs/sweeps.md",
        )
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _sweep(args) if args.command == "sweep" else _run(args)
    except WorkbenchError as exc:
        if args.verbose:
            import traceback

            traceback.print_exc()
        # a fragment's error carries its original traceback: shown with --verbose only
        message = str(exc) if args.verbose else str(exc).split("\n--- original traceback ---")[0]
        print(f"workbench: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("workbench: interrupted; every worker was released.", file=sys.stderr)
        return 130
    finally:
        if args.workers is not None:
            os.environ.pop(WORKERS_OVERRIDE, None)
        if "workbench.cluster.connect" in sys.modules:  # a run started the embedded cluster
            from workbench.runtime.process.interrupts import shielded

            with shielded(
                "closing the embedded cluster",
                reraise=False,  # the last thing done
                if_abandoned="its worker processes are then ended without a clean shutdown",
            ):
                sys.modules["workbench.cluster.connect"].shutdown_embedded()


def console_main(argv: list[str] | None = None) -> int:
    """The ``workbench`` command: :func:`main`, then a quick interpreter exit.

    At exit Python runs its cycle collector over every object still alive (torch,
    distributed, the notebook's namespace): ~0.7 s of the ~6 s coarse quickstart on a
    2-core machine. Freezing them first (``gc.freeze``) skips that pass. By then
    :func:`main` has closed what workbench opened (the embedded cluster, the run's logs),
    modules are still torn down and their objects freed by reference counting; only
    objects in reference cycles are left to the operating system. A Ctrl-C after
    :func:`main` returned is ignored: the command is exiting already. Neither is done by
    :func:`main` itself, which tests and scripts call in a process that goes on.
    """
    code = main(argv)
    if threading.current_thread() is threading.main_thread():
        # done: a Ctrl-C from here on (a second press as the run stops) would only turn
        # this clean exit into a KeyboardInterrupt at the top level
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.freeze()
    return code


def _run(args) -> int:
    from workbench.notebook import load_notebook

    given = options_from(args)
    RunConfig(**given)  # every check, before the notebook loads or a cluster starts
    if args.connect_timeout <= 0:
        raise RunConfigError(f"--connect-timeout must be a positive number of seconds, got {args.connect_timeout:g}.")
    security = _security(args)
    if args.workers is not None and args.workers < 1:
        raise RunConfigError(f"--workers must be a whole number ≥ 1, got {args.workers}.")
    if args.evaluate is not None and args.evaluate < 1:
        raise RunConfigError(f"--evaluate must be a whole number of episodes ≥ 1, got {args.evaluate}.")
    if args.workers is not None:
        os.environ[WORKERS_OVERRIDE] = str(args.workers)  # read when the embedded cluster starts
    if (
        given.get("cluster") is None
        and _needs_embedded(given.get("policy", "inline"))
        and not _may_bring_a_cluster(args.notebook)
    ):
        from workbench.cluster.connect import start_embedded_in_background

        # the workers start (and import torch) while the notebook loads (and imports torch)
        start_embedded_in_background()
    fdg, options = load_notebook(args.notebook, overrides=args.overrides)
    options.update(given)
    if "steps" not in options:
        print(f"workbench: steps: the default, {DEFAULT_STEPS} per iteration (--steps T runs another)", flush=True)
    options.setdefault("run_name", Path(args.notebook).stem)  # the run store's name for it
    config = RunConfig.from_options(options)
    if args.workers is not None and config.cluster is not None:
        raise RunConfigError(
            "--workers sizes the embedded cluster; with --cluster the "
            "cluster's own workers are used (start more there)."
        )
    if security is not None and not isinstance(config.cluster, str):
        raise RunConfigError(
            "--tls-ca-file/--tls-cert/--tls-key secure the connection to a "
            "scheduler: give its address with --cluster tls://HOST:PORT."
        )
    handle = None
    if isinstance(config.cluster, str) and needs_cluster(config.policy):
        from workbench.cluster.connect import connect

        # connect here, not in fdg.run: it takes the TLS settings and the timeout, and an
        # unreachable scheduler fails before any training output
        handle = connect(config.cluster, security=security, timeout=args.connect_timeout)
        config = config.replace(cluster=handle.client)
    try:
        run = fdg.run(config)
    except KeyboardInterrupt:  # the first Ctrl-C stops at a boundary: say what it kept
        stopped = fdg.last_run
        if stopped is not None and stopped.state is not None and config.checkpoint_dir is not None:
            print(
                f"workbench: stopped at iteration {stopped.completed_iterations}; its final checkpoint "
                f"is in {config.checkpoint_dir} (--resume {config.checkpoint_dir} goes on from it).",
                file=sys.stderr,
            )
        raise
    finally:
        if handle is not None:
            handle.close()
    print(run.summary())
    if args.evaluate is not None:
        print(f"evaluation: {run.evaluate(args.evaluate).summary()}")
    if run.target_return is not None and not run.solved_at:
        print(f"workbench: the target return {run.target_return:g} was not reached.", file=sys.stderr)
        return 1
    return 0


def _sweep(args) -> int:
    from workbench.notebook import load_notebook

    return sweep_command(args, load_notebook)


def _needs_embedded(policy) -> bool:
    """Whether the command line's policy will start the embedded cluster (a policy it cannot
    read yet is left to the run, which says what is wrong with it)."""
    try:
        return needs_cluster(policy)
    except Exception:  # noqa: BLE001 - reported by the run, with the notebook's context
        return False


def _may_bring_a_cluster(path) -> bool:
    """Whether the notebook might name its own cluster (a ``--cluster`` on its run line, a
    ``distributed.Client`` or a Dask cluster made in a cell): then the embedded one is not
    started ahead. A text check, on the safe side: a false alarm only forgoes the head start.

    >>> import json, tempfile
    >>> nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
    ...     {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
    ...      "source": "client = Client('tcp://10.0.0.5:8786')"}]}
    >>> with tempfile.NamedTemporaryFile("w", suffix=".ipynb", delete=False) as f:
    ...     json.dump(nb, f)
    >>> _may_bring_a_cluster(f.name)
    True
    """
    from workbench.notebook import notebook_cells

    try:
        text = "\n".join(notebook_cells(path))
    except Exception:  # noqa: BLE001 - unreadable: load_notebook says why
        return True
    return "--cluster" in text or "Client(" in text or "Cluster(" in text


def _security(args):
    """A ``distributed.security.Security`` from the --tls-* flags (None without them)."""
    files = {"--tls-ca-file": args.tls_ca_file, "--tls-cert": args.tls_cert, "--tls-key": args.tls_key}
    if not any(files.values()):
        return None
    missing = [flag for flag in ("--tls-ca-file", "--tls-cert") if not files[flag]]
    if missing:
        raise RunConfigError(
            f"TLS needs --tls-ca-file and --tls-cert (and --tls-key when the key is "
            f"not in the certificate file); {' and '.join(missing)} missing."
        )
    for flag, path in files.items():
        if path and not Path(path).is_file():
            raise RunConfigError(f"{flag} {path!r}: no such file.")
    from distributed.security import Security

    return Security(
        tls_ca_file=args.tls_ca_file,
        tls_client_cert=args.tls_cert,
        tls_client_key=args.tls_key,
        require_encryption=True,
    )


if __name__ == "__main__":
    sys.exit(console_main())
