"""The training set-up around the model: the optimizer, the loss's inputs, and the loss itself."""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from .base import Check, Skip, kind_of


class OptimizerAttached(Check):
    """The optimizer holds this model's trainable parameters, all of them (its settings: `OptimizerSettings`)."""

    id, title = "optimizer", "Optimizer not set up for this model"
    cause = "optimizer_setup"

    def run(self, ctx):
        opt = ctx.optimizer
        if opt is None:
            raise Skip("no optimizer given (pass optimizer=...)")
        held = {id(p) for g in opt.param_groups for p in g["params"]}
        trainable = [(n, p) for n, p in ctx.model.named_parameters() if p.requires_grad]
        attached = [n for n, p in trainable if id(p) in held]
        change = ("Create the optimizer after the model, from model.parameters(), and again whenever the model "
                  "is rebuilt.")
        if trainable and not attached:
            return [self.finding(
                "error", "The optimizer holds none of this model's parameters: it will update another model "
                "(was the model rebuilt after the optimizer was created?).", change,
                evidence={"optimizer_parameters": len(held), "model_parameters": len(trainable)}, place="optimizer")]
        findings = []
        missing = [n for n, p in trainable if id(p) not in held]
        if missing:
            findings.append(self.finding(
                "warning", f"{len(missing)} trainable parameters are not in the optimizer ({', '.join(missing[:3])}"
                f"{', ...' if len(missing) > 3 else ''}): they will never change.",
                "Pass all of model.parameters() to the optimizer, or set requires_grad=False on deliberately "
                "frozen ones.", evidence={"missing": len(missing), "trainable": len(trainable)}, place="optimizer",
                where=missing[0]))
        return findings


class LossShapes(Check):
    """Prediction and target have shapes the loss does not silently broadcast ((N, 1) against (N,), or
    against (N, 3): one output column stretched over three target columns)."""

    id, title = "loss_shapes", "Prediction and target shapes broadcast in the loss"
    cause = "loss_function"

    def run(self, ctx):
        out, y = ctx.output(), ctx.y
        node = ctx.output_node()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                ctx.loss(out, y)
            except Exception as e:  # noqa: BLE001 - the loss failing is what this check reports
                return [self.finding(
                    "error", f"The loss fails on the model's output {list(out.shape)} and the target "
                    f"{list(y.shape)}: {type(e).__name__}: {str(e).splitlines()[0][:200]}",
                    "Make the model's output and the target the shapes and dtypes the loss expects.",
                    evidence={"output_dims": out.dim(), "target_dims": y.dim()}, place="loss", node=node)]
        if not y.dtype.is_floating_point:
            return self._class_axis(ctx, out, y)
        if tuple(out.shape) == tuple(y.shape):
            return []
        try:
            joint = torch.broadcast_shapes(out.shape, y.shape)
        except RuntimeError:
            return []
        numel = torch.Size(joint).numel()
        if numel <= min(out.numel(), y.numel()):  # same elements, only laid out differently
            return []
        if out.numel() == y.numel() and _aligns_itself(ctx.loss, out, y):
            return []
        told = any("target size" in str(w.message) for w in caught)
        what = ("every prediction is compared with every target" if numel > max(out.numel(), y.numel()) else
                "each prediction is repeated to meet several targets" if out.numel() < y.numel() else
                "each target is repeated to meet several predictions")
        return [self.finding(
            "error", f"The prediction {list(out.shape)} and the target {list(y.shape)} broadcast to "
            f"{list(joint)} in the loss: {what}" + (" (torch warned too)." if told else "."),
            f"Give the model as many outputs as the target has values per sample ({list(y.shape[1:])}), or "
            f"reshape one to the other's shape: output.squeeze(-1) or target.view({', '.join(map(str, out.shape))}).",
            evidence={"prediction_numel": out.numel(), "target_numel": y.numel(), "broadcast_numel": numel},
            place="loss", node=node)]

    def _class_axis(self, ctx, out, y) -> list:
        """A sequence model's (N, L, C) scores, classes last (a Linear made them), given as they are to a loss that
        reads axis 1 as the classes: with L == C it runs, scoring every position against the wrong axis."""
        node = ctx.graph.output_node
        if out.dim() != 3 or out.shape[1] != out.shape[2] or tuple(y.shape) != tuple(out.shape[:2]):
            return []
        if node is None or node.op != "call_module" or not isinstance(
                ctx.model.get_submodule(node.target), nn.Linear):
            return []
        classes = out.shape[2]
        onehot = F.one_hot(y.clamp(0, classes - 1), classes).to(out.dtype) * 12 - 6
        with torch.no_grad():
            as_given, transposed = float(ctx.loss(onehot, y)), float(ctx.loss(onehot.transpose(1, 2), y))
        if not as_given > transposed:  # the loss reads the last axis as the classes, as the Linear made them
            return []
        return [self.finding(
            "error", f"The model's {node.target!r} puts the {classes} class scores on the last axis of "
            f"{list(out.shape)}, but the loss reads axis 1 as the classes: perfect scores cost {as_given:.3g}, "
            f"the same scores transposed {transposed:.3g}.",
            "Give the loss output.transpose(1, 2) (or output.reshape(-1, C) with target.reshape(-1)).",
            evidence={"loss_at_perfect": as_given, "loss_at_perfect_transposed": transposed},
            place="loss", node=node.name)]


class LossSign(Check):
    """The loss is smallest at perfect predictions, larger at wrong ones, and finite at extreme ones."""

    id, title = "loss_sign", "Loss is not minimal at perfect predictions"
    cause = "loss_function"

    def run(self, ctx):
        out, y = ctx.output(), ctx.y
        if not bool(torch.isfinite(out).all()):
            raise Skip("the model's output is not finite (see non_finite)")
        if y.dtype.is_floating_point and y.shape == out.shape and out.dim() >= 2 and bool(
                ((y > 0) & (y < 1)).any()) and not bool(torch.isin(y, torch.tensor([0.0, 1.0])).all()):
            raise Skip("soft targets (mixup, distillation): no one prediction is perfect for them")
        perfect, wrong = _ideal_predictions(out, y)
        with torch.no_grad():
            at_init = float(ctx.loss(out, y))
            at_perfect = [float(ctx.loss(p, y)) for p in perfect]
            at_wrong = float(ctx.loss(wrong, y))
            # Ten times a logit is still a legal logit; ten times a regression target is not a legal value
            # (a log-link loss, Poisson's, rightly overflows there), so extremes are judged for classes only.
            regression = y.dtype.is_floating_point and not bool(((y == 0) | (y == 1)).all())
            extreme = [] if regression else [float(ctx.loss(p * 10, y)) for p in perfect] + [
                float(ctx.loss(wrong * 10, y))]
        if y.dtype.is_floating_point and out.numel() != y.numel() and not math.isfinite(min(at_perfect)):
            raise Skip("the outputs are not values of the target (a distribution's parameters?): every output "
                       "equal to the target is no legal prediction for this loss")
        # A regression target's candidates are guesses at the link (identity, log): the best one must be finite
        values = [at_init, min(at_perfect)] if regression else [at_init, *at_perfect, at_wrong, *extreme]
        if not all(torch.isfinite(torch.tensor(v)) for v in values):
            bad = next(v for v in values if not torch.isfinite(torch.tensor(v)))
            return [self.finding(
                "error", f"The loss is {bad} at extreme (but legal) predictions: it overflows or takes log(0).",
                "Compute the loss from logits with the stable forms (F.cross_entropy, F.log_softmax, "
                "F.binary_cross_entropy_with_logits, torch.logsumexp), or add a small epsilon inside log.",
                evidence={"loss_at_init": at_init, "loss_at_perfect": min(at_perfect)}, place="loss",
                node=ctx.output_node())]
        best = min(at_perfect)
        # Bounded below, a loss gains little past a perfect prediction made ten times as confident (cross-entropy:
        # 2.3 at the start, 0.002 at logits of 6, 0 at 60). One that falls by more than the whole way from the
        # start to perfect has no minimum (a contrastive loss without its margin): training drives the outputs off.
        if extreme and not _normalised(out) and min(extreme) < best - max(abs(at_init - best), abs(best), 1e-3):
            return [self.finding(
                "error", f"The loss falls without bound: {best:.3g} at perfect predictions, {min(extreme):.3g} at "
                f"predictions ten times as large (at the start: {at_init:.3g}).",
                "Check the loss's sign and its margin (a term to maximise must be bounded: relu(margin - d) ** 2, "
                "not -d ** 2).",
                evidence={"loss_at_init": at_init, "loss_at_perfect": best, "loss_at_x10": min(extreme)},
                place="loss", node=ctx.output_node())]
        scale = max(abs(at_init), abs(best), 1e-8)  # a tolerance on the values compared, not on a far-off wrong
        if best < at_init - 1e-3 * scale and best < at_wrong - 1e-3 * scale:
            return []
        if is_metric_loss(ctx.loss, out, y):  # no position is "right"; a wrong sign makes wrong rows cheaper
            return []
        return [self.finding(
            "error", "The loss is not smallest at perfect predictions"
            + (" and falls without bound at wrong ones: its sign is wrong." if at_wrong < at_init else "."),
            "Check the loss's sign (a loss to minimise: -log-likelihood, not +log-likelihood) and that it "
            "compares prediction with target.",
            evidence={"loss_at_init": at_init, "loss_at_perfect": best, "loss_at_wrong": at_wrong,
                      **({"loss_at_wrong_x10": extreme[-1]} if extreme else {})}, place="loss",
            node=ctx.output_node())]


def _normalised(out: torch.Tensor) -> bool:
    """Whether the output is log-probabilities (logsumexp 0) or probabilities (rows summing to 1) over an axis: the
    model cannot make them ten times as large, so a loss unbounded there (NLL) is bounded on what it makes."""
    if out.dim() < 2 or not out.dtype.is_floating_point:
        return False
    o = out.float()
    return any(float(torch.logsumexp(o, ax).abs().max()) <= 1e-3 or (
        bool((o >= 0).all()) and float((o.sum(ax) - 1).abs().max()) <= 1e-3) for ax in {1, out.dim() - 1})


def is_metric_loss(loss, out: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether a loss on integer labels reads no class from a position of the output (triplet, contrastive,
    prototype losses want same-class rows close, whichever direction): confident one-hot rows for the labels cost
    as little as for every label moved to the next class's axis, and less than the output at initialisation.
    A relative 1e-3 of the larger value tells equal from a class-reading loss, which costs several nats more."""
    if y.dtype.is_floating_point or out.dim() != 2 or y.dim() != 1 or len(y) != len(out) or not len(y):
        return False
    classes = out.shape[1]
    if int(y.min()) < 0 or int(y.max()) >= classes or classes < 2:
        return False
    own = 12 * F.one_hot(y, classes).to(out.dtype) - 6
    moved = 12 * F.one_hot((y + 1) % classes, classes).to(out.dtype) - 6
    with torch.no_grad():
        at_own, at_moved, at_init = float(loss(own, y)), float(loss(moved, y)), float(loss(out, y))
    scale = max(abs(at_own), abs(at_moved), abs(at_init), 1e-8)
    return abs(at_own - at_moved) <= 1e-3 * scale and at_own < at_init - 1e-3 * scale


def _aligns_itself(loss, out: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether the loss reshapes the prediction to the target itself (`out.reshape(y.shape)` inside it): then it
    costs the same on the output as given and on the output already laid out as the target. A loss that
    broadcasts (N, 1) against (N,) compares every prediction with every target and costs something else, unless
    all predictions are equal, which the model's output at initialisation is not (a relative 1e-5: float noise)."""
    with torch.no_grad():
        as_given, laid_out = float(loss(out, y)), float(loss(out.reshape(y.shape), y))
    return math.isfinite(as_given) and abs(as_given - laid_out) <= 1e-5 * max(abs(as_given), abs(laid_out), 1e-8)


def _ideal_predictions(out: torch.Tensor, y: torch.Tensor):
    """Candidate perfect predictions (logits or values) for the target, and one clearly wrong prediction."""
    if not y.dtype.is_floating_point and out.dim() >= 2 and out.shape[0] == y.shape[0] and y.dim() == out.dim() - 1:
        # Classes on axis 1 (torch's losses) or, for a sequence's (N, L, C) scores, last (a loss that transposes
        # or flattens them itself); padding's ignore_index (-100) is clamped, as the loss ignores it anyway.
        # Labels reaching the axis's length are no class indices into it, yet the loss ran on them: it reads them
        # otherwise (ordinal thresholds, cumulative logits), and a one-hot there is no perfect prediction.
        layouts = [ax for ax in {1, out.dim() - 1}
                   if tuple(out.shape[:ax]) + tuple(out.shape[ax + 1:]) == tuple(y.shape)
                   and int(y.max()) < out.shape[ax]]
        if not layouts:
            raise Skip(f"the target {list(y.shape)} is not the output {list(out.shape)} less a class axis "
                       "holding its labels")
        perfect, wrong = [], None
        for ax in sorted(layouts):
            classes = out.shape[ax]
            onehot = F.one_hot(y.clamp(0, classes - 1), classes).movedim(-1, ax).to(out.dtype)
            perfect += [12 * onehot - 6, onehot]
            if wrong is None:
                wrong = 12 * F.one_hot((y.clamp(0, classes - 1) + 1) % classes, classes).movedim(-1, ax) - 6
        return perfect, wrong.to(out.dtype)
    if y.dtype.is_floating_point and y.numel() == out.numel():
        if tuple(out.shape) != tuple(y.shape):
            raise Skip("the prediction and target shapes differ (see loss_shapes)")
        target = y.to(out.dtype)
        candidates = [target]
        if bool(((target == 0) | (target == 1)).all()):
            # probabilities, logits, or a distance for a pair's "same" flag (contrastive: 0 apart when same)
            candidates += [12 * target - 6, 1 - target]
            return candidates, 6 - 12 * target
        if bool((target >= 0).all()):  # a log link (Poisson, Gamma): the loss takes the log of the rate
            candidates.append(torch.log(target.clamp(min=1e-3)))
        return candidates, target + 3 * target.std() + 1
    if y.dtype.is_floating_point and out.dim() == 2 and len(y) == len(out) and y[0].numel() == 1:
        # One target per row, several outputs (quantiles, an ensemble's members): every output equal to the
        # target is perfect for any loss that compares each output with it.
        target = y.reshape(-1, 1).expand_as(out).to(out.dtype)
        return [target], target + 3 * target.std() + 1
    raise Skip(f"cannot build perfect predictions for output {list(out.shape)} and target {list(y.shape)}")


_LAYOUT_OPS = {"squeeze", "unsqueeze", "view", "reshape", "flatten", "contiguous", "transpose", "permute"}


class DoubleSoftmax(Check):
    """A softmax or sigmoid at the output, before a loss that applies its own (cross-entropy from logits);
    or a loss that squashes the logits itself (softmax inside a custom loss, before F.cross_entropy)."""

    id, title = "double_softmax", "Output activation applied twice"
    cause = "output_activation"

    def run(self, ctx):
        loss = ctx.loss_fn
        if isinstance(loss, nn.CrossEntropyLoss | nn.BCEWithLogitsLoss):
            node = ctx.graph.output_node
            # a squeeze or reshape after the activation moves no value: the scores are still squashed
            while node is not None and kind_of(node) in _LAYOUT_OPS and node.inputs:
                node = ctx.graph.node(node.inputs[0])
            if node is None or kind_of(node) not in ("softmax", "sigmoid"):
                return []
            return [self.finding(
                "warning", f"The model ends in {node.kind} and {type(loss).__name__} applies it again: "
                "gradients shrink and the loss cannot reach zero.",
                f"Remove the final {node.kind}: {type(loss).__name__} takes raw logits.",
                evidence={}, place="node", where=node.name, node=node.name)]
        return self._squashing_loss(ctx)

    def _squashing_loss(self, ctx):
        """A loss on class logits falls towards its minimum as correct logits grow confident (cross-entropy
        to 0; label smoothing makes it rise again). One that stays put far above 0 between logits of 6 and
        60 saturated: it sees probabilities where it expects logits, and its gradient vanishes there."""
        out, y = ctx.output(), ctx.y
        if y.dtype.is_floating_point or out.dim() < 2 or y.dim() != out.dim() - 1 or out.shape[0] != y.shape[0]:
            raise Skip("neither a torch cross-entropy module nor class logits for integer labels")
        classes = out.shape[1]
        confident = 6 * (2 * F.one_hot(y.clamp(0, classes - 1), classes).movedim(-1, 1).to(out.dtype) - 1)
        with torch.no_grad():
            at_init, at_6, at_60 = (float(ctx.loss(p, y)) for p in (out, confident, 10 * confident))
        if not all(map(math.isfinite, (at_init, at_6, at_60))) or at_init <= 0:
            raise Skip("the loss is not finite or not positive at these logits (see loss_sign)")
        if at_6 < 0.25 * at_init or abs(at_60 - at_6) > 0.01 * at_6:
            return []
        return [self.finding(
            "error", f"The loss stays at {at_6:.3g} for correct logits of 6 and of 60 (at the start: {at_init:.3g}): "
            "it squashes the logits before the loss (probabilities passed to cross-entropy), so it cannot reach "
            "its minimum and its gradient vanishes for confident predictions.",
            "Pass the raw logits to F.cross_entropy / nn.CrossEntropyLoss (it applies log-softmax itself); "
            "drop the softmax inside the loss.",
            evidence={"loss_at_init": at_init, "loss_at_logits_6": at_6, "loss_at_logits_60": at_60},
            place="loss", node=ctx.output_node())]
