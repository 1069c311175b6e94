"""What one tracked step offers the quantities: its loss, parameters and gradients, and the
reductions several quantities share (per-sample gradients, distances, the Hessian diagonal, ...).

A reduction is computed once per step, on first use, whichever quantity asks first, and one that
cannot be had raises the same `Unavailable` for every quantity that asks. `Cockpit` makes one
`StepContext` per tracked step (see `tracking`); the quantities only ever see this object.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import nn

from .fused import distance, parameter_pass
from .hessian import HessianOperator, full_diagonal, ggn_diagonal, hutchinson_diagonal
from .taps import Unavailable, fallback_grads

if TYPE_CHECKING:
    from .cockpit import Cockpit


class StepContext:
    """What one tracked step offers the quantities. Every reduction is computed once, on first use,
    and a reduction that is unavailable raises the same `Unavailable` for every quantity asking."""

    def __init__(self, cockpit: Cockpit, step: int, loss: torch.Tensor, losses: torch.Tensor | None,
                 batch_size: int, optimizer, comparisons: tuple[bool, bool, list | None] = (False, False, None)):
        self.cockpit, self.step = cockpit, step
        # what the step's quantities compare the parameters with, for `_parameter_pass`: the first
        # step's parameters?, a snapshot of this step's?, and the previous step's snapshot (or None)
        self.comparisons = comparisons
        self.live_params = [p for _, p in cockpit.params]
        self.names = [n for n, _ in cockpit.params]
        self._loss_tensor, self._losses_tensor = loss, losses
        self.loss = float(loss.detach())
        self.losses = losses.detach() if losses is not None else None
        self.batch_size = batch_size
        self.optimizer = optimizer
        self._cache: dict = {}

    def after_backward(self) -> None:
        self.params = [p.detach() for p in self.live_params]
        self.dim = sum(p.numel() for p in self.params)
        self.grads = [p.grad.detach() if p.grad is not None else torch.zeros_like(p) for p in self.live_params]

    @property
    def initial_params(self):
        return self.cockpit._initial

    def grad_norms(self) -> list[float]:
        return self._cached("grad_norms", lambda: [float(n) for n in torch._foreach_norm(self.grads)])

    @property
    def grad_sq_norm(self) -> float:
        return sum(n * n for n in self.grad_norms())

    def snapshot(self) -> list[torch.Tensor]:
        """This step's parameters, copied into reused buffers (two sets, alternating: a snapshot
        lives until the next tracked step has used it). Fresh memory costs more than the copy."""
        if self.comparisons[1]:
            return self._cached("parameter_pass", self._parameter_pass)["snapshot"]
        return self._cached("snapshot", lambda: self._snapshot_buffers(copy=True))

    def _snapshot_buffers(self, copy: bool) -> list[torch.Tensor]:
        cp = self.cockpit
        bufs = cp._buffers(f"snapshot{cp._flip}")
        cp._flip ^= 1
        if copy:
            torch._foreach_copy_(bufs, self.params)
        cp._snapshot = (self.step, bufs)
        return bufs

    def distances(self, other: list[torch.Tensor]) -> list[float]:
        """||theta - other|| per parameter, without forming the difference (one pass, no memory)."""
        initial, _, previous = self.comparisons
        if (initial and other is self.initial_params) or (previous is not None and other is previous):
            return self._cached("parameter_pass", self._parameter_pass)[
                "initial" if other is self.initial_params else "previous"]
        return self._cached(("distances", id(other)), lambda: [distance(p, o) for p, o in zip(self.params, other)])

    def _parameter_pass(self) -> dict:
        """The planned comparisons in one pass over the parameters (each pass reads them from memory)."""
        initial, snapshot, previous = self.comparisons
        bufs = self._snapshot_buffers(copy=False) if snapshot else None
        to_initial, to_previous = parameter_pass(self.params, self.initial_params if initial else None, previous,
                                                 bufs)
        return {"initial": to_initial, "previous": to_previous, "snapshot": bufs}

    def not_finite(self, error: Exception) -> Unavailable:
        """At a step whose loss is NaN or infinite, a computation that failed is skipped for this step only."""
        if math.isfinite(self.loss):
            raise error
        return Unavailable(f"cannot be computed at a step whose loss is {self.loss} "
                           f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})")

    def difference(self, other: list[torch.Tensor]) -> list[torch.Tensor]:
        """theta - other per parameter."""
        return self._cached(("difference", id(other)), lambda: torch._foreach_sub(self.params, other))

    def _cached(self, key, compute):
        if key not in self._cache:
            with self.cockpit._costs.timed(key[0] if isinstance(key, tuple) else key, shared=True):
                try:
                    self._cache[key] = compute()
                except Unavailable as e:
                    self._cache[key] = e
                except Exception as e:  # noqa: BLE001 - only at a non-finite step, re-raised otherwise
                    self._cache[key] = self.not_finite(e)
        value = self._cache[key]
        if isinstance(value, Unavailable):
            raise value
        return value

    # ---------------------------------------------------------------- per-sample reductions
    def per_sample(self):
        return self._cached("per_sample", self._per_sample)

    def _per_sample(self):
        cp, B = self.cockpit, self.batch_size
        if B < 2:
            raise Unavailable("needs a batch of at least 2 samples")
        mixing = [n for n, m in cp.model.named_modules()
                  if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training]
        if mixing:
            raise Unavailable(f"BatchNorm in training mode ({', '.join(mixing)}) mixes the samples of a "
                              "batch, so per-sample gradients are not defined; put those layers in eval "
                              "mode, or replace them (GroupNorm, LayerNorm)")
        result = cp.taps.per_sample(self.live_params, B)
        missing = [i for i, r in enumerate(result) if r is None]
        if missing:
            for i, grads in zip(missing, self._fallback([self.names[i] for i in missing])):
                result[i] = grads
        return result

    def _fallback(self, names: list[str]):
        from .persample import Dense

        cp = self.cockpit
        taps = cp.taps
        dropout = [n for n, m in cp.model.named_modules()
                   if isinstance(m, nn.modules.dropout._DropoutNd) and m.training and m.p > 0]
        if dropout:
            raise Unavailable(f"parameters outside Linear/Conv layers ({', '.join(names[:3])}...) need a "
                              f"per-sample re-run of the model, which cannot repeat the masks of dropout "
                              f"in training mode ({', '.join(dropout)})")
        if taps.kwargs or taps.output_grad is None or not taps.args:
            raise Unavailable(f"parameters outside Linear/Conv layers ({', '.join(names[:3])}) need the "
                              "model called with positional tensor inputs returning one tensor")
        taps.recording = False
        try:
            grads = fallback_grads(cp.model, names, taps.args, taps.output_grad * self.batch_size,
                                   cp.chunk_size)
        except Exception as e:  # noqa: BLE001 - vmap rejects many things; report, do not crash training
            raise Unavailable(f"torch.func could not compute per-sample gradients of {names[0]}... "
                              f"({type(e).__name__}: {e})") from e
        finally:
            taps.recording = True
        return [Dense(grads[n]) for n in names]

    def sq_norms(self):
        return self._cached("sq_norms", lambda: [ps.sq_norms().double() for ps in self.per_sample()])

    def dots_mean(self):
        return self._cached("dots_mean", lambda: [ps.dot_mean().double() for ps in self.per_sample()])

    def sum_sq(self):
        return self._cached("sum_sq", lambda: [ps.sum_sq() for ps in self.per_sample()])

    # ---------------------------------------------------------------- curvature
    def hessian_operator(self) -> HessianOperator:
        return self._cached("hvp", lambda: HessianOperator(
            self.live_params, [p.grad for p in self.live_params]))

    def prepare_ggn(self) -> None:
        """The Gauss-Newton diagonal needs the forward graph: compute it before the user's backward."""
        cp = self.cockpit

        def compute():
            if self._losses_tensor is None:
                raise Unavailable("the exact Gauss-Newton diagonal needs individual_losses")
            self._per_sample_guard()
            mc = cp.mc_samples if cp.hess_method == "ggn-mc" else None
            return ggn_diagonal(cp.taps, self.live_params, self.names, self._losses_tensor, cp.chunk_size,
                                mc, cp._generator)

        self._cached_quietly("hess_diag", compute)

    def _per_sample_guard(self):
        mixing = [n for n, m in self.cockpit.model.named_modules()
                  if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training]
        if mixing:
            raise Unavailable(f"BatchNorm in training mode ({', '.join(mixing)}) mixes the samples; the "
                              "Gauss-Newton diagonal is computed per sample")

    def _cached_quietly(self, key, compute):
        try:
            self._cached(key, compute)
        except Unavailable:
            pass

    def hess_diag(self):
        cp = self.cockpit

        def compute():
            op = self.hessian_operator()
            if cp.hess_method == "full":
                return full_diagonal(op)
            return hutchinson_diagonal(op, cp.hutchinson_samples, cp._generator)

        return self._cached("hess_diag", compute)

    def plain_sgd_lr(self, name: str = "this quantity") -> float:
        """The learning rate of plain SGD (raises `Unavailable` for any other optimizer).

        Callable on a context or, as ``StepContext.plain_sgd_lr(optimizer)``, on an optimizer."""
        opt = self.optimizer if isinstance(self, StepContext) else self
        if opt is None:
            raise Unavailable(f"{name} needs the optimizer (pass optimizer=...)")
        groups = opt.param_groups
        plain = type(opt) is torch.optim.SGD and all(
            g.get("momentum", 0) == 0 and g.get("dampening", 0) == 0 and g.get("weight_decay", 0) == 0
            and not g.get("nesterov", False) for g in groups)
        if not plain:
            raise Unavailable(f"{name} is defined for plain SGD only (no momentum, dampening, weight decay "
                              f"or nesterov), not {type(opt).__name__}")
        if len({g["lr"] for g in groups}) > 1:
            raise Unavailable(f"{name} needs one learning rate for all parameter groups")
        return float(groups[0]["lr"])
