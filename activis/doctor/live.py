"""The doctor during training: watchers attached to a run's step log, findings kept with the run.

``activis.watch(cockpit)`` (or ``Cockpit(..., doctor=True)``, which calls it) makes a
`TrainingDoctor` that subscribes to the cockpit's step log: every step the cockpit writes is handed
to the watchers (the loss, gradient norms, update sizes, alpha, the learning rate and the metrics
given to ``log_metrics``), and the loop-mechanics watchers read the parameters' version counters,
one small gradient hook and the optimizer's step hook. The cockpit never imports the doctor. Each
new finding is appended to ``<log_dir>/findings.jsonl`` (the run record's findings, one JSON object
a line) and handed to ``on_finding(finding)`` (e.g. to save a checkpoint). Watchers never raise into
the training loop: one that fails is listed as failed with the reason.
"""

from __future__ import annotations

import json
import math
import pathlib
import statistics
from collections import deque
from collections.abc import Callable

import torch
from torch import nn

from ..run.log import layer_of
from .findings import DoctorError, Finding, Report
from .mechanics import Clipping, FrozenLayer, LabelShift, LearningRate, MissingStep, MissingZeroGrad
from .nonfinite import NonFiniteSource
from .watchers import (
    AccuracyFlat,
    Divergence,
    DyingReLUs,
    ExplodingGradients,
    LossNotFinite,
    Oscillation,
    Plateau,
    StepSize,
    UpdateBlindSpots,
    VanishingGradients,
)

FINDINGS = "findings.jsonl"
WATCHERS = [NonFiniteSource, LossNotFinite, LearningRate, MissingZeroGrad, MissingStep, FrozenLayer, Clipping,
            LabelShift, Divergence, Plateau, Oscillation, AccuracyFlat, ExplodingGradients, VanishingGradients,
            UpdateBlindSpots, StepSize, DyingReLUs]


class TrainingDoctor:
    """The watchers of one training run (``cockpit.doctor`` once attached).

    ``findings`` grows as problems appear (each reported once per place); ``subscribe(callback)`` calls
    ``callback(finding)`` for each new one; ``report()`` gives them (merged into diagnoses) as a `Report`.
    Feed it with `attach` (a step log) or `observe` (one step's readings).
    """

    def __init__(self, model: nn.Module, params=None, watchers=None, *, optimizer=None, taps=None,
                 on_finding: Callable[[Finding], None] | None = None, log_dir=None):
        if not isinstance(model, nn.Module):
            raise DoctorError(f"the doctor watches a torch.nn.Module, got {type(model).__name__}")
        if on_finding is not None and not callable(on_finding):
            raise DoctorError("on_finding must be callable as on_finding(finding)")
        self.model, self.optimizer, self.taps = model, optimizer, taps
        self.params = list(params) if params is not None else [(n, p) for n, p in model.named_parameters()
                                                              if p.requires_grad]
        self.names = [n for n, _ in self.params]
        self.layers = list(dict.fromkeys(layer_of(n) for n in self.names))
        self._sizes: dict[str, int] = {}
        for n, p in self.params:
            self._sizes[layer_of(n)] = self._sizes.get(layer_of(n), 0) + p.numel()
        self.findings: list[Finding] = []
        self.failed: dict[str, str] = {}
        self.path = pathlib.Path(log_dir) / FINDINGS if log_dir is not None else None
        self._reported: set[tuple[str, str]] = set()
        self._listeners: list[Callable[[Finding], None]] = [on_finding] if on_finding is not None else []
        self._fed: dict[int, set] = {}
        self._lrs: list[float] = []
        self._losses: deque = deque(maxlen=40)
        self.lr_peak = 0.0
        self._unsubscribe = None
        self.watchers = []
        for w in watchers or WATCHERS:
            try:
                self.watchers.append(w(self))
            except Exception as e:  # noqa: BLE001 - a watcher that cannot start is listed, never fatal
                self.failed[w.id] = f"could not start: {type(e).__name__}: {e}"

    # ------------------------------------------------------------------ what watchers read
    @staticmethod
    def layer(param_name: str) -> str:
        return layer_of(param_name)

    def layer_norms(self, norms: list[float], rms: bool = False) -> dict[str, float]:
        """Per-parameter norms combined per layer: the layer's norm, or its root mean square per element."""
        sq: dict[str, float] = {}
        for name, v in zip(self.names, norms):
            sq[layer_of(name)] = sq.get(layer_of(name), 0.0) + float(v) ** 2
        return {k: math.sqrt(v / (self._sizes[k] if rms else 1)) for k, v in sq.items()}

    def lr(self, values: dict) -> float | None:
        """This step's learning rate: the log's ``lr``, else the optimizer's first group's."""
        lr = values.get("lr")
        if lr is None and "Loss" in values and self.optimizer is not None and self.optimizer.param_groups:
            lr = self.optimizer.param_groups[0].get("lr")
        return float(lr) if isinstance(lr, int | float | torch.Tensor) else None

    @property
    def warming(self) -> bool:
        """The learning rate is 0 or still rising (a warm-up): the loss and updates are not judged yet."""
        lrs = self._lrs[-4:]
        return bool(lrs) and (lrs[-1] == 0 or any(b > a * 1.001 for a, b in zip(lrs, lrs[1:])))

    @property
    def loss_falling(self) -> bool:
        """The median loss of the last 20 steps is clearly (5 %) below that of the 20 before: the run learns.
        A large update or a growing gradient then is a network learning (attention waking up, a fast rate
        that works), not a rate too high. False until 40 losses were logged."""
        if len(self._losses) < self._losses.maxlen:
            return False
        losses = list(self._losses)
        return statistics.median(losses[20:]) < 0.95 * statistics.median(losses[:20])

    @property
    def annealed(self) -> bool:
        """The schedule has brought the learning rate below 5 % of its peak: small steps are its intent."""
        return bool(self._lrs) and self._lrs[-1] < 0.05 * self.lr_peak

    # ------------------------------------------------------------------ feeding
    def attach(self, log) -> TrainingDoctor:
        """Watch a step log as it grows (``log.subscribe``): each appended step is observed once."""
        if self._unsubscribe is not None:
            raise DoctorError("this doctor already watches a log")
        self._unsubscribe = log.subscribe(self._on_log)
        return self

    def _on_log(self, log) -> None:
        steps = log.steps
        if not steps:
            return
        step = steps[-1]
        record = log.record(step)
        fed = self._fed.setdefault(step, set())
        new = {k: v for k, v in record.items() if k not in fed}
        fed.update(new)
        for old in [s for s in self._fed if s < step - 2]:
            del self._fed[old]
        if new:
            self.observe(step, new)

    def observe(self, step: int, values: dict) -> None:
        """Hand the watchers one step's readings; never raises."""
        if "Loss" in values:
            loss = values["Loss"]
            if isinstance(loss, int | float | torch.Tensor) and math.isfinite(float(loss)):
                self._losses.append(float(loss))
            lr = self.lr(values)
            if lr is not None:
                self._lrs.append(lr)
                del self._lrs[:-8]
                self.lr_peak = max(self.lr_peak, lr)
        for w in self.watchers:
            if w.id in self.failed:
                continue
            try:
                new = w.observe(step, values)
            except Exception as e:  # noqa: BLE001 - findings never block training
                self.failed[w.id] = f"could not run: {type(e).__name__}: {e}"
                continue
            for f in new:
                self._add(f)

    def _add(self, f: Finding) -> None:
        key = (f.check, f.where)
        if key in self._reported:
            return
        self._reported.add(key)
        self.findings.append(f)
        if self.path is not None:
            self._keep(f)
        for callback in list(self._listeners):
            try:
                callback(f)
            except Exception as e:  # noqa: BLE001 - a listener's failure never stops training
                self.failed[f"listener {getattr(callback, '__name__', callback)!s}"] = f"{type(e).__name__}: {e}"

    def _keep(self, f: Finding) -> None:
        row = {"step": f.step, "check": f.check, "severity": f.severity, "title": f.title, "cause": f.cause,
               "place": f.place, "where": f.where, "node": f.node, "message": f.message, "advice": f.change,
               "evidence": {k: (float(v) if math.isfinite(float(v)) else None) for k, v in f.evidence.items()}}
        try:
            with open(self.path, "a", encoding="utf-8") as out:
                out.write(json.dumps(row) + "\n")
        except OSError as e:
            self.failed["findings.jsonl"] = f"cannot append to {self.path}: {e.strerror or e}"

    def subscribe(self, callback: Callable[[Finding], None]) -> Callable[[], None]:
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback) if callback in self._listeners else None

    def report(self) -> Report:
        skipped = {w.id: w.unavailable for w in self.watchers if getattr(w, "unavailable", None)}
        ran = [w.id for w in self.watchers if w.id not in self.failed and w.id not in skipped]
        return Report(self.findings, skipped, ran, failed=self.failed)

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for w in self.watchers:
            if hasattr(w, "close"):
                w.close()


def watch(cockpit, *, optimizer=None, on_finding: Callable[[Finding], None] | None = None,
          watchers=None) -> TrainingDoctor:
    """Attach the training doctor to a cockpit: its watchers follow the cockpit's step log, findings go to
    ``<log_dir>/findings.jsonl`` and to ``on_finding``. ``optimizer`` defaults to the cockpit's (the
    clipping watcher needs one). Returns the doctor, also set as ``cockpit.doctor``."""
    log = getattr(cockpit, "log", None)
    if log is None or not hasattr(log, "subscribe") or not hasattr(cockpit, "model"):
        raise DoctorError(f"watch needs an activis.Cockpit, got {type(cockpit).__name__}")
    if getattr(cockpit, "doctor", None) is not None:
        raise DoctorError("this cockpit is already watched (cockpit.doctor)")
    optimizer = optimizer if optimizer is not None else getattr(cockpit, "optimizer", None)
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise DoctorError(f"optimizer must be a torch.optim.Optimizer, not {type(optimizer).__name__}")
    doctor = TrainingDoctor(cockpit.model, cockpit.params, watchers, optimizer=optimizer,
                            taps=getattr(cockpit, "taps", None), on_finding=on_finding,
                            log_dir=getattr(log, "directory", None))
    doctor.attach(log)
    cockpit.doctor = doctor
    return doctor
