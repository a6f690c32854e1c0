"""Distribution policies: how many replicas of each fragment run, where, and what fuses.

A policy is plain data: ``groups``, each a set of fragments fused into one process per
replica, with a replica count and (optionally) the workers the replicas go to. Presets are
constructors that place themselves on whatever FDG and cluster they are given.

Example:
    >>> from workbench.fdg.graph import Graph
    >>> fdg = Graph()
    >>> _ = fdg.add_fragment("env", "obs = make()", rate="init")
    >>> _ = fdg.add_fragment("actor", "action = pick(obs)", rate="step")
    >>> _ = fdg.add_fragment("env", "obs = advance(action)", rate="step")
    >>> _ = fdg.add_fragment("learner", "w = learn(obs, action)", rate="iteration")
    >>> inv = Inventory((WorkerInfo("tcp://a:1", "w0"), WorkerInfo("tcp://b:1", "w1")))
    >>> SingleLearnerCoarse().place(fdg, inv)
    Policy('SingleLearnerCoarse', actor+env ×2 on w0, w1 | learner ×1 on w0)
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass, field

from workbench.fdg.errors import PlacementError
from workbench.fdg.graph import Graph
from workbench.fdg.vocabulary import IN_PROCESS, check_device_kind, whole_number
from workbench.fdg.inventory import Inventory, WorkerInfo
from workbench.fdg.placing import _check_count, _env_workers, _home, _spread, _whole
from workbench.fdg.unplaced import unplaced_message

__all__ = [
    "Group",
    "Policy",
    "Inline",
    "SingleLearnerCoarse",
    "SingleLearnerFine",
    "MultiLearner",
    "GPUOnly",
    "Async",
    "Pipelined",
    "resolve_policy",
    "as_policy_spec",
    "needs_cluster",
    "PRESETS",
]

#: Where an unplaced replica runs: the calling process (no Dask).


@dataclass(frozen=True)
class Group:
    """Fragments fused into one loop per replica, with no serialisation between them.

    ``workers`` holds one worker name per replica (``"local"`` = the calling process).
    """

    fragments: tuple[str, ...]
    replicas: int = 1
    workers: tuple[str, ...] = ()
    device: str = "cpu"

    @property
    def name(self) -> str:
        return "+".join(self.fragments)

    def __post_init__(self) -> None:
        try:
            check_device_kind(self.device, f"group {self.name!r}")
        except ValueError as exc:
            raise PlacementError(str(exc)) from None
        # bool is an int to Python, and JSON's 2.7 must not quietly become 2; NumPy's 2 is 2
        if whole_number(self.replicas) is None or self.replicas < 1:
            raise PlacementError(f"group {self.name!r}: replicas must be a whole number ≥ 1, got {self.replicas!r}.")
        object.__setattr__(self, "replicas", whole_number(self.replicas))  # a plain int: JSON takes it
        if self.workers and len(self.workers) != self.replicas:
            raise PlacementError(
                f"group {self.name!r}: {self.replicas} replicas but {len(self.workers)} workers "
                f"({', '.join(self.workers)}); give one worker per replica."
            )

    def to_dict(self) -> dict:
        return {
            "fragments": list(self.fragments),
            "replicas": self.replicas,
            "workers": list(self.workers),
            "device": self.device,
        }


@dataclass(frozen=True)
class Policy:
    """A concrete placement: every fragment in exactly one group.

    ``asynchronous``: a group that gathers per-iteration values from many replicas takes
    each replica's value as it arrives (running its cells once per value) and replies to
    that replica alone, instead of waiting for all of them (MSRL's async interfaces, A3C).

    ``lag``: the groups with step cells (actors) read what the groups without them (the
    learner) write each iteration ``lag`` iterations late, so they act on iteration ``i + 1``
    while the learner learns from iteration ``i`` (one-step off-policy with ``lag=1``: the
    actors' weights are one update behind). Still deterministic: every value is the same
    on every run, only older.
    """

    name: str
    groups: tuple[Group, ...] = field(default_factory=tuple)
    asynchronous: bool = False
    lag: int = 0

    def __post_init__(self) -> None:
        if whole_number(self.lag) is None or self.lag < 0:
            raise PlacementError(f"policy {self.name!r}: lag must be a whole number ≥ 0, got {self.lag!r}.")
        object.__setattr__(self, "lag", whole_number(self.lag))
        if self.lag and self.asynchronous:
            raise PlacementError(
                f"policy {self.name!r}: lag and asynchronous do not combine (an asynchronous "
                "learner answers each actor's arrival at once); use one of them."
            )

    @property
    def in_process(self) -> bool:
        """True when every replica runs in the calling process (no cluster needed)."""
        return all(set(g.workers) <= {IN_PROCESS} for g in self.groups)

    def group_of(self, fragment: str) -> Group:
        for group in self.groups:
            if fragment in group.fragments:
                return group
        raise PlacementError(unplaced_message(self.name, fragment))

    def check(
        self, fdg: Graph, inventory: Inventory | None = None, *, gpus_here: Callable[[], int] | None = None
    ) -> None:
        """Raise :class:`PlacementError` unless the policy places every fragment of ``fdg``
        exactly once, on workers that exist, and every GPU group where there is a GPU:
        ``inventory`` says the cluster workers' GPUs, ``gpus_here`` this process's (see
        :meth:`check_gpus_here`; None: not checked)."""
        if gpus_here is not None:
            self.check_gpus_here(gpus_here)
        placed = [f for g in self.groups for f in g.fragments]
        for name in placed:
            if name not in fdg:
                raise PlacementError(
                    f"policy {self.name!r} places fragment {name!r}, which the FDG does not have "
                    f"(fragments: {', '.join(fdg.fragments)})."
                )
        twice = sorted({n for n in placed if placed.count(n) > 1})
        if twice:
            raise PlacementError(f"policy {self.name!r} places {', '.join(twice)} in two groups.")
        for name in fdg.fragments:
            self.group_of(name)
        if inventory is not None:
            for group in self.groups:
                for worker in group.workers:
                    if worker == IN_PROCESS:
                        continue
                    info = inventory.find(worker)
                    if info is None:
                        raise PlacementError(
                            f"policy {self.name!r} puts {group.name!r} on worker {worker!r}, which "
                            f"is not in the cluster — it may have left since the policy was made "
                            f"(workers now: {', '.join(inventory.names) or 'none'}). Place the "
                            "group on a worker that is there, or rebuild the policy from a preset."
                        )
                    if group.device == "gpu" and info.gpus == 0:
                        gpus = ", ".join(w.name for w in inventory.gpu_workers()) or "none"
                        raise PlacementError(
                            f"policy {self.name!r} puts {group.name!r} on the GPU of worker "
                            f"{worker!r}, which has no GPU (workers with GPUs: {gpus}). Use "
                            "device 'cpu' or a worker with a GPU."
                        )

    def check_gpus_here(self, gpus_here: Callable[[], int]) -> None:
        """Raise :class:`PlacementError` for a group this policy puts on the GPU of the calling
        process (inline, or a group on ``"local"``) when that process has none — before
        anything runs, as :meth:`check` refuses a GPU group on a cluster worker without one.
        ``gpus_here`` (the process's GPU count) is asked only when there is such a group.

        >>> on_gpu = Policy("inline", (Group(("learner",), 1, (IN_PROCESS,), "gpu"),))
        >>> on_gpu.check_gpus_here(lambda: 1)  # a GPU here: fine
        >>> on_gpu.check_gpus_here(lambda: 0)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        workbench.fdg.errors.PlacementError: policy 'inline' puts group 'learner' (fragment learner) on the GPU ...
        """
        here = [g for g in self.groups if g.device == "gpu" and (self.in_process or IN_PROCESS in g.workers)]
        if here and gpus_here() <= 0:
            raise PlacementError(gpu_not_here_message(self, here[0]))

    def to_dict(self) -> dict:
        """Plain data (what ``to_json`` writes)."""
        return {
            "name": self.name,
            "asynchronous": self.asynchronous,
            "lag": self.lag,
            "groups": [g.to_dict() for g in self.groups],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: dict) -> "Policy":
        """The inverse of :meth:`to_dict`; malformed data raises :class:`PlacementError`."""
        return cls.from_json(json.dumps(data))

    @classmethod
    def from_json(cls, text: str) -> "Policy":
        try:
            data = json.loads(text)
            groups = tuple(
                Group(
                    _names(g["fragments"]),
                    _whole(g.get("replicas", 1)),
                    _names(g.get("workers", [])),
                    g.get("device", "cpu"),
                )
                for g in data["groups"]
            )
            asynchronous = data.get("asynchronous", False)
            if not isinstance(asynchronous, bool):
                raise TypeError(f"asynchronous must be true or false, got {asynchronous!r}")
            return cls(str(data.get("name", "custom")), groups, asynchronous, data.get("lag", 0))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise PlacementError(
                f"policy JSON is malformed ({exc}); expected "
                '{"name": …, "groups": [{"fragments": [...], "replicas": N, "workers": [...]}]}.'
            ) from None

    def __repr__(self) -> str:
        parts = []
        for g in self.groups:
            where = f" on {', '.join(dict.fromkeys(g.workers))}" if g.workers else ""
            parts.append(f"{g.name} ×{g.replicas}{where}")
        mode = ", async" if self.asynchronous else f", lag {self.lag}" if self.lag else ""
        return f"Policy({self.name!r}, {' | '.join(parts)}{mode})"


def gpu_not_here_message(policy: Policy, group: Group) -> str:
    """Why ``group`` cannot run on the GPU of the calling process, and what to do (one line)."""
    fragments = f"fragment{'s' if len(group.fragments) > 1 else ''} {', '.join(group.fragments)}"
    here = (
        "wb.Inline() (the CPU) instead of wb.Inline(device='gpu')"
        if policy.name == Inline.name
        else f"device='cpu' for group {group.name!r}"
    )
    return (
        f"policy {policy.name!r} puts group {group.name!r} ({fragments}) on the GPU of this process "
        f"(the notebook's or script's own, {IN_PROCESS!r}), which has no GPU: no CUDA device answers "
        f"here. Run it on a cluster worker with a GPU (policy 'gpuonly' or 'coarse' with a cluster, or "
        f"a wb.Policy group on that worker with device='gpu'), or here on the CPU: {here}."
    )


def _names(value) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"expected a list of names, got {value!r}")
    return tuple(value)


class Inline:
    """Every fragment fused in the calling process, one replica each, no Dask: for debugging,
    as the overhead baseline, and with ``device="gpu"`` for a notebook on a GPU machine (the
    whole loop on this process's GPU: nothing is copied to another process, as a model in a
    worker would be).

    >>> Inline(device="gpu")
    Inline(device='gpu')
    """

    name = "inline"

    def __init__(self, device: str = "cpu") -> None:
        try:
            self.device = check_device_kind(device, "Inline")
        except ValueError as exc:
            raise PlacementError(str(exc)) from None

    def __repr__(self) -> str:
        return f"Inline(device={self.device!r})"

    def place(self, fdg: Graph, inventory: Inventory | None = None) -> Policy:
        return Policy(self.name, (Group(tuple(fdg.fragments), 1, (IN_PROCESS,), self.device),))


class SingleLearnerCoarse:
    """Acting fragments (those with step cells) fused and replicated over the workers; the
    rest (the learner) as one replica, on a GPU worker when there is one.

    ``actors`` is the number of acting replicas (default: one per worker). ``lag=1``
    pipelines them with the learner (see :class:`Policy`): they act on the next iteration
    with weights one update old while it learns, so on separate cores both run at once; the
    actors then go to the workers other than the learner's first.

    >>> SingleLearnerCoarse(actors=1, lag=1)
    SingleLearnerCoarse(actors=1, lag=1)
    """

    name = "SingleLearnerCoarse"

    def __init__(self, actors: int | None = None, lag: int = 0) -> None:
        actors = _check_count(self.name, "actors", actors)  # the class's own name: Async is one too
        if whole_number(lag) is None or lag < 0:
            raise PlacementError(f"{self.name}(lag=…) must be a whole number ≥ 0, got {lag!r}.")
        self.actors, self.lag = actors, whole_number(lag)

    def __repr__(self) -> str:
        return f"SingleLearnerCoarse(actors={self.actors!r}" + (f", lag={self.lag})" if self.lag else ")")

    def place(self, fdg: Graph, inventory: Inventory) -> Policy:
        if not inventory.workers:
            raise PlacementError(f"{self.name} needs a cluster with at least one worker.")
        acting = fdg.schedule().step_order
        learning = tuple(n for n in fdg.fragments if n not in acting)
        if not acting:
            raise PlacementError(
                f"{self.name} replicates the fragments that have step cells, and this FDG "
                "has none; use the inline policy."
            )
        names = inventory.names
        count = self.actors or len(names)
        home: WorkerInfo = (inventory.gpu_workers() or inventory.workers)[0]
        lag = getattr(self, "lag", 0)  # a preset unpickled from before the option: none
        # pipelined, the actors and the learner compute at once: the learner's worker last
        workers = _env_workers(inventory, home, count) if lag and learning else _spread(names, count)
        groups = [Group(acting, count, workers, _wished_device(fdg, acting, workers, inventory))]
        if learning:
            groups.append(Group(learning, 1, (home.name,), "gpu" if home.gpus else "cpu"))
        return Policy(self.name, tuple(groups), lag=lag if learning else 0)


def _wished_device(fdg: Graph, fragments, workers, inventory: Inventory, default: str = "cpu") -> str:
    """``"gpu"`` for a group whose fragments ask for it (``--device gpu``), or whose preset
    wants it (``default``), when every worker its replicas go to has a GPU; else ``"cpu"``
    (a wish, as on the board: a cluster without GPUs still runs the preset)."""
    wished = default == "gpu" or any(fdg[n].device == "gpu" for n in fragments)
    has_gpus = all((inventory.find(w) or WorkerInfo("", w)).gpus > 0 for w in workers)
    return "gpu" if wished and workers and has_gpus else "cpu"


class Async(SingleLearnerCoarse):
    """SingleLearnerCoarse's placement, asynchronous: each acting replica's per-iteration
    output (A3C's gradients) reaches the learner as it arrives; the learner runs once per
    arrival and sends its fresh output (weights) back to that replica alone. No barrier."""

    name = "Async"

    def __init__(self, actors: int | None = None) -> None:  # no lag: arrivals are answered at once
        super().__init__(actors)

    def __repr__(self) -> str:
        return f"Async(actors={self.actors!r})"

    def place(self, fdg: Graph, inventory: Inventory) -> Policy:
        coarse = super().place(fdg, inventory)
        return Policy(self.name, coarse.groups, asynchronous=True)


class Pipelined(SingleLearnerCoarse):
    """SingleLearnerCoarse pipelined (``lag=1``, see :class:`Policy`): the learner alone on
    the first worker, the acting replicas on the others (default: one per other worker),
    acting on iteration ``i + 1`` with the weights of update ``i - 1`` while the learner
    learns from iteration ``i``. Both compute at once, so an iteration lasts about the
    longer of the two rather than their sum; the batches are one update off-policy (GRPO's
    and PPO's clipped ratio corrects for it). Deterministic, as the synchronous presets.

    >>> from workbench.fdg.graph import Graph
    >>> fdg = Graph()
    >>> _ = fdg.add_fragment("learner", "w = 0", rate="init")
    >>> _ = fdg.add_fragment("actor", "x = w", rate="step")
    >>> _ = fdg.add_fragment("learner", "w = x.sum()", rate="iteration")
    >>> Pipelined().place(fdg, Inventory((WorkerInfo("tcp://a:1", "w0"), WorkerInfo("tcp://b:1", "w1"))))
    Policy('Pipelined', actor ×1 on w1 | learner ×1 on w0, lag 1)
    """

    name = "Pipelined"

    def __init__(self, actors: int | None = None, lag: int = 1) -> None:
        super().__init__(actors, lag)

    def __repr__(self) -> str:
        return f"Pipelined(actors={self.actors!r}, lag={self.lag!r})"

    def place(self, fdg: Graph, inventory: Inventory) -> Policy:
        others = max(1, len(inventory.names) - 1)  # the learner's worker computes for it alone
        placed = SingleLearnerCoarse(self.actors or others, self.lag).place(fdg, inventory)
        return Policy(self.name, placed.groups, lag=placed.lag)


class SingleLearnerFine:
    """The actor beside the learner in one process; environment replicas spread over the
    other workers, exchanging observations and actions every step (no weights on the wire).

    ``envs`` is the number of environment replicas (default: one per other worker);
    ``env_fragments`` names the environment fragments (default: those named ``env…``).
    Env replicas go to the other workers first, the learner's last (:func:`_env_workers`).
    """

    name = "SingleLearnerFine"

    def __init__(self, envs: int | None = None, env_fragments: tuple[str, ...] | None = None) -> None:
        self.envs, self.env_fragments = _check_count(self.name, "envs", envs), env_fragments

    def place(self, fdg: Graph, inventory: Inventory) -> Policy:
        home = _home(inventory)
        stepping = fdg.schedule().step_order
        envs = tuple(self.env_fragments or (n for n in stepping if n.startswith("env")))
        unknown = [n for n in envs if n not in fdg]
        if not stepping:  # naming env fragments cannot help: there is no per-step loop to split
            raise PlacementError(
                "SingleLearnerFine splits the per-step loop (environments on their own workers, "
                "exchanging values every step) but this FDG has no step cells: its fragments "
                f"({', '.join(fdg.fragments)}) run per iteration or at init only. Use "
                "SingleLearnerCoarse, MultiLearner or inline; fine needs an env and an actor "
                "--every step."
            )
        if not envs or unknown:
            raise PlacementError(
                "SingleLearnerFine splits environment fragments from the rest, but "
                + (
                    f"the FDG has no fragment {', '.join(map(repr, unknown))}"
                    if unknown
                    else "no step fragment is named env…"
                )
                + f"; pass SingleLearnerFine(env_fragments=(…)) naming the fragments that step "
                f"environments, among the step fragments {', '.join(stepping)}."
            )
        rest = tuple(n for n in fdg.fragments if n not in envs)
        if not any(e.timing == "per-step" and (e.producer in envs) != (e.consumer in envs) for e in fdg.interfaces):
            raise PlacementError(
                "SingleLearnerFine exchanges values every step between the environment fragments "
                f"({', '.join(envs)}) and the rest, but this FDG has no per-step interface between "
                "them; use SingleLearnerCoarse."
            )
        others = tuple(w.name for w in inventory.workers if w.name != home.name) or (home.name,)
        count = self.envs or len(others)
        groups = [Group(rest, 1, (home.name,), "gpu" if home.gpus else "cpu")] if rest else []
        groups.append(
            Group(
                tuple(n for n in stepping if n in envs) + tuple(n for n in envs if n not in stepping),
                count,
                _env_workers(inventory, home, count),
            )
        )
        return Policy(self.name, tuple(groups))


class MultiLearner:
    """The whole loop (actor+env+learner) fused per worker and replicated; the learners
    average gradients at the ``wb.allreduce`` sync point the algorithm marks."""

    name = "MultiLearner"

    def __init__(self, learners: int | None = None) -> None:
        self.learners = _check_count(self.name, "learners", learners)

    def place(self, fdg: Graph, inventory: Inventory) -> Policy:
        names = inventory.names
        if not names:
            raise PlacementError("MultiLearner needs a cluster with at least one worker.")
        count = self.learners or len(names)
        workers = _spread(names, count)
        # learners on GPUs when every worker they go to has one
        return Policy(
            self.name,
            (Group(_ordered(fdg), count, workers, _wished_device(fdg, fdg.fragments, workers, inventory, "gpu")),),
        )


class GPUOnly:
    """The whole loop fused in one process on one GPU (the first worker when none has one:
    then it runs on that worker's CPU)."""

    name = "GPUOnly"

    def place(self, fdg: Graph, inventory: Inventory) -> Policy:
        home = _home(inventory)
        return Policy(self.name, (Group(_ordered(fdg), 1, (home.name,), "gpu" if home.gpus else "cpu"),))


def _ordered(fdg: Graph) -> tuple[str, ...]:
    """Every fragment, step fragments first in step order (a readable group name)."""
    stepping = fdg.schedule().step_order
    return stepping + tuple(n for n in fdg.fragments if n not in stepping)


PRESETS = {
    "inline": Inline,
    "coarse": SingleLearnerCoarse,
    "SingleLearnerCoarse": SingleLearnerCoarse,
    "fine": SingleLearnerFine,
    "SingleLearnerFine": SingleLearnerFine,
    "multilearner": MultiLearner,
    "MultiLearner": MultiLearner,
    "gpuonly": GPUOnly,
    "GPUOnly": GPUOnly,
    "async": Async,
    "Async": Async,
    "pipelined": Pipelined,
    "Pipelined": Pipelined,
}


def as_policy_spec(spec):
    """A preset object or :class:`Policy` from a name, a ``.json`` file path, a preset
    object or a Policy (``"auto"`` stays a name: the runner handles it)."""
    if not isinstance(spec, str) or spec == "auto":
        return spec
    if spec.endswith(".json"):
        from pathlib import Path

        path = Path(spec)
        if not path.is_file():
            raise PlacementError(f"policy file not found: {spec!r}.")
        return Policy.from_json(path.read_text())
    try:
        return PRESETS[spec]()
    except KeyError:
        raise PlacementError(
            f"unknown policy {spec!r}; choose one of {', '.join(PRESETS)}, auto, a FILE.json, "
            f"or a Policy.{_did_you_mean(spec)}"
        ) from None


def _did_you_mean(spec: str) -> str:
    """`` Did you mean 'coarse'?`` for a preset name with a typo or the wrong case, else ''."""
    names = [*PRESETS, "auto"]
    lower: dict[str, str] = {}
    for name in names:  # the short spelling first: 'multilearner', not 'MultiLearner'
        lower.setdefault(name.lower(), name)
    close = difflib.get_close_matches(spec.lower(), list(lower), n=1, cutoff=0.6)
    return f" Did you mean {lower[close[0]]!r}?" if close else ""


def needs_cluster(spec) -> bool:
    """Whether a policy spec (see :func:`as_policy_spec`) places anything on Dask workers."""
    if spec == "auto":
        return True
    spec = as_policy_spec(spec)
    if isinstance(spec, Policy):
        return not spec.in_process
    return not isinstance(spec, Inline)


def resolve_policy(
    spec, fdg: Graph, inventory: Inventory | None, *, gpus_here: Callable[[], int] | None = None
) -> Policy:
    """Turn a policy given by name, file, preset object or :class:`Policy` into a checked
    Policy (``gpus_here``: see :meth:`Policy.check`)."""
    spec = as_policy_spec(spec)
    policy = spec if isinstance(spec, Policy) else spec.place(fdg, inventory)
    policy.check(fdg, inventory, gpus_here=gpus_here)
    return policy
