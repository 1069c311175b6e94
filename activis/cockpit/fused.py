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


def inner_and_square(a: list[torch.Tensor], b: list[torch.Tensor]) -> tuple[float, float]:
    """sum(a · b) and ||b||**2 over lists of tensors, in float64, in one pass over both: what an
    iteration on the Hessian needs of a product, without joining the pieces into one vector."""
    ab = bb = 0.0
    for x, y in zip(a, b):
        if _compiled(x, y):
            from ._kernels import inner_and_square as kernel

            dot, square = kernel(_flat(x), _flat(y))
        else:
            x64, y64 = x.detach().double(), y.detach().double()
            dot, square = float((x64 * y64).sum()), float(y64.square().sum())
        ab, bb = ab + dot, bb + square
    return ab, bb


def parameter_pass(params: list[torch.Tensor], initial: list[torch.Tensor] | None,
                   previous: list[torch.Tensor] | None,
                   snapshot: list[torch.Tensor] | None) -> tuple[list[float] | None, list[float] | None]:
    """Per tensor ||theta - initial|| and ||theta - previous||, and theta copied into ``snapshot``,
    each only where given (a distance not asked for is None), in one pass over the parameters."""
    to_initial, to_previous = [], []
    for k, p in enumerate(params):
        refs = [r[k] if r is not None else None for r in (initial, previous, snapshot)]
        given = [r for r in refs if r is not None]
        if _compiled(p, *given) and (snapshot is None or refs[2].is_contiguous()):  # written through a view
            from ._kernels import parameter_pass as kernel

            flat = _flat(p)
            d0, d1 = kernel(flat, *(flat if r is None else _flat(r) for r in refs), *(r is not None for r in refs))
            to_initial.append(math.sqrt(d0))
            to_previous.append(math.sqrt(d1))
            continue
        to_initial.append(distance(p, refs[0]) if initial is not None else 0.0)
        to_previous.append(distance(p, refs[1]) if previous is not None else 0.0)
        if snapshot is not None:
            refs[2].copy_(p)
    return (to_initial if initial is not None else None), (to_previous if previous is not None else None)
