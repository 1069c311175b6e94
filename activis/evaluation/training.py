"""Metrics over training: what `Cockpit.log_eval` writes per step. Each metric's volatility is read
from the run record (`activis.run.volatility`, no scikit-learn) and named here too."""

from __future__ import annotations

import numpy as np

from ..run.volatility import jump_scores, sudden_jumps, volatility
from .report import evaluate

__all__ = ["eval_metrics", "jump_scores", "sudden_jumps", "volatility"]


def eval_metrics(labels, scores, *, class_names=None, threshold: float | None = None) -> dict[str, float]:
    """The summary of one evaluation as finite floats (undefined metrics left out)."""
    summary = evaluate(labels=labels, scores=scores, class_names=class_names, threshold=threshold).summary
    return {k: v for k, v in summary.items() if np.isfinite(v)}
