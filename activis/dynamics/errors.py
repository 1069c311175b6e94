"""The one error of training dynamics, recorded (activis.run.dynamics) or computed (this package)."""

from __future__ import annotations

import numpy as np

from ..run.dynamics import DynamicsError

__all__ = ["DynamicsError", "whole_number"]


def whole_number(value, what: str, minimum: int | None = None) -> int:
    """``value`` as an int, or a DynamicsError naming ``what``: 1.5, NaN, text and booleans are refused,
    not rounded (``int()`` would turn 1.5 into 1 and fail on NaN with a bare ValueError)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or (minimum is not None and value < minimum):
        rule = "a whole number" if minimum is None else f"at least {minimum} (a whole number)"
        raise DynamicsError(f"{what} must be {rule}, not {value!r}.")
    return int(value)
