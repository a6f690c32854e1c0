"""A GPU group placed in this process (inline, or a group on "local") where this process
has no GPU is refused before anything starts, in one line naming the group, its fragments
and what to do — as a GPU group on a cluster worker without one is (docs/errors.md, row 111).
It used to fail only once the replica was built, as a DeviceError 12-14 frames deep in
workbench's own code, naming no group or fragment."""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.error import UsageError

import workbench as wb
from workbench.devices import gpus_here
from workbench.fdg.graph import Graph
from workbench.fdg.policy import IN_PROCESS, Group, Policy, resolve_policy

# On a GPU host these placements are right and run: the refusal is for hosts without one.
cpu_host_only = pytest.mark.skipif(gpus_here() > 0, reason="this host has a GPU: the placement runs")


def never_asked() -> int:
    raise AssertionError("gpus_here was asked, but no group is on this process's GPU")


def learner_fdg(mark: Path) -> wb.FDG:
    """One fragment asking for the GPU; its init cell leaves a line in ``mark`` when it runs."""
    fdg = wb.FDG(namespace={"mark": str(mark)})
    fdg.add_fragment("learner", "open(mark, 'a').write('init\\n')\nw = 0", rate="init", device="gpu")
    fdg.add_fragment("learner", "w = w + 1", rate="iteration", device="gpu")
    return fdg


# ----------------------------------------------------------------------------- the decision
def test_a_gpu_group_in_a_process_without_a_gpu_is_refused_naming_group_fragments_and_fix():
    inline = Policy("inline", (Group(("actor", "env", "learner"), 1, (IN_PROCESS,), "gpu"),))
    with pytest.raises(wb.PlacementError) as info:
        inline.check_gpus_here(lambda: 0)
    text = str(info.value)
    assert text == (
        "policy 'inline' puts group 'actor+env+learner' (fragments actor, env, learner) on the GPU of "
        "this process (the notebook's or script's own, 'local'), which has no GPU: no CUDA device "
        "answers here. Run it on a cluster worker with a GPU (policy 'gpuonly' or 'coarse' with a "
        "cluster, or a wb.Policy group on that worker with device='gpu'), or here on the CPU: "
        "wb.Inline() (the CPU) instead of wb.Inline(device='gpu')."
    )
    assert "\n" not in text
    mine = Policy("mine", (Group(("env",), 2), Group(("learner",), 1, (IN_PROCESS,), "gpu")))
    with pytest.raises(
        wb.PlacementError,
        match=r"policy 'mine' puts group 'learner' \(fragment learner\) "
        r"on the GPU of this process .* or here on the CPU: device='cpu' for group 'learner'\.$",
    ):
        mine.check_gpus_here(lambda: 0)


def test_a_gpu_here_or_no_gpu_group_here_passes_and_only_a_gpu_group_asks():
    on_gpu = Policy("inline", (Group(("learner",), 1, (IN_PROCESS,), "gpu"),))
    on_gpu.check_gpus_here(lambda: 1)
    Policy("inline", (Group(("learner",), 1, (IN_PROCESS,), "cpu"),)).check_gpus_here(never_asked)
    # a GPU group on a cluster worker is the inventory's to judge (Policy.check), not this process's
    Policy("cluster", (Group(("learner",), 1, ("0",), "gpu"),)).check_gpus_here(never_asked)


def test_resolve_policy_refuses_it_with_this_process_gpu_count_and_not_without_one():
    fdg = Graph()
    fdg.add_fragment("learner", "w = 1", rate="iteration", device="gpu")
    with pytest.raises(wb.PlacementError, match="group 'learner' .fragment learner. on the GPU of this process"):
        resolve_policy(wb.Inline(device="gpu"), fdg, None, gpus_here=lambda: 0)
    assert resolve_policy(wb.Inline(device="gpu"), fdg, None, gpus_here=lambda: 2).groups[0].device == "gpu"
    assert resolve_policy(wb.Inline(device="gpu"), fdg, None).groups[0].device == "gpu"  # a plan, not a run
    assert resolve_policy("inline", fdg, None, gpus_here=never_asked).groups[0].device == "cpu"


# ----------------------------------------------------------------------------- a run
@cpu_host_only
@pytest.mark.parametrize("placement", ["inline-gpu", "policy-on-local"])
def test_a_gpu_run_in_this_cpu_only_process_is_refused_before_any_cell_runs(tmp_path, placement):
    mark = tmp_path / "ran.txt"
    fdg = learner_fdg(mark)
    policy = (
        wb.Inline(device="gpu")
        if placement == "inline-gpu"
        else wb.Policy("mine", (Group(("learner",), 1, (IN_PROCESS,), "gpu"),))
    )
    before, fixed_policy = fdg.copy(), policy
    with pytest.raises(wb.PlacementError) as info:
        fdg.run(iterations=2, policy=policy, progress=False)
    text = str(info.value)
    assert "group 'learner' (fragment learner) on the GPU of this process" in text and "\n" not in text
    assert "Run it on a cluster worker with a GPU" in text and "here on the CPU" in text
    # refused up front: in prepare, not 12 frames down in building a replica
    assert info.traceback[-1].name == "check_gpus_here" and len(info.traceback) <= 6
    assert not mark.exists()  # no cell ran
    assert fdg == before and fdg.last_run is None and policy is fixed_policy  # nothing lost, no run recorded
    fixed = (
        wb.Inline() if placement == "inline-gpu" else wb.Policy("mine", (Group(("learner",), 1, (IN_PROCESS,), "cpu"),))
    )
    with pytest.warns(Warning, match="asks for --device gpu"):  # the cell's wish, said, not obeyed
        run = fdg.run(iterations=2, policy=fixed, progress=False)
    assert run.status == "finished" and run.completed_iterations == 2
    assert mark.read_text() == "init\n"


@cpu_host_only
def test_in_a_notebook_it_is_one_usage_error_and_the_fdg_then_runs_on_the_cpu(ip, tmp_path):
    policy = tmp_path / "local_gpu.json"
    policy.write_text(Policy("mine", (Group(("learner",), 1, (IN_PROCESS,), "gpu"),)).to_json())
    ip.user_ns["mark"] = str(tmp_path / "ran.txt")
    assert ip.run_cell("%%fragment learner --init --device gpu\nopen(mark, 'a').write('init\\n')\nw = 0\n").success
    assert ip.run_cell("%%fragment learner --device gpu\nw = w + 1\n").success
    with pytest.raises(UsageError) as info:
        ip.run_line_magic("fdg", f"run --iterations 1 --policy {policy}")
    assert str(info.value).startswith(
        "policy 'mine' puts group 'learner' (fragment learner) on the GPU of this process"
    ) and "\n" not in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__  # shown without workbench's frames
    assert not (tmp_path / "ran.txt").exists()
    with pytest.warns(Warning, match="asks for --device gpu"):
        run = ip.run_line_magic("fdg", "run --iterations 1 --policy inline")
    assert run.status == "finished" and (tmp_path / "ran.txt").read_text() == "init\n"
