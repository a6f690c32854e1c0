"""A fragment a policy does not place: what the error says.

Three cases, three pieces of advice (docs/errors.md, rows 48 and 48b):

- a policy of your own (a ``wb.Policy``, a JSON file, the board's) that leaves a fragment
  out: add the fragment to one of its groups;
- the placement a preset made (``inline``, ``SingleLearnerCoarse``, …) reused for an FDG
  that has grown since: a preset has no groups to edit, so pass the preset itself and it
  places every fragment there is;
- a **new fragment registered while a run trains** (``%%fragment logger`` mid-run): the
  run's placement was made when it started, and a new fragment cannot join a run in
  flight. The cell is refused — not registered — and the run goes on with its cells; stop
  the run, register the cell again, and run: the next run places it.

Example:
    >>> print(unplaced_message("mine", "critic"))
    policy 'mine' does not place fragment 'critic'; add it to a group.
"""

from __future__ import annotations

from workbench.fdg.errors import PlacementError

__all__ = ["unplaced_message", "refuse_new_fragments", "PRESET_NAMES"]

#: the names of the placements presets make (``Policy.name``), and the short spellings
PRESET_NAMES = frozenset(
    {
        "inline",
        "coarse",
        "SingleLearnerCoarse",
        "fine",
        "SingleLearnerFine",
        "multilearner",
        "MultiLearner",
        "gpuonly",
        "GPUOnly",
        "async",
        "Async",
        "pipelined",
        "Pipelined",
    }
)


def unplaced_message(policy_name: str, fragment: str) -> str:
    """The message for a policy that does not place ``fragment`` (no run in flight)."""
    if policy_name in PRESET_NAMES:
        return (
            f"policy {policy_name!r} does not place fragment {fragment!r}: it is the placement "
            f"the {policy_name} preset made for the FDG as it was before {fragment!r} was added, "
            f"and a preset has no groups to edit. Pass the preset itself (policy="
            f"{policy_name!r}): it places every fragment of the FDG when the run starts."
        )
    return f"policy {policy_name!r} does not place fragment {fragment!r}; add it to a group."


def refuse_new_fragments(graph, policy) -> None:
    """Raise :class:`PlacementError` when ``graph`` (the FDG as an edit during a run would
    leave it) has a fragment the running placement ``policy`` does not place: a fragment
    registered while the run trains. Nothing else is checked here (``make_plan`` is)."""
    placed = {name for group in policy.groups for name in group.fragments}
    new = [name for name in graph.fragments if name not in placed]
    if not new:
        return
    fragment, name = new[0], policy.name
    if name in PRESET_NAMES:
        raise PlacementError(
            f"fragment {fragment!r} is new, and a new fragment cannot join a run in flight under a "
            f"preset ({name}): the preset placed the fragments there were when the run started, and "
            f"has no groups to add one to. The cell was not added; the run goes on with its cells. "
            f"Stop the run (%fdg stop or fdg.stop()), run this cell again (or fdg.add_fragment), "
            f"then run again (%fdg run): the preset places {fragment!r} with every other fragment."
        )
    raise PlacementError(
        f"fragment {fragment!r} is new, and the run in flight's policy {name!r} does not place it: "
        f"a new fragment cannot join a run in flight. The cell was not added; the run goes on with "
        f"its cells. Stop the run (%fdg stop or fdg.stop()), add {fragment!r} to a group of the "
        f"policy, run this cell again (or fdg.add_fragment), then run again with that policy."
    )
