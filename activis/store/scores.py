"""Class probabilities from the model's raw outputs, whichever kind of outputs a store keeps.

The writer derives each instance's prediction and confidence from them, the reader offers them as
`ActivationStore.scores`, and the analysis ranks an instance's classes by them: one definition for all.
"""

from __future__ import annotations

import numpy as np

from .errors import StoreError
from .manifest import OUTPUT_KINDS


def scores_from_outputs(outputs: np.ndarray, kind: str) -> np.ndarray:
    """Class probabilities from raw outputs of the given kind (float32, rows x classes).

    A single output column is a binary classifier: its score for class 1 (sigmoid of a logit, or
    the probability itself), returned as two columns.
    """
    out = np.asarray(outputs, dtype=np.float32)
    if out.ndim != 2:
        raise StoreError(f"Outputs must be instances x classes, not shape {out.shape}.")
    if out.shape[1] == 1:
        x = out[:, 0].astype(np.float64)
        if kind == "logits":
            p1 = np.exp(-np.logaddexp(0.0, -x))  # sigmoid without overflow
        elif kind == "log_probabilities":
            p1 = np.exp(x)
        else:
            p1 = x
        return np.stack([1.0 - p1, p1], axis=1).astype(np.float32)
    if kind == "probabilities":
        return out.copy()
    if kind == "log_probabilities":
        return np.exp(out)
    if kind != "logits":
        raise StoreError(f"Unknown output kind {kind!r}; one of {', '.join(OUTPUT_KINDS)}.")
    with np.errstate(invalid="ignore", over="ignore"):
        shifted = out - out.max(axis=1, keepdims=True)
        e = np.exp(shifted)
        return e / e.sum(axis=1, keepdims=True)
