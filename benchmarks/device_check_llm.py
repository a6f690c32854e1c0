"""The device check's GRPO parts (``device_check.py --parts llm llm_trl llm_both llm_first``):
``bench_llm_rl.py``'s sides on this host (the 113M model on a GPU, the small one on the CPU),
each seed's line streamed as it ends, then optionally each side's peak memory; and
``bench_llm_first_iteration.py``'s split of the first iteration.

Example (what device_check.py runs in a part's own process)::

    rows = part_llm("both", seeds=(1,), updates=2, warm_start_steps=5, logs="out")
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from benchmarks.harness import module_command, streamed


def part_llm(
    side: str = "workbench",
    seeds=(1, 2, 3),
    updates: int = 40,
    warm_start_steps: int | None = None,
    logs: str | None = None,
    memory: bool = False,
    policies=None,
    tf32: bool = False,
):
    """One side of ``bench_llm_rl.py`` (GRPO against TRL, docs/llm.md): on a GPU the 113M
    model inline on the GPU and under GPUOnly, else the small one on the CPU. Its JSON goes to ``--logs`` (or a
    temporary folder) for ``bench_llm_rl.py --merge`` here; each seed's line is printed as it
    ends, so a cut keeps the seeds done."""
    import torch

    cuda = torch.cuda.is_available()
    out = Path(logs or tempfile.mkdtemp(prefix="workbench-llm-"), f"llm_{side}.json")
    only = [] if side == "both" else ["--only", side]  # both: one process, one warm start a seed
    command = [
        *module_command("benchmarks.bench_llm_rl"),
        *only,
        "--device",
        "cuda" if cuda else "cpu",
        "--size",
        "100m" if cuda else "small",
        "--seeds",
        *map(str, seeds),
        "--updates",
        str(updates),
        "--json",
        str(out),
    ]
    if warm_start_steps is not None:
        command += ["--warm-start-steps", str(warm_start_steps)]
    if policies and side != "trl":
        command += ["--policies", *policies]
    command += ["--tf32"] if tf32 else []
    returncode, lines = streamed(command)
    said = [line for line in lines if line.startswith(("seed ", "TRL", "workbench", "GRPO"))]
    part = {"workbench": "llm", "trl": "llm_trl", "both": "llm_both"}[side]
    rows = [{"part": part, "what": "bench_llm_rl", "value": f"rc {returncode}; json {out}"}] + [
        {"part": part, "what": "line", "value": line} for line in said
    ]
    if not memory:  # on the H200 it ran past the part's limit twice: asked for by --llm-memory
        return rows
    # then this side's peak memory, one process (bench_llm_memory.py, docs/llm.md), the same model
    size = (
        ["--device", "cuda", "--hidden", "768", "--layers", "12", "--heads", "12"]
        if cuda
        else ["--hidden", "64", "--layers", "2", "--heads", "4"]
    )  # the CPU check of this script: the small model
    _, peaks = streamed([*module_command("benchmarks.bench_llm_memory"), *only, "--repeats", "1", *size])
    return rows + [
        {"part": part, "what": "peak memory", "value": line}
        for line in peaks
        if line.startswith(("GRPO peak", "TRL", "workbench"))
    ]


def part_llm_trl(**kwargs):
    """TRL's side of :func:`part_llm` (its wheels: ``llm_wheels.py --trl``)."""
    return part_llm("trl", **kwargs)


def part_llm_first() -> list[dict]:
    """Where GRPO's first iteration goes (bench_llm_first_iteration.py: the 113M model on a
    GPU, the small one here), its lines as printed."""
    import torch

    size = ["--device", "cuda", "--size", "100m"] if torch.cuda.is_available() else []
    returncode, lines = streamed([*module_command("benchmarks.bench_llm_first_iteration"), *size])
    shown = [f"| {line}" for line in lines if line.strip() and "Warning" not in line]  # kept as printed
    return [{"part": "llm_first", "what": f"rc {returncode}", "value": "\n".join(shown or ["| no output"])}]


def part_llm_both(**kwargs):
    """Both sides of :func:`part_llm` in one process, each seed's warm start shared (its
    wheels: ``llm_wheels.py --both``, which counts on the image's pyarrow)."""
    return part_llm("both", **kwargs)
