"""A torch-free loop with every interface kind, for tests, soaks and learning the model.

No RL here: ``env`` replicas count up from ``10 * replica.index``, the ``actor`` scales what
it sees by a gain, and the ``learner`` sums what the envs reported and halves the gain
each iteration. Between them it has a per-step ring carried by an init value (``obs``),
stacked step→iteration data (``reward``), a latest value broadcast back (``scale`` →
``gain``) and ``wb.log`` metrics — so it exercises every wiring path in milliseconds.

Example:
    >>> run = build_fdg().run(iterations=2, steps=3, progress=False)
    >>> run.metrics["learner/total"].tolist()
    [18.0, 40.5]
"""

from __future__ import annotations

__all__ = ["build_fdg"]


def build_fdg(**namespace):
    """The counters FDG; ``namespace`` adds names for cells you add to it."""
    import numpy as np

    import workbench as wb

    fdg = wb.FDG(namespace={"np": np, "wb": wb, **namespace})
    fdg.add_fragment("env", "obs = np.arange(3.0) + 10 * replica.index\nseen = 0", rate="init")
    fdg.add_fragment("learner", "scale = 1.0\ntotal = 0.0", rate="init")
    fdg.add_fragment("actor", "gain = scale", rate="init")
    fdg.add_fragment("actor", "action = obs * gain", rate="step")
    fdg.add_fragment(
        "env",
        "obs = obs + 1\nreward = action.copy()\nseen += 1\nwb.log('charts/episodic_return', float(reward.sum()))",
        rate="step",
    )
    fdg.add_fragment(
        "learner",
        "total += float(reward.sum())\nbatch = reward.shape\nwb.log('learner/total', total)\nscale = scale * 0.5",
        rate="iteration",
    )
    fdg.add_fragment("actor", "gain = scale", rate="iteration")
    return fdg
