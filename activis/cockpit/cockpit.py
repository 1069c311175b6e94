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

import inspect
import os
import pathlib
import warnings
from collections.abc import Iterable

import torch
from torch import nn

from ..run.log import META, CockpitError, CockpitLog, layer_of
from ..run.record import RUN, Run, open_run
from .hessian import not_piecewise_linear
from .quantities import QUANTITIES, Quantity, configuration
from .step import StepContext
from .taps import Taps, Unavailable
from .tracking import Costs, Tracking, optimizer_config

_HESS_METHODS = ("auto", "ggn", "full", "hutchinson", "ggn-mc")
_MAX_MODULES = 1000  # a model summary lists at most this many modules (a run.json stays small)


def _writing_rank() -> bool:
    """Whether this process writes the run record: not on torchrun ranks other than 0."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank() == 0
    rank = os.environ.get("RANK", "0")
    return not rank.isdigit() or int(rank) == 0


def model_summary(model: nn.Module) -> dict:
    """What run.json keeps of a model: its class, parameter counts, and its modules (name, type,
    own parameters), as plain JSON."""
    modules = [{"name": name or "(model)", "type": type(m).__name__,
                "parameters": sum(p.numel() for p in m.parameters(recurse=False))}
               for name, m in model.named_modules()]
    return {"class": type(model).__name__, "parameters": sum(p.numel() for p in model.parameters()),
            "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "modules": modules[:_MAX_MODULES], "n_modules": len(modules)}


def run_optimizer(optimizer) -> dict:
    """An optimizer as run.json keeps it: its class and first group's hyper-parameters (lr, weight
    decay, momentum, betas...), plain JSON."""
    described = optimizer_config(optimizer)
    return {"class": described["type"], **described["hyperparameters"],
            "param_groups": len(getattr(optimizer, "param_groups", []))}


class Cockpit:
    """Tracks a configuration (or list) of quantities for ``model`` and writes them to a log.

    ``quantities``: ``"economy"``, ``"business"``, ``"full"`` or a list of quantities: `Quantity`
    objects (each with its own schedule), classes or names (``["Loss", "GradNorm"]``: every step).
    ``log_dir``: a run record (`activis.Run`) or a folder for one (an activation store's
    ``store.section("cockpit")`` works): the cockpit writes its step log and, in ``run.json``, the
    optimizer and a summary of the model (``cockpit.run``); None keeps the log in memory only
    (``cockpit.log``). Under torchrun only rank 0 writes; the other ranks keep their log in memory.
    ``hessian_diagonal`` picks how HessTrace and TIC get diag(H): ``"ggn"`` (exact for piecewise
    linear networks), ``"full"`` (exact, one Hessian column per parameter: small models only),
    ``"hutchinson"`` (an estimate), ``"ggn-mc"`` (an estimate: the Gauss-Newton diagonal from
    ``mc_samples`` random mixtures of the loss Hessian's columns instead of all C of them,
    the reference's ``diag_ggn_mc``) or ``"auto"`` (the first exact one, else Hutchinson). Which
    one produced a value is recorded as ``hess_diag_method`` in the log.
    ``doctor=True`` also watches the run for training problems: the same as ``activis.watch(cockpit)``,
    which attaches the training doctor to this cockpit's log (``cockpit.doctor``); the cockpit itself
    knows nothing of the doctor.
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
        self.doctor = None  # set by activis.watch(cockpit): the doctor follows the log, closed with the cockpit
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
        self._costs = Costs()
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
        self.run = self._run_record(log_dir, run)
        if self.run is None:
            self.log = CockpitLog(meta, None, fsync_interval=fsync_interval)
        else:
            self.log = self.run.start_log(meta, fsync_interval=fsync_interval)
            self.run.set_config(model=model_summary(model),
                                optimizer=None if optimizer is None else run_optimizer(optimizer))
        if doctor:  # through the package's public name: this module does not import the doctor
            import activis

            activis.watch(self)

    @staticmethod
    def _run_record(log_dir, name: str | None) -> Run | None:
        """The run record the cockpit writes: the one given, one made at the folder (or the one made
        there before by `Run.create`), or None (in memory; also on every torchrun rank but 0)."""
        if log_dir is None or not _writing_rank():
            return None
        if isinstance(log_dir, Run):
            return log_dir
        path = pathlib.Path(log_dir)
        if (path / META).exists():
            raise CockpitError(f"{path} already holds a cockpit log; log each run into a folder of its own")
        return open_run(path) if (path / RUN).exists() else Run.create(path, name=name)

    def describe_optimizer(self, optimizer) -> None:
        """Record an optimizer first seen during training in the run record's configuration."""
        if self.run is not None:
            self.run.set_config(optimizer=run_optimizer(optimizer))

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
                 batch_size: int | None = None) -> Tracking:
        """A context for one step's ``backward()``: ``with cockpit(step, loss=..., individual_losses=...)``."""
        return Tracking(self, int(step), loss, individual_losses, optimizer or self.optimizer, batch_size)

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


def _as_numpy(values):
    if isinstance(values, torch.Tensor):
        return values.detach().float().cpu().numpy() if values.is_floating_point() else values.detach().cpu().numpy()
    return values
