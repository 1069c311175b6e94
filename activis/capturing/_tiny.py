"""One compiled pass over a batch's float32 rows: the largest magnitude (does every value fit the
storage dtype?) and how many values float16 keeps with fewer digits (or as 0). numba is imported
only when a capture first meets float32 rows (see `layers._RowCheck`)."""

from __future__ import annotations

import numba
import numpy as np


def _scan(bits, bound):
    # magnitudes as unsigned integers order as the values do, NaN above Inf; |x| - 1 wraps 0 to the top,
    # so one comparison finds 0 < |x| < tiny
    peak = np.uint32(0)
    tiny = 0
    for i in range(bits.shape[0]):
        magnitude = bits[i] & np.uint32(0x7FFFFFFF)
        peak = max(peak, magnitude)
        tiny += (magnitude - np.uint32(1)) < bound
    return peak, tiny


try:
    scan = numba.njit(cache=True, nogil=True)(_scan)
except RuntimeError:  # no writable cache location: compile in each process instead
    scan = numba.njit(nogil=True)(_scan)
