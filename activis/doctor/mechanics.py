"""Watchers of the training loop's mechanics: what the user's loop does to the parameters, step by step.

They read what no quantity records: the parameters' version counters (an optimizer step or any
in-place change bumps them), one small parameter's incoming gradient (a tensor hook), the
optimizer's learning rates and, at its step, whether the gradient was clipped. Each costs a few
attribute reads per step; the NaN/Inf source is looked for only at the first non-finite step, by
running that step's batch again through hooked modules.
"""

from __future__ import annotations

import math
import statistics
from collections import deque

import torch

from .watchers import Watcher, finite

_PATIENCE = 5  # consecutive steps a loop-mechanics problem must show before it is reported


class MissingZeroGrad(Watcher):
    """A backward pass starts after an optimizer step while the parameter still holds the last gradient:
    ``zero_grad()`` is missing, so gradients add up over the whole run (accumulating over micro-batches
    between two steps is fine: the gradient is stale only once a step has used it)."""

    id, title, cause = "missing_zero_grad", "Gradients are never zeroed", "missing_zero_grad"

    def __init__(self, doctor):
        super().__init__(doctor)
        self.param = min((p for _, p in doctor.params), key=lambda p: p.numel())
        self.version = self.param._version
        self.stale, self.since, self.step = 0, None, None
        self.recent: deque = deque(maxlen=8)  # whether each of the last updates was followed by a stale gradient
        self.handle = self.param.register_hook(self._on_gradient)

    def _on_gradient(self, grad):
        p = self.param
        if p._version != self.version:  # updated since the last gradient arrived
            stale = p.grad is not None and bool(p.grad.detach().abs().sum() > 0)
            self.recent.append(stale)
            if stale and self.since is None:
                self.since = self.step
            # stale after most updates (zeroing only every few steps is as wrong as never)
            self.stale = sum(self.recent) if sum(self.recent) * 2 > len(self.recent) else 0
            if not any(self.recent):
                self.since = None
        self.version = p._version
        return None

    def observe(self, step, values):
        if "Loss" not in values:
            return []
        self.step = step + 1  # the gradient hook fires during the next step's backward
        if self.stale >= _PATIENCE:
            return [self.finding(
                "error", f"From step {self.since} on, every backward pass adds to the gradient of the step before: "
                "optimizer.zero_grad() is never called, so each update uses the sum of all gradients so far.",
                "Call optimizer.zero_grad() (or model.zero_grad()) before each loss.backward().",
                self.since if self.since is not None else step, evidence={"stale_steps": self.stale},
                place="optimizer")]
        return []

    def close(self):
        self.handle.remove()


class MissingStep(Watcher):
    """Backward passes go on but no parameter changes: ``optimizer.step()`` is missing (or steps another
    model's parameters)."""

    id, title, cause = "missing_optimizer_step", "The optimizer never steps", "missing_optimizer_step"
    patience = 8

    def __init__(self, doctor):
        super().__init__(doctor)
        self.versions = None
        self.still, self.since = 0, None

    def observe(self, step, values):
        if "Loss" not in values:
            return []
        versions = sum(p._version for _, p in self.doctor.params)
        if self.versions is not None and versions == self.versions:
            self.since = step if self.still == 0 else self.since
            self.still += 1
        elif self.versions is not None:
            self.still = 0
        self.versions = versions
        if self.still >= self.patience:
            return [self.finding(
                "error", f"No parameter has changed since step {self.since} although backward passes go on: "
                "the optimizer never steps (or holds another model's parameters).",
                "Call optimizer.step() after loss.backward(), with an optimizer built from this model's "
                "parameters.", self.since - 1, evidence={"steps_without_update": self.still}, place="optimizer")]
        return []


class FrozenLayer(Watcher):
    """A layer whose parameters were being updated stops changing mid-run while the others go on (its
    ``requires_grad`` switched off, or it left the optimizer)."""

    id, title, cause = "frozen_layer", "A layer stopped training mid-run", "frozen_layer"
    patience, warmup = 8, 5

    def __init__(self, doctor):
        super().__init__(doctor)
        self.layers: dict[str, list] = {}
        for name, p in doctor.params:
            self.layers.setdefault(doctor.layer(name), []).append(p)
        self.last: dict[str, int] = {}
        self.moved: dict[str, int] = {}
        self.still: dict[str, int] = {}
        self.since: dict[str, int] = {}

    def observe(self, step, values):
        if "Loss" not in values:
            return []
        changed = {}
        for layer, params in self.layers.items():
            v = sum(p._version for p in params)
            changed[layer] = layer in self.last and v != self.last[layer]
            self.last[layer] = v
        if not any(changed.values()):
            return []  # no update at all this step: MissingStep's business, or accumulation
        found = []
        for layer, moved in changed.items():
            if moved:
                self.moved[layer] = self.moved.get(layer, 0) + 1
                self.still[layer] = 0
                continue
            if self.moved.get(layer, 0) < self.warmup:
                continue  # frozen from the start (on purpose) or not yet moving
            if self.still.get(layer, 0) == 0:
                self.since[layer] = step
            self.still[layer] = self.still.get(layer, 0) + 1
            if self.still[layer] == self.patience:
                off = [n for n, p in self.doctor.params if self.doctor.layer(n) == layer and not p.requires_grad]
                found.append(self.finding(
                    "warning", f"{layer} was updated for {self.moved[layer]} steps, then stopped changing at step "
                    f"{self.since[layer]} while the other layers go on"
                    + (" (requires_grad was switched off)." if off else "."),
                    "If freezing it was not intended, look for requires_grad_(False), a parameter group whose lr "
                    "was set to 0, or an optimizer rebuilt without it.", self.since[layer] - 1,
                    evidence={"updated_steps": self.moved[layer], "frozen_steps": self.still[layer]},
                    place="module", where=layer, node=layer))
        return found


class Clipping(Watcher):
    """At the optimizer's step the gradient is a small fraction of what backward produced, step after step:
    the clipping threshold is so low that it swallows the updates."""

    id, title, cause = "clipping", "Gradient clipping swallows the updates", "clipping"
    ratio = 0.02

    def __init__(self, doctor):
        super().__init__(doctor)
        self.ratios: deque = deque(maxlen=_PATIENCE)
        self.norm, self.step, self.versions = None, None, None
        self.first = None
        opt = doctor.optimizer
        self.handle = opt.register_step_pre_hook(self._before_step) if opt is not None else None
        if opt is None:
            self.unavailable = "needs the optimizer (Cockpit(..., optimizer=opt), or watch(cockpit, optimizer=opt))"

    def observe(self, step, values):
        norms = values.get("GradNorm")
        if isinstance(norms, list):
            self.norm = math.sqrt(sum(float(n) ** 2 for n in norms))
            self.step = step
            self.versions = [None if p.grad is None else p.grad._version for _, p in self.doctor.params]
        if len(self.ratios) == _PATIENCE and statistics.median(r for _, r in self.ratios) < self.ratio:
            median = statistics.median(r for _, r in self.ratios)
            return [self.finding(
                "warning", f"At each optimizer step the gradient is {median:.2g} of its size after backward: "
                "clipping cuts every update to almost nothing.",
                "Raise max_norm (1.0 is common) or clip by norm instead of by value.", self.first,
                evidence={"clipped_over_raw": median}, place="optimizer")]
        return []

    def _before_step(self, _optimizer, _args, _kwargs):
        if self.norm is None or not self.norm > 0 or self.versions is None:
            return
        now = [None if p.grad is None else p.grad._version for _, p in self.doctor.params]
        if now == self.versions:
            self.ratios.append((self.step, 1.0))
            return
        norm = float(torch.norm(torch.stack(torch._foreach_norm(
            [p.grad for _, p in self.doctor.params if p.grad is not None]))))
        ratio = norm / self.norm
        if ratio >= self.ratio:
            self.ratios.clear()
        elif not self.ratios or self.ratios[-1][1] >= self.ratio:
            self.first = self.step
        self.ratios.append((self.step, ratio))
        self.versions = None

    def close(self):
        if self.handle is not None:
            self.handle.remove()


class LearningRate(Watcher):
    """The learning rate as the loop sets it: a jump far above anything before (a spike), or a schedule meant
    for epochs stepped every batch (the rate falls tenfold within a few steps of its peak)."""

    id, title, cause = "learning_rate", "Learning-rate spike", "lr_spike"
    spike, decay_steps = 5.0, 20

    def __init__(self, doctor):
        super().__init__(doctor)
        self.peak, self.peak_step, self.previous, self.fall_start, self.falls = 0.0, None, None, None, 0
        self.decayed = False

    def observe(self, step, values):
        lr = self.doctor.lr(values)
        if lr is None:
            return []
        found = []
        if self.previous is not None and self.peak > 0 and lr > self.spike * self.peak:
            found.append(self.finding(
                "error", f"The learning rate jumped from {self.previous:.3g} to {lr:.3g} at step {step}, "
                f"{lr / self.peak:.0f}x anything before.", "Find what sets the learning rate at this step (a "
                "schedule's milestone, a manual param_group change) and cap it.", step,
                evidence={"lr": lr, "previous_peak": self.peak}, place="optimizer"))
        if lr > self.peak * 1.001:
            self.peak, self.peak_step = lr, step
        if lr >= self.peak:
            self.falls, self.fall_start = 0, None
        elif self.previous is not None and lr < self.previous:
            self.fall_start = step if self.fall_start is None else self.fall_start
            self.falls += 1
        # tenfold within 20 steps of reaching the peak, or in 3 or more falls within 20 steps of the first: a
        # schedule counted in epochs run per batch (a milestone's drop after a long plateau, or a decay spread
        # over the run, is neither)
        fast = self.peak_step is not None and step - self.peak_step < self.decay_steps
        steep = self.falls >= 3 and self.fall_start is not None and step - self.fall_start < self.decay_steps
        if not self.decayed and self.fall_start is not None and lr <= 0.1 * self.peak and (fast or steep):
            self.decayed = True
            found.append(self.finding(
                "warning", f"The learning rate fell from {self.peak:.3g} to {lr:.3g} between steps "
                f"{self.fall_start} and {step}: a schedule meant for epochs is being stepped every batch.",
                "Call scheduler.step() once per epoch (or build the schedule in batches: T_max, step_size and "
                "milestones counted in optimizer steps).", self.fall_start,
                evidence={"peak_lr": self.peak, "lr": lr, "steps": step - self.fall_start}, place="optimizer",
                cause="scheduler_per_batch", title="Scheduler stepped every batch"))
        self.previous = lr
        return found


class LabelShift(Watcher):
    """The loss jumps from a learned level back up towards where it started and stays there, with the
    learning rate unchanged: the data or labels changed from that step on."""

    id, title, cause = "labels_corrupted", "Labels corrupted during training", "labels_corrupted"
    before, after = 20, 5

    def __init__(self, doctor):
        super().__init__(doctor)
        self.losses: deque = deque(maxlen=self.before + self.after)
        self.first: list[float] = []
        self.done = False

    def observe(self, step, values):
        loss = values.get("Loss")
        if not finite(loss) or self.done:
            return []
        if len(self.first) < 5:
            self.first.append(loss)
        self.losses.append((step, loss))
        if len(self.losses) < self.before + self.after:
            return []
        old = [v for _, v in list(self.losses)[: self.before]]
        new = [v for _, v in list(self.losses)[self.before:]]
        start = statistics.median(self.first)
        level = statistics.median(old[-8:])  # where the loss was just before (it was still falling)
        noise = statistics.median(abs(b - a) for a, b in zip(old, old[1:]))
        learned = level < 0.8 * start
        jumped = min(new) > level + max(6 * noise, 0.25 * (start - level))
        if learned and jumped and not self.doctor.warming:
            self.done = True
            onset = list(self.losses)[self.before][0]
            return [self.finding(
                "warning", f"From step {onset} the loss jumped from {level:.3g} to {statistics.median(new):.3g} "
                f"(it started at {start:.3g}) and stays there, with the learning rate unchanged: the labels or "
                "data the loop feeds changed.", "Check what the data pipeline does from this step on: labels "
                "shuffled or re-mapped, a different data source, augmentation that destroys the label.", onset,
                evidence={"loss_before": level, "loss_after": statistics.median(new), "first_loss": start},
                place="data", where="labels")]
        return []
