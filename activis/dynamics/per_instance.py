"""Per-instance training quantities at one checkpoint: the loss and the gradient norm at the logits.

The cockpit's per-sample instruments (the loss, the gradient norms) are summed over a batch and carry no
instance id; the probe store's outputs at a checkpoint give them per instance. For softmax cross-entropy
the gradient of an instance's loss with respect to its logits is ``softmax(z) - onehot(y)``, so its norm
(EL2N, Paul et al. 2021) is exact at the logits and costs one pass over the outputs: the part of a
per-sample parameter-gradient norm that the data decides, without the model or torch.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .cartography import _as_logits
from .errors import DynamicsError

QUANTITIES = {"loss": "per-instance loss (cross-entropy)", "grad_norm": "gradient norm at the logits ‖p − y‖"}


def instance_quantities(view) -> pd.DataFrame:
    """``loss`` and ``grad_norm`` per instance of a store at one checkpoint (``store.at(step)``); NaN where
    an instance's label is unknown (-1 or out of range)."""
    outputs = getattr(view, "outputs", None)
    instances = getattr(view, "instances", None)
    if outputs is None or instances is None or "label" not in instances.columns:
        raise DynamicsError("Per-instance quantities need a store's outputs and a 'label' column in its instances.")
    logits = np.asarray(_as_logits(outputs, getattr(view, "output_kind", "logits")), dtype=np.float64)
    if logits.ndim != 2 or logits.shape[1] < 2:
        raise DynamicsError(f"Per-instance quantities need class scores shaped (instances, classes), not "
                            f"{logits.shape}.")
    labels = instances["label"].to_numpy()
    known = (labels >= 0) & (labels < logits.shape[1])
    top = logits.max(axis=1, keepdims=True)
    shifted = np.exp(logits - top)
    total = shifted.sum(axis=1, keepdims=True)
    probs = shifted / total
    rows = np.flatnonzero(known)
    loss = np.full(len(logits), np.nan)
    loss[rows] = np.log(total[rows, 0]) + top[rows, 0] - logits[rows, labels[rows]]
    probs[rows, labels[rows]] -= 1.0  # softmax - onehot: the gradient of the loss at the logits
    grad_norm = np.full(len(logits), np.nan)
    grad_norm[rows] = np.sqrt((probs[rows] ** 2).sum(axis=1))
    return pd.DataFrame({"loss": loss, "grad_norm": grad_norm})
