"""An option the policy does not use is said, not dropped (issue 30): a cluster given to
an in-process policy — by name or as a concrete Policy placing every group "local" — is
connected to (a re-placement may move the run onto it) and the run says it is not used."""

from __future__ import annotations

import pytest

from tests.conftest import toy_fdg
from workbench.fdg.policy import Group, Policy


@pytest.mark.parametrize(
    "policy",
    ["inline", Policy("here", (Group(tuple(toy_fdg().fragments), 1, ("local",)),))],
    ids=["inline", "a Policy placing every group in this process"],
)
def test_a_cluster_an_in_process_policy_does_not_use_is_said(client, policy):
    fdg = toy_fdg()
    run = fdg.run(iterations=2, steps=2, policy=policy, cluster=client, progress=False)
    assert run.status == "finished" and run.completed_iterations == 2
    said = [e.message for e in run.events if e.kind == "not applied"]
    assert len(said) == 1 and "the cluster given is not used" in said[0], run.events


def test_no_cluster_no_word(client):
    run = toy_fdg().run(iterations=1, steps=2, policy="inline", progress=False)
    assert not [e for e in run.events if "cluster" in e.message]
