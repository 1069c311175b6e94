"""NaN, Inf, overflow and underflow, counted as values are stored rather than hidden.

A layer's values are stored in a smaller dtype (float16 by default) than the model computed them
in; a value beyond that dtype's range is saturated and counted, and NaN or Inf the model itself
produced is kept and counted. The common case, everything finite, costs one fast pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass
class NonFinite:
    """What `check_finite` found in one block of stored values."""

    nan: int = 0
    inf: int = 0
    overflow: int = 0  # finite in the source but beyond the storage dtype: saturated
    per_row: np.ndarray | None = field(default=None, repr=False)
    underflow: int = 0  # nonzero in the source but below the storage dtype's smallest normal: 0 or subnormal

    def add_to(self, counts: dict) -> None:
        for key in COUNTS:
            counts[key] = int(counts.get(key, 0)) + getattr(self, key)


COUNTS = ("nan", "inf", "overflow", "underflow")


def _zero_counts() -> dict:
    return dict.fromkeys(COUNTS, 0)


def check_finite(stored: np.ndarray, source: Callable[[], np.ndarray] | np.ndarray | None = None) -> NonFinite | None:
    """Count NaN, Inf and overflow in ``stored`` (a 2-D block in its storage dtype).

    Returns None when everything is finite: one pass, the common case. Otherwise counts against
    ``source`` (the values before conversion; a callable is only called then), saturates values
    that overflowed the storage dtype to its largest finite magnitude in place, and returns counts
    with the number of bad values per row. NaN and Inf the model itself produced are kept: they are
    what it computed, and are reported rather than hidden.
    """
    if _all_finite(stored):
        return None
    src = source() if callable(source) else (stored if source is None else source)
    src = np.asarray(src).reshape(stored.shape)
    nan = np.isnan(src)
    inf = np.isinf(src)
    overflow = ~np.isfinite(stored) & np.isfinite(src)
    if overflow.any():
        big = np.finfo(stored.dtype).max
        stored[overflow] = np.where(src[overflow] > 0, big, -big)
    bad = nan | inf | overflow
    return NonFinite(nan=int(nan.sum()), inf=int(inf.sum()), overflow=int(overflow.sum()),
                     per_row=bad.reshape(len(stored), -1).sum(axis=1).astype(np.int32))


_FINITE_CHUNK = 1 << 15  # values per step: the masked copy stays in the CPU cache and off mmap'd memory


def _all_finite(values: np.ndarray) -> bool:
    """True when no value is NaN or Inf, judged by the exponent bits read as integers (numpy's
    float16 isfinite is scalar code, ten times slower than a masked integer max)."""
    if values.dtype.kind != "f" or values.size == 0:
        return True
    if values.dtype.itemsize not in (2, 4, 8) or not values.flags.c_contiguous or not values.dtype.isnative:
        return bool(np.isfinite(values).all())
    bits = values.reshape(-1).view(f"u{values.dtype.itemsize}")
    magnitude = np.array((1 << (8 * values.dtype.itemsize - 1)) - 1, dtype=bits.dtype)
    exponent = {2: 0x7C00, 4: 0x7F800000, 8: 0x7FF0000000000000}[values.dtype.itemsize]
    return all((bits[i:i + _FINITE_CHUNK] & magnitude).max() < exponent for i in range(0, bits.size, _FINITE_CHUNK))
