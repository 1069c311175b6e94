"""When a quantity is tracked: the reference's linear and logarithmic schedules.

A schedule is a callable ``step -> bool`` with a readable ``describe()`` that the log's metadata
keeps, so a run says what it tracked when.
"""

from __future__ import annotations

from ..run.log import CockpitError


class Schedule:
    def __call__(self, step: int) -> bool:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.describe()


class linear(Schedule):  # noqa: N801 - named like the reference's function
    """Track at steps ``offset + n * interval`` for n >= 0."""

    def __init__(self, interval: int = 1, offset: int = 0):
        if int(interval) < 1:
            raise CockpitError(f"interval must be a positive integer, got {interval!r}")
        self.interval, self.offset = int(interval), int(offset)

    def __call__(self, step: int) -> bool:
        shifted = step - self.offset
        return shifted >= 0 and shifted % self.interval == 0

    def describe(self) -> str:
        return f"linear(interval={self.interval}, offset={self.offset})"


class logarithmic(Schedule):  # noqa: N801
    """Track at ``steps`` log-spaced steps between base**start and base**end (and at 0 if ``init``).

    The steps are the reference's: ``torch.logspace(start, end, steps, base, dtype=int)``.
    """

    def __init__(self, start: float, end: float, steps: int = 300, base: float = 10, init: bool = True):
        import torch

        if steps < 1 or end < start:
            raise CockpitError(f"need steps >= 1 and end >= start, got start={start}, end={end}, steps={steps}")
        points = torch.logspace(start, end, steps, base=base, dtype=torch.int64).tolist()
        self.steps = sorted(set(points) | ({0} if init else set()))
        self._set = frozenset(self.steps)
        self.args = (start, end, steps, base, init)

    def __call__(self, step: int) -> bool:
        return step in self._set

    def describe(self) -> str:
        start, end, steps, base, init = self.args
        return f"logarithmic(start={start}, end={end}, steps={steps}, base={base}, init={init})"
