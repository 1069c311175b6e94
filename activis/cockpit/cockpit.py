"""The Cockpit: tracks the instruments' quantities around a training loop's backward pass.

Two ways to use it, both recording at step t the parameters theta_t and mini-batch t (after
``backward()``, before ``optimizer.step()``)::

    cockpit = Cockpit(model, "economy", log_dir="runs/a", optimizer=opt)

    # the reference's form: a context around backward()
    losses = F.cross_entropy(model(x), y, reduction="none")
    loss = losses.mean()
    with cockpit(step, loss=loss, individual_losses=losses):
        loss.backward(create_graph=cockpit.create_graph(step))
    opt.step()

    # one call: the mean, the backward and the tracking
    cockpit.backward(F.cross_entropy(model(x), y, reduction="none"))
    opt.step()

A quantity that cannot be had for this model or step (per-sample gradients under BatchNorm in
training mode, CABS without plain SGD, ...) is skipped with one warning that says why, and the
reason is kept in ``cockpit.skipped`` and in the log; it is never faked.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import time
import warnings
from collections.abc import Iterable

import torch
from torch import nn

from .fused import distance, parameter_pass
from .hessian import (
    HessianOperator,
    full_diagonal,
    ggn_diagonal,
    hutchinson_diagonal,
    not_piecewise_linear,
)
from .log import CockpitError, CockpitLog, layer_of
from .quantities import QUANTITIES, Quantity, TwoStepQuantity, configuration
from .taps import Taps, Unavailable, fallback_grads

_HESS_METHODS = ("auto", "ggn", "full", "hutchinson", "ggn-mc")


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


class Cockpit:
    """Tracks a configuration (or list) of quantities for ``model`` and writes them to a log.

    ``quantities``: ``"economy"``, ``"business"``, ``"full"`` or a list of quantities: `Quantity`
    objects (each with its own schedule), classes or names (``["Loss", "GradNorm"]``: every step).
    ``log_dir``: a folder for the log (an activation store's ``store.section("cockpit")`` works);
    None keeps the log in memory only (``cockpit.log``).
    ``hessian_diagonal`` picks how HessTrace and TIC get diag(H): ``"ggn"`` (exact for piecewise
    linear networks), ``"full"`` (exact, one Hessian column per parameter: small models only),
    ``"hutchinson"`` (an estimate), ``"ggn-mc"`` (an estimate: the Gauss-Newton diagonal from
    ``mc_samples`` random mixtures of the loss Hessian's columns instead of all C of them,
    the reference's ``diag_ggn_mc``) or ``"auto"`` (the first exact one, else Hutchinson). Which
    one produced a value is recorded as ``hess_diag_method`` in the log.
    ``doctor=True`` also watches the run for training problems (``cockpit.doctor``: a
    `activis.doctor.watchers.TrainingDoctor`, fed every tracked step's readings).
    """

    def __init__(self, model: nn.Module, quantities: str | Iterable[Quantity] = "economy", *,
                 log_dir=None, run: str | None = None, optimizer=None, hessian_diagonal: str = "auto",
                 full_hessian_max_params: int = 2048, hutchinson_samples: int = 20, mc_samples: int = 1,
                 chunk_size: int = 32, fsync_interval: float = 1.0, seed: int = 0, doctor: bool = False):
        if not isinstance(model, nn.Module):
            raise CockpitError(f"Cockpit needs a torch.nn.Module, got {type(model).__name__}")
        self.model = model
        self.quantities = self._quantities(quantities)
        self.params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not self.params:
            raise CockpitError("the model has no parameters that require gradients")
        self.optimizer = optimizer
        self.doctor = None  # the training doctor's watchers (doctor=True), fed each step's readings
        if doctor:
            from ..doctor.watchers import TrainingDoctor

            self.doctor = TrainingDoctor(model, self.params)
        self.chunk_size = chunk_size
        self.hutchinson_samples, self.mc_samples = hutchinson_samples, mc_samples
        self._generator = torch.Generator().manual_seed(seed)
        self.hess_method, self.hess_note = self._choose_hess_method(hessian_diagonal, full_hessian_max_params)
        self.taps = Taps(model)
        self.skipped: dict[str, str] = {}
        self._initial: list[torch.Tensor] | None = None
        self._bufs: dict[str, list[torch.Tensor]] = {}
        self._flip = 0
        self._snapshot: tuple[int, list[torch.Tensor]] | None = None  # (step, parameters) of the last snapshot
        self._watched: dict[int, list] = {}  # id(optimizer) -> hook handles
        self._step_watch: dict | None = None
        self._pending: tuple[int, list] | None = None
        self._next_step = 0
        self._costs = _Costs()
        meta = {
            "run": run or (str(log_dir) if log_dir is not None else "run"),
            "model": type(model).__name__,
            "params": [{"name": n, "shape": list(p.shape), "layer": layer_of(n)} for n, p in self.params],
            "quantities": {q.name: {**q.describe(), "aggregate": q.aggregate} for q in self.quantities},
            "hess_diag_method": self.hess_method,
            "hess_diag_note": self.hess_note,
            "config": {"n_parameters": sum(p.numel() for _, p in self.params),
                       **({"optimizer": optimizer_config(optimizer)} if optimizer is not None else {})},
            "arrays": {q.name: {"dtype": "<i8", "shape": self._array_shape(q)}
                       for q in self.quantities if hasattr(q, "bins") or hasattr(q, "grad_bins")},
        }
        self.log = CockpitLog(meta, log_dir, fsync_interval=fsync_interval)

    # ---------------------------------------------------------------- set-up
    @staticmethod
    def _quantities(quantities) -> list[Quantity]:
        if isinstance(quantities, str):
            return configuration(quantities)
        result = []
        for q in quantities:
            if isinstance(q, str):
                if q not in QUANTITIES:
                    raise CockpitError(f"unknown quantity {q!r}; known quantities: {', '.join(QUANTITIES)}")
                q = QUANTITIES[q]
            if inspect.isclass(q) and issubclass(q, Quantity):
                q = q()
            if not isinstance(q, Quantity):
                raise CockpitError(f"not a quantity: {q!r}; known quantities: {', '.join(QUANTITIES)}")
            result.append(q)
        names = [q.name for q in result]
        duplicates = {n for n in names if names.count(n) > 1}
        if duplicates:
            raise CockpitError(f"each quantity may appear once; twice: {sorted(duplicates)}")
        return result

    def _array_shape(self, q) -> list[int]:
        if hasattr(q, "grad_bins"):
            return [len(self.params), q.grad_bins.bins, q.param_bins.bins]
        return [len(self.params), q.bins.bins]

    def _choose_hess_method(self, method: str, full_max: int) -> tuple[str, str]:
        if method not in _HESS_METHODS:
            raise CockpitError(f"hessian_diagonal must be one of {_HESS_METHODS}, not {method!r}")
        if not any(q.curvature for q in self.quantities):
            return "none", ""
        reason = not_piecewise_linear(self.model)
        dim = sum(p.numel() for _, p in self.params)
        if method == "ggn":
            return "ggn", ("exact: the network is piecewise linear" if reason is None
                           else f"Gauss-Newton approximation, not the Hessian: {reason}")
        if method == "ggn-mc":
            return "ggn-mc", (f"ESTIMATE: Monte-Carlo Gauss-Newton diagonal, {self.mc_samples} "
                              "sample(s) per example" + (f"; and not the Hessian: {reason}" if reason else ""))
        if method == "auto":
            if reason is None:
                return "ggn", "exact: the network is piecewise linear"
            method = "full" if dim <= full_max else "hutchinson"
        if method == "full":
            return "full", f"exact: full Hessian diagonal over {dim} parameters"
        return "hutchinson", (f"ESTIMATE: Hutchinson with {self.hutchinson_samples} samples"
                              + (f" ({reason})" if reason else ""))

    # ---------------------------------------------------------------- the training-loop API
    def __call__(self, step: int, *, loss: torch.Tensor | None = None,
                 individual_losses: torch.Tensor | None = None, optimizer=None,
                 batch_size: int | None = None) -> _Tracking:
        """A context for one step's ``backward()``: ``with cockpit(step, loss=..., individual_losses=...)``."""
        return _Tracking(self, int(step), loss, individual_losses, optimizer or self.optimizer, batch_size)

    def create_graph(self, step: int) -> bool:
        """Whether this step's backward must keep the gradient's graph (for Hessian-vector products)."""
        tracked = [q for q in self.quantities if q.tracks(step)]
        return any(q.hvp for q in tracked) or (
            self.hess_method in ("full", "hutchinson") and any(q.curvature for q in tracked))

    def backward(self, individual_losses: torch.Tensor, *, step: int | None = None, optimizer=None,
                 batch_size: int | None = None) -> torch.Tensor:
        """Mean, backward and tracking in one call; returns the mean loss. Steps count from 0 unless given."""
        step = self._next_step if step is None else int(step)
        loss = individual_losses.mean()
        with self(step, loss=loss, individual_losses=individual_losses, optimizer=optimizer,
                  batch_size=batch_size):
            loss.backward(create_graph=self.create_graph(step))
        self._next_step = step + 1
        return loss

    def costs(self):
        """What the tracking has cost so far, as a DataFrame: per quantity, and per reduction that
        several quantities share (per-sample gradients, the Hessian diagonal, ...; counted once, apart
        from the quantities that use it), the calls, the first call's time (it compiles and warms
        up), the mean of the later calls and the total. Use it to choose schedules: the expensive
        instruments can be tracked less often."""
        return self._costs.frame()

    def log_metrics(self, step: int, **values: float) -> None:
        """Record other per-step numbers (accuracy, validation loss, ...) next to the quantities."""
        bad = [k for k in values if k in QUANTITIES]
        if bad:
            raise CockpitError(f"{bad} are quantity names; pick other names for metrics")
        self.log.append(step, {k: float(v) for k, v in values.items()})
        if self.doctor is not None:
            self.doctor.observe(step, {k: float(v) for k, v in values.items()})

    def log_eval(self, step: int, labels, scores, *, class_names=None, threshold: float | None = None) -> dict:
        """Evaluate predictions (labels, and one score per instance or per class, tensors or arrays) and
        write the metrics (AUC with its DeLong interval, AP, accuracy, F1, ECE...) as ``eval/<metric>``."""
        from ..evaluation import eval_metrics  # scikit-learn is loaded only by runs that evaluate

        values = eval_metrics(_as_numpy(labels), _as_numpy(scores), class_names=class_names, threshold=threshold)
        self.log.append(step, {f"eval/{k}": v for k, v in values.items()})
        return values

    def close(self) -> None:
        """Remove the model and optimizer hooks and close the log files."""
        self.taps.remove()
        for handles in self._watched.values():
            for h in handles:
                h.remove()
        self._watched = {}
        if self.doctor is not None:
            self.doctor.close()
        self.log.close()

    # ---------------------------------------------------------------- was the last step plain SGD?
    def watch_step(self, optimizer) -> None:
        """Note the gradients this step saw; the optimizer's hooks then tell whether its next step was
        theta -= lr * gradient with exactly them (no clipping, no other change) and nothing else
        touched the parameters afterwards. Costs no pass over the parameters."""
        if optimizer is None:
            self._step_watch = None
            return
        if id(optimizer) not in self._watched:
            self._watched[id(optimizer)] = [optimizer.register_step_pre_hook(self._before_step),
                                            optimizer.register_step_post_hook(self._after_step)]
        self._step_watch = {"optimizer": optimizer, "grads": None}  # filled in once the step is tracked

    def _note_grads(self) -> None:
        if self._step_watch is not None and self._step_watch["grads"] is None:
            self._step_watch["grads"] = [(p.grad, None if p.grad is None else p.grad._version)
                                         for _, p in self.params]

    def _before_step(self, optimizer, _args, _kwargs) -> None:
        watch = self._step_watch
        if watch is None or watch["optimizer"] is not optimizer:
            return
        params = [p for _, p in self.params]
        unchanged = watch["grads"] is not None and all(
            p.grad is g and (g is None or g._version == v) for p, (g, v) in zip(params, watch["grads"]))
        try:
            lr = StepContext.plain_sgd_lr(optimizer)
        except Unavailable:
            lr = None
        watch["lr"] = lr if unchanged else None

    def _after_step(self, optimizer, _args, _kwargs) -> None:
        watch = self._step_watch
        if watch is not None and watch["optimizer"] is optimizer and watch.get("lr") is not None:
            watch["versions"] = [p._version for _, p in self.params]

    def sgd_step_lr(self) -> float | None:
        """The learning rate of the last optimizer step if it was a plain SGD step on the watched gradient."""
        watch = self._step_watch
        if watch is None or "versions" not in watch:
            return None
        if any(p._version != v for (_, p), v in zip(self.params, watch["versions"])):
            return None
        return watch["lr"]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _buffers(self, name: str) -> list[torch.Tensor]:
        if name not in self._bufs:
            self._bufs[name] = [torch.empty_like(p) for _, p in self.params]
        return self._bufs[name]

    def _skip(self, name: str, reason: str, values: dict) -> None:
        if self.skipped.get(name) != reason:
            warnings.warn(f"Cockpit: {name} skipped: {reason}", stacklevel=4)
            self.skipped[name] = reason
        values.setdefault("_skipped", {})[name] = reason


class _Costs:
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


class _Tracking:
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
            if cp.doctor is not None:
                cp.doctor.observe(step - 1, earlier)
        if self.active:
            arrays = {k: values.pop(k) for k in list(values) if k in cp.log.meta["arrays"]}
            values["batch_size"] = ctx.batch_size
            if self.optimizer is not None:
                values["lr"] = float(self.optimizer.param_groups[0]["lr"])
                if "optimizer" not in cp.log.config:  # an optimizer first seen here joins the configuration
                    values["_config"] = {"optimizer": optimizer_config(self.optimizer)}
            if "hess_diag" in ctx._cache and not isinstance(ctx._cache["hess_diag"], Unavailable):
                values["hess_diag_method"] = cp.hess_method
            cp.log.append(step, values, arrays)
            if cp.doctor is not None:
                cp.doctor.observe(step, values)

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


def _as_numpy(values):
    if isinstance(values, torch.Tensor):
        return values.detach().float().cpu().numpy() if values.is_floating_point() else values.detach().cpu().numpy()
    return values
