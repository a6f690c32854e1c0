"""Bad input, everywhere a user can give it: each case gets a clear error (what was wrong,
where, what to do) and loses nothing (the FDG and the policy stay as they were, no worker
is left busy). docs/errors.md is the catalogue; the last test keeps it honest."""

from __future__ import annotations

import ast
import math
import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from IPython.core.error import UsageError

import workbench as wb
from tests.cluster.test_coarse import _replicas_left
from tests.conftest import LOOP_CELLS, toy_fdg, two_worker_client
from tests.runtime.test_inline import _expected_totals
from workbench.cluster.connect import connect
from workbench.envs import CartPole, GymVectorEnv, SimpleSpread, ThreadedVectorEnv
from workbench.errors import MetricError
from workbench.fdg.policy import Group

ROOT = Path(__file__).resolve().parents[1]


def _fdg(ip) -> wb.FDG:
    return ip.magics_manager.registry["WorkbenchMagics"].fdg


def _cells(ip, *cells) -> None:
    for cell in cells:
        result = ip.run_cell(cell)
        assert result.success, result.error_in_exec or result.error_before_exec


def _cartpole_fdg(
    actor: str = "action = np.zeros(len(obs), dtype=np.int64)",
    env_init: str = "envs = wb.envs.make('CartPole-v1', num_envs=4, seed=0)\nobs = envs.reset()",
) -> wb.FDG:
    fdg = wb.FDG(namespace={"np": np, "wb": wb})
    fdg.add_fragment("env", env_init, rate="init")
    fdg.add_fragment("actor", actor, rate="step")
    fdg.add_fragment("env", "obs, reward, terminated, truncated, info = envs.step(action)", rate="step")
    fdg.add_fragment("learner", "total = float(reward.sum())", rate="iteration")
    return fdg


def _raises_in_run(fdg: wb.FDG, **kwargs) -> wb.FragmentRuntimeError:
    """Run ``fdg`` expecting a fragment error; check the FDG is intact and return the error."""
    before = fdg.copy()
    options = {"iterations": 2, "steps": 2, "progress": False, **kwargs}
    with pytest.raises(wb.FragmentRuntimeError) as info:
        fdg.run(**options)
    assert fdg == before and fdg.last_run.status == "failed"
    assert "The run stopped cleanly; the FDG is intact" in str(info.value)
    assert not [t for t in threading.enumerate() if t.name.startswith("workbench-")]
    return info.value


# ============================================================================ magics
@pytest.mark.parametrize(
    "line, message",
    [
        ("actor --speed 3", "%%fragment: unrecognized arguments: --speed 3. Usage: %%fragment"),
        ("actor --every sometimes", "argument --every: invalid choice: 'sometimes'"),
        ("actor --init --every step", "argument --every: not allowed with argument --init"),
        ("actor --replicas 0", "fragment 'actor': --replicas must be ≥ 1, got 0."),
        ("actor --replicas two", "argument --replicas: invalid int value: 'two'"),
        ("actor --device tpu", "argument --device: invalid choice: 'tpu'"),
        ("", "the following arguments are required: name"),
        ("my-actor", "fragment 'my-actor': fragment name 'my-actor' is not a Python identifier."),
        ("actor --reads 2x", "fragment 'actor': name '2x' is not a Python identifier."),
    ],
    ids=[
        "unknown-option",
        "bad-every",
        "init-and-every",
        "replicas-0",
        "replicas-not-int",
        "bad-device",
        "no-name",
        "bad-name",
        "bad-reads",
    ],
)
def test_bad_fragment_line_is_a_usage_error_and_keeps_the_fdg(ip, capsys, line, message):
    _cells(ip, *LOOP_CELLS)
    before = _fdg(ip).copy()
    result = ip.run_cell(f"%%fragment {line}\naction = obs + 2\n")
    assert not result.success
    err = capsys.readouterr().err
    assert "UsageError" in err and message in err
    assert _fdg(ip) == before


@pytest.mark.parametrize(
    "line, message",
    [
        ("run --bogus 3", "%fdg run: unrecognized arguments: --bogus 3"),
        ("run --steps abc", "argument --steps: invalid int value: 'abc'"),
        ("run --steps 0", "--steps must be a whole number ≥ 1, got 0."),
        ("run --iterations -1", "--iterations must be a whole number ≥ 1, got -1."),
        ("run --target-return high", "argument --target-return: invalid float value: 'high'"),
        ("run --policy corse", "unknown policy 'corse'; choose one of inline, coarse"),
        ("run --policy nowhere.json", "policy file not found: 'nowhere.json'"),
    ],
    ids=[
        "unknown-option",
        "steps-not-int",
        "steps-0",
        "iterations-negative",
        "target-not-float",
        "unknown-policy",
        "missing-policy-file",
    ],
)
def test_bad_fdg_run_line_is_a_usage_error_and_starts_nothing(ip, line, message):
    _cells(ip, *LOOP_CELLS)
    before = _fdg(ip).copy()
    with pytest.raises(UsageError) as info:
        ip.run_line_magic("fdg", line)
    assert message in str(info.value)
    assert _fdg(ip) == before and _fdg(ip).last_run is None


def test_unknown_policy_name_suggests_the_preset():
    fdg = toy_fdg()
    for typo, meant in [
        ("corse", "coarse"),
        ("Coarse", "coarse"),
        ("multi-learner", "multilearner"),
        ("inlne", "inline"),
    ]:
        with pytest.raises(wb.PlacementError, match=f"unknown policy '{typo}'.* Did you mean '{meant}'\\?$"):
            fdg.run(iterations=1, steps=1, policy=typo, progress=False)
    with pytest.raises(wb.PlacementError) as info:
        fdg.run(iterations=1, steps=1, policy="sideways", progress=False)
    assert "Did you mean" not in str(info.value)
    assert fdg.last_run is None


def test_fdg_run_while_a_run_is_going_is_refused(ip):
    _cells(ip, "import time", *LOOP_CELLS, "%%fragment learner\ntime.sleep(0.01)\n")
    ip.run_line_magic("fdg", "run --background --iterations 100000 --steps 1")
    try:
        deadline = time.monotonic() + 30
        while (_fdg(ip).last_run is None or not _fdg(ip).last_run.rows) and time.monotonic() < deadline:
            time.sleep(0.02)  # until the background run has started iterating
        going = _fdg(ip).last_run
        assert going is not None and going.rows
        with pytest.raises(UsageError, match="a background run is going; stop it first with %fdg stop"):
            ip.run_line_magic("fdg", "run --iterations 1")
        with pytest.raises(wb.RunConfigError, match=r"this FDG is already running; stop it first \(%fdg stop"):
            _fdg(ip).run(iterations=1, steps=1, progress=False)
        assert _fdg(ip).last_run is going  # the refused run replaced nothing
    finally:
        stopped = ip.run_line_magic("fdg", "stop")
    assert stopped.status == "stopped"
    assert ip.run_line_magic("fdg", "run --iterations 1 --steps 1").status == "finished"


def test_fdg_stop_with_nothing_running_says_so(ip, capsys):
    _cells(ip, *LOOP_CELLS)
    assert ip.run_line_magic("fdg", "stop") is None
    assert "nothing is running." in capsys.readouterr().out


# ============================================================================ the FDG
def test_a_name_read_that_nobody_writes_is_named_with_its_cell_line(ip):
    _cells(ip, *LOOP_CELLS, "gain = 2.0", "%%fragment actor\nstart = obs\naction = start * gian\n")
    before = _fdg(ip).copy()
    with pytest.raises(UsageError) as info:
        ip.run_line_magic("fdg", "run --iterations 1 --steps 1")
    message = str(info.value)
    assert message.startswith(
        "fragment 'actor' (step cell) reads 'gian' (cell line 2), but no "
        "fragment writes it and the notebook does not define it."
    )
    assert "Did you mean 'gain'?" in message and "--reads/--writes" in message
    assert _fdg(ip) == before and _fdg(ip).last_run is None


def test_a_name_two_fragments_write_is_refused_and_the_fdg_kept(ip, capsys):
    _cells(ip, *LOOP_CELLS)
    before = _fdg(ip).copy()
    result = ip.run_cell("%%fragment critic\nreward = 0.0\n")
    assert not result.success
    err = capsys.readouterr().err
    assert (
        "'reward' is written by fragments 'env', 'critic' and read by 'learner': an interface "
        "has exactly one writer. Rename the name in all but one of the writing cells."
    ) in err
    assert _fdg(ip) == before and "critic" not in _fdg(ip)


def test_a_step_cell_that_does_not_bind_a_name_others_read_is_named():
    fdg = toy_fdg()
    fdg.add_fragment("env", "obs = obs + 1\nif seen > 0:\n    reward = action.copy()\nseen += 1", rate="step")
    err = _raises_in_run(fdg)
    assert (err.fragment, err.rate, err.replica, err.worker, err.iteration) == ("env", "step", 0, "local", 0)
    assert "the step cell did not bind 'reward' this time" in str(err)
    assert "Bind it on every path through the cell." in str(err)


def test_a_step_cell_that_does_not_bind_a_name_the_next_fragment_reads_is_named():
    fdg = toy_fdg()
    fdg.add_fragment("actor", "if gain > 10:\n    action = obs * gain", rate="step")
    err = _raises_in_run(fdg, iterations=1, steps=1)
    assert err.fragment == "actor" and err.rate == "step"
    assert "did not bind 'action'" in str(err) and "--init" not in str(err).split("---")[0]


# ============================================================================ at run time
def test_an_environment_id_that_does_not_exist_names_the_fragment_and_cell_line():
    fdg = _cartpole_fdg(env_init="n = 4\nenvs = wb.envs.make('NoSuchEnv-v0', num_envs=n)\nobs = envs.reset()")
    err = _raises_in_run(fdg)
    assert (err.fragment, err.rate, err.line) == ("env", "init", 2)
    assert str(err).startswith(
        "fragment 'env' (init cell), replica 0 on local, raised at cell line 2:\n"
        "    envs = wb.envs.make('NoSuchEnv-v0', num_envs=n)\n"
        "ValueError: unknown environment id 'NoSuchEnv-v0'."
    )
    assert "gymnasium.pprint_registry()" in str(err)

    typo = _cartpole_fdg(env_init="envs = wb.envs.make('cartpole-v1', num_envs=4)\nobs = envs.reset()")
    err = _raises_in_run(typo)
    assert err.line == 1 and "Did you mean 'CartPole-v1', 'CartPole-v0'" in str(err)


@pytest.mark.parametrize(
    "actor, got",
    [
        ("action = np.zeros((len(obs), 2), dtype=np.int64)", "got shape (4, 2), dtype int64"),
        ("action = np.zeros(len(obs) + 1, dtype=np.int64)", "got shape (5,), dtype int64"),
        ("action = np.full(len(obs), 0.7)", "got shape (4,), dtype float64"),
    ],
    ids=["logits-shape", "wrong-batch", "float-dtype"],
)
def test_actions_of_the_wrong_shape_or_dtype_name_the_env_cell(actor, got):
    err = _raises_in_run(_cartpole_fdg(actor=actor))
    assert (err.fragment, err.rate, err.line) == ("env", "step", 1)
    assert "obs, reward, terminated, truncated, info = envs.step(action)" in str(err)
    assert "ValueError: CartPole.step expects actions of shape (4,) with integer values" in str(err)
    assert got in str(err)


def _pendulum():
    import gymnasium

    return gymnasium.make("Pendulum-v1")


@pytest.mark.parametrize(
    "make_env, actions, expected",
    [
        (lambda: CartPole(4, seed=0), np.full(4, 0.5), "CartPole.step expects actions of shape (4,) with integer"),
        (
            lambda: CartPole(4, seed=0),
            np.zeros(3, np.int64),
            "got shape (3,), dtype int64. step takes one action per env",
        ),
        (
            lambda: SimpleSpread(2, seed=0),
            np.zeros((2, 3), np.float32),
            "SimpleSpread.step expects actions of shape (2, 3) with integer",
        ),
        (lambda: SimpleSpread(2, seed=0), np.zeros((2, 4), np.int64), "got shape (2, 4)"),
        (
            lambda: SimpleSpread(2, continuous_actions=True, seed=0),
            np.ones((2, 3, 5), np.int64),
            "SimpleSpread.step expects actions of shape (2, 3, 5) with floating-point values; got shape (2, 3, 5), dtype int64",
        ),
        (
            lambda: wb.envs.make("CartPole-v1", 4, backend="gymnasium"),
            np.full(4, 1.0),
            "GymVectorEnv.step expects actions of shape (4,) with integer",
        ),
        (
            lambda: GymVectorEnv(_pendulum, 3),
            np.zeros(3, np.int64),
            "GymVectorEnv.step expects actions of shape (3, 1) with floating-point values; got shape (3,), dtype int64",
        ),
        (
            lambda: ThreadedVectorEnv(_pendulum, 4, threads=2),
            np.zeros((4, 2), np.float32),
            "ThreadedVectorEnv.step expects actions of shape (4, 1)",
        ),
    ],
    ids=[
        "cartpole-float",
        "cartpole-batch",
        "spread-float",
        "spread-shape",
        "spread-continuous-int",
        "gym-float",
        "gym-box-int",
        "threaded-shape",
    ],
)
def test_envs_check_action_shape_and_dtype(make_env, actions, expected):
    env = make_env()
    env.reset(seed=0)
    try:
        with pytest.raises(ValueError) as info:
            env.step(actions)
        assert expected in str(info.value)
        space = env.action_space  # the env is unharmed: a good batch steps as before
        good = np.zeros((env.num_envs, *space.shape), dtype=space.dtype)
        assert env.step(good)[0].shape[0] == env.num_envs
    finally:
        env.close()


@pytest.mark.gpu
def test_cupy_envs_check_action_dtype():
    from workbench.kernels import gpu_available

    if not gpu_available():
        pytest.skip("no usable CUDA GPU with CuPy")
    import cupy

    for env, shape in (
        (wb.envs.make("CartPole-v1", 8, backend="cupy", seed=0), (8,)),
        (SimpleSpread(8, seed=0, xp=cupy), (8, 3)),
    ):
        env.reset()
        with pytest.raises(ValueError, match="with integer values"):
            env.step(cupy.zeros(shape, cupy.float32))
        env.step(cupy.zeros(shape, cupy.int64))


def test_nan_in_the_loss_stops_the_run_naming_the_metric():
    fdg = toy_fdg()
    learner = (
        "total += float(reward.sum())\nloss = total * float('nan')\nwb.log('losses/loss', loss{})\nscale = scale * 0.5"
    )
    fdg.add_fragment("learner", learner.format(""), rate="iteration")
    err = _raises_in_run(fdg)
    assert (err.fragment, err.rate, err.line, err.iteration) == ("learner", "iteration", 3, 0)
    assert "    wb.log('losses/loss', loss)\nMetricError: metric 'losses/loss' is nan." in str(err)
    assert "lower the learning rate" in str(err) and "allow_nan=True" in str(err)

    fdg.add_fragment("learner", learner.format(", allow_nan=True"), rate="iteration")  # the opt-out
    run = fdg.run(iterations=2, steps=2, progress=False)
    assert run.status == "finished" and math.isnan(run.rows[0]["losses/loss"])


def test_log_refuses_what_is_not_a_finite_number():
    with pytest.raises(MetricError, match=r"metric 'losses/v' has 2 of 3 values not finite \(-inf, inf\)"):
        wb.log("losses/v", np.array([1.0, np.inf, -np.inf]))
    with pytest.raises(
        MetricError,
        match=r"wb.log\('losses/all', …\) needs a number or an array of "
        r"numbers, got dict \{'a': 1.0\}",
    ):
        wb.log("losses/all", {"a": 1.0})
    assert isinstance(MetricError("x"), ValueError)  # code catching ValueError still does
    wb.log("charts/x", np.array([1.0, 2.0]))
    wb.log("charts/x", float("inf"), allow_nan=True)


def test_a_fragment_raising_on_a_worker_stops_cleanly_and_the_fixed_cell_runs_again(client):
    fdg = toy_fdg()
    fdg.add_fragment("learner", "total += float(reward.sum())\nscale = 1 / (total * 0)", rate="iteration")
    err = _raises_in_run(fdg, iterations=5, policy="coarse", cluster=client)
    assert (err.fragment, err.rate, err.replica, err.line, err.iteration) == ("learner", "iteration", 0, 2, 0)
    assert err.worker in {"0", "1"}
    assert str(err).startswith(
        f"fragment 'learner' (iteration cell), replica 0 on worker {err.worker}, raised "
        "in iteration 0 at cell line 2:\n    scale = 1 / (total * 0)\n"
        "ZeroDivisionError: float division by zero\n"
    )
    assert _replicas_left(client) == 0 and not any(client.processing().values())

    fdg.add_fragment(
        "learner", "total += float(reward.sum())\nwb.log('learner/total', total)\nscale = scale * 0.5", rate="iteration"
    )  # the cell, fixed and re-run
    run = fdg.run(iterations=3, steps=2, policy="coarse", cluster=client, progress=False)
    both = np.concatenate([np.arange(3.0), np.arange(3.0) + 10])
    assert run.status == "finished" and run.metrics["learner/total"].tolist() == _expected_totals(3, 2, both)


# ============================================================================ policies
def test_a_malformed_policy_json_file_is_refused_before_anything_runs(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text('{"name": "mine", "groups": [{"fragments": ["actor", "env"], "replicas": 2')
    fdg = toy_fdg()
    before = fdg.copy()
    with pytest.raises(wb.PlacementError, match=r"^policy JSON is malformed \(.*\); expected \{\"name\": …"):
        fdg.run(iterations=1, steps=1, policy=str(path), progress=False)
    assert fdg == before and fdg.last_run is None


def test_a_policy_naming_unknown_workers_is_refused(client, tmp_path):
    policy = wb.Policy("mine", (Group(("actor", "env"), 1, ("gpu-box-7",)), Group(("learner",), 1, ("0",))))
    path = tmp_path / "mine.json"
    path.write_text(policy.to_json())
    fdg = toy_fdg()
    before = fdg.copy()
    with pytest.raises(wb.PlacementError) as info:
        fdg.run(iterations=2, steps=2, policy=str(path), cluster=client, progress=False)
    assert str(info.value).startswith(
        "policy 'mine' puts 'actor+env' on worker 'gpu-box-7', which is not in the cluster — it may "
        "have left since the policy was made (workers now: 0, 1)."
    )
    assert wb.Policy.from_json(path.read_text()) == policy  # the file is untouched
    assert fdg == before and _replicas_left(client) == 0


@pytest.fixture
def gpuless_client(client):
    """``client`` where this host has no GPU; on a GPU host, a 2-worker cluster of its own
    whose workers see none (``CUDA_VISIBLE_DEVICES`` empty), so the refusal runs there too."""
    import torch

    if not torch.cuda.is_available():
        yield client
        return
    with two_worker_client(env={"CUDA_VISIBLE_DEVICES": ""}) as hidden:
        yield hidden


def test_a_gpu_policy_on_a_cluster_without_gpus_is_refused(gpuless_client):
    client = gpuless_client
    policy = wb.Policy("on-gpu", (Group(("actor", "env"), 2, ("0", "1")), Group(("learner",), 1, ("0",), "gpu")))
    fdg = toy_fdg()
    before = fdg.copy()
    with pytest.raises(wb.PlacementError) as info:
        fdg.run(iterations=2, steps=2, policy=policy, cluster=client, progress=False)
    assert str(info.value) == (
        "policy 'on-gpu' puts 'learner' on the GPU of worker '0', which has no GPU (workers with "
        "GPUs: none). Use device 'cpu' or a worker with a GPU."
    )
    assert fdg == before and _replicas_left(client) == 0


# ============================================================================ clusters
#: a busy machine's slack on top of a connect timeout: well under Dask's own 30 s default,
#: so a connect that ignored the timeout still fails these tests
SLACK_S = 15.0


def test_an_unreachable_scheduler_fails_within_the_timeout():
    start = time.monotonic()
    with pytest.raises(wb.RunConfigError) as info:
        connect("tcp://127.0.0.1:9", timeout=1.5)
    assert time.monotonic() - start < 1.5 + SLACK_S
    assert str(info.value).startswith("could not reach a Dask scheduler at 'tcp://127.0.0.1:9' within 1.5 s")
    assert "leave --cluster out to use the embedded local cluster" in str(info.value)


@pytest.mark.parametrize(
    "address, message",
    [
        ("nonsense://host:8786", "'nonsense://host:8786' is not a Dask scheduler address (unknown address scheme"),
        ("127.0.0.1:notaport", "'127.0.0.1:notaport' is not a Dask scheduler address"),
    ],
    ids=["scheme", "port"],
)
def test_a_malformed_scheduler_address_is_named(address, message):
    fdg = toy_fdg()
    with pytest.raises(wb.RunConfigError) as info:
        fdg.run(iterations=1, steps=1, policy="coarse", cluster=address, progress=False)
    assert str(info.value).startswith(message) and "tcp://HOST:PORT" in str(info.value)


def test_an_address_that_is_not_a_scheduler_fails_within_the_timeout(client):
    dashboard = client.dashboard_link.split("//")[1].split("/")[0]  # an HTTP server: no Dask handshake
    start = time.monotonic()
    with pytest.raises(wb.RunConfigError) as info:
        connect(f"tcp://{dashboard}", timeout=1.0)
    assert time.monotonic() - start < 1.0 + SLACK_S
    assert "accepted the connection but did not answer as a Dask scheduler within 1 s" in str(info.value)
    assert "not the dashboard's (8787)" in str(info.value)


def test_a_run_is_the_last_run_while_it_connects_and_a_failed_connect_loses_nothing():
    """``fdg.running`` and ``fdg.last_run`` agree from a run's first moment (a notebook polls
    them while a background run connects), and a run that never reached its cluster leaves
    the previous run's record in place."""
    import socket

    fdg = toy_fdg()
    before = fdg.run(iterations=1, steps=1, progress=False)
    silent = socket.create_server(("127.0.0.1", 0))  # accepts, never answers: the connect waits
    address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
    failed: list[BaseException] = []

    def run():
        try:
            fdg.run(iterations=1, steps=1, policy="coarse", cluster=address, progress=False)
        except BaseException as exc:  # noqa: BLE001 - the test checks what it was
            failed.append(exc)

    thread = threading.Thread(target=run)
    try:
        thread.start()
        deadline = time.monotonic() + 5
        while not fdg.running and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.005)
        assert fdg.running, "the run never showed as running while it connected"
        going = fdg.last_run
        assert going is not before and going.status == "running" and going.policy_name == "SingleLearnerCoarse"
        thread.join(60)
    finally:
        silent.close()
    assert not thread.is_alive() and len(failed) == 1 and isinstance(failed[0], wb.RunConfigError)
    assert "did not answer as a Dask scheduler" in str(failed[0])
    assert going.status == "failed" and going.error is failed[0]
    assert fdg.last_run is before and not fdg.running


def test_a_cluster_that_is_not_a_client_or_address_is_refused():
    fdg = toy_fdg()
    with pytest.raises(
        wb.RunConfigError, match="--cluster must be a Dask scheduler address .* or a distributed.Client; got 8786"
    ):
        fdg.run(iterations=1, steps=1, policy="coarse", cluster=8786, progress=False)
    with pytest.raises(wb.RunConfigError, match="security must be a distributed.security.Security, not str"):
        connect("tls://127.0.0.1:9", security="ca.pem")


_LINK = re.compile(r"\[(test_\w+)\]\((\.\./tests/[\w/]+\.py)\)")


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_the_error_catalogue_links_real_tests():
    """Every row of docs/errors.md points at a test function that exists in the file it links."""
    doc = ROOT / "docs" / "errors.md"
    rows = [line for line in doc.read_text().splitlines() if re.match(r"^\|\s*\d+\s*\|", line)]
    assert len(rows) >= 30
    numbers = [int(re.match(r"^\|\s*(\d+)", row).group(1)) for row in rows]
    assert len(set(numbers)) == len(numbers), "row numbers repeat"
    functions: dict[Path, set[str]] = {}
    for row in rows:
        assert row.count(" | ") >= 4, f"a row has fewer than 5 columns: {row}"
        links = _LINK.findall(row)
        assert links, f"a row links no test: {row}"
        for name, target in links:
            path = (doc.parent / target).resolve()
            assert path.is_file(), f"{target} does not exist ({row})"
            functions.setdefault(path, _test_functions(path))
            assert name in functions[path], f"{name} is not a test in {target}"
