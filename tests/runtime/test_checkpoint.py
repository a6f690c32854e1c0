"""Checkpoints: weights-only files, atomic writes, resume under any policy and worker count."""

from __future__ import annotations

import json
import logging
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import workbench as wb
from workbench.errors import CheckpointError
from workbench.runtime.state.checkpoint import load_checkpoint, save_checkpoint
from workbench.runtime.state.portable import encode_state, restore_into
from workbench.runtime.state.replica_state import RunState

QUICKSTART = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb"


def weights_fdg() -> wb.FDG:
    """A learner with a torch network and Adam that logs the sum of its weights *before*
    each update: resuming must continue from exactly the saved weights. The env keeps a
    NumPy generator, whose stream must continue too."""
    fdg = wb.FDG(namespace={"np": np, "torch": torch, "wb": wb})
    fdg.add_fragment("env", "rng = np.random.default_rng(replica.index)\nobs = rng.normal(size=(4, 3))", rate="init")
    fdg.add_fragment("env", "obs = rng.normal(size=(4, 3)).astype(np.float32)", rate="step")
    fdg.add_fragment(
        "learner",
        "torch.manual_seed(0)\nnet = torch.nn.Linear(3, 1)\n"
        "opt = torch.optim.Adam(net.parameters(), lr=0.01)\nupdates = 0",
        rate="init",
    )
    fdg.add_fragment(
        "learner",
        textwrap.dedent("""\
        wb.log("learner/w_before", float(sum(p.detach().sum() for p in net.parameters())))
        loss = net(torch.as_tensor(obs).reshape(-1, 3)).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        updates += 1
        wb.log("learner/updates", updates)
        """),
        rate="iteration",
    )
    return fdg


def saved_weight_sum(path) -> float:
    ckpt = load_checkpoint(path)
    net = torch.nn.Linear(3, 1)
    ns = {"net": net, "opt": torch.optim.Adam(net.parameters())}
    restore_into(ns, ckpt.state.fragments["learner"][0])
    return float(sum(p.detach().sum() for p in net.parameters()))


# -- the encoding ------------------------------------------------------------------------
def test_portable_state_round_trips_networks_optimisers_arrays_and_generators():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    net(torch.ones(5, 3)).sum().backward()
    opt.step()
    rng = np.random.default_rng(7)
    rng.normal(size=3)
    values = {
        "net": net,
        "opt": opt,
        "rng": rng,
        "obs": np.arange(6, dtype=np.int16).reshape(2, 3),
        "t": torch.arange(3.0),
        "n": 5,
        "hist": [1.5, (2, "x")],
        "cfg": {"a": None},
        "fn": lambda x: x,
    }
    saved, skipped = encode_state(values)
    assert skipped == ["fn"]

    torch.manual_seed(1)  # what the init cell builds again: other weights, fresh Adam
    fresh_net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    ns = {"net": fresh_net, "opt": torch.optim.Adam(fresh_net.parameters(), lr=1e-3)}
    restore_into(ns, saved)
    for a, b in zip(net.parameters(), ns["net"].parameters()):
        assert torch.equal(a, b)
    assert ns["opt"].state_dict()["state"][0]["exp_avg"].equal(opt.state_dict()["state"][0]["exp_avg"])
    assert ns["opt"].param_groups[0]["params"][0] is next(ns["net"].parameters())  # still linked
    assert ns["rng"].normal() == rng.normal()  # the stream continues
    assert ns["obs"].dtype == np.int16 and (ns["obs"] == values["obs"]).all()
    assert ns["n"] == 5 and ns["hist"] == [1.5, (2, "x")] and ns["cfg"] == {"a": None}


def test_checkpoint_files_are_json_and_weights_only(tmp_path):
    run = weights_fdg().run(iterations=3, steps=2, progress=False)
    path = run.checkpoint(tmp_path)
    manifest = json.loads((Path(path) / "manifest.json").read_text())
    assert manifest["iteration"] == 3 and manifest["policy"]["name"] == "inline"
    assert {c["fragment"] for c in manifest["cells"]} == {"env", "learner"}
    torch.load(Path(path) / "state.pt", weights_only=True)  # loads without pickle
    assert (tmp_path / "LATEST").read_text() == "iteration-000003"
    # the checkpoint rebuilds its FDG: a fresh process can resume without the notebook
    assert wb.FDG.from_checkpoint(load_checkpoint(tmp_path), namespace=weights_fdg().namespace) == weights_fdg()


def test_a_checkpoint_with_a_pickled_payload_is_refused_without_running_it(tmp_path):
    run = weights_fdg().run(iterations=1, steps=2, progress=False)
    path = Path(run.checkpoint(tmp_path))
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save(
        {"format": "workbench-checkpoint", "version": 1, "fragments": {"x": Evil()}},
        path / "state.pt",
        pickle_module=pickle,
    )
    with pytest.raises(CheckpointError, match="cannot be read"):
        load_checkpoint(path)
    assert not marker.exists()


# -- resume -----------------------------------------------------------------------------
def test_resume_continues_from_the_saved_iteration_with_the_saved_weights(tmp_path):
    fdg = weights_fdg()
    first = fdg.run(iterations=4, steps=2, progress=False)
    first.checkpoint(tmp_path)
    resumed = fdg.run(iterations=2, steps=2, progress=False, resume=str(tmp_path))
    assert resumed.rows[0]["iteration"] == 4
    assert resumed.rows[0]["learner/updates"] == 5  # plain counters continue too
    assert resumed.rows[0]["learner/w_before"] == pytest.approx(saved_weight_sum(tmp_path), abs=1e-6)
    # the same numbers as a run that never stopped: weights, Adam and the env's generator
    straight = weights_fdg().run(iterations=6, steps=2, progress=False)
    assert resumed.metrics["learner/w_before"].tolist() == pytest.approx(
        straight.metrics["learner/w_before"].tolist()[4:], abs=1e-6
    )


def test_a_resumed_run_s_rate_counts_only_its_own_env_steps(tmp_path):
    """The count goes on from the checkpoint's; the rate is this run's steps over this run's
    time, as charts/SPS is (it divided the total by this run's time: 40,016 against 13,338)."""
    fdg = weights_fdg()
    fdg.run(iterations=4, steps=2, progress=False).checkpoint(tmp_path)
    resumed = fdg.run(iterations=2, steps=2, progress=False, resume=str(tmp_path))
    base = resumed.env_steps_base
    assert base > 0 and resumed.env_steps > base
    assert resumed.steps_per_second == pytest.approx((resumed.env_steps - base) / resumed.wall_time)
    assert f"({base:,} of them before it resumed)" in resumed.summary()


@pytest.fixture(scope="module")
def one_worker():
    from distributed import Client, LocalCluster

    with LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        silence_logs=logging.ERROR,
    ) as cluster:
        with Client(cluster, set_as_default=False) as c:
            yield c


@pytest.mark.parametrize("direction", ["coarse on 2 workers → gpuonly on 1", "gpuonly on 1 worker → coarse on 2"])
def test_checkpoint_under_one_policy_resumes_under_another_on_other_workers(direction, client, one_worker, tmp_path):
    """The acceptance test: written under SingleLearnerCoarse on 2 workers, resumed under
    GPUOnly (everything in one group; on a CPU here) on 1 (and the reverse), from the saved
    iteration and weights."""
    fdg = weights_fdg()
    if direction.startswith("coarse"):
        (write_policy, write_on), (read_policy, read_on) = ("coarse", client), ("gpuonly", one_worker)
    else:
        (write_policy, write_on), (read_policy, read_on) = ("gpuonly", one_worker), ("coarse", client)
    first = fdg.run(iterations=3, steps=2, policy=write_policy, cluster=write_on, progress=False)
    first.checkpoint(tmp_path)
    written = load_checkpoint(tmp_path)
    assert len(written.policy.groups[0].workers) + len(written.policy.groups[-1].workers) >= 2

    resumed = fdg.run(iterations=2, steps=2, policy=read_policy, cluster=read_on, progress=False, resume=str(tmp_path))
    assert resumed.status == "finished"
    assert resumed.rows[0]["iteration"] == 3
    assert resumed.rows[0]["learner/w_before"] == pytest.approx(saved_weight_sum(tmp_path), abs=1e-6)
    assert resumed.rows[0]["learner/updates"] == 4


def test_ppo_keeps_what_it_learned_across_a_checkpoint(tmp_path, client):
    """A real learner: PPO trained inline, checkpointed, resumed under SingleLearnerCoarse
    on the cluster. With the learning rate then set to 0 (Adam then moves nothing), what
    the resumed learner and both actor replicas hold must be the checkpoint's weights bit
    for bit, and the learner's counters go on from where they were: its update count and
    the observation statistics' sample count (which learning rate 0 does not stop)."""
    import dataclasses

    from workbench.notebook import load_notebook

    fdg, options = load_notebook(QUICKSTART)
    trained = fdg.run(iterations=6, steps=options["steps"], progress=False)
    trained.checkpoint(tmp_path)
    agent = trained.state.fragments["learner"][0]["agent"]
    saved = {k: v.clone() for k, v in agent.named_parameters()}
    seen = float(agent.obs_norm.count)
    frozen = dict(fdg.namespace, cfg=dataclasses.replace(fdg.namespace["cfg"], learning_rate=0.0))
    resumed = fdg.run(
        iterations=3,
        steps=options["steps"],
        policy="coarse",
        cluster=client,
        progress=False,
        resume=str(tmp_path),
        namespace=frozen,
    )
    assert resumed.rows[0]["iteration"] == 6 and resumed.status == "finished"
    learner = resumed.state.fragments["learner"][0]
    assert learner["update"] == 6 + 3
    after = dict(learner["agent"].named_parameters())
    assert all(torch.equal(saved[k], after[k]) for k in saved), "the learner's weights changed"
    cfg = fdg.namespace["cfg"]
    assert float(learner["agent"].obs_norm.count) == seen + 3 * cfg.num_envs * cfg.num_steps
    for actor in resumed.state.fragments["actor"]:
        assert all(torch.equal(saved[k], dict(actor["policy"].named_parameters())[k]) for k in saved)


# -- automatic checkpoints ----------------------------------------------------------------
@pytest.mark.parametrize("policy", ["inline", "coarse"])
def test_checkpoints_every_n_iterations_while_training(policy, client, tmp_path):
    fdg = weights_fdg()
    run = fdg.run(
        iterations=7,
        steps=2,
        policy=policy,
        cluster=client,
        progress=False,
        checkpoint_dir=str(tmp_path),
        checkpoint_every=2,
    )
    names = [Path(p).name for p in run.checkpoints]
    assert names == ["iteration-000002", "iteration-000004", "iteration-000006", "iteration-000007"]
    kept = sorted(p.name for p in tmp_path.glob("iteration-*"))
    assert kept == names[-3:]  # keep=3 by default
    # a periodic checkpoint holds the weights the run had then
    mid = fdg.run(iterations=1, steps=2, progress=False, resume=str(tmp_path / "iteration-000004"))
    assert mid.rows[0]["learner/w_before"] == pytest.approx(run.metrics["learner/w_before"][4], abs=1e-6)


# -- atomicity ------------------------------------------------------------------------------
_WRITER = """
import sys, numpy as np, workbench as wb
fdg = wb.FDG(namespace={"np": np})
fdg.add_fragment("learner", "big = np.zeros(1)\\nn = 0", rate="init")
fdg.add_fragment("learner", "n += 1\\nbig = np.ones(int(size))", rate="iteration")
fdg.namespace["size"] = 1
run = fdg.run(iterations=1, steps=1, progress=False)
run.checkpoint(sys.argv[1])
print("first written", flush=True)
fdg.namespace["size"] = 60_000_000  # ~480 MB: long enough to be killed mid-write
run = fdg.run(iterations=1, steps=1, progress=False, resume=sys.argv[1])
run.checkpoint(sys.argv[1])
print("second written", flush=True)
"""


def test_killing_the_process_mid_write_leaves_the_previous_checkpoint_loadable(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    ckpt = tmp_path / "ckpt"
    proc = subprocess.Popen([sys.executable, str(script), str(ckpt)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "first written"
        deadline = time.monotonic() + 60
        while not list(ckpt.glob(".tmp-*/state.pt")):  # the second write is under way
            assert proc.poll() is None, "the writer finished before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.001)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        proc.kill()
    assert not (ckpt / "iteration-000002").exists()
    loaded = load_checkpoint(ckpt)
    assert loaded.iteration == 1 and loaded.state.fragments["learner"][0]["n"] == 1
    # the next write clears the half-written leftovers
    save_checkpoint(
        ckpt,
        RunState(5, loaded.state.fragments, frozenset()),
        wb.FDG.from_checkpoint(loaded, namespace={"np": np}),
        loaded.policy,
    )
    assert not list(ckpt.glob(".tmp-*")) and load_checkpoint(ckpt).iteration == 5


# -- bad checkpoints ------------------------------------------------------------------------
def test_a_checkpoint_from_an_fdg_with_other_fragments_is_refused_and_nothing_changes(tmp_path):
    weights_fdg().run(iterations=1, steps=2, progress=False).checkpoint(tmp_path)
    other = wb.FDG()
    other.add_fragment("counter", "n = 0", rate="init")
    other.add_fragment("counter", "n += 1", rate="step")
    before = other.copy()
    with pytest.raises(CheckpointError, match=r"fragments env, learner.*this FDG has counter"):
        other.run(iterations=1, steps=1, progress=False, resume=str(tmp_path))
    assert other == before and other.last_run is None


def test_a_missing_or_empty_checkpoint_path_says_so(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nowhere")
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        load_checkpoint(tmp_path)


def test_a_corrupt_checkpoint_is_reported_and_the_previous_one_still_loads(tmp_path):
    fdg = weights_fdg()
    first = fdg.run(iterations=1, steps=2, progress=False)
    first.checkpoint(tmp_path)
    second = fdg.run(iterations=1, steps=2, progress=False, resume=str(tmp_path))
    newest = Path(second.checkpoint(tmp_path))
    (newest / "state.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="cannot be read.*Earlier checkpoints"):
        load_checkpoint(tmp_path)
    assert load_checkpoint(tmp_path / "iteration-000001").iteration == 1


def test_checkpoint_needs_a_kept_state():
    run = weights_fdg().run(iterations=1, steps=2, progress=False, keep_state=False)
    with pytest.raises(CheckpointError, match="keep_state"):
        run.checkpoint("/tmp/unused")


def test_after_a_fragment_error_the_fixed_cell_resumes_from_the_last_checkpoint(tmp_path):
    """A learner that raises mid-run: the run stops with the fragment named, the periodic
    checkpoints stay, and after fixing the cell training resumes from the newest one."""
    fdg = weights_fdg()
    fdg.add_fragment(
        "learner",
        "if updates == 5:\n    raise ValueError('boom')\n" + fdg["learner"].cells["iteration"].code,
        rate="iteration",
    )
    with pytest.raises(wb.FragmentRuntimeError, match=r"fragment 'learner'.*cell line 2") as info:
        fdg.run(iterations=10, steps=2, progress=False, checkpoint_dir=str(tmp_path), checkpoint_every=2)
    assert "ValueError: boom" in str(info.value)
    assert fdg.last_run.status == "failed"
    assert load_checkpoint(tmp_path).iteration == 4
    fdg.add_fragment("learner", weights_fdg()["learner"].cells["iteration"].code, rate="iteration")  # the fix
    resumed = fdg.run(iterations=3, steps=2, progress=False, resume=str(tmp_path))
    assert resumed.status == "finished" and resumed.rows[0]["iteration"] == 4
    assert resumed.rows[-1]["learner/updates"] == 7


def test_an_init_cell_that_builds_other_shapes_cannot_take_the_checkpoint(tmp_path):
    weights_fdg().run(iterations=1, steps=2, progress=False).checkpoint(tmp_path)
    wider = weights_fdg()
    wider.add_fragment(
        "learner", "net = torch.nn.Linear(3, 2)\nopt = torch.optim.Adam(net.parameters())\nupdates = 0", rate="init"
    )
    with pytest.raises(
        wb.FragmentRuntimeError,
        match=r"(?s)fragment 'learner' \(init cell\).*restoring "
        r"its checkpointed state failed: ValueError: "
        r"net.state_dict\(\)\['weight'\] does not fit",
    ) as info:
        wider.run(iterations=1, steps=2, progress=False, resume=str(tmp_path))
    assert "shape (1, 3)" in str(info.value) and "shape (2, 3)" in str(info.value)
    assert load_checkpoint(tmp_path).iteration == 1


def test_numpy_scalars_in_a_fragments_state_checkpoint_and_load(tmp_path):
    """``total = reward.sum()`` keeps an np.float64: a checkpoint of it must load (torch's
    weights_only loader refuses NumPy scalars, so they are saved as Python numbers)."""
    fdg = wb.FDG(namespace={"np": np})
    fdg.add_fragment("learner", "total = np.float64(0)\ncount = np.int64(0)", rate="init")
    fdg.add_fragment("learner", "total = total + np.float64(1.5)\ncount = count + 1", rate="iteration")
    fdg.run(iterations=2, steps=1, progress=False).checkpoint(tmp_path)
    resumed = fdg.run(iterations=1, steps=1, progress=False, resume=str(tmp_path))
    assert resumed.state.fragments["learner"][0]["total"] == 4.5
    assert resumed.state.fragments["learner"][0]["count"] == 3
