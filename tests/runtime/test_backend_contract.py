"""The backend contract (:mod:`workbench.runtime.engine.backend`): both backends implement every
method it declares abstract, the driver calls declared methods and never probes a backend
for what it has, a backend that leaves one out cannot be made, one without a fence runs on
the defaults, and the one replica loop both backends run hands errors and exits as told."""

from __future__ import annotations

import ast
import inspect
import pathlib

import pytest

import workbench as wb
from workbench.cluster.backend import DaskBackend
from workbench.fdg.plan import make_plan
from workbench.fdg.policy import resolve_policy
from workbench.runtime.engine import driver
from workbench.runtime.engine.backend import Backend, StreamSpec, run_replica
from workbench.runtime.transport.channels import LocalPostman, Mailbox
from workbench.runtime.engine.driver import drive
from workbench.runtime.engine.inline import InlineBackend
from workbench.runtime.replicas.replica import group_program

ROOT = pathlib.Path(__file__).resolve().parents[2] / "workbench"
BACKENDS = [InlineBackend, DaskBackend]


@pytest.mark.parametrize("cls", BACKENDS, ids=lambda c: c.__name__)
def test_both_backends_implement_every_abstract_method(cls):
    assert issubclass(cls, Backend) and not inspect.isabstract(cls)
    assert Backend.__abstractmethods__ == {"deploy", "start", "stop", "check", "failure", "export", "teardown"}
    for name in Backend.__abstractmethods__:
        assert getattr(cls, name) is not getattr(Backend, name), f"{cls.__name__}.{name} is the contract's"


@pytest.mark.parametrize("cls", BACKENDS, ids=lambda c: c.__name__)
def test_a_fenced_backend_releases_and_fences(cls):
    # `fenced` tells the driver to pace the loops with release() and stop them with fence()
    assert cls.fenced
    assert cls.release is not Backend.release and cls.fence is not Backend.fence


def test_the_inline_backend_can_be_made_as_it_is():
    backend = InlineBackend()
    assert isinstance(backend, Backend) and backend.snapshots is None and backend.overdue is False


def _backend_uses(path: pathlib.Path) -> tuple[set[str], list[str]]:
    """The attributes ``path`` reads or sets on a name ``backend``, and its getattr/hasattr
    calls on one."""
    used, probes = set(), []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "backend":
            used.add(node.attr)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == "backend"
        ):
            probes.append(ast.unparse(node))
    return used, probes


def test_the_driver_never_probes_a_backend():
    source = pathlib.Path(driver.__file__)
    used, probes = _backend_uses(source)
    assert probes == [] and "getattr(backend" not in source.read_text()
    assert {"release", "fence", "activity", "busy_cells", "snapshots", "scheduler_lost", "overdue"} <= used


@pytest.mark.parametrize("module", ["runtime/engine/driver.py", "trainer.py"])
def test_every_member_the_driver_and_the_trainer_use_is_declared(module):
    used, _ = _backend_uses(ROOT / module)
    assert used, module
    assert used <= set(dir(Backend)), f"{module} uses undeclared {sorted(used - set(dir(Backend)))}"


class _Complete(Backend):
    """The least a backend must implement."""

    def deploy(self, plan, programs, notebook, states=None): ...
    def start(self, plan, stream, events): ...
    def stop(self): ...
    def check(self): ...
    def failure(self, exc):
        return exc

    def export(self):
        return {}

    def teardown(self): ...


def test_a_backend_missing_a_required_method_cannot_be_made():
    class NoCheck(Backend):
        deploy, start, stop, failure, export, teardown = (
            _Complete.deploy,
            _Complete.start,
            _Complete.stop,
            _Complete.failure,
            _Complete.export,
            _Complete.teardown,
        )

    with pytest.raises(TypeError, match="abstract.*check"):
        NoCheck()
    backend = _Complete()  # and one that has them all runs on the defaults for the rest
    assert (backend.fenced, backend.snapshots, backend.overdue) == (False, None, False)
    assert backend.fence(3) is None and backend.activity() is None and backend.scheduler_lost() is None
    assert backend.busy_cells() == [] and backend.env_step_counts() == {}
    assert backend.release(3) is None and backend.announce("worker lost", "w1 left", 2) is None


def _counter_plan(step: str = "n += 1"):
    fdg = wb.FDG(namespace={"wb": wb})
    fdg.add_fragment("counter", "n = 0", rate="init")
    fdg.add_fragment("counter", step, rate="step")
    fdg.add_fragment("counter", "wb.log('n', n)", rate="iteration")
    plan = make_plan(fdg, resolve_policy("inline", fdg, None))
    return plan, {g: group_program(plan, g, 2, True, "auto") for g in plan.groups}


def test_a_backend_without_a_fence_is_never_paced_and_stops_after_the_task_in_hand():
    class Unfenced(InlineBackend):
        fenced = False
        fence = Backend.fence

        def release(self, iteration):
            raise AssertionError("an unfenced backend is released")

    plan, programs = _counter_plan()
    backend = Unfenced()
    backend.deploy(plan, programs, {"wb": wb}, None)
    records = []
    try:
        completed = drive(plan, backend, 1000, lambda record: records.append(record) or len(records) == 3)
    finally:
        backend.teardown()
    assert completed == 3 and [r.iteration for r in records] == [0, 1, 2]


def _one_replica(step: str):
    plan, programs = _counter_plan(step)
    backend = InlineBackend()
    backend.deploy(plan, programs, {"wb": wb}, None)
    ((key, replica),) = backend.replicas.items()
    boxes = {key: Mailbox(replica.program.arrival_keys)}
    return backend, plan, replica, boxes[key], LocalPostman(boxes), {key[0]: 1}


def test_run_replica_runs_the_loop_and_says_it_ended():
    backend, plan, replica, box, postman, counts = _one_replica("n += 1")
    said = []
    try:
        ran = run_replica(
            replica,
            plan,
            StreamSpec(3),
            box,
            postman,
            counts,
            lambda task, report: said.append(task),
            stopping=lambda: False,
            stop=lambda: said.append("stop"),
            fence=None,
            on_exit=lambda: said.append("exit"),
        )
    finally:
        backend.teardown()
    assert ran == len(said) - 1 and said[-1] == "exit" and "stop" not in said


@pytest.mark.parametrize("told", ["on_error", "raised", "passes"])
def test_run_replica_stops_the_run_and_hands_its_error_on_as_told(told):
    backend, plan, replica, box, postman, counts = _one_replica("raise ValueError('boom')")
    said: list = []
    error = wb.errors.FragmentRuntimeError
    options = {"on_error": lambda exc: said.append(type(exc))} if told == "on_error" else {}
    if told == "passes":
        options["passes"] = (error,)
    try:

        def run():
            return run_replica(
                replica,
                plan,
                StreamSpec(3),
                box,
                postman,
                counts,
                lambda task, report: None,
                stopping=lambda: False,
                stop=lambda: said.append("stop"),
                fence=None,
                on_exit=lambda: said.append("exit"),
                **options,
            )

        if told == "on_error":
            assert run() is None
        else:
            with pytest.raises(error, match="boom"):
                run()
    finally:
        backend.teardown()
    assert said == {"on_error": ["stop", error, "exit"], "raised": ["stop", "exit"], "passes": ["exit"]}[told]
