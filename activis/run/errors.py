"""The run record's error class."""

from __future__ import annotations


class RunError(ValueError):
    """A run record that cannot be created, read or compared as asked: a folder that is not a run (or a
    newer one), a bad configuration, finding or metric, a step written twice, an unknown run or series."""
