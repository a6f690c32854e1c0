"""What fragment code can ask of the runtime: who am I, log a metric, all-reduce.

Fragment cells run with a ``replica`` object in their namespace and may call
``wb.log`` and ``wb.allreduce``; outside a run these work too (logging goes nowhere,
all-reduce is the identity), so the same functions run in a plain script.

Example (inside a fragment cell):
    >>> import workbench as wb
    >>> wb.log("charts/episodic_return", 17.0)      # no run active: ignored
    >>> wb.allreduce(3.0)                           # one replica: the identity
    3.0
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.deferred_metrics import Deferred, is_deferred, read_metric, where_logged
from workbench.metric_values import as_floats, check_finite, metric_values

__all__ = [
    "ReplicaInfo",
    "ReplicaContext",
    "log",
    "allreduce",
    "reducible",
    "current",
    "env_steps",
    "count_env_steps",
    "step_elsewhere",
    "lane_switch",
    "Evaluating",
    "evaluating",
    "env_seed",
    "render_mode",
    "evaluation",
]


@dataclass(frozen=True)
class ReplicaInfo:
    """The ``replica`` name in every fragment namespace: which copy this is, and where.

    ``index`` is in ``range(count)``; ``worker`` is the Dask worker name (``"local"`` in
    the calling process); ``device`` is ``"cpu"`` or ``"cuda:K"``, always a string torch
    and CuPy accept (``model.to(replica.device)``, ``wb.kernels.get_xp(replica.device)``):
    a group placed on ``"gpu"`` gets ``"cuda:K"`` here, ``K = index % GPUs of the worker``
    (see ``workbench.devices.replica_device``).

    >>> ReplicaInfo("learner").device
    'cpu'
    >>> ReplicaInfo("learner", device="tpu")
    Traceback (most recent call last):
    ...
    workbench.devices.DeviceError: unknown device 'tpu': use 'cpu' or 'cuda:K' (K = 0, 1, … the GPU's index in this process)
    """

    fragment: str
    index: int = 0
    count: int = 1
    worker: str = "local"
    device: str = "cpu"

    @property
    def iteration(self) -> int | None:
        """The iteration this cell runs in (0-based, continuing across resume: a run resumed
        from iteration 40 starts at 40); None in an init cell and outside a run. The same
        under every policy, so schedules can use it."""
        ctx = _current.get()
        return ctx.iteration if ctx is not None else None

    def __post_init__(self) -> None:
        if self.device != "cpu":  # the common case costs nothing
            from workbench.devices import replica_device

            object.__setattr__(self, "device", replica_device(self.device, self.index))


@dataclass
class ReplicaContext:
    """Per-task state the runtime keeps while a replica's cells run."""

    info: ReplicaInfo
    iteration: int | None = None
    #: iteration → metric name → values logged
    metrics: dict[int, dict[str, list[float]]] = field(default_factory=dict)
    #: how ``allreduce`` combines values across learner replicas (identity by default)
    reducer: Callable[[Any], Any] | None = None
    #: the step of the iteration a step cell runs in (None in other cells)
    step: int | None = None
    #: env steps this step counted with ``count_env_steps`` (None: none called)
    counted: int | None = None
    #: the run's env steps before the current iteration (and step), for ``env_steps()``
    env_steps: Callable[[], int] | None = None
    #: names logged with ``prog_bar=True``, in the order first logged: the progress shows them
    shown: list[str] = field(default_factory=list)

    def record(self, name: str, value: Any) -> None:
        self.add(name, as_floats(value))

    def add(self, name: str, values: list) -> None:
        bucket = self.metrics.setdefault(self.iteration if self.iteration is not None else -1, {})
        bucket.setdefault(name, []).extend(values)
        if values and not isinstance(values[0], float):
            self.deferred = True

    #: some values were logged from a device and are read by `read_deferred`
    deferred: bool = False

    def read_deferred(self) -> None:
        """Read the device values logged during this task (see `log`): one copy per
        metric. Raises `DeferredMetricError` for a NaN/inf, naming where it was logged."""
        if not self.deferred:
            return
        for bucket in self.metrics.values():
            for name, values in bucket.items():
                values[:] = read_metric(name, values)
        self.deferred = False


_current: contextvars.ContextVar[ReplicaContext | None] = contextvars.ContextVar("workbench_replica", default=None)


def current() -> ReplicaContext | None:
    """The running replica's context, or None outside a run."""
    return _current.get()


def activate(ctx: ReplicaContext | None) -> contextvars.Token:
    """Make ``ctx`` the running replica's context in this thread, and its device the
    thread's current CUDA device (torch and CuPy), so arrays its cells create without
    naming a device land on the replica's GPU."""
    if ctx is not None and ctx.info.device != "cpu":
        from workbench.devices import use_device

        use_device(ctx.info.device)
    return _current.set(ctx)


def deactivate(token: contextvars.Token) -> None:
    _current.reset(token)


def log(name: str, value: Any, *, allow_nan: bool = False, prog_bar: bool = False) -> None:
    """Record a metric for this iteration: a number, or an array of numbers (each kept).

    Use flat names such as ``charts/episodic_return`` or ``losses/policy_loss``. A device
    value (a CuPy array, a CUDA tensor, a GPU env's ``info["episode_return"]``) is read at
    the end of the iteration, not here, so a step cell that logs it never makes the GPU
    wait (`workbench.deferred_metrics`). A value
    that is NaN or infinite raises :class:`~workbench.errors.MetricError` naming the
    metric, so a diverging loss stops the run at the line that logged it instead of
    training on garbage; ``allow_nan=True`` records such a value anyway (for a metric that
    is legitimately undefined at times, such as an explained variance of constant returns).

    ``prog_bar=True`` (as Lightning's ``self.log``) puts the metric's newest value in the
    run's progress bar, its live view and its summary line, beside env-steps/s and the
    return: what tells a run without episodes (GRPO's reward and held-out accuracy) how it
    goes. ``wb.log("charts/heldout_accuracy", acc, prog_bar=True)`` shows
    ``heldout_accuracy 0.724``.
    """
    if not isinstance(name, str) or not name:
        from workbench.errors import MetricError

        # refused here, at the cell's line: a bad name would only fail later, in the report
        raise MetricError(
            f"wb.log needs a metric name (a non-empty string such as "
            f"'losses/loss') first, got {type(name).__name__} {name!r:.40}: "
            f"wb.log('name', value)."
        )
    ctx = _current.get()
    if prog_bar and ctx is not None and name not in ctx.shown:
        ctx.shown.append(name)
    if is_deferred(value):
        if ctx is not None:
            ctx.add(name, [Deferred(value, allow_nan, where_logged())])
        return
    values = metric_values(name, value)
    if not allow_nan:
        check_finite(name, values)
    if ctx is not None:
        ctx.add(name, values)


def allreduce(value: Any) -> Any:
    """Mark a gradient (or any tensor) sync point: averaged across this fragment's
    replicas when there are several, returned unchanged when there is one. It takes one
    array, tensor or number (integers come back as the floats of their mean, with one
    replica too); every replica
    must call it the same number of times each iteration (a replica that calls it once
    more is an error, not a mean over two iterations)."""
    value = reducible(value)  # what it takes, said alike under every policy
    ctx = _current.get()
    if ctx is None or ctx.reducer is None:
        return value
    return ctx.reducer(value)


def reducible(value: Any) -> Any:
    """``value`` as ``wb.allreduce`` averages it, or a ``ValueError`` saying what it takes —
    the same under every policy (with one replica nothing is averaged, so a list or an
    integer array came back unchanged there, while two learners met a bare ``TypeError``
    or got floats back).

    One number or one array or tensor; integers (and bools) are averaged as the floats
    their true division gives (NumPy: float64; torch: its default dtype), one replica or many:

        >>> reducible(3), reducible(np.arange(2)).dtype, reducible(np.ones(2, np.float32)).dtype
        (3.0, dtype('float64'), dtype('float32'))
        >>> reducible([np.ones(2)])
        Traceback (most recent call last):
        ...
        ValueError: wb.allreduce averages one array, tensor or number; it was given a list. Join several gradients into one (torch.cat([g.reshape(-1) for g in grads])) and split the mean back, or call it once for each.
    """
    if isinstance(value, (int, float, np.number)):  # bool is an int
        return float(value) if isinstance(value, (int, np.integer, np.bool_)) else value
    kind = type(value).__module__
    if kind.startswith("torch"):
        if value.is_floating_point() or value.is_complex():
            return value
        import torch

        return value.to(torch.get_default_dtype())
    if isinstance(value, np.ndarray) or kind.startswith("cupy"):
        return value if value.dtype.kind in "fc" else value.astype(np.float64)
    raise ValueError(
        f"wb.allreduce averages one array, tensor or number; it was given a {type(value).__name__}. "
        "Join several gradients into one (torch.cat([g.reshape(-1) for g in grads])) and split the "
        "mean back, or call it once for each."
    )


def env_steps() -> int:
    """The run's env steps (all env replicas together) before the current iteration —
    in a step cell, before the current step: ``before_iteration + step × envs``. The
    same under every policy and continuing across resume, for ε and learning-rate
    schedules. 0 outside a run.

    ``envs`` is what the env replicas stepped together in the first step of this stretch
    (a stretch begins with the run, and again at each resume, re-placement, applied edit
    or recovery from a lost worker). Replicas do not tell each other their counts every
    step (that would put a round trip in every step), so an env whose count varies from
    step to step (``wb.count_env_steps`` with a changing ``n``) makes this an estimate;
    ``run.env_steps`` and the rows stay exact.

    Example (an actor's step cell): ``eps = linear(1.0, 0.05, 10_000, wb.env_steps())``
    """
    ctx = _current.get()
    return ctx.env_steps() if ctx is not None and ctx.env_steps is not None else 0


def count_env_steps(n: int) -> None:
    """Count ``n`` env steps in this step, instead of the automatic rule (the leading size
    of ``reward``). A step cell that calls it is an env fragment, and once any does, only
    such fragments count: call it in every fragment that steps envs (docs/counting.md).
    Outside a run: ignored."""
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise ValueError(f"count_env_steps needs a whole number ≥ 0, got {n!r}.")
    ctx = _current.get()
    if ctx is not None:
        ctx.counted = (ctx.counted or 0) + int(n)


#: what `step_elsewhere` calls in this context: the lanes runtime (`workbench.runtime.replicas.lanes`)
#: sets it in each lane; None outside lanes
lane_switch: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "workbench_lane_switch", default=None
)


def step_elsewhere() -> None:
    """Let another lane of this thread run while this lane's envs step elsewhere (in C++
    threads, on a device); returns once this lane's turn comes back. A no-op outside lanes.

    Call it between handing the work off and waiting for it, as `EnvPoolVectorEnv.step`
    does between EnvPool's ``send`` and ``recv``::

        pool.send(actions)
        step_elsewhere()        # the other replica acts meanwhile
        result = pool.recv()
    """
    switch = lane_switch.get()
    if switch is not None:
        switch()


@dataclass
class Evaluating:
    """What a trained state is played under (``run.evaluate``/``run.show``): cells act
    greedily (`evaluating`), envs get held-out seeds (`env_seed`) and, for a video, render
    (`render_mode`). ``seed`` None: each seed a cell gives is moved by ``HELD_OUT``."""

    seed: int | None = None
    render: bool = False
    #: (the seed the cell gave, the seed used), in the order envs were made
    seeds: list[tuple[int | None, int]] = field(default_factory=list)
    #: a cell asked `evaluating` (so it could act greedily)
    asked: bool = False

    #: added to a training seed to hold it out (training seeds are small: cfg.seed + replica.index)
    HELD_OUT = 1_000_000


#: the evaluation in progress in this context (workbench.evaluation sets it); None while training
evaluation: contextvars.ContextVar[Evaluating | None] = contextvars.ContextVar("workbench_evaluation", default=None)


def evaluating() -> bool:
    """True while ``run.evaluate()``/``run.show()`` plays a trained state: act greedily
    (the most likely action, the mean of a Gaussian, ε = 0). The one way a cell learns it
    is evaluated; cells that do not ask act as in training. False in training and outside a run.

    Example (an actor's step cell): ``action = logits.argmax(-1) if wb.evaluating() else sample(logits)``

    >>> evaluating()
    False
    """
    now = evaluation.get()
    if now is None:
        return False
    now.asked = True
    return True


def env_seed(seed: int | None) -> int | None:
    """The seed to give an env: ``seed`` in training; during an evaluation a held-out one
    (``seed + 1,000,000``, or the seed ``run.evaluate(seed=…)`` asked for). ``wb.envs.make``
    calls it; an env a cell builds itself can too (``MyEnv(seed=wb.env_seed(cfg.seed))``).

    >>> env_seed(3)
    3
    """
    now = evaluation.get()
    if now is None:
        return seed
    if now.seed is not None:  # asked for: the first env gets it, later ones the next seeds
        used = now.seed + len(now.seeds)
    else:
        used = (seed if seed is not None else 0) + Evaluating.HELD_OUT
    now.seeds.append((seed, used))
    return used


def render_mode() -> str | None:
    """``"rgb_array"`` while ``run.show()`` records a video (make envs that render), else None.

    >>> render_mode() is None
    True
    """
    now = evaluation.get()
    return "rgb_array" if now is not None and now.render else None
