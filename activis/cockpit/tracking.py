"""One tracked step: the context around its backward pass, and what the tracking costs.

`Tracking` checks the step's losses, runs the quantities scheduled for it (and finishes those
begun at the step before) on a `StepContext`, and writes their readings to the log; a quantity
that cannot be had is skipped with its reason, never faked. `Costs` times each quantity and
shared reduction, for `Cockpit.costs`.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from typing import TYPE_CHECKING

import torch

from ..run.log import CockpitError
from .quantities import Quantity, TwoStepQuantity
from .step import StepContext
from .taps import Unavailable

if TYPE_CHECKING:
    from .cockpit import Cockpit


class Costs:
    """Wall time of each quantity and shared reduction, each block's own: time spent in blocks nested
    inside it (a reduction first needed by a quantity) is counted for them, not twice. The first call
    is kept apart: it compiles and warms up."""

    def __init__(self):
        self.first: dict[str, float] = {}
        self.later: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.shared: set[str] = set()
        self._counted = 0.0  # seconds already attributed: nested blocks subtract what they add

    @contextlib.contextmanager
    def timed(self, name: str, shared: bool = False):
        start, counted = time.perf_counter(), self._counted
        try:
            yield
        finally:
            own = time.perf_counter() - start - (self._counted - counted)
            self._counted += own
            if name in self.first:
                self.later[name] = self.later.get(name, 0.0) + own
            else:
                self.first[name] = own
            self.calls[name] = self.calls.get(name, 0) + 1
            if shared:
                self.shared.add(name)

    def frame(self):
        import pandas as pd

        rows = [{"name": n, "shared": n in self.shared, "calls": self.calls[n], "first_ms": 1e3 * first,
                 "mean_ms": 1e3 * self.later[n] / (self.calls[n] - 1) if n in self.later else float("nan"),
                 "total_s": first + self.later.get(n, 0.0)} for n, first in self.first.items()]
        frame = pd.DataFrame(rows, columns=["name", "shared", "calls", "first_ms", "mean_ms", "total_s"])
        return frame.sort_values("mean_ms", ascending=False, ignore_index=True)


class Tracking:
    """The context around one step's backward pass (see `Cockpit.__call__`)."""

    def __init__(self, cockpit: Cockpit, step: int, loss, losses, optimizer, batch_size):
        self.cockpit, self.step = cockpit, step
        self.loss, self.losses, self.optimizer, self.batch_size = loss, losses, optimizer, batch_size

    def __enter__(self):
        cp, step = self.cockpit, self.step
        self.active = [q for q in cp.quantities if q.tracks(step)]
        pending = cp._pending
        cp._pending = None
        self.finishing = pending[1] if pending is not None and pending[0] == step - 1 else []
        self.ctx = None
        if not self.active and not self.finishing and cp._initial is not None:
            return self
        loss, losses = self._check_losses()
        B = self._batch_size(losses)
        previous = None
        if cp._snapshot is not None and cp._snapshot[0] == step - 1 and any(q.snapshots for q, _ in self.finishing):
            previous = cp._snapshot[1]
        comparisons = (any(q.reads_initial for q in self.active),
                       any(isinstance(q, TwoStepQuantity) and q.snapshots for q in self.active), previous)
        self.ctx = StepContext(cp, step, loss, losses, B, self.optimizer, comparisons)
        if cp.hess_method in ("ggn", "ggn-mc") and any(q.curvature for q in self.active):
            self.ctx.prepare_ggn()
        cp.taps.output_grad = None
        cp.taps.armed = any(q.per_sample for q in self.active) or any(
            q.end_per_sample for q, _ in self.finishing)
        return self

    def _check_losses(self):
        loss, losses = self.loss, self.losses
        if losses is not None:
            if not isinstance(losses, torch.Tensor) or losses.dim() != 1:
                raise CockpitError("individual_losses must be a 1-D tensor with one loss per sample "
                                 "(e.g. F.cross_entropy(..., reduction='none'))")
            mean = losses.detach().mean()
            if loss is None:
                loss = mean
            elif not torch.isclose(loss.detach().to(mean), mean, rtol=1e-4, atol=1e-6, equal_nan=True):
                raise CockpitError(f"loss ({float(loss.detach()):.6g}) is not the mean of individual_losses "
                                 f"({float(mean):.6g}); the instruments assume the mean loss")
        if loss is None:
            raise CockpitError("pass loss=... or individual_losses=... to the cockpit")
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise CockpitError("loss must be a scalar tensor")
        self._warn_if_not_finite(loss, losses)
        return loss, losses

    def _warn_if_not_finite(self, loss, losses) -> None:
        """A NaN or infinite loss is what the instruments are there to show: recorded, with a warning."""
        value = float(loss.detach())
        if math.isfinite(value):
            return
        bad = "" if losses is None else (f" ({int((~torch.isfinite(losses.detach())).sum())} of "
                                          f"{losses.numel()} individual losses are not finite)")
        warnings.warn(f"Cockpit: the loss at step {self.step} is {value}{bad}; it is recorded, and the "
                      "instruments that need finite gradients record NaN at this step", RuntimeWarning,
                      stacklevel=4)

    def _batch_size(self, losses) -> int:
        if losses is not None:
            return losses.shape[0]
        if self.batch_size is not None:
            return int(self.batch_size)
        args = self.cockpit.taps.args
        if args and isinstance(args[0], torch.Tensor) and args[0].dim() > 0:
            return args[0].shape[0]
        raise CockpitError("cannot infer the batch size: pass individual_losses=... or batch_size=...")

    def __exit__(self, exc_type, exc, tb):
        cp = self.cockpit
        cp.taps.armed = False
        try:
            if exc_type is None and self.ctx is not None:
                self._track()
        finally:
            cp.taps.clear()
            for _, p in cp.params:  # break the grad <-> graph cycle that create_graph leaves
                if p.grad is not None and p.grad.grad_fn is not None:
                    p.grad = p.grad.detach()
            cp._note_grads()
        return False

    def _track(self):
        cp, ctx, step = self.cockpit, self.ctx, self.step
        ctx.after_backward()
        if cp._initial is None:
            cp._initial = [p.clone() for p in ctx.params]
        earlier: dict = {}
        for q, state in self.finishing:
            self._run(q, earlier, lambda q=q, state=state: earlier.__setitem__(q.name, q.finish(state, ctx)))
        values: dict = {}
        pending = []
        for q in self.active:
            if isinstance(q, TwoStepQuantity):
                self._run(q, values, lambda q=q: pending.append((q, q.start(ctx))))
            else:
                self._run(q, values, lambda q=q: values.__setitem__(q.name, q.compute(ctx)))
        cp._pending = (step, pending) if pending else None
        if earlier:
            arrays = {k: earlier.pop(k) for k in list(earlier) if k in cp.log.meta["arrays"]}
            cp.log.append(step - 1, earlier, arrays)
        if self.active:
            arrays = {k: values.pop(k) for k in list(values) if k in cp.log.meta["arrays"]}
            values["batch_size"] = ctx.batch_size
            if self.optimizer is not None:
                values["lr"] = float(self.optimizer.param_groups[0]["lr"])
                if "optimizer" not in cp.log.config:  # an optimizer first seen here joins the configuration
                    values["_config"] = {"optimizer": optimizer_config(self.optimizer)}
                    cp.describe_optimizer(self.optimizer)
            if "hess_diag" in ctx._cache and not isinstance(ctx._cache["hess_diag"], Unavailable):
                values["hess_diag_method"] = cp.hess_method
            cp.log.append(step, values, arrays)

    def _run(self, q: Quantity, values: dict, compute) -> None:
        try:
            with self.cockpit._costs.timed(q.name):
                compute()
        except Unavailable as e:
            self.cockpit._skip(q.name, str(e), values)
        except Exception as e:  # noqa: BLE001 - only at a non-finite step, re-raised otherwise
            self.cockpit._skip(q.name, str(self.ctx.not_finite(e)), values)


def optimizer_config(optimizer) -> dict:
    """An optimizer's type and the scalar hyperparameters of its first parameter group (for run tables)."""
    group = optimizer.param_groups[0] if optimizer.param_groups else {}
    hyper = {}
    for key, value in group.items():
        if isinstance(value, bool | int | float | str) and key != "params":
            hyper[key] = value
        elif isinstance(value, tuple) and all(isinstance(v, int | float) for v in value):
            hyper[key] = list(value)
    return {"type": type(optimizer).__name__, "hyperparameters": hyper}
