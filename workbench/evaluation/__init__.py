"""Evaluate and watch a trained policy: play a run's final state without learning.

``run.evaluate(episodes=10)`` plays the state's acting and env fragments (never a learner)
on held-out env seeds, greedily where the cells ask ``wb.evaluating()``, and returns an
`EvaluationResult`; ``run.show()`` does the same with envs that render and returns a
`Video`; ``RunConfig.video_every`` records a clip every N iterations while a run trains.

Owns: `player` (running the cells), `episodes` (counting them per env), `results`,
`video` (frames → an inline video), `recording` (clips during training). Imports the
fragment API (`workbench.context`), errors, the FDG model and metric loggers; never the
runtime or the cluster: it runs in the calling process, on the state a run kept.
"""

from workbench.evaluation.errors import EvaluationError
from workbench.evaluation.player import evaluate, show
from workbench.evaluation.results import EvaluationResult, iqm
from workbench.evaluation.video import Video

__all__ = ["evaluate", "show", "EvaluationResult", "Video", "iqm", "EvaluationError"]
