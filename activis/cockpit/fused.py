"""One-pass reductions over parameter-sized tensors, with no temporaries.

On the CPU, a temporary the size of a layer's weights costs more in fresh memory (page faults)
than the arithmetic that fills it, and a training step is only a few passes over the weights: the
cockpit's own passes must not add more. These reductions run compiled on the CPU (see `_kernels`)
and fall back to torch for other devices and dtypes.
"""

from __future__ import annotations

import math

import torch


def _compiled(*tensors: torch.Tensor) -> bool:
    dtype = tensors[0].dtype
    return all(t.device.type == "cpu" and t.dtype == dtype for t in tensors) and dtype in (torch.float32,
                                                                                          torch.float64)


def _flat(t: torch.Tensor):
    return t.detach().reshape(-1).numpy()


def distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b||, computed in float64."""
    if not _compiled(a, b):
        return float(torch.dist(a.double(), b.double()))
    from ._kernels import squared_distance

    return math.sqrt(squared_distance(_flat(a), _flat(b)))


def ratio_sum(num: torch.Tensor, den: torch.Tensor, eps: float) -> float:
    """sum(num / (den + eps)), computed in float64."""
    if not _compiled(num, den):
        return float((num.double() / (den.double() + eps)).sum())
    from ._kernels import ratio_sum as kernel

    return kernel(_flat(num), _flat(den), float(eps))
