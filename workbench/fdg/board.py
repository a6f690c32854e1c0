"""Editing a policy the way a placement board does: drop a fragment on a device, change a
replica count. Each edit returns a new :class:`Policy` or raises :class:`PlacementError`
with the reason the drop is refused — so a widget stays a thin view of this logic.

Example:
    >>> from workbench.fdg.graph import Graph
    >>> from workbench.fdg.inventory import Inventory, WorkerInfo
    >>> from workbench.fdg.policy import SingleLearnerCoarse
    >>> fdg = Graph()
    >>> _ = fdg.add_fragment("env", "obs = 0", rate="init")
    >>> _ = fdg.add_fragment("actor", "act = obs", rate="step")
    >>> _ = fdg.add_fragment("env", "obs = act", rate="step")
    >>> _ = fdg.add_fragment("learner", "w = obs", rate="iteration")
    >>> inv = Inventory((WorkerInfo("tcp://a:1", "w0"), WorkerInfo("tcp://b:1", "w1", gpus=1)))
    >>> policy = SingleLearnerCoarse().place(fdg, inv)
    >>> move_fragment(policy, fdg, "learner", "w1", "gpu", inv)
    Policy('custom', actor+env ×2 on w0, w1 | learner ×1 on w1)
    >>> fill_preset("multilearner", fdg, inv)
    Policy('MultiLearner', actor+env+learner ×2 on w0, w1)
"""

from __future__ import annotations

from workbench.fdg.errors import PlacementError
from workbench.fdg.graph import Graph
from workbench.fdg.vocabulary import check_device_kind, whole_number
from workbench.fdg.inventory import Inventory
from workbench.fdg.plan import make_plan
from workbench.fdg.auto_candidates import auto_candidates
from workbench.fdg.policy import IN_PROCESS, PRESETS, Group, Policy

__all__ = ["BOARD_PRESETS", "move_fragment", "set_replicas", "fill_preset", "load_policy"]

#: The presets a board offers, by the names ``--policy`` takes. ``inline`` is not among
#: them: it places nothing on the cluster's workers.
BOARD_PRESETS = ("coarse", "fine", "multilearner", "gpuonly", "async", "pipelined", "auto")


def move_fragment(policy: Policy, fdg: Graph, fragment: str, worker: str, device: str, inventory: Inventory) -> Policy:
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
    try:
        check_device_kind(device, f"cannot place {fragment!r}")
    except ValueError as exc:
        raise PlacementError(str(exc)) from None
    policy.group_of(fragment)  # raises for a fragment the policy does not place
    groups = []
    for group in policy.groups:
        rest = tuple(f for f in group.fragments if f != fragment)
        if rest:
            groups.append(Group(rest, group.replicas, group.workers, group.device))
    home = next(
        (i for i, g in enumerate(groups) if g.replicas == 1 and g.workers == (target.name,) and g.device == device),
        None,
    )
    if home is None:
        groups.append(Group((fragment,), 1, (target.name,), device))
    else:
        g = groups[home]
        groups[home] = Group(_in_fdg_order(fdg, (*g.fragments, fragment)), 1, g.workers, g.device)
    return _checked(Policy("custom", tuple(groups), policy.asynchronous, policy.lag), fdg, inventory)


def set_replicas(policy: Policy, fdg: Graph, fragment: str, count: int, inventory: Inventory) -> Policy:
    """The group holding ``fragment`` gets ``count`` replicas, spread round-robin over the
    workers it used (all workers when it grows past them)."""
    if whole_number(count) is None or count < 1:
        raise PlacementError(f"replicas must be a whole number ≥ 1, got {count!r}.")
    count = whole_number(count)
    group = policy.group_of(fragment)
    # workers that have left are dropped from the pool: a resize is a way to recover from that
    pool = tuple(w for w in dict.fromkeys(group.workers) if inventory.find(w)) or inventory.names
    if count > len(pool):
        pool = pool + tuple(n for n in inventory.names if n not in pool)
    workers = tuple(pool[i % len(pool)] for i in range(count))
    groups = tuple(Group(g.fragments, count, workers, g.device) if g is group else g for g in policy.groups)
    return _checked(Policy("custom", groups, policy.asynchronous, policy.lag), fdg, inventory)


def fastest_trial(auto_table: list[dict]) -> str:
    """The policy of the fastest row of a run's ``auto_table`` (rows of ``policy``, ``rate``
    and its ``unit``).

    >>> fastest_trial([{"policy": "SingleLearnerCoarse", "rate": 900.0, "unit": "env-steps/s"},
    ...                {"policy": "MultiLearner", "rate": 1500.0, "unit": "env-steps/s"}])
    'MultiLearner'
    """
    return max(auto_table, key=lambda row: row["rate"])["policy"]


def fill_preset(name: str, fdg: Graph, inventory: Inventory, *, auto_table: list[dict] | None = None) -> Policy:
    """The preset ``name`` (one of :data:`BOARD_PRESETS`, or a preset class name) placed on
    this cluster.

    ``auto`` is decided at run time, by measuring each candidate on the cluster: given the
    ``auto_table`` of a run that did (``run.auto_table``), it is the fastest candidate that
    run measured; without one it is refused with that explanation.
    """
    if name == "auto":
        if not auto_table:
            fits = ", ".join(n for n, _ in auto_candidates(fdg, inventory)) or "none fits this cluster"
            raise PlacementError(
                "auto is chosen at run time: a run with policy auto tries each preset that fits "
                f"this cluster ({fits}) for a few iterations and keeps the fastest. After such a "
                "run, auto here fills the board with its pick."
            )
        name = fastest_trial(auto_table)
    if name == "inline" or name not in PRESETS:
        raise PlacementError(f"unknown preset {name!r}; choose one of {', '.join(BOARD_PRESETS)}.")
    return _checked(PRESETS[name]().place(fdg, inventory), fdg, inventory)


def load_policy(text: str, fdg: Graph, inventory: Inventory) -> Policy:
    """A policy from its JSON (:meth:`Policy.to_json`), checked against this FDG and cluster.

    Refused (PlacementError) when the JSON is malformed, the policy does not place every
    fragment once, names a worker that is not there, or leaves a group without workers or
    in the calling process (the board places replicas on workers).
    """
    policy = Policy.from_json(text)
    for group in policy.groups:
        if not group.workers or IN_PROCESS in group.workers:
            where = "no workers" if not group.workers else "the calling process (inline)"
            raise PlacementError(
                f"policy {policy.name!r} puts {group.name!r} on {where}; a board places every "
                "replica on a cluster worker: give the group one worker per replica."
            )
    return _checked(policy, fdg, inventory)


def _in_fdg_order(fdg: Graph, names: tuple[str, ...]) -> tuple[str, ...]:
    order = list(fdg.fragments)
    return tuple(sorted(names, key=order.index))


def _checked(policy: Policy, fdg: Graph, inventory: Inventory) -> Policy:
    policy.check(fdg, inventory)
    make_plan(fdg, policy)  # raises when the placement cannot be wired (replica counts)
    return policy
