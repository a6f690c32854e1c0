"""A worker whose channel servers answer late is busy, not lost (issue 30: under
SingleLearnerCoarse(actors=100) on 2 cores, liveness retired a healthy worker): the
liveness decision retires only workers that miss both probes AND that the scheduler has
not heard from lately; a live worker always heartbeats."""
from __future__ import annotations

from workbench.cluster import liveness
from workbench.cluster._dask_compat import workers_info

UNANSWERED = ("127.0.0.1", 1)  # nothing listens there: a probe gets no challenge


def test_a_heartbeating_worker_whose_channels_do_not_answer_is_not_lost(client):
    live = sorted(workers_info(client))[0]
    assert liveness.confirmed_silent({live: UNANSWERED}) == [live]  # the probes alone would retire it
    assert liveness.lost_among(client, {live: UNANSWERED}) == []
    assert live in workers_info(client)


def test_a_worker_the_scheduler_has_not_heard_from_is_lost(client):
    gone = "tcp://127.0.0.1:9"  # not a worker of this cluster: never heard from
    live = sorted(workers_info(client))[0]
    assert liveness.lost_among(client, {gone: UNANSWERED, live: UNANSWERED}) == [gone]
    # and one heard from too long ago (a frozen or cut-off worker by the time both probes failed)
    assert liveness.lost_among(client, {live: UNANSWERED}, within=0.0) == [live]
