"""The model's inputs as the checks handle them: one tensor, or a dict of tensors passed to ``forward`` by
name (a tokenizer's output: ``input_ids``, ``attention_mask``, ...), samples along the first dimension.

Data as Hugging Face fine-tunes feed it (a Dataset or list of dict items, a DataLoader yielding dict
batches) is split as `activis.capture` splits it: ``labels`` (or label, target, targets, y) is the target,
``sample_weight`` the weight, the other keys the inputs; one input left is passed positionally. Every check
reads inputs through these helpers, so each one runs on dict inputs as on a tensor.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F

from ..capturing.sources import LABEL_KEYS
from .findings import DoctorError

WEIGHT_KEYS = ("sample_weight", "sample_weights", "weight", "weights")
# the input a data check judges when there are several (the tokens, the pixels), before any other
_MAIN_KEYS = ("input_ids", "pixel_values", "input_values", "inputs_embeds", "input_features", "x", "inputs",
              "input", "features")


def count(x) -> int:
    """The number of samples."""
    return len(next(iter(x.values()))) if isinstance(x, Mapping) else len(x)


def take(x, index):
    """The samples at ``index`` (a slice, indices or a boolean mask), of the same kind."""
    return {k: v[index] for k, v in x.items()} if isinstance(x, Mapping) else x[index]


def first(x, n: int, start: int = 0):
    return take(x, slice(start, start + n))


def call(model, x):
    """The model on these inputs: a dict by name, as training calls it (``model(**batch)``)."""
    return model(**x) if isinstance(x, Mapping) else model(x)


def main(x) -> torch.Tensor:
    """The input the data checks judge (scale, blank samples, leakage): the tensor, or the dict's tokens or
    pixels (``input_ids``, ``pixel_values``...), else its first value."""
    if not isinstance(x, Mapping):
        return x
    key = next((k for k in _MAIN_KEYS if k in x), next(iter(x)))
    return x[key]


def flat(x) -> torch.Tensor:
    """Each sample as one row of numbers (every input of a dict side by side): what makes two samples the same."""
    if not isinstance(x, Mapping):
        return x.reshape(len(x), -1)
    rows = [v.reshape(len(v), -1) for v in x.values()]
    dtype = torch.float32 if any(r.dtype.is_floating_point for r in rows) else torch.int64
    return torch.cat([r.to(dtype) for r in rows], 1)


def describe(x) -> str:
    if isinstance(x, Mapping):
        return "{" + ", ".join(f"{k}: {list(v.shape[1:])}" for k, v in x.items()) + "}"
    return str(list(x.shape[1:]))


def same_form(a, b) -> bool:
    """Whether two inputs hold the same features (a dict's keys; a tensor's shape per sample)."""
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        return isinstance(a, Mapping) and isinstance(b, Mapping) and list(a) == list(b)
    return tuple(a.shape[1:]) == tuple(b.shape[1:])


def split(item, tensor):
    """(inputs, target, weight or None) of one item or batch: a tuple ``(x, y[, w])`` or a dict with a label
    key. ``tensor(value, name)`` turns each value into a tensor."""
    if isinstance(item, Mapping):
        label = next((k for k in LABEL_KEYS if k in item), None)
        if label is None:
            raise DoctorError(f"a dict item for the doctor needs its target under one of {', '.join(LABEL_KEYS)}; "
                              f"it has {', '.join(map(str, item))}")
        weight = next((k for k in WEIGHT_KEYS if k in item), None)
        rest = {k: tensor(v, k) for k, v in item.items() if k not in (label, weight)}
        if not rest:
            raise DoctorError(f"a dict item for the doctor needs inputs beside its target {label!r}")
        x = next(iter(rest.values())) if len(rest) == 1 else rest
        return x, tensor(item[label], label), tensor(item[weight], weight) if weight else None
    if isinstance(item, tuple | list) and len(item) in (2, 3):
        x = item[0]
        x = {k: tensor(v, k) for k, v in x.items()} if isinstance(x, Mapping) else tensor(x, "X")
        return x, tensor(item[1], "y"), tensor(item[2], "sample_weight") if len(item) > 2 else None
    raise DoctorError("an item or batch for the doctor is (x, y), (x, y, sample_weight) or a dict of inputs with "
                      f"a {'/'.join(LABEL_KEYS[:2])} key; got {type(item).__name__}")


def concat(parts: list, stack: bool = False):
    """Items (``stack``) or batches joined along the samples; sequences of different lengths (each batch
    padded to its longest, as a collate does) are padded with zeros to the longest, on the side the
    ``attention_mask`` pads."""
    if isinstance(parts[0], Mapping):
        keys = list(parts[0])
        if any(list(p) != keys for p in parts):
            raise DoctorError(f"the items' inputs differ: {list(parts[0])} and "
                              f"{next(list(p) for p in parts if list(p) != keys)}")
        left = [_pads_left(p) for p in parts]
        return {k: _join([p[k] for p in parts], stack, left) for k in keys}
    return _join(parts, stack, [False] * len(parts))


def _pads_left(x: Mapping) -> bool:
    mask = x.get("attention_mask")
    if not isinstance(mask, torch.Tensor) or mask.dim() < 1 or not mask.numel():
        return False
    mask = mask.reshape(-1, mask.shape[-1]) if mask.dim() > 1 else mask[None]
    return bool((mask[:, 0] == 0).any()) and bool((mask[:, -1] != 0).all())


def _join(tensors: list[torch.Tensor], stack: bool, left: list[bool]) -> torch.Tensor:
    axis = 0 if stack else 1
    if all(t.dim() > axis for t in tensors) and len({t.shape for t in tensors}) > 1 and \
            len({t.dim() for t in tensors}) == 1 and len({t.shape[axis + 1:] for t in tensors}) == 1:
        longest = max(t.shape[axis] for t in tensors)
        tensors = [F.pad(t, [0, 0] * (t.dim() - axis - 1) + ([longest - t.shape[axis], 0] if lft else
                                                             [0, longest - t.shape[axis]]))
                   for t, lft in zip(tensors, left)]
    try:
        return torch.stack(tensors) if stack else torch.cat(tensors)
    except RuntimeError as e:
        raise DoctorError(f"the samples' inputs cannot be joined into one batch: {str(e).splitlines()[0]}") from e
