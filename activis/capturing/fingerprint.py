"""The fingerprints a resumed capture compares: CRC-32 digests of the model's parameters and of the data.

A resumed capture must write the rows an uninterrupted one would have written, so it checks that
the model and the rows already written are the same as before. A CRC-32 (about 1 GB/s, 4x faster
than sha256 here) tells data apart by accident, not against someone forging a collision.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from .sources import _as_tensor


def _model_digests(model: nn.Module) -> dict[str, str]:
    """A CRC-32 of every value of every parameter and buffer, by name: a resume names what changed."""
    return {name: f"{zlib.crc32(_bytes_of(value), zlib.crc32(f'{tuple(value.shape)}:{value.dtype}'.encode())):08x}"
            for name, value in model.state_dict().items()}


def _crc(crc: int, x, labels, mask: np.ndarray | None = None) -> int:
    """``crc`` continued over a batch's input tensors, its labels (int64, as stored) and a padding mask given
    apart from the inputs."""
    for value in _tensors(x):
        crc = zlib.crc32(_bytes_of(value), crc)
    crc = zlib.crc32(np.ascontiguousarray(labels, dtype=np.int64), crc)
    return crc if mask is None else zlib.crc32(mask, crc)


def _tensors(x):
    if isinstance(x, Mapping):
        for key in sorted(x, key=str):
            yield from _tensors(x[key])
    elif isinstance(x, (tuple, list)):
        for value in x:
            yield from _tensors(value)
    else:
        yield _as_tensor(x)


def _bytes_of(value: torch.Tensor) -> np.ndarray:
    """The tensor's bytes, whatever its dtype (bfloat16 has no numpy twin), without a copy on the CPU."""
    value = value.detach().cpu().contiguous().reshape(-1)
    return value.view(torch.uint8).numpy() if value.numel() else np.zeros(0, np.uint8)
