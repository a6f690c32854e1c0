"""What ``policy="auto"`` may try on an FDG and a cluster, and what it leaves out, with why.

auto promises to pick among placements that never change what is learned: it measures each
candidate on the real run, so a candidate that would train something else (independent
learners, actors on older weights) must not be tried, let alone kept. A candidate is left out
when it does not fit (silently: its preset refuses this FDG or cluster), when its placement
would replicate a learner whose cells never call ``wb.allreduce`` (said, in
:attr:`Candidates.left_out`), or when it acts on older weights and ``lag`` (``--auto-lag``)
does not allow it.

Example:
    >>> from workbench.fdg.graph import Graph
    >>> from workbench.fdg.inventory import WorkerInfo
    >>> fdg = Graph()
    >>> _ = fdg.add_fragment("env", "obs = 0", rate="init")
    >>> _ = fdg.add_fragment("actor", "action = obs + 1", rate="step")
    >>> _ = fdg.add_fragment("env", "obs = action\\nreward = obs", rate="step")
    >>> _ = fdg.add_fragment("learner", "w = reward.sum()", rate="iteration")
    >>> inv = Inventory((WorkerInfo("tcp://a:1", "w0"), WorkerInfo("tcp://b:1", "w1")))
    >>> candidates = auto_candidates(fdg, inv)
    >>> [name for name, _ in candidates]
    ['SingleLearnerCoarse', 'SingleLearnerFine', 'GPUOnly']
    >>> print(candidates.left_out[0])
    MultiLearner: not tried, the learner never calls wb.allreduce (independent learners would change what is learned)
"""

from __future__ import annotations

from workbench.fdg.errors import PlacementError
from workbench.fdg.graph import Graph
from workbench.fdg.inventory import Inventory
from workbench.fdg.plan import independent_learners
from workbench.fdg.policy import GPUOnly, MultiLearner, Pipelined, SingleLearnerCoarse, SingleLearnerFine

__all__ = ["Candidates", "auto_candidates", "INDEPENDENT_LEARNERS_LEFT_OUT"]

#: What auto says of a preset it leaves out because its learner replicas would not average
INDEPENDENT_LEARNERS_LEFT_OUT = (
    "not tried, the learner never calls wb.allreduce (independent learners would change what is learned)"
)


class Candidates(list):
    """The ``(name, preset)`` pairs auto tries, in order (a plain list of them, as before),
    and ``left_out``: a line per preset that fits but was not offered, saying why (auto
    prints them under its table).

    >>> Candidates([("GPUOnly", GPUOnly())], left_out=("MultiLearner: not tried, …",)).left_out
    ('MultiLearner: not tried, …',)
    """

    def __init__(self, pairs=(), left_out: tuple[str, ...] = ()) -> None:
        super().__init__(pairs)
        self.left_out = tuple(left_out)


def auto_candidates(fdg: Graph, inventory: Inventory, lag: int = 0) -> Candidates:
    """The presets ``policy="auto"`` tries: every synchronous preset that can place this
    FDG on this cluster without making independent learners, and ``Pipelined(lag=lag)``
    when ``lag`` (``--auto-lag``) allows it. Async and Pipelined change the algorithm's
    semantics, acting on older weights, so they are never chosen for you unasked.

    A placement that replicates a learner whose cells never call ``wb.allreduce``
    (MultiLearner on DQN) is judged by :func:`workbench.fdg.plan.independent_learners`, the
    same analysis that warns when such a policy is asked for by name: auto does not try it,
    so its trial cannot train independent learners, and says so in ``left_out``.
    """
    out, left_out = [], []
    lagging = [Pipelined(lag=lag)] if lag else []
    for preset in (SingleLearnerCoarse(), SingleLearnerFine(), MultiLearner(), GPUOnly(), *lagging):
        try:
            placed = preset.place(fdg, inventory)
        except PlacementError:
            continue  # does not fit this FDG or cluster: nothing to say, it was never an option
        if independent_learners(fdg, placed):
            left_out.append(f"{preset.name}: {INDEPENDENT_LEARNERS_LEFT_OUT}")
            continue
        out.append((preset.name, preset))
    return Candidates(out, tuple(left_out))
