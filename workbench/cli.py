"""``workbench run NOTEBOOK.ipynb``: train a notebook's FDG headless, no Jupyter server.

Options on the command line override the notebook's own ``%fdg run`` line.

    $ workbench run notebooks/quickstart.ipynb --policy coarse
    $ workbench run notebooks/quickstart.ipynb --checkpoint-dir ckpt --checkpoint-every 20
    $ workbench run notebooks/quickstart.ipynb --policy fine --resume ckpt
    $ workbench run notebooks/quickstart.ipynb --policy coarse --scheduler tls://10.0.0.5:8786 \
          --tls-ca-file ca.pem --tls-cert client.pem --tls-key client-key.pem
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from workbench.errors import RunConfigError, WorkbenchError
from workbench.fdg.options import add_checkpoint_options
from workbench.fdg.policy import needs_cluster

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="workbench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train the FDG a notebook defines")
    run.add_argument("notebook", help="path to a .ipynb with %%fragment cells")
    run.add_argument("--iterations", type=int, help="training iterations (default: the notebook's)")
    run.add_argument("--steps", type=int, help="steps per iteration, T (default: the notebook's)")
    run.add_argument("--policy", help="inline | coarse | fine | multilearner | gpuonly | async | auto | FILE.json")
    run.add_argument("--scheduler", help="Dask scheduler address, tcp://HOST:PORT or tls://HOST:PORT "
                                         "(default: an embedded local cluster)")
    run.add_argument("--target-return", type=float, dest="target_return",
                     help="stop once the mean of the last 20 episode returns reaches this")
    add_checkpoint_options(run)
    tls = run.add_argument_group(
        "TLS", "for a scheduler started with TLS (dask scheduler --tls-ca-file … --tls-cert … "
               "--tls-key …); the connection then requires encryption. See docs/security.md.")
    tls.add_argument("--tls-ca-file", metavar="FILE", help="CA certificate(s) that signed the scheduler's")
    tls.add_argument("--tls-cert", metavar="FILE", help="this client's certificate")
    tls.add_argument("--tls-key", metavar="FILE", help="its private key (if not in the --tls-cert file)")
    run.add_argument("--connect-timeout", type=float, default=10.0, metavar="SECONDS",
                     help="how long to try to reach --scheduler (default 10)")
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

    for name in ("iterations", "steps"):  # before the notebook loads or a cluster starts
        value = getattr(args, name)
        if value is not None and value < 1:
            raise RunConfigError(f"--{name} must be a whole number ≥ 1, got {value}.")
    if args.connect_timeout <= 0:
        raise RunConfigError(f"--connect-timeout must be a positive number of seconds, got {args.connect_timeout:g}.")
    security = _security(args)
    fdg, options = load_notebook(args.notebook)
    for name in ("iterations", "steps", "policy", "target_return", "checkpoint_dir", "checkpoint_every",
                 "resume"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    if args.scheduler:
        options["cluster"] = args.scheduler
    handle = None
    if security is not None and not isinstance(options.get("cluster"), str):
        raise RunConfigError("--tls-ca-file/--tls-cert/--tls-key secure the connection to a "
                             "scheduler: give its address with --scheduler tls://HOST:PORT.")
    if isinstance(options.get("cluster"), str) and needs_cluster(options.get("policy", "inline")):
        from workbench.cluster.connect import connect

        # connect here, not in fdg.run: it takes the TLS settings and the timeout, and an
        # unreachable scheduler fails before any training output
        handle = connect(options["cluster"], security=security, timeout=args.connect_timeout)
        options["cluster"] = handle.client
    try:
        run = fdg.run(**options)
    finally:
        if handle is not None:
            handle.close()
    print(run.summary())
    if run.target_return is not None and not run.solved_at:
        print(f"workbench: the target return {run.target_return:g} was not reached.", file=sys.stderr)
        return 1
    return 0


def _security(args):
    """A ``distributed.security.Security`` from the --tls-* flags (None without them)."""
    files = {"--tls-ca-file": args.tls_ca_file, "--tls-cert": args.tls_cert, "--tls-key": args.tls_key}
    if not any(files.values()):
        return None
    missing = [flag for flag in ("--tls-ca-file", "--tls-cert") if not files[flag]]
    if missing:
        raise RunConfigError(f"TLS needs --tls-ca-file and --tls-cert (and --tls-key when the key is "
                             f"not in the certificate file); {' and '.join(missing)} missing.")
    for flag, path in files.items():
        if path and not Path(path).is_file():
            raise RunConfigError(f"{flag} {path!r}: no such file.")
    from distributed.security import Security

    return Security(tls_ca_file=args.tls_ca_file, tls_client_cert=args.tls_cert,
                    tls_client_key=args.tls_key, require_encryption=True)


if __name__ == "__main__":
    sys.exit(main())
