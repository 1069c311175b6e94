"""Which steps of a padded sequence are real, so that a sequence layer is reduced over those alone.

A padded batch holds pad positions whose activations are no instance's: averaged in, they shift
every neuron of the shorter sequences, and ``"last"`` on right padding reads a pad. The mask comes
from the inputs (a dict input's ``attention_mask``, the Hugging Face convention, or the key named
by ``sequence_mask=``) or from an (N, T) array aligned with the instances; 1 (True) marks a real
position, 0 a pad, on either side.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from .options import CaptureError

AUTO_KEY = "attention_mask"


class _MaskSource:
    """Where each batch's padding mask comes from: an input key, an array of every row, or nowhere."""

    def __init__(self, given, n: int | None):
        self.key: str | None = None
        self.array: np.ndarray | None = None
        self.auto = given is None
        if given is None or given is False:
            return
        if isinstance(given, str):
            if not given:
                raise CaptureError("sequence_mask must name an input key, not ''.")
            self.key = given
            return
        if given is True or not isinstance(given, (np.ndarray, torch.Tensor, list, tuple)):
            raise CaptureError(f"sequence_mask must be an (N, T) array of 1 (real step) and 0 (padding), the name of "
                               f"the input key that holds one, False (reduce over every step) or None (the inputs' "
                               f"'{AUTO_KEY}' when there is one), not {type(given).__name__}.")
        array = given.detach().cpu().numpy() if isinstance(given, torch.Tensor) else np.asarray(given)
        _check_values(array, "sequence_mask", n, "instances")
        self.array = array.astype(bool)

    @property
    def name(self) -> str | None:
        """What the store records as the mask's origin."""
        return self.key if self.key is not None else "array" if self.array is not None else None

    def resolve(self, x, batch) -> None:
        """Settle the automatic choice on the first batch: its ``attention_mask`` when it has one."""
        if self.auto and any(isinstance(d, Mapping) and AUTO_KEY in d for d in (x, batch)):
            self.key = AUTO_KEY
        if self.key is not None:
            self._lookup(x, batch)

    def _lookup(self, x, batch) -> tuple[object, bool]:
        """The mask under ``key`` in the model's inputs or, beside them, in the batch; and whether it is an input."""
        if isinstance(x, Mapping) and self.key in x:
            return x[self.key], True
        if isinstance(batch, Mapping) and self.key in batch:
            return batch[self.key], False  # beside the input that input_key= chose
        keys = [d for d in (x, batch) if isinstance(d, Mapping)]
        if not keys:
            raise CaptureError(f"sequence_mask={self.key!r} names an input key, but the model's input is "
                               f"{type(x).__name__}, not a dict; pass the mask itself as an (N, T) array.")
        raise CaptureError(f"sequence_mask={self.key!r} is not among the inputs' keys: "
                           f"{', '.join(map(str, keys[-1]))}.")

    def steps(self, x, batch, row: int, n: int, device) -> _Steps | None:
        """The real steps of the batch of rows ``row``..``row + n - 1`` (``x``: its model input, on the CPU)."""
        mask = self._rows(x, batch, row, n)
        return None if mask is None else _Steps.of(mask.to(device), row)

    def _rows(self, x, batch, row: int, n: int) -> torch.Tensor | None:
        if self.array is not None:
            rows = self.array[row:row + n]
            if len(rows) != n:  # data of unknown length, longer than the mask
                raise CaptureError(f"sequence_mask has {len(self.array)} rows, but the data goes on past them "
                                   f"(rows {row}-{row + n - 1}); give it one row per instance.")
            return torch.from_numpy(rows)
        if self.key is None:
            return None
        value, _ = self._lookup(x, batch)
        if not isinstance(value, torch.Tensor):
            value = torch.as_tensor(np.asarray(value))
        _check_values(value, f"The inputs' {self.key!r}", n, "rows in the batch")
        return value != 0

    def digest_part(self, x, batch, row: int, n: int) -> np.ndarray | None:
        """The mask's bytes where they are not among the inputs' (an array, a key beside input_key=): a resumed
        capture must see the same."""
        if self.key is not None and self._lookup(x, batch)[1]:
            return None
        mask = self._rows(x, batch, row, n)
        return None if mask is None else np.ascontiguousarray(mask.numpy(), dtype=np.uint8)


def _check_values(mask, what: str, n: int | None, rows: str) -> None:
    shape = tuple(mask.shape)
    if len(shape) != 2 or (n is not None and shape[0] != n):
        expected = f"({n}, T)" if n is not None else "(N, T)"
        raise CaptureError(f"{what} has shape {shape}; a padding mask is {expected}: one row per instance ({n} "
                           f"{rows}), one column per step. Pass sequence_mask=False to reduce over every step.")
    if isinstance(mask, torch.Tensor):
        binary = mask.dtype == torch.bool or bool(((mask == 0) | (mask == 1)).all())
    else:
        binary = mask.dtype == bool or (mask.dtype.kind in "biuf" and bool(((mask == 0) | (mask == 1)).all()))
    if not binary:
        raise CaptureError(f"{what} holds values other than 0 and 1 (dtype {mask.dtype}); a padding mask is 1 "
                           "(or True) at each real step and 0 (False) at each pad.")


class _Steps:
    """One batch's real steps: the mask and, computed once for every layer, each row's first and last."""

    def __init__(self, mask: torch.Tensor, row: int, count: torch.Tensor, first: torch.Tensor, last: torch.Tensor):
        self.mask = mask
        self.row = row  # the batch's first row, for errors
        self.length = int(mask.shape[1])
        self.count = count
        self.first = first
        self.last = last

    @classmethod
    def of(cls, mask: torch.Tensor, row: int) -> _Steps:
        count = mask.sum(dim=1)
        empty = (count == 0).nonzero().flatten().tolist()
        if empty:
            rows = ", ".join(str(row + i) for i in empty[:10]) + (", ..." if len(empty) > 10 else "")
            which = f"Rows {rows} have" if len(empty) > 1 else f"Row {rows} has"
            raise CaptureError(f"{which} no real step in the padding mask (all 0): a sequence reduction of nothing "
                               "has no value. Leave those instances out, or pass sequence_mask=False to reduce over "
                               "every step.")
        index = torch.arange(mask.shape[1], device=mask.device)
        first = torch.where(mask, index, mask.shape[1]).amin(dim=1)
        last = torch.where(mask, index, -1).amax(dim=1)
        return cls(mask, row, count, first, last)

    def reduce(self, value: torch.Tensor, how: str) -> torch.Tensor:
        """(n, F) from a sequence value (n, T, F) over its real steps only (``how``: a sequence or channel
        reduction)."""
        device = value.device  # a layer may run on another device than the inputs (a model split over several)
        if how in ("first", "last"):
            rows = torch.arange(value.shape[0], device=device)
            return value[rows, (self.first if how == "first" else self.last).to(device)]
        real = self.mask.to(device).unsqueeze(-1)
        if how == "max":
            return torch.where(real, value, float("-inf")).amax(dim=1)
        wide = torch.float32 if value.dtype in (torch.float16, torch.bfloat16) else None
        return torch.where(real, value, 0).sum(dim=1, dtype=wide) / self.count.to(device).unsqueeze(-1)
