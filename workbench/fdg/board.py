"""Editing a policy the way a placement board does: drop a fragment on a device, change a
replica count. Each edit returns a new :class:`Policy` or raises :class:`PlacementError`
with the reason the drop is refused — so a widget stays a thin view of this logic.

Example:
    >>> from workbench.fdg.graph import FDG
    >>> from workbench.fdg.inventory import Inventory, WorkerInfo
    >>> from workbench.fdg.policy import SingleLearnerCoarse
    >>> fdg = FDG()
    >>> _ = fdg.add_fragment("env", "obs = 0", rate="init")
    >>> _ = fdg.add_fragment("actor", "act = obs", rate="step")
    >>> _ = fdg.add_fragment("env", "obs = act", rate="step")
    >>> _ = fdg.add_fragment("learner", "w = obs", rate="iteration")
    >>> inv = Inventory((WorkerInfo("tcp://a:1", "w0"), WorkerInfo("tcp://b:1", "w1", gpus=1)))
    >>> policy = SingleLearnerCoarse().place(fdg, inv)
    >>> move_fragment(policy, fdg, "learner", "w1", "gpu", inv)
    Policy('custom', actor+env ×2 on w0, w1 | learner ×1 on w1)
"""
from __future__ import annotations

from workbench.fdg.errors import PlacementError
from workbench.fdg.graph import FDG
from workbench.fdg.inventory import Inventory
from workbench.fdg.plan import make_plan
from workbench.fdg.policy import Group, Policy

__all__ = ["move_fragment", "set_replicas"]


def move_fragment(policy: Policy, fdg: FDG, fragment: str, worker: str, device: str,
                  inventory: Inventory) -> Policy:
    """``fragment`` dropped on ``device`` (``cpu`` or ``gpu``) of ``worker``.

    A fragment fused with others leaves its group; it joins the single-replica group
    already on that worker and device, if there is one, else it gets a group of its own (a
    replicated fragment dropped on one device becomes one replica there).
    Refused (PlacementError, with the reason) when the worker is not there, has no GPU for a
    GPU drop, or the result cannot run (replica counts that cannot feed each other).
    """
    target = inventory.find(worker)
    if target is None:
        raise PlacementError(
            f"cannot place {fragment!r} on {worker!r}: that worker is not in the cluster (it may "
            f"have left). Workers now: {', '.join(inventory.names) or 'none'}."
        )
    if device == "gpu" and target.gpus == 0:
        raise PlacementError(f"cannot place {fragment!r} on the GPU of {worker!r}: it has no GPU.")
    if device not in ("cpu", "gpu"):
        raise PlacementError(f"device must be 'cpu' or 'gpu', not {device!r}.")
    policy.group_of(fragment)  # raises for a fragment the policy does not place
    groups = []
    for group in policy.groups:
        rest = tuple(f for f in group.fragments if f != fragment)
        if rest:
            groups.append(Group(rest, group.replicas, group.workers, group.device))
    home = next((i for i, g in enumerate(groups)
                 if g.replicas == 1 and g.workers == (target.name,) and g.device == device), None)
    if home is None:
        groups.append(Group((fragment,), 1, (target.name,), device))
    else:
        g = groups[home]
        groups[home] = Group(_in_fdg_order(fdg, (*g.fragments, fragment)), 1, g.workers, g.device)
    return _checked(Policy("custom", tuple(groups), policy.asynchronous), fdg, inventory)


def set_replicas(policy: Policy, fdg: FDG, fragment: str, count: int, inventory: Inventory) -> Policy:
    """The group holding ``fragment`` gets ``count`` replicas, spread round-robin over the
    workers it used (all workers when it grows past them)."""
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise PlacementError(f"replicas must be a whole number ≥ 1, got {count!r}.")
    group = policy.group_of(fragment)
    pool = tuple(dict.fromkeys(group.workers)) or inventory.names
    if count > len(pool):
        pool = pool + tuple(n for n in inventory.names if n not in pool)
    workers = tuple(pool[i % len(pool)] for i in range(count))
    groups = tuple(Group(g.fragments, count, workers, g.device) if g is group else g for g in policy.groups)
    return _checked(Policy("custom", groups, policy.asynchronous), fdg, inventory)


def _in_fdg_order(fdg: FDG, names: tuple[str, ...]) -> tuple[str, ...]:
    order = list(fdg.fragments)
    return tuple(sorted(names, key=order.index))


def _checked(policy: Policy, fdg: FDG, inventory: Inventory) -> Policy:
    policy.check(fdg, inventory)
    make_plan(fdg, policy)  # raises when the placement cannot be wired (replica counts)
    return policy
