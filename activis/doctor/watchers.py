"""The doctor during training: watchers over the quantities the cockpit already computes.

``Cockpit(model, ..., doctor=True)`` makes a `TrainingDoctor` that the cockpit hands every tracked
step's readings (Loss, GradNorm, UpdateSize, Alpha, ... and the metrics given to ``log_metrics``).
Each watcher (one class per problem) keeps a little state and reports a problem once, with the
step where it began. Watchers never raise into the training loop: one that fails is listed as
skipped with the reason. Dying ReLUs need the units' activity, which the cockpit does not record:
that watcher adds one forward hook per ``nn.ReLU`` that counts active units (a comparison and an
``any`` per call).
"""

from __future__ import annotations

import math
import statistics
from collections import deque

import torch
from torch import nn

from ..cockpit.taps import rerunning
from .findings import Finding


class Watcher:
    """One problem watched during training. ``observe`` returns the findings that are new at this step."""

    id = ""
    title = ""
    cause = ""  # what is wrong when it fires (`activis.doctor.diagnosis.CAUSES`)

    def __init__(self, doctor):
        self.doctor = doctor

    def observe(self, step: int, values: dict) -> list[Finding]:
        raise NotImplementedError

    def finding(self, severity, message, change, step, *, evidence=None, place="model", where="", node=None,
                cause=None, title=None):
        return Finding(check=self.id, severity=severity, title=title or self.title, message=message,
                       evidence=dict(evidence or {}), place=place, where=where, node=node, change=change, step=step,
                       cause=cause or self.cause)


def finite(v) -> bool:
    return v is not None and math.isfinite(v)


class LossNotFinite(Watcher):
    id, title, cause = "loss_not_finite", "NaN or Inf loss", "numerical"

    def observe(self, step, values):
        loss = values.get("Loss")
        if loss is None or math.isfinite(loss):
            return []
        return [self.finding("error", f"The loss became {loss} at step {step}.",
                             "Lower the learning rate, clip gradients, and look for log/exp/division of values "
                             "that reach 0 or overflow (run activis.checkup on the failing batch).", step,
                             evidence={"loss": loss}, place="loss")]


class Divergence(Watcher):
    """The loss climbs far above its best so far and stays there."""

    id, title, cause = "divergence", "Loss diverges", "learning_rate_too_high"
    factor, patience = 10.0, 3

    def __init__(self, doctor):
        super().__init__(doctor)
        self.best, self.first, self.since, self.count = math.inf, None, None, 0

    def observe(self, step, values):
        loss = values.get("Loss")
        if not finite(loss):
            return []
        if self.first is None:
            self.first = loss
        self.best = min(self.best, loss)
        if loss > self.factor * max(self.best, 1e-12) and loss > 2 * abs(self.first):
            self.since = step if self.since is None else self.since
            self.count += 1
            if self.count >= self.patience:
                return [self.finding("error", f"The loss rose from its best {self.best:.4g} to {loss:.4g}.",
                                     "Lower the learning rate (by 10x), add gradient clipping or warm-up.", self.since,
                                     evidence={"best_loss": self.best, "loss": loss}, place="optimizer")]
        else:
            self.since, self.count = None, 0
        return []


class Plateau(Watcher):
    """The loss has stopped falling while it is still near where it started: the median of the last 25
    losses is no lower than that of 25 losses 100 steps before. Medians, not single steps (mini-batch
    noise), and counted only once a warm-up is over."""

    id, title, cause = "plateau", "Loss plateau", "learning_rate_too_low"
    window, span = 25, 100

    def __init__(self, doctor):
        super().__init__(doctor)
        self.history: deque = deque(maxlen=self.span + self.window)
        self.start = None

    def observe(self, step, values):
        loss = values.get("Loss")
        if not finite(loss) or self.doctor.warming or self.doctor.annealed:
            return []
        self.history.append((step, loss))
        if self.start is None and len(self.history) == self.window:
            self.start = statistics.median(v for _, v in self.history)
        if len(self.history) < self.history.maxlen or self.start is None:
            return []
        losses = [v for _, v in self.history]
        old, now = statistics.median(losses[: self.window]), statistics.median(losses[-self.window:])
        if 0.98 * old <= now <= 1.1 * old and now > 0.8 * self.start:  # flat, not rising (a rise has other causes)
            return [self.finding("warning", f"Over {self.span} steps the median loss went from {old:.4g} to {now:.4g}, "
                                 f"still {now / self.start:.0%} of where it started.",
                                 "Raise the learning rate, check that gradients reach every layer (activis.checkup), "
                                 "or change the optimizer.", self.history[self.window][0],
                                 evidence={"median_loss_before": old, "median_loss": now, "start_loss": self.start},
                                 place="optimizer")]
        return []


class Oscillation(Watcher):
    """The loss zig-zags: successive changes alternate in sign with a large amplitude."""

    id, title, cause = "oscillation", "Loss oscillates", "learning_rate_too_high"
    window = 30  # random mini-batch noise flips the sign of two thirds of the changes; a step too big, all

    def __init__(self, doctor):
        super().__init__(doctor)
        self.losses = deque(maxlen=self.window)

    def observe(self, step, values):
        loss = values.get("Loss")
        if not finite(loss):
            return []
        self.losses.append(loss)
        if len(self.losses) < self.window:
            return []
        diffs = [b - a for a, b in zip(self.losses, list(self.losses)[1:])]
        flips = sum(a * b < 0 for a, b in zip(diffs, diffs[1:])) / (len(diffs) - 1)
        amplitude = statistics.fmean(abs(d) for d in diffs) / max(statistics.fmean(self.losses), 1e-12)
        if flips >= 0.95 and amplitude > 0.2:
            return [self.finding("warning", f"The loss went up and down in {flips:.0%} of the last {self.window} "
                                 f"steps, by {amplitude:.0%} of its size.",
                                 "Lower the learning rate, or use momentum/Adam with a smaller step.",
                                 step - self.window + 1, evidence={"sign_flips": flips, "amplitude": amplitude},
                                 place="optimizer")]
        return []


class AccuracyFlat(Watcher):
    """An accuracy metric (from ``log_metrics``) that has not improved over its first values."""

    id, title, cause = "accuracy_flat", "Accuracy not improving", "capacity"
    patience = 50

    def __init__(self, doctor):
        super().__init__(doctor)
        self.values: list[tuple[int, float]] = []

    def observe(self, step, values):
        name = next((k for k in values if "acc" in k.lower() and isinstance(values[k], float | int)), None)
        if self.doctor.warming or name is None or not finite(float(values[name])):
            return []
        self.values.append((step, float(values[name])))
        if len(self.values) < self.patience:
            return []
        readings = [v for _, v in self.values]
        first, last = max(5, len(readings) // 4), max(10, len(readings) // 4)
        early, recent = statistics.fmean(readings[:first]), statistics.fmean(readings[-last:])
        # A reading's own noise (from successive differences, blind to a slow trend): with batches of 4-8 one
        # batch's accuracy moves by 0.1 or more. Flat means even the optimistic end of the improvement's ~95 %
        # interval (two standard errors above it) stays under 0.01.
        noise = statistics.pstdev(b - a for a, b in zip(readings, readings[1:])) / math.sqrt(2)
        error = noise * math.sqrt(1 / first + 1 / last)
        if recent - early + 2 * error < 0.01:
            return [self.finding("warning", f"{name} has not improved over {len(self.values)} readings "
                                 f"(mean of the last {last}: {recent:.3g}, of the first {first}: {early:.3g}).",
                                 "Run activis.checkup: check label coupling, gradient flow and the learning rate.",
                                 self.values[0][0], evidence={"recent": recent, "first": early}, place="model")]
        return []


class ExplodingGradients(Watcher):
    """A layer's gradient norm a thousand times its norm over the first steps, or not finite: suddenly (ten times
    its last 10 steps' median) or while the loss is not falling. A gradient that grows gradually while the loss
    falls is a layer waking up (attention's query, key and value start with almost none and grow as it learns
    to attend), not an explosion."""

    id, title, cause = "exploding_gradients", "Exploding gradients", "learning_rate_too_high"
    factor = 1e3

    def __init__(self, doctor):
        super().__init__(doctor)
        self.early: dict[str, list[float]] = {}
        self.recent: dict[str, deque] = {}

    def observe(self, step, values):
        norms = values.get("GradNorm")
        if not isinstance(norms, list):
            return []
        found = []
        layers = self.doctor.layer_norms(norms)
        for layer, n in layers.items():
            early = self.early.setdefault(layer, [])
            if len(early) < 5:
                if math.isfinite(n):
                    early.append(n)
                continue
            # a layer behind a zero-initialised head starts with no gradient at all: measured against the
            # network's early gradients, not its own zero
            base = max(statistics.median(early), 1e-2 * max(statistics.median(e) for e in self.early.values()
                                                            if len(e) >= 5))
            recent = self.recent.setdefault(layer, deque(maxlen=10))
            sudden = not recent or n > 10 * statistics.median(recent)
            recent.append(n)
            if not math.isfinite(n) or (base > 0 and n > self.factor * base
                                        and (sudden or not self.doctor.loss_falling)):
                found.append(self.finding(
                    "error", f"The gradient of {layer} reached {n:.3g}, {n / base if base else math.inf:.3g} times "
                    "its size over the first steps.",
                    "Clip gradients (torch.nn.utils.clip_grad_norm_), lower the learning rate, add normalisation.",
                    step, evidence={"grad_norm": n, "early_grad_norm": base}, place="module", where=layer,
                    node=layer))
        return found


class VanishingGradients(Watcher):
    """The first layer's gradient a thousandth of the last layer's and tiny (AutoTrainer's rule), for 20 steps
    without growing (the median of the window's last 5 steps within 3 times that of its first 5): one that
    grows steadily from near zero is waking up (a transformer's first attention block at initialisation),
    not vanishing."""

    id, title, cause = "vanishing_gradients", "Vanishing gradients", "vanishing_gradients"
    patience = 20  # a zero-initialised head holds the early layers' gradients at 0 for the first steps

    def __init__(self, doctor):
        super().__init__(doctor)
        self.streak: deque = deque(maxlen=self.patience)  # (step, first layer's rms) while it is tiny

    def observe(self, step, values):
        norms = values.get("GradNorm")
        if not isinstance(norms, list) or len(self.doctor.layers) < 2:
            return []
        rms = self.doctor.layer_norms(norms, rms=True)
        first, last = rms[self.doctor.layers[0]], rms[self.doctor.layers[-1]]
        if last > 0 and first / last < 1e-3 and first < 1e-4:
            self.streak.append((step, first))
            recent = [v for _, v in self.streak]
            growing = statistics.median(recent[-5:]) > 3 * statistics.median(recent[:5])
            if len(self.streak) == self.patience and not growing:
                layer = self.doctor.layers[0]
                return [self.finding(
                    "warning", f"The gradient of the first layer ({layer}) is {first / last:.2g} times the last "
                    "layer's: the early layers barely learn.",
                    "Use ReLU-family activations with He initialisation, normalisation or residual connections.",
                    self.streak[0][0], evidence={"first_rms": first, "last_rms": last}, place="module",
                    where=layer, node=layer)]
        else:
            self.streak.clear()
        return []


class UpdateBlindSpots(Watcher):
    """Parameters whose relative update ||dtheta|| / ||theta|| stays below 1e-5 (DeepInsight's blind spots), or
    above 0.1 while the loss has stopped falling, over 20 tracked steps; or one of the first updates above half
    the layer's size (a step that large throws the layer away: its ReLUs die and it then stalls, which must not
    read as "too low"). Large steps on small weights (a transformer's 0.02-std initialisation under Adam's
    ~lr-per-weight step) that keep the loss falling are a fast rate that works, not one too high."""

    id, title, cause = "update_size", "Weight-change blind spots", "learning_rate_too_low"
    window, low, high = 20, 1e-5, 0.1
    settle = 50  # steps before "too large" is judged: a zero-initialised layer's first updates are all it is
    blowup = 0.5

    def __init__(self, doctor):
        super().__init__(doctor)
        self.ratios: dict[str, deque] = {}
        self.calls, self.norms = 0, []
        norms = torch._foreach_norm([p.detach() for _, p in doctor.params])
        self.initial = doctor.layer_norms([float(n) for n in norms])  # a zero-initialised layer has no size to lose

    def observe(self, step, values):
        updates = values.get("UpdateSize")
        if not isinstance(updates, list) or self.doctor.warming or not any(u for u in updates if finite(u)):
            return []  # no step at all here (gradient accumulation): MissingStep's business
        if self.calls % 10 == 0:  # ||theta|| moves slowly: one pass over the parameters every 10 steps
            self.norms = [float(n) for n in torch._foreach_norm([p.detach() for _, p in self.doctor.params])]
        self.calls += 1
        norms = self.norms
        per_layer: dict[str, list[float]] = {}  # the layer's ||dtheta||^2 and ||theta||^2: a zero-initialised
        for name, u, n in zip(self.doctor.names, updates, norms):  # bias does not speak for its weight
            if math.isfinite(u):
                sums = per_layer.setdefault(self.doctor.layer(name), [0.0, 0.0])
                sums[0] += u * u
                sums[1] += n * n
        found = []
        for layer, (moved, size) in per_layer.items():
            if size <= 1e-16:
                continue
            history = self.ratios.setdefault(layer, deque(maxlen=self.window))
            history.append(math.sqrt(moved / size))
            if self.calls <= 10 and history[-1] > self.blowup and self.initial.get(layer, 0) > 1e-6:
                found.append(self.finding(
                    "error", f"At step {step} one update changed {layer}'s weights by {history[-1]:.2g} of their "
                    "size: the learning rate is far too high (layers thrown this far stop learning).",
                    "Lower the learning rate by 10x or more, add warm-up.", step,
                    evidence={"relative_update": history[-1]}, place="optimizer", where=layer, node=layer,
                    cause="learning_rate_too_high"))
            if len(history) < self.window:
                continue
            median = statistics.median(history)
            if (median < self.low and not self.doctor.annealed) or (
                    median > self.high and self.calls > self.settle and not self.doctor.loss_falling):
                stalled = median < self.low
                found.append(self.finding(
                    "warning", f"{layer}'s weights change by {median:.2g} of their size per step "
                    f"({'they barely move' if stalled else 'too much'}).",
                    ("Check that the optimizer holds these parameters and that their learning rate is not ~0; "
                     "check that gradients reach them." if stalled else
                     "Lower the learning rate for this layer, or add warm-up."),
                    step - self.window + 1, evidence={"median_relative_update": median}, place="module",
                    where=layer, node=layer, cause=None if stalled else "learning_rate_too_high"))
        return found


class StepSize(Watcher):
    """The Cockpit's alpha: the median over 20 steps well above 1 (each step overshoots the valley)."""

    id, title, cause = "step_size", "Step size overshoots or crawls", "learning_rate_too_high"
    window = 20

    def __init__(self, doctor):
        super().__init__(doctor)
        self.alphas: deque = deque(maxlen=self.window)

    def observe(self, step, values):
        alpha = values.get("Alpha")
        if not finite(alpha):
            return []
        self.alphas.append((step, alpha))
        if len(self.alphas) < self.window:
            return []
        median = statistics.median(a for _, a in self.alphas)
        if median > 1.0:
            return [self.finding("warning", f"The median alpha over {self.window} steps is {median:.2f}: every step "
                                 "lands higher on the far side of the valley.",
                                 "Lower the learning rate (alpha near 0 is a step to the bottom).",
                                 self.alphas[0][0], evidence={"median_alpha": median}, place="optimizer")]
        if median < -0.95:
            return [self.finding("note", f"The median alpha over {self.window} steps is {median:.2f}: the steps "
                                 "crawl downhill.", "A larger learning rate may train faster.", self.alphas[0][0],
                                 evidence={"median_alpha": median}, place="optimizer", cause="learning_rate_too_low")]
        return []


class DyingReLUs(Watcher):
    """The share of a ReLU's units that were never active over a window of training steps grows past 50 %."""

    id, title, cause = "dying_relus", "ReLUs dying", "dead_units"
    window = 20

    def __init__(self, doctor):
        super().__init__(doctor)
        self.active: dict[str, torch.Tensor] = {}
        self.first: dict[str, float] = {}
        self.began: dict[str, int] = {}
        self.steps = 0
        self.handles = [m.register_forward_hook(self._hook(path)) for path, m in doctor.model.named_modules()
                        if isinstance(m, nn.ReLU)]

    def _hook(self, path):
        def hook(module, _inputs, output):
            if not module.training or not isinstance(output, torch.Tensor) or output.dim() < 2 or rerunning():
                return
            with torch.no_grad():
                unit = -1 if output.dim() == 3 else 1
                active = (output > 0).movedim(unit, 0).reshape(output.shape[unit], -1).any(1)
            seen = self.active.get(path)
            self.active[path] = active if seen is None or seen.shape != active.shape else seen | active
        return hook

    def observe(self, step, values):
        if "Loss" not in values:
            return []
        self.steps += 1
        if self.steps % self.window:
            return []
        found = []
        for path, active in self.active.items():
            dead = 1.0 - float(active.float().mean())
            first = self.first.setdefault(path, dead)
            if dead > 0.2:
                self.began.setdefault(path, step - self.window + 1)
            if dead > 0.5 and dead > first + 0.2:
                found.append(self.finding(
                    "warning", f"{dead:.0%} of {path}'s units were never active over the last {self.window} steps "
                    f"(at the start: {first:.0%}).",
                    "Lower the learning rate, use LeakyReLU/GELU, or add normalisation before the ReLU.",
                    self.began.get(path, step), evidence={"dead_fraction": dead, "at_start": first},
                    place="module", where=path, node=path))
        self.active = {}
        return found

    def close(self):
        for h in self.handles:
            h.remove()




# the watchers that read only the step log's readings (the others also watch the loop: `activis.doctor.live`)
READINGS = [LossNotFinite, Divergence, Plateau, Oscillation, AccuracyFlat, ExplodingGradients, VanishingGradients,
            UpdateBlindSpots, StepSize, DyingReLUs]
