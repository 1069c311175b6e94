"""Labels that fit the loss: targets in [0, 1] for BCE, log-probabilities into NLL, one label per row for
cross-entropy, and the scale of regression targets."""

from __future__ import annotations

import torch
from torch import nn

from .base import Check, Skip


class LabelsFitLoss(Check):
    """What torch's loss modules silently accept but cannot learn from."""

    id, title = "labels_fit_loss", "Labels do not fit the loss"
    cause = "labels_for_loss"

    def run(self, ctx):
        loss, y, out = ctx.loss_fn, ctx.data.Y, ctx.output()
        node = ctx.output_node()
        if isinstance(loss, nn.BCEWithLogitsLoss | nn.BCELoss):
            yf = y.float()
            if bool(((yf < 0) | (yf > 1)).any()):
                return [self.finding(
                    "error", f"{type(loss).__name__} needs targets in [0, 1]; they range from {float(yf.min()):g} "
                    f"to {float(yf.max()):g}.", "Map the labels to 0/1 (e.g. (y + 1) / 2 for -1/+1 labels), or use "
                    "CrossEntropyLoss for several classes.",
                    evidence={"target_min": float(yf.min()), "target_max": float(yf.max())},
                    place="loss", where="labels", node=node)]
            return []
        if isinstance(loss, nn.NLLLoss):
            if out.dim() < 2:
                raise Skip("the output has no class dimension")
            total = torch.logsumexp(out.float(), 1)
            gap = float(total.abs().max())
            if gap > 1e-3:
                return [self.finding(
                    "error", f"NLLLoss takes log-probabilities, but logsumexp of the output is up to {gap:.3g} "
                    "away from 0: these are raw scores, and the loss falls without bound.",
                    "End the model with log_softmax(dim=1), or use CrossEntropyLoss on the raw logits.",
                    evidence={"largest_logsumexp": gap}, place="loss", node=node)]
            return []
        if isinstance(loss, nn.CrossEntropyLoss) and y.dtype.is_floating_point and y.shape == out.shape:
            sums = y.float().sum(1)
            if bool(((y < 0).any()) or (sums - 1).abs().max() > 1e-3):
                return [self.finding(
                    "error", "CrossEntropyLoss was given float targets of the output's shape, which it reads as "
                    f"class probabilities, but rows sum to {float(sums.min()):.3g}..{float(sums.max()):.3g}, not "
                    "1: several labels per row (multi-label) need a sigmoid per class.",
                    "Use BCEWithLogitsLoss for multi-label targets, or give one class index per row.",
                    evidence={"row_sum_min": float(sums.min()), "row_sum_max": float(sums.max())},
                    place="loss", where="labels", node=node)]
        raw = self._raw_scores_as_log_probabilities(ctx, out, ctx.y)
        if raw:
            return raw
        if isinstance(loss, nn.MSELoss | nn.L1Loss | nn.SmoothL1Loss | nn.HuberLoss) and out.dim() == 2 \
                and out.shape[1] > 1 and not y.dtype.is_floating_point:
            return [self.finding(
                "error", f"{type(loss).__name__} compares the {out.shape[1]} outputs with class indices: a "
                "regression loss on classes.", "Use CrossEntropyLoss with class indices.",
                place="loss", where="labels", node=node)]
        return []

    def _raw_scores_as_log_probabilities(self, ctx, out, y) -> list:
        """A loss written as a function (F.nll_loss after a transpose) on raw scores: raising every score by c
        lowers it by exactly c (times a fixed weight) however large c is, so it falls without bound, whereas
        cross-entropy, focal and smoothed losses do not move at all. Judged only when the output is no
        log-probabilities on either class axis (logsumexp 0: a model ending in log_softmax is right)."""
        if y.dtype.is_floating_point or out.dim() < 2 or not out.dtype.is_floating_point:
            return []
        if any(float(torch.logsumexp(out.float(), ax).abs().max()) <= 1e-3 for ax in {1, out.dim() - 1}):
            return []
        with torch.no_grad():
            base, by_1, by_10 = (float(ctx.loss(out + c, y)) for c in (0.0, 1.0, 10.0))
        d1, d10 = by_1 - base, by_10 - base
        # exactly linear (to float noise) and falling: no softmax between the scores and the loss
        if not (d1 < 0 and abs(d10 - 10 * d1) <= 1e-3 * abs(d10)):
            return []
        return [self.finding(
            "error", f"The loss falls by {-d1:.3g} for every 1 added to all scores ({base:.3g} to {by_10:.3g} at "
            "+10): it reads raw scores as log-probabilities (NLL without log_softmax) and falls without bound.",
            "Apply log_softmax over the classes before nll_loss, or use cross_entropy on the raw logits.",
            evidence={"loss": base, "loss_scores_plus_1": by_1, "loss_scores_plus_10": by_10},
            place="loss", node=ctx.output_node())]


class TargetScale(Check):
    """Regression targets near unit scale: a squared loss on targets in the thousands dwarfs everything
    else, and the output layer's initialisation is far from them."""

    id, title = "target_scale", "Unscaled regression targets"
    cause = "target_scale"
    largest = 50.0

    def run(self, ctx):
        y = ctx.data.Y
        if not y.dtype.is_floating_point:
            raise Skip("integer targets (classes), not a regression")
        if bool(((y == 0) | (y == 1)).all()):
            raise Skip("0/1 targets (a binary classification)")
        yf = y.double()
        std, mean = float(yf.std()), float(yf.mean().abs())
        if not (max(std, mean) > self.largest or 0 < std < 1e-3 and mean < 1e-2):
            return []
        return [self.finding(
            "warning" if max(std, mean) < 1e4 else "error",
            f"The regression targets have mean {float(yf.mean()):.4g} and std {std:.4g}: the loss and its gradients "
            "are dominated by their scale.",
            "Standardise the targets ((y - mean) / std with the training set's statistics) and invert that on "
            "the predictions.", evidence={"target_mean": float(yf.mean()), "target_std": std},
            place="data", where="labels", node=ctx.output_node())]
