"""The one error evaluation raises on purpose."""

from __future__ import annotations

from workbench.errors import WorkbenchError

__all__ = ["EvaluationError"]


class EvaluationError(WorkbenchError, ValueError):
    """An evaluation or a video could not be made: what was wrong and what to do. The run,
    its state and the FDG are unchanged."""
