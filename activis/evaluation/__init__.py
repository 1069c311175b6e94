"""Evaluation of a classifier from its stored scores: exact ROC/PR and AUC (with DeLong's interval
and the error a bucketed AUC would make), confusion, per-class precision/recall/F1, calibration,
score distributions, metrics over training steps and runs side by side.

Plain numpy / scikit-learn: no torch, no widgets.
"""

from .compare import compare_stores
from .inputs import NONFINITE, EvaluationError, EvaluationWarning, NonFiniteScoresWarning, Outcomes, outcomes
from .ranking import auc, bucketed_auc, delong, delong_difference
from .report import Evaluation, evaluate
from .runs import compare_runs, run_config
from .training import eval_metrics, volatility

__all__ = ["NONFINITE", "Evaluation", "EvaluationError", "EvaluationWarning", "NonFiniteScoresWarning", "Outcomes",
           "auc", "bucketed_auc", "compare_runs", "compare_stores", "delong", "delong_difference", "eval_metrics",
           "evaluate", "outcomes", "run_config", "volatility"]
