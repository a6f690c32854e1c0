"""``allreduce="torch"`` on a real LocalCluster: gloo process groups between worker
processes give the channels' numbers to the bit (2 learners, one per worker; 3 learners,
two of them sharing a worker), MultiLearner PPO's learners stay identical weight for weight
and equal to the channels' run, and a group is torn down at the run's end, on a stop, on a
re-placement and on a lost worker, so the next stretch forms a new one. A group that cannot
form fails the run with the replicas, their workers and the fix, and loses nothing."""

from __future__ import annotations

import filecmp
import os
import signal
import time

import pytest
import torch

import workbench as wb
from workbench.algorithms import ppo
from workbench.cluster._dask_compat import workers_info
from workbench.errors import FragmentRuntimeError
from workbench.runtime.transport import process_group

#: (shape, dtype) of the values each learner reduces every iteration: small ones (one
#: all-gather) and big ones (all-to-all + all-gather on 3 replicas), floats and integers
CASES = [
    ((), torch.float32),
    ((3,), torch.float32),
    ((2, 5), torch.float64),
    ((7,), torch.int64),
    ((9155,), torch.float32),
    ((301, 17), torch.float32),
]

REDUCE_CELLS = [
    ("%%fragment learner --init", "update = 0\nresults = []\n"),
    (
        "%%fragment learner",
        """\
draws = torch.Generator().manual_seed(1000 * update + replica.index)
for shape, dtype in CASES:
    results.append(wb.allreduce((torch.randn(shape, generator=draws) * 100).to(dtype)))
wb.log("test/groups_open_here", open_groups())
update += 1
""",
    ),
]


def _reduce_fdg() -> wb.FDG:
    fdg = wb.FDG(namespace={"torch": torch, "wb": wb, "CASES": CASES, "open_groups": process_group.open_groups})
    for line, body in REDUCE_CELLS:
        fdg.add_cell(line, body)
    return fdg


def _no_group_left(client, timeout: float = 10.0) -> None:
    """Every worker closes its groups (their watchers notice within a fraction of a second)."""
    deadline = time.monotonic() + timeout
    while any(client.run(process_group.open_groups).values()):
        assert time.monotonic() < deadline, client.run(process_group.open_groups)
        time.sleep(0.1)


def _ppo(iterations: int, learners: int, client, allreduce: str, **options):
    cfg = ppo.PPOConfig()
    fdg = ppo.build_fdg({**vars(ppo), "cfg": cfg})
    return fdg, fdg.run(
        iterations=iterations,
        steps=cfg.num_steps,
        policy=wb.MultiLearner(learners=learners),
        cluster=client,
        progress=False,
        allreduce=allreduce,
        **options,
    )


def _same_weights(*agents) -> bool:
    first = agents[0].state_dict()
    return all(torch.equal(first[k], a.state_dict()[k]) for a in agents[1:] for k in first)


@pytest.mark.parametrize("learners", [2, 3])
def test_gloo_and_the_channels_give_identical_numbers(learners, client):
    results = {}
    for how in ("channels", "torch"):
        run = _reduce_fdg().run(
            iterations=3,
            steps=1,
            policy=wb.MultiLearner(learners=learners),
            cluster=client,
            progress=False,
            allreduce=how,
        )
        assert run.status == "finished", run.error
        replicas = run.state.fragments["learner"]
        assert len(replicas) == learners
        results[how] = [r["results"] for r in replicas]
        assert sum(row["wire/bytes"] for row in run.rows) > 100_000  # gloo's bytes are counted too
        opened = run.metrics["test/groups_open_here"]
        assert (opened > 0).all() if how == "torch" else (opened == 0).all()  # gloo was used, or not
    assert len(results["torch"][0]) == 3 * len(CASES)
    for torch_values in results["torch"]:
        for mine, theirs in zip(torch_values, results["channels"][0]):
            assert mine.dtype == theirs.dtype and torch.equal(mine, theirs)
    _no_group_left(client)  # the run's end closed every group


def test_multilearner_ppo_learners_stay_identical_and_equal_the_channels_run(client):
    _, channels = _ppo(3, 2, client, "channels")
    _, gloo = _ppo(3, 2, client, "torch")
    agents = [r["agent"] for r in gloo.state.fragments["learner"]]
    assert _same_weights(*agents), "the learners drifted apart"
    assert _same_weights(agents[0], channels.state.fragments["learner"][0]["agent"])
    assert gloo.metrics["losses/value_loss"].tolist() == channels.metrics["losses/value_loss"].tolist()
    _no_group_left(client)


class At:
    """A run logger that calls ``act(fdg)`` once iteration ``at`` has finished."""

    def __init__(self, fdg_ref, at: int, act) -> None:
        self.fdg_ref, self.at, self.act = fdg_ref, at, act

    def log(self, row: dict) -> None:
        if row["iteration"] == self.at:
            self.act(self.fdg_ref[0])

    def close(self) -> None:
        pass


def test_a_stop_and_a_replacement_tear_the_group_down_and_the_next_stretch_forms_its_own(client):
    fdg_ref = []
    cfg = ppo.PPOConfig()
    fdg = ppo.build_fdg({**vars(ppo), "cfg": cfg})
    fdg_ref.append(fdg)
    # 2 learners, then 3 (one worker holding two ranks): a new group at the boundary
    grow = At(fdg_ref, 1, lambda f: f.replace(wb.MultiLearner(learners=3)))
    run = fdg.run(
        iterations=4,
        steps=cfg.num_steps,
        policy=wb.MultiLearner(learners=2),
        cluster=client,
        progress=False,
        allreduce="torch",
        loggers=[grow],
    )
    assert run.status == "finished", run.error
    assert any(e.kind == "replaced" for e in run.events), [e.kind for e in run.events]
    agents = [r["agent"] for r in run.state.fragments["learner"]]
    assert len(agents) == 3 and _same_weights(*agents)
    _no_group_left(client)

    stop = At(fdg_ref, 1, lambda f: f.stop())
    run = fdg.run(
        iterations=50,
        steps=cfg.num_steps,
        policy=wb.MultiLearner(learners=2),
        cluster=client,
        progress=False,
        allreduce="torch",
        loggers=[stop],
    )
    assert run.status == "stopped" and len(run.rows) < 50
    _no_group_left(client)


def test_a_group_that_cannot_form_fails_the_run_by_name_and_loses_nothing(client, tmp_path):
    """Every rendezvous fails here (the workers give it no time at all: what an unreachable
    replica 0 gives after its timeout): the run fails with an error naming the replicas,
    their workers and the fix; the FDG, the policy and the checkpoint written before are
    untouched, and the same FDG resumes from that checkpoint over the channels."""
    policy = wb.MultiLearner(learners=2)
    fdg, first = _ppo(2, 2, client, "channels", checkpoint_dir=str(tmp_path), checkpoint_every=2)
    assert first.status == "finished" and first.checkpoints
    saved = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    copy = tmp_path.parent / "before"
    import shutil

    shutil.copytree(tmp_path, copy)
    cells = {name: dict(frag.cells) for name, frag in fdg.fragments.items()}

    def set_timeout(seconds):
        from workbench.runtime.transport import process_group as pg

        pg.RENDEZVOUS_TIMEOUT_S = seconds

    client.run(set_timeout, 0.0)
    try:
        with pytest.raises(FragmentRuntimeError) as caught:
            fdg.run(
                iterations=2,
                steps=ppo.PPOConfig().num_steps,
                policy=policy,
                cluster=client,
                progress=False,
                allreduce="torch",
            )
    finally:
        client.run(set_timeout, process_group.RENDEZVOUS_TIMEOUT_S)
    text = str(caught.value)
    names = sorted(str(w["name"]) for w in workers_info(client).values())
    assert "could not form the process group of the 2 replicas" in text
    assert all(f"on worker {name} (127.0.0.1)" in text for name in names), text
    assert "could not connect to the other replicas through the rendezvous store" in text
    assert "allreduce='channels'" in text and "--allreduce channels" in text
    _no_group_left(client)
    # nothing lost: the cells, the policy object, the checkpoint's files and bytes
    assert {name: dict(frag.cells) for name, frag in fdg.fragments.items()} == cells
    assert policy.learners == 2
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file()) == saved
    assert not filecmp.dircmp(tmp_path, copy).diff_files
    resumed = fdg.run(
        iterations=2,
        steps=ppo.PPOConfig().num_steps,
        policy=policy,
        cluster=client,
        progress=False,
        resume=str(tmp_path),
        allreduce="channels",
    )
    assert resumed.status == "finished" and resumed.env_steps > first.env_steps


def test_a_lost_learner_breaks_the_group_and_the_run_goes_on_with_a_new_one(doomed_cluster):
    """Learner 1's worker is killed mid-run: learner 0's collective fails at once
    ("connection closed"), it waits for the driver as on the channels, the run is re-placed
    from its snapshot, and the new stretch forms a new group (both ranks in one process)."""
    client = doomed_cluster
    pids = client.run(os.getpid)
    fdg_ref, killed = [], []

    def kill(fdg):
        if killed:  # the iteration run again after the loss logs its row again
            return
        name = fdg.last_run.policy.groups[0].workers[1]
        address = next(a for a, info in workers_info(client).items() if str(info["name"]) == name)
        os.kill(pids[address], signal.SIGKILL)
        killed.append(name)

    cfg = ppo.PPOConfig()
    fdg = ppo.build_fdg({**vars(ppo), "cfg": cfg})
    fdg_ref.append(fdg)
    run = fdg.run(
        iterations=10,
        steps=cfg.num_steps,
        policy=wb.MultiLearner(learners=2),
        cluster=client,
        progress=False,
        allreduce="torch",
        loggers=[At(fdg_ref, 3, kill)],
    )
    assert killed and run.status == "finished", (run.error, run.summary())
    lost = [e for e in run.events if e.kind == "worker lost"]
    assert len(lost) == 1 and f"worker {killed[0]} left" in lost[0].message
    learners = run.state.fragments["learner"]
    assert len(learners) == 2 and _same_weights(*(r["agent"] for r in learners))
    assert learners[0]["update"] == 10
    _no_group_left(client)
