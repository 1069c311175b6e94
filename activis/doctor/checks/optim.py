"""The optimizer as the user's code: its hyper-parameters read from a copy that runs a few steps.

The model, optimizer and scheduler are deep-copied together (so the copies still point at each
other) and trained for a few steps on the batch; the scheduler's copy is then stepped on alone to
read its schedule, so a warm-up that starts at a learning rate of 0 is read by the rate it reaches,
not as "learning rate 0".
"""

from __future__ import annotations

import copy
import math
import warnings

import torch

from .. import inputs
from ..context import first_tensor
from .base import Check, Skip

_ADAPTIVE = ("Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad", "Adadelta", "SparseAdam", "Lion")
# learning rates outside these bounds are orders of magnitude off (adaptive: the step is ~lr per weight)
_LR_RANGE = {"adaptive": (1e-7, 0.05), "sgd": (1e-5, 2.0)}
_CRAWL = 1e-5  # relative update per step below which the weights barely move
_SCHEDULE_STEPS = 2000  # scheduler-only steps read to find the rate a warm-up reaches


def _family(opt) -> str:
    name = type(opt).__name__
    return "adaptive" if name in _ADAPTIVE or "adam" in name.lower() else "sgd"


def schedule(optimizer, scheduler, steps: int) -> list[list[float]]:
    """The learning rate of every parameter group over the scheduler's first ``steps`` steps (copies only)."""
    opt, sched = copy.deepcopy((optimizer, scheduler))
    rates = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(steps):
            rates.append([float(g["lr"]) for g in opt.param_groups])
            if sched is None:
                break
            try:
                sched.step()
            except Exception:  # noqa: BLE001 - a schedule that needs a metric (ReduceLROnPlateau): read what we have
                break
    return rates


def _steps_on_a_metric(scheduler) -> bool:
    """ReduceLROnPlateau and its kind: step(metric), driven by a validation score the checks do not have."""
    import inspect

    try:
        params = list(inspect.signature(scheduler.step).parameters.values())
    except (TypeError, ValueError):
        return False
    return bool(params) and params[0].default is inspect.Parameter.empty and params[0].kind in (
        inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class OptimizerSettings(Check):
    """Learning rate, weight decay and momentum within the orders of magnitude that train, read from the
    schedule's first steps; and a few steps on a copy that do not blow the weights up."""

    id, title = "optimizer_settings", "Optimizer hyper-parameters off by orders of magnitude"
    cause = "learning_rate_too_high"
    steps = 6

    def run(self, ctx):
        opt = ctx.optimizer
        if opt is None:
            raise Skip("no optimizer given (pass optimizer=...)")
        groups = [i for i, g in enumerate(opt.param_groups) if g["params"]]
        rates = schedule(opt, ctx.scheduler, _SCHEDULE_STEPS)
        findings = []
        family = _family(opt)
        low, high = _LR_RANGE[family]
        name = type(opt).__name__
        for i in groups:
            g = opt.param_groups[i]
            peak = max(r[i] for r in rates)
            evidence = {"group": i, "peak_lr": peak, "lr_now": float(g["lr"])}
            if peak <= 0:
                findings.append(self.finding(
                    "error", f"The learning rate of parameter group {i} is 0"
                    + (f" and stays 0 over the scheduler's first {len(rates)} steps" if ctx.scheduler else "")
                    + ": those parameters never move.",
                    f"Set a positive learning rate ({name}: " + ("1e-3 is a common start" if family == "adaptive"
                                                                   else "1e-2 to 1e-1") + ").",
                    evidence=evidence, place="optimizer", cause="learning_rate_too_low"))
            elif peak > high:
                findings.append(self.finding(
                    "error" if peak > 10 * high else "warning",
                    f"{name}'s learning rate reaches {peak:.3g} in group {i}: far above what {name} trains with "
                    f"(up to about {high:g}).", f"Lower it to {1e-3 if family == 'adaptive' else 0.1:g} and raise "
                    "it only while the loss keeps falling smoothly.", evidence=evidence, place="optimizer"))
            elif peak < low:
                findings.append(self.finding(
                    "warning", f"{name}'s learning rate peaks at {peak:.3g} in group {i}: the weights will barely "
                    "move.", f"Raise it (to about {1e-3 if family == 'adaptive' else 0.05:g}).",
                    evidence=evidence, place="optimizer", cause="learning_rate_too_low"))
            findings.extend(self._decay_and_momentum(g, i, family, name))
        if not findings:
            peak = max(max(r[i] for r in rates) for i in groups) if groups else 0.0
            findings.extend(self._trial(ctx, peak if family == "adaptive" else None))
        return findings

    def _decay_and_momentum(self, g, i, family, name):
        found = []
        wd = float(g.get("weight_decay", 0) or 0)
        decoupled = name == "AdamW" or g.get("decoupled_weight_decay", False)
        limit = 1.0 if decoupled else (0.1 if family == "adaptive" else 0.05)
        if wd > limit:
            found.append(self.finding(
                "warning", f"weight_decay is {wd:g} in group {i}: it pulls the weights to zero faster than the "
                "loss can move them.", f"Use {0.01 if decoupled else 5e-4:g} to {0.1 if decoupled else 5e-3:g}.",
                evidence={"group": i, "weight_decay": wd}, place="optimizer", cause="weight_decay"))
        momentum = g.get("momentum")
        betas = g.get("betas")
        bad = [v for v in ([momentum] if isinstance(momentum, int | float) else []) + list(betas or [])
               if isinstance(v, int | float) and not 0 <= v < 1]
        if bad:
            found.append(self.finding(
                "error", f"momentum/betas {bad} in group {i}: a momentum of 1 or more makes the steps grow without "
                "bound.", "Use momentum 0.9 (SGD) or betas (0.9, 0.999) (Adam).",
                evidence={"group": i, "momentum": float(bad[0])}, place="optimizer", cause="momentum"))
        return found

    def _trial(self, ctx, adaptive_peak):
        """A few steps of the user's optimizer on a copy: the relative update per step, and the loss.

        An adaptive optimizer moves each weight by about its learning rate whatever the gradient's scale, so
        its update relative to the weights, scaled to the schedule's peak rate (a warm-up's first steps are
        small on purpose), says whether the rate fits the weights: below 1e-5 per step (DeepInsight's
        blind spot, as the watcher's), the weights need 10,000 steps to move by a tenth."""
        model, opt, sched = copy.deepcopy((ctx.model, ctx.optimizer, ctx.scheduler))
        model.train()
        params = [p for g in opt.param_groups for p in g["params"] if p.requires_grad]
        if not params:
            raise Skip("the optimizer holds no trainable parameter (see optimizer)")
        torch.manual_seed(ctx.seed)
        ratios, losses, at_peak = [], [], []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(self.steps):
                before = [p.detach().clone() for p in params]
                lr = max(float(g["lr"]) for g in opt.param_groups)
                opt.zero_grad(set_to_none=True)
                loss = ctx.loss(first_tensor(inputs.call(model, ctx.x)), ctx.y)
                losses.append(float(loss.detach()))
                if not math.isfinite(losses[-1]):
                    break
                loss.backward()
                opt.step()
                if sched is not None and not _steps_on_a_metric(sched):
                    sched.step()
                moved = math.sqrt(sum(float((p.detach() - b).pow(2).sum()) for p, b in zip(params, before)))
                size = math.sqrt(sum(float(b.pow(2).sum()) for b in before))
                ratios.append(moved / size if size > 0 else 0.0)
                if adaptive_peak and lr > 0:
                    at_peak.append(ratios[-1] * adaptive_peak / lr)
        with torch.no_grad():
            model.eval()
        # risen tenfold (plus one, for a loss near 0): measured as a rise, so a loss below 0 (a Gaussian
        # likelihood, a wrong sign) that falls is not read as blown up
        blown = not all(math.isfinite(v) for v in losses) or (
            len(losses) > 2 and losses[-1] > losses[0] + 9 * abs(losses[0]) + 1)
        median = sorted(ratios)[len(ratios) // 2] if ratios else 0.0
        crawl = sorted(at_peak)[len(at_peak) // 2] if at_peak else None
        if not blown and crawl is not None and 0 < crawl < _CRAWL:  # 0: nothing moved (see optimizer)
            return [self.finding(
                "warning", f"Each step of {type(opt).__name__} on a copy changes the weights by {crawl:.2g} of their "
                f"size at the learning rate's peak ({adaptive_peak:.3g}): they would need over "
                f"{0.1 / crawl:,.0f} steps to move by a tenth.",
                "Raise the learning rate (Adam-family optimizers: about 1e-3 from scratch, 1e-5 to 1e-4 to "
                "fine-tune).", evidence={"median_relative_update": crawl, "peak_lr": adaptive_peak},
                place="optimizer", cause="learning_rate_too_low")]
        if not blown and median <= 0.3:
            return []
        return [self.finding(
            "error" if blown else "warning",
            f"Over {len(losses)} steps of {type(opt).__name__} on a copy, each step changed the weights by "
            f"{median:.2g} of their size" + (f" and the loss went from {losses[0]:.4g} to {losses[-1]:.4g}."
                                              if blown else "."),
            "Lower the learning rate (by 10x) and add a warm-up.",
            evidence={"median_relative_update": median, "first_loss": losses[0], "last_loss": losses[-1]},
            place="optimizer")]
