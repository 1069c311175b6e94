"""The model's output as a capture stores it: one row of class scores per instance, and their kind.

Models return their scores in many shapes (a tensor, a dict or a Hugging Face output with
``logits``, a single binary column); the store keeps one (N, C) table and says whether it holds
logits, probabilities or log-probabilities, so that the views compute the same predictions.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from .layers import _describe, _select
from .options import CaptureError


def _class_scores(out, element: list | None) -> torch.Tensor:
    """The (n, C) class scores in a model's output ``out`` (``element``: the output_element= path, if given)."""
    if element is None and not isinstance(out, torch.Tensor):
        if isinstance(out, Mapping) and "logits" in out:
            element = ["logits"]
        elif hasattr(out, "logits"):
            element = ["logits"]
    logits = _select(out, element, "The model's output", "output_element=...")
    if logits.dim() == 1 or (logits.dim() == 2 and logits.shape[1] == 1):
        _refuse_class_indices(logits)
        logits = logits.reshape(-1, 1)
    if logits.dim() != 2:
        raise CaptureError(f"The model's output is {_describe(logits)}; capture needs one row of class scores "
                           "per instance (choose it with output_element=).")
    return logits


def _detect_kind(outputs: np.ndarray) -> str:
    """What the first outputs are (``output_kind="auto"``): probabilities, log-probabilities, else logits."""
    with np.errstate(all="ignore"):
        if outputs.shape[1] == 1:
            return "probabilities" if ((outputs >= 0) & (outputs <= 1)).all() else "logits"
        if ((outputs >= 0) & (outputs <= 1)).all() and np.abs(outputs.sum(axis=1) - 1).max() < 1e-3:
            return "probabilities"
        if (outputs <= 0).all():
            lse = np.log(np.exp(outputs.astype(np.float64)).sum(axis=1))
            if np.abs(lse).max() < 1e-3:
                return "log_probabilities"
    return "logits"


def _refuse_class_indices(scores: torch.Tensor) -> None:
    """A single output column is a binary classifier's score, unless it holds class indices (an argmax)."""
    integral = not scores.is_floating_point() or bool(torch.all(scores == scores.round()))
    if integral and scores.numel() and float(scores.min()) >= 0 and float(scores.max()) > 1:
        raise CaptureError(f"The model returns class indices ({_describe(scores)}, values "
                           f"{int(scores.min())}..{int(scores.max())}), not class scores: capture needs the logits or "
                           "probabilities before the argmax. Return them from forward, or choose them with "
                           "output_element=.")
