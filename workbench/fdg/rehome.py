"""Re-placing a policy after workers left: the replicas of a worker that is gone move to
the least loaded worker that is there (GPU groups only to workers with a GPU)."""

from __future__ import annotations

from workbench.fdg.inventory import Inventory
from workbench.fdg.errors import PlacementError
from workbench.fdg.policy import IN_PROCESS, Group, Policy

__all__ = ["rehome"]


def rehome(policy: Policy, inventory: Inventory) -> Policy:
    """``policy`` with every replica placed on a worker that is gone moved to a worker that
    is there — the least loaded first, GPU groups only to workers with a GPU.

    >>> from workbench.fdg.inventory import WorkerInfo
    >>> p = Policy("p", (Group(("actor",), 2, ("w0", "w1")), Group(("learner",), 1, ("w1",))))
    >>> rehome(p, Inventory((WorkerInfo("tcp://a:1", "w0"), WorkerInfo("tcp://c:1", "w2"))))
    Policy('p', actor ×2 on w0, w2 | learner ×1 on w0)
    """
    load = {w.name: 0 for w in inventory.workers}
    for group in policy.groups:
        for worker in group.workers:
            if worker in load:
                load[worker] += 1
    groups = []
    for group in policy.groups:
        workers = []
        for worker in group.workers:
            if worker == IN_PROCESS or inventory.find(worker) is not None:
                workers.append(worker)
                continue
            able = [w.name for w in inventory.workers if group.device != "gpu" or w.gpus > 0]
            if not able:
                kind = "a GPU" if group.device == "gpu" else "any"
                raise PlacementError(
                    f"worker {worker!r} of group {group.name!r} is gone and no worker with {kind} "
                    f"is left to take its place (workers: {', '.join(inventory.names) or 'none'})."
                )
            spare = min(able, key=lambda name: (load[name], able.index(name)))
            load[spare] += 1
            workers.append(spare)
        groups.append(Group(group.fragments, group.replicas, tuple(workers), group.device))
    return Policy(policy.name, tuple(groups), policy.asynchronous, policy.lag)
