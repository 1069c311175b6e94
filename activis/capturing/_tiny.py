"""A compiled count of float32 values that float16 keeps with fewer digits (or as 0); numba is
imported only when a float16 capture first meets float32 rows (see `layers._count_tiny`)."""

from __future__ import annotations

import numba
import numpy as np


def _count(bits, bound):
    # |x| - 1 as unsigned integers: 0 wraps to the top, so one comparison finds 0 < |x| < tiny
    count = 0
    for i in range(bits.shape[0]):
        count += ((bits[i] & np.uint32(0x7FFFFFFF)) - np.uint32(1)) < bound
    return count


try:
    count_tiny = numba.njit(cache=True, nogil=True)(_count)
except RuntimeError:  # no writable cache location: compile in each process instead
    count_tiny = numba.njit(nogil=True)(_count)
