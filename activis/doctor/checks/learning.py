"""Can the model learn this data? Overfitting one small batch, and learning real labels better than shuffled ones."""

from __future__ import annotations

import math

import torch

from .. import inputs
from .base import Check, Skip
from .data import conflicting_rows
from .setup import is_metric_loss


class OverfitBatch(Check):
    """A copy of the model trained on about 100 samples reaches near-zero loss within a bounded number of steps.

    Samples whose input also appears with another label are left out: they set a floor above zero."""

    id, title = "overfit_batch", "Cannot overfit one small batch"
    cause = "capacity"
    target = 0.05  # of the first loss

    def run(self, ctx):
        x, y = ctx.data.take(100)
        conflicting = conflicting_rows(inputs.flat(x), y)
        if conflicting.any():
            x, y = inputs.take(x, ~conflicting), y[~conflicting]
        if len(y) < 2:
            raise Skip("fewer than 2 samples without conflicting labels")
        if y.dtype.is_floating_point and y.dim() >= 2 and bool(((y > 0) & (y < 1)).any()):
            raise Skip("soft targets (mixup, distillation) keep the loss above zero")
        model, losses = ctx.trained_copy(x, y, ctx.steps, stop_below=lambda first: self.target * first)
        if not losses:
            raise Skip("stopped by train_seconds before the first step; give checkup more train_seconds")
        first = losses[0]
        if not math.isfinite(first) or first <= 0:
            raise Skip(f"the first loss is {first:.4g}, not positive (see loss_sign, non_finite)")
        last = losses[-1]
        floor = _floor(ctx, ctx.output(inputs.first(x, 1)), y)
        reached = math.isfinite(last) and min(losses) <= floor + self.target * (first - floor)
        if not reached and any(not p.requires_grad for p in ctx.model.parameters()):
            raise Skip("part of the model is frozen on purpose: it need not memorise a batch")
        if reached:
            return []
        if _still_falling(losses, floor):
            raise Skip(f"the loss was still falling steadily after {len(losses)} steps ({first:.4g} -> "
                       f"{min(losses):.4g}): slow, not unable; give checkup more steps")
        if ctx.out_of_time:
            raise Skip(f"stopped by train_seconds after {len(losses)} of {ctx.steps} steps (loss {first:.4g} -> "
                       f"{min(losses):.4g}); give checkup more train_seconds")
        return [self.finding(
            "error", f"Trained on {len(y)} samples for {len(losses)} steps, the loss only went from "
            f"{first:.4g} to {min(losses):.4g}: the model cannot memorise one small batch.",
            "Look for a layer that is skipped or overwritten, a bottleneck or final activation that cannot "
            "express the targets (a ReLU before a regression output, a too narrow layer), or a "
            "non-differentiable step; a model must memorise 100 samples before it can learn thousands.",
            evidence={"samples": len(y), "steps": len(losses), "first_loss": first, "best_loss": min(losses),
                      "excluded_conflicting": int(conflicting.sum())}, place="model", node=ctx.output_node())]


class LabelCoupling(Check):
    """Trained on half the sample, the model predicts the other half better from the real labels than a
    copy trained on shuffled labels does, and better than the base rate."""

    id, title = "label_coupling", "Labels decoupled from inputs"
    cause = "labels_decoupled"
    steps = 150
    # With class weights (or heavy imbalance) the held-out loss is ruled by a few rare samples, each weighed
    # many times: a model that learnt the classes can still lose there to a constant. The mean per-class
    # recall weighs every class alike whatever the loss does; this far above chance and the shuffled copy,
    # the labels are coupled.
    balanced_margin = 0.15

    def run(self, ctx):
        X, Y = ctx.data.X, ctx.data.Y
        if any(not p.requires_grad for p in ctx.model.parameters()):
            raise Skip("part of the model is frozen on purpose: a short run on a copy says little about it")
        n = min(len(Y), 400)
        if n < 60:
            raise Skip(f"needs at least 60 samples to hold some out, got {len(Y)}")
        if bool((Y[:n] == Y[:1]).all()):
            raise Skip("every target is the same (a placeholder: a triplet or self-supervised loss reads the "
                       "inputs alone), so shuffling them changes nothing")
        if isinstance(X, torch.Tensor) and X[:n].shape == Y[:n].shape and torch.equal(X[:n], Y[:n]):
            raise Skip("the targets are the inputs (an autoencoder): they cannot be decoupled from them")
        order = torch.randperm(n, generator=torch.Generator().manual_seed(ctx.seed))
        train, held = order[: n // 2], order[n // 2:]
        xt, yt, xh, yh = inputs.take(X, train), Y[train], inputs.take(X, held), Y[held]
        shuffled = yt[torch.randperm(len(yt), generator=torch.Generator().manual_seed(ctx.seed + 1))]
        real, _, real_curve = ctx.trained_copy(xt, yt, self.steps, held=(xh, yh))
        control, _, control_curve = ctx.trained_copy(xt, shuffled, self.steps, held=(xh, yh))
        # the best held-out loss along training: early stopping's view, so that overfitting a hard task
        # does not read as not learning it
        held_real, held_control = _best(real_curve), _best(control_curve)
        with torch.no_grad():
            out_held = _out(real, xh)
            base = _base_rate_loss(ctx, out_held, yt, yh)
            floor = _floor(ctx, out_held, yh)  # label smoothing's: out of reach for both, so compared above it
        if ctx.out_of_time:
            raise Skip("the training runs were stopped by train_seconds; give checkup more train_seconds")
        if not (math.isfinite(held_real) and math.isfinite(held_control)):
            raise Skip("the held-out loss is not finite (see non_finite)")
        evidence = {"held_out_loss": held_real, "held_out_loss_shuffled_labels": held_control}
        if base is not None:
            evidence["base_rate_loss"] = base
        beats_control = held_real - floor < 0.8 * (held_control - floor)
        beats_base = base is None or held_real - floor < 0.97 * (base - floor)
        if beats_control and beats_base:
            return []
        with torch.no_grad():
            if is_metric_loss(ctx.loss, out_held, yh):  # embeddings: judged by their nearest training neighbour
                balanced = (_neighbour_accuracy(real, xt, yt, xh, yh),
                            _neighbour_accuracy(control, xt, yt, xh, yh))
                chance = 1.0 / len(yh.unique())
            else:
                balanced = _balanced_accuracy(out_held, yh), _balanced_accuracy(_out(control, xh), yh)
                chance = 1.0 / out_held.shape[1]
        if None not in balanced:
            evidence["balanced_accuracy"], evidence["balanced_accuracy_shuffled_labels"] = balanced
            if balanced[0] > max(balanced[1], chance) + self.balanced_margin:
                return []
        why = ("it predicts held-out samples no better than a copy trained on shuffled labels"
               if not beats_control else "it predicts held-out samples no better than the base rate")
        return [self.finding(
            "error", f"Trained on {len(yt)} samples, {why}: the labels look decoupled from the inputs.",
            "Check that inputs and labels are shuffled and split together (one permutation for both, or a "
            "Dataset returning (x, y) pairs), and that no sample weight zeroes most of the data.",
            evidence=evidence, place="data", where="labels")]


def _still_falling(losses: list[float], floor: float) -> bool:
    """Whether the last third of the run still cut the loss by over a quarter: a model that cannot memorise
    stalls well before the end (a bottleneck, a cut gradient); one that is only slow is still on its way."""
    third = len(losses) // 3
    if third < 5:
        return False
    before, last = min(losses[:-third]), min(losses[-third:])
    return math.isfinite(last) and last - floor < 0.75 * (before - floor)


def _floor(ctx, out, y) -> float:
    """The lowest loss reachable: 0, or with label smoothing the user's loss at the smoothed targets' own
    log-probabilities (with class weights torch weighs the smoothing term by every class's weight, so the
    entropy alone is below what any prediction reaches); the entropy where that cannot be formed."""
    eps = float(getattr(ctx.loss_fn, "label_smoothing", 0.0) or 0.0)
    if eps <= 0 or out.dim() < 2:
        return 0.0
    c = out.shape[1]
    if out.dim() == 2 and y.dim() == 1 and not y.dtype.is_floating_point:
        smoothed = torch.full((len(y), c), eps / c)
        smoothed[torch.arange(len(y)), y.clamp(0, c - 1)] += 1 - eps
        with torch.no_grad():
            value = float(ctx.loss(smoothed.log().to(out.dtype), y))
        if math.isfinite(value):
            return value
    high, low = 1 - eps + eps / c, eps / c
    return -(high * math.log(high) + (c - 1) * low * math.log(low))


def _balanced_accuracy(out: torch.Tensor, y: torch.Tensor) -> float | None:
    """The mean over the classes present of the share of their samples predicted right; None unless the
    output is (N, C) class scores for integer labels."""
    if out.dim() != 2 or out.shape[1] < 2 or y.dim() != 1 or y.dtype.is_floating_point or len(y) != len(out):
        return None
    right = out.argmax(1) == y
    recalls = [float(right[y == c].float().mean()) for c in y.unique().tolist() if 0 <= c < out.shape[1]]
    return sum(recalls) / len(recalls) if recalls else None


def _neighbour_accuracy(model, xt, yt, xh, yh) -> float:
    """The mean per-class share of held-out samples whose nearest training embedding has their label: what a
    metric loss's embeddings are for (its held-out value rests on the hardest pairs of the held-out set)."""
    nearest = torch.cdist(_out(model, xh).flatten(1).float(), _out(model, xt).flatten(1).float()).argmin(1)
    right = yt[nearest] == yh
    return sum(float(right[yh == c].float().mean()) for c in yh.unique().tolist()) / len(yh.unique())


def _best(curve: list[float]) -> float:
    finite = [v for v in curve if math.isfinite(v)]
    return min(finite) if finite else math.nan


def _out(model, x):
    from ..context import first_tensor

    return first_tensor(inputs.call(model, x))


def _base_rate_loss(ctx, out: torch.Tensor, yt: torch.Tensor, yh: torch.Tensor) -> float | None:
    """The held-out loss of the best constant prediction learnt from the training labels, if it can be formed."""
    try:
        if not yt.dtype.is_floating_point and out.dim() == 2:
            counts = torch.bincount(yt.clamp(min=0), minlength=out.shape[1]).float()[: out.shape[1]] + 0.5
            constant = (counts / counts.sum()).log().expand_as(out)
        elif yt.dtype.is_floating_point and yt.numel() == len(yt) * (out.numel() // len(out)):
            constant = yt.float().mean(0).expand_as(out.reshape(len(out), *yt.shape[1:])).reshape(out.shape)
        else:
            return None
        value = float(ctx.loss(constant.contiguous(), yh))
    except Exception:  # noqa: BLE001 - a loss that cannot take a constant prediction: compare with the control only
        return None
    return value if math.isfinite(value) else None
