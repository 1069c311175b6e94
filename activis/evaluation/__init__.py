"""Evaluation of a classifier from its stored scores: exact ROC/PR and AUC (with DeLong's interval
and the error a bucketed AUC would make), confusion, per-class precision/recall/F1, calibration,
score distributions and metrics over training steps (runs side by side: `activis.run.compare`).

Plain numpy / scikit-learn: no torch, no widgets.
"""

from ..run.compare import compare as compare_runs
from ..run.compare import run_config
from .compare import compare_stores
from .inputs import NONFINITE, EvaluationError, EvaluationWarning, NonFiniteScoresWarning, Outcomes, outcomes
from .ranking import auc, bucketed_auc, delong, delong_difference
from .report import Evaluation, evaluate
from .training import eval_metrics, volatility

__all__ = ["NONFINITE", "Evaluation", "EvaluationError", "EvaluationWarning", "NonFiniteScoresWarning", "Outcomes",
           "auc", "bucketed_auc", "compare_runs", "compare_stores", "delong", "delong_difference", "eval_metrics",
           "evaluate", "outcomes", "run_config", "volatility"]
