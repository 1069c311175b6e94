"""The one error of training dynamics, recorded (activis.run.dynamics) or computed (this package)."""

from __future__ import annotations

from ..run.dynamics import DynamicsError

__all__ = ["DynamicsError"]
