"""Bad input at the cluster's door and on the command line: TLS certificates and addresses,
what the embedded cluster listens on, the CLI's options. Each gets a clear error and loses
nothing (docs/errors.md; tests/test_bad_input.py holds the rest and checks the catalogue)."""

from __future__ import annotations

import time

import nbformat
import numpy as np
import pytest

import workbench as wb
from tests.conftest import LOOP_CELLS, tls_local_cluster, toy_fdg
from tests.runtime.test_inline import _expected_totals
from tests.test_bad_input import SLACK_S
from workbench.cli import main
from workbench.cluster.connect import connect


# ---------------------------------------------------------------------------- TLS
@pytest.fixture(scope="module")
def tls_cluster():
    with tls_local_cluster() as cluster:
        yield cluster


@pytest.fixture
def tls_files(tls_cluster, tmp_path) -> dict[str, str]:
    """The TLS cluster's CA, client certificate and key as PEM files, as a user has them."""
    security = tls_cluster.security
    files = {}
    for name, pem in (
        ("ca", security.tls_ca_file),
        ("cert", security.tls_client_cert),
        ("key", security.tls_client_key),
    ):
        (tmp_path / f"{name}.pem").write_text(pem)
        files[name] = str(tmp_path / f"{name}.pem")
    return files


def test_tls_cluster_runs_an_fdg_through_workbench(tls_cluster):
    handle = connect(tls_cluster.scheduler_address, security=tls_cluster.security)
    try:
        assert handle.owned and handle.client.scheduler.address.startswith("tls://")
        run = toy_fdg().run(iterations=3, steps=2, policy="coarse", cluster=handle.client, progress=False)
    finally:
        handle.close()
    both = np.concatenate([np.arange(3.0), np.arange(3.0) + 10])
    assert run.status == "finished" and run.policy_name == "SingleLearnerCoarse"
    assert run.metrics["learner/total"].tolist() == _expected_totals(3, 2, both)


def test_a_plain_connection_to_a_tls_scheduler_is_refused(tls_cluster):
    plain = tls_cluster.scheduler_address.replace("tls://", "tcp://")
    fdg = toy_fdg()
    before = fdg.copy()
    start = time.monotonic()
    with pytest.raises(wb.RunConfigError) as info:
        fdg.run(iterations=1, steps=1, policy="coarse", cluster=plain, progress=False)
    assert time.monotonic() - start < 5 + SLACK_S
    assert str(info.value).startswith(f"the scheduler at {plain!r} closed the plain (unencrypted) connection (")
    assert "it probably requires TLS. Connect to tls://… instead" in str(info.value)
    assert fdg == before


def test_a_tls_address_without_certificates_is_refused(tls_cluster):
    with pytest.raises(wb.RunConfigError) as info:
        connect(tls_cluster.scheduler_address)
    assert str(info.value).startswith(
        f"{tls_cluster.scheduler_address!r} is a TLS address, but no TLS "
        "certificates were given. Pass the certificates: security=Security("
    )
    plain = tls_cluster.scheduler_address.replace("tls://", "tcp://")
    with pytest.raises(
        wb.RunConfigError,
        match=r"TLS was asked for \(require_encryption\), but "
        r"'tcp://.*' is not a tls:// address",
    ):
        connect(plain, security=tls_cluster.security)


def test_tls_certificates_that_do_not_belong_together_are_named(tls_cluster, tls_files, tmp_path):
    from distributed.security import Security

    other = Security.temporary()  # a key from another pair
    (tmp_path / "other-key.pem").write_text(other.tls_client_key)
    mismatched = Security(
        tls_ca_file=tls_files["ca"],
        tls_client_cert=tls_files["cert"],
        tls_client_key=str(tmp_path / "other-key.pem"),
        require_encryption=True,
    )
    with pytest.raises(wb.RunConfigError, match=r"the TLS certificates for 'tls://.*' could not be used"):
        connect(tls_cluster.scheduler_address, security=mismatched)
    with pytest.raises(
        wb.RunConfigError,
        match=r"the TLS handshake with 'tls://.*' failed \(.*\): the two "
        r"sides do not trust each other's certificates",
    ):
        connect(tls_cluster.scheduler_address, security=other)  # a pair from another CA


def test_fdg_run_with_a_tls_address_takes_certificates_from_dask_config(tls_cluster, tls_files):
    """What `%fdg run --cluster tls://…` does: certificates from distributed.comm.tls.*."""
    import dask

    with dask.config.set(
        {
            "distributed.comm.tls.ca-file": tls_files["ca"],
            "distributed.comm.tls.client.cert": tls_files["cert"],
            "distributed.comm.tls.client.key": tls_files["key"],
        }
    ):
        run = toy_fdg().run(
            iterations=1, steps=1, policy="coarse", cluster=tls_cluster.scheduler_address, progress=False
        )
    assert run.status == "finished"


def test_cli_connects_with_tls_flags(tls_cluster, tls_files, tiny_notebook, capsys):
    code = main(
        [
            "run",
            tiny_notebook,
            "--policy",
            "coarse",
            "--iterations",
            "2",
            "--steps",
            "2",
            "--scheduler",
            tls_cluster.scheduler_address,
            "--tls-ca-file",
            tls_files["ca"],
            "--tls-cert",
            tls_files["cert"],
            "--tls-key",
            tls_files["key"],
        ]
    )
    assert code == 0 and "2/2 iterations under SingleLearnerCoarse" in capsys.readouterr().out


# ---------------------------------------------------------------------------- safe defaults
def _listening(pid: int) -> list[tuple[str, int]]:
    import psutil

    process = psutil.Process(pid)
    connections = (
        process.net_connections(kind="inet")
        if hasattr(process, "net_connections")
        else process.connections(kind="inet")
    )
    return [(c.laddr.ip, c.laddr.port) for c in connections if c.status == psutil.CONN_LISTEN]


def test_embedded_cluster_listens_on_loopback_only(monkeypatch):
    """Every socket the embedded cluster listens on — scheduler, dashboard, workers, nannies —
    is bound to 127.0.0.1 (checked on the bound sockets, not on the settings). The dashboard
    gets a free port here: 8787 may be taken by someone else's run."""
    import os

    from workbench.cluster import connect as connect_module

    monkeypatch.setattr(connect_module, "EMBEDDED_DASHBOARD_ADDRESS", "127.0.0.1:0")
    monkeypatch.setattr(connect_module, "_embedded", None)
    handle = connect_module.embedded_cluster(n_workers=1, quiet=True)
    try:
        scheduler = handle.cluster.scheduler
        dashboard_port = int(handle.dashboard_link.split(":")[2].split("/")[0])
        scheduler_port = int(scheduler.address.rsplit(":", 1)[1])
        mine = dict((port, ip) for ip, port in _listening(os.getpid()))
        assert mine[scheduler_port] == "127.0.0.1" and mine[dashboard_port] == "127.0.0.1"
        # the nannies live in this process (a LocalCluster's do): every socket here too
        assert set(mine.values()) == {"127.0.0.1"}, mine
        for pid in handle.client.run(os.getpid).values():
            sockets = _listening(pid)
            assert sockets and {ip for ip, _ in sockets} == {"127.0.0.1"}, sockets
    finally:
        connect_module.shutdown_embedded()


# ============================================================================ the CLI
@pytest.fixture
def tiny_notebook(tmp_path) -> str:
    """A torch-free notebook: the magics tests' loop, with a %fdg run line."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext workbench\nimport numpy as np\nimport workbench as wb"),
        *(nbformat.v4.new_code_cell(cell) for cell in LOOP_CELLS),
        nbformat.v4.new_code_cell("run = %fdg run --iterations 2 --steps 2"),
    ]
    path = tmp_path / "tiny.ipynb"
    nbformat.write(nb, path)
    return str(path)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--iterations", "-3"], "--iterations must be a whole number ≥ 1, got -3."),
        (["--steps", "0"], "--steps must be a whole number ≥ 1, got 0."),
        (["--policy", "Coarse"], "unknown policy 'Coarse'; choose one of inline, coarse"),
        (["--connect-timeout", "0"], "--connect-timeout must be a positive number of seconds, got 0."),
        (
            ["--tls-cert", "client.pem"],
            "TLS needs --tls-ca-file and --tls-cert (and --tls-key when the "
            "key is not in the certificate file); --tls-ca-file missing.",
        ),
        (
            ["--tls-ca-file", "nowhere-ca.pem", "--tls-cert", "nowhere.pem"],
            "--tls-ca-file 'nowhere-ca.pem': no such file.",
        ),
    ],
    ids=["iterations-negative", "steps-0", "unknown-policy", "timeout-0", "tls-incomplete", "tls-missing-file"],
)
def test_cli_bad_options_are_one_clear_line(tiny_notebook, capsys, argv, message):
    assert main(["run", tiny_notebook, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("workbench: error: ") and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_cli_unknown_policy_suggests_the_preset(tiny_notebook, capsys):
    assert main(["run", tiny_notebook, "--policy", "corse"]) == 2
    assert capsys.readouterr().err.rstrip().endswith("Did you mean 'coarse'?")


def test_cli_steps_that_are_not_a_number_are_an_argparse_error(tiny_notebook, capsys):
    with pytest.raises(SystemExit) as info:
        main(["run", tiny_notebook, "--steps", "ten"])
    assert info.value.code == 2
    assert "workbench run: error: argument --steps: invalid int value: 'ten'" in capsys.readouterr().err


def test_cli_tls_flags_need_a_scheduler(tiny_notebook, tls_files, capsys):
    code = main(
        [
            "run",
            tiny_notebook,
            "--policy",
            "coarse",
            "--tls-ca-file",
            tls_files["ca"],
            "--tls-cert",
            tls_files["cert"],
            "--tls-key",
            tls_files["key"],
        ]
    )
    assert code == 2
    assert (
        "--tls-ca-file/--tls-cert/--tls-key secure the connection to a scheduler: give its "
        "address with --cluster tls://HOST:PORT."
    ) in capsys.readouterr().err


def test_cli_unreachable_scheduler_fails_within_the_timeout(tiny_notebook, capsys):
    start = time.monotonic()
    code = main(
        ["run", tiny_notebook, "--policy", "coarse", "--scheduler", "tcp://127.0.0.1:9", "--connect-timeout", "1"]
    )
    assert code == 2 and time.monotonic() - start < 1 + SLACK_S
    err = capsys.readouterr().err
    assert err.startswith("workbench: error: could not reach a Dask scheduler at 'tcp://127.0.0.1:9' within 1 s")


def test_cli_runs_the_tiny_notebook(tiny_notebook, capsys):
    assert main(["run", tiny_notebook]) == 0
    assert "2/2 iterations under inline" in capsys.readouterr().out


# ============================================================================ the catalogue
