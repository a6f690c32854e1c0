"""The notebook's values travel to a cluster once per deploy, not once per replica
(workbench.cluster.notebook_shipping), and nothing of them stays in Dask's stores."""

from __future__ import annotations

import json

import numpy as np

import workbench as wb
from tests.conftest import toy_fdg


def _stored_keys(client) -> set[str]:
    return {key for keys in client.run(lambda dask_worker: [str(k) for k in dask_worker.data]).values() for key in keys}


def test_three_replicas_take_one_pickled_copy_of_the_notebook(client):
    pickled = []

    class Heavy:  # defined here: cloudpickle ships it by value; it counts where it is pickled
        def __reduce__(self):
            pickled.append(1)
            return np.zeros, (4,)

    before = _stored_keys(client)
    fdg = toy_fdg(heavy=Heavy())
    fdg.add_fragment("learner", "total += float(reward.sum())\nwb.log('heavy', float(heavy.sum()))", rate="iteration")
    run = fdg.run(iterations=2, steps=2, policy=wb.SingleLearnerCoarse(actors=2), cluster=client, progress=False)
    assert run.status == "finished" and run.metrics["heavy"].tolist() == [0.0, 0.0]
    assert len(pickled) == 1  # two actor+env replicas and the learner: one copy between them
    tasks = ("-deploy-", "-loop-", "-export-")  # the run's own tasks (their results go later)
    assert {k for k in _stored_keys(client) - before if not any(t in k for t in tasks)} == set()


def test_replicas_in_one_worker_start_from_the_same_notebook_objects_as_inline(client):
    # one scattered copy per worker: its replicas share the notebook's objects, as the replicas
    # of an inline run do (the cells of both actor replicas append to one list; the learner,
    # in the same process, sees both), while each keeps its own namespace (its own ``mark``)
    def fdg():
        graph = toy_fdg(shared=[])
        graph.add_fragment("actor", "gain = scale\nmark = replica.index\nshared.append(mark)", rate="init")
        graph.add_fragment("actor", "action = obs * gain\nassert mark == replica.index", rate="step")
        graph.add_fragment("learner", "total += float(reward.sum())\nwb.log('seen', len(shared))", rate="iteration")
        return graph

    worker = str(next(iter(client.scheduler_info()["workers"].values()))["name"])
    two_on_one = wb.Policy.from_json(
        json.dumps(
            {
                "name": "two-on-one",
                "groups": [
                    {"fragments": ["actor", "env"], "replicas": 2, "workers": [worker, worker]},
                    {"fragments": ["learner"], "replicas": 1, "workers": [worker]},
                ],
            }
        )
    )
    on_cluster = fdg().run(iterations=2, steps=2, policy=two_on_one, cluster=client, progress=False)
    inline = fdg().run(
        iterations=2,
        steps=2,
        policy=wb.Policy.from_json(
            json.dumps(
                {
                    "name": "two-inline",
                    "groups": [
                        {"fragments": ["actor", "env"], "replicas": 2, "workers": ["local", "local"]},
                        {"fragments": ["learner"], "replicas": 1, "workers": ["local"]},
                    ],
                }
            )
        ),
        progress=False,
    )
    assert on_cluster.metrics["seen"].tolist() == inline.metrics["seen"].tolist() == [2.0, 2.0]
