"""Where a NaN/Inf is born during training: the module that produced it, not one that passed it on.

At the first step whose loss or gradient norm is not finite, the batch of that step (the cockpit's
taps keep the model's inputs until the step is logged) runs again through the model with hooks on
every leaf module, the parameters unchanged (the optimizer has not stepped yet). Forward: the first
module whose inputs are finite and whose output is not. Backward (when the forward is finite): the
gradient of the output is pulled back to every module's output and input at once; the producer is
the module whose output gradient is finite and whose input or parameter gradient is not.
"""

from __future__ import annotations

import torch
from torch import nn

from .state import ModelState
from .watchers import Watcher, finite


def _all_finite(values) -> bool:
    return all(bool(torch.isfinite(v).all()) for v in values
               if isinstance(v, torch.Tensor) and v.dtype.is_floating_point)


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def forward_source(model: nn.Module, args, kwargs):
    """(module path or None, every module's (path, inputs, outputs) in the order the calls finished) of one
    forward pass. A module finishes after the modules it calls, so the first with finite inputs and a
    non-finite output is the innermost producer (a parent's own functional op, when no child produced it)."""
    calls: list[tuple[str, list, list]] = []
    leaves = [(p, m) for p, m in model.named_modules() if p]

    def hook_for(path):
        def hook(_m, inputs, output):
            calls.append((path, _tensors(inputs), _tensors(output)))
        return hook

    handles = [m.register_forward_hook(hook_for(p)) for p, m in leaves]
    try:
        out = model(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
    for path, inputs, outputs in calls:
        if _all_finite(inputs) and not _all_finite(outputs):
            return path, calls, out
    if not _all_finite(_tensors(out)):
        return "(model forward, outside its modules)", calls, out
    return None, calls, out


def backward_source(model: nn.Module, calls, out) -> str | None:
    """The module whose backward turns a finite gradient into a NaN/Inf."""
    outputs = _tensors(out)
    if not outputs or not outputs[0].requires_grad:
        return None
    wanted, owners = [], []
    modules = dict(model.named_modules())
    for path, inputs, outs in calls:
        for t in outs:
            if t.requires_grad:
                wanted.append(t)
                owners.append((path, "output"))
        for t in inputs:
            if t.requires_grad:
                wanted.append(t)
                owners.append((path, "input"))
        for p in modules[path].parameters(recurse=False):
            if p.requires_grad:
                wanted.append(p)
                owners.append((path, "input"))
    if not wanted:
        return None
    grads = torch.autograd.grad(outputs[0], wanted, torch.ones_like(outputs[0]), allow_unused=True)
    state: dict[str, dict[str, bool]] = {}
    for (path, role), g in zip(owners, grads):
        if g is not None:
            ok = bool(torch.isfinite(g).all())
            state.setdefault(path, {}).setdefault(role, True)
            state[path][role] = state[path][role] and ok
    producers = [path for path, _, _ in reversed(calls)
                 if state.get(path, {}).get("output", True) and state.get(path, {}).get("input", True) is False]
    inner = [p for p in producers if not any(q.startswith(p + ".") for q in producers)]
    return inner[0] if inner else None


class NonFiniteSource(Watcher):
    """The first NaN/Inf of the run (loss or gradients), traced to the module that produced it."""

    id, title, cause = "non_finite_source", "A NaN/Inf is produced", "numerical"

    def __init__(self, doctor):
        super().__init__(doctor)
        self.done = False
        self.losses: list[float] = []  # the finite losses so far: a loss that grew a hundredfold first means the
        # NaN is the end of a divergence (the learning rate), not a bad operation

    def observe(self, step, values):
        if self.done:
            return []
        loss, norms = values.get("Loss"), values.get("GradNorm")
        if finite(loss):
            self.losses.append(loss)
        bad_grad = isinstance(norms, list) and not all(finite(float(n)) for n in norms)
        if finite(loss) and not bad_grad:
            return []
        if loss is None and not bad_grad:
            return []
        self.done = True
        taps = self.doctor.taps
        args, kwargs = (getattr(taps, "args", ()), getattr(taps, "kwargs", {})) if taps is not None else ((), {})
        where, how = None, ""
        if args or kwargs:
            params = [p for _, p in self.doctor.params]
            if not _all_finite(params):
                bad = next(n for n, p in self.doctor.params if not _all_finite([p]))
                where, how = self.doctor.layer(bad), "its parameters are already NaN/Inf (an earlier update)"
            else:
                where, how = self._trace(args, kwargs)
        what = f"the loss became {loss}" if not finite(loss) else "the gradient became NaN/Inf"
        first = self.losses[:3]
        if len(first) == 3 and max(self.losses[-5:]) > 100 * max(min(first), 1e-12) and where is not None:
            return [self.finding(
                "error", f"At step {step} {what} after the loss had grown {max(self.losses[-5:]) / min(first):.3g}x: "
                f"the steps are too large, and {where!r} overflowed first {how}.",
                "Lower the learning rate (by 10x or more), add warm-up and gradient clipping.", step,
                evidence={"loss_growth": max(self.losses[-5:]) / min(first)}, place="optimizer", where=where,
                node=where, cause="learning_rate_too_high")]
        if where is None:
            return [self.finding(
                "error", f"At step {step} {what}; every module's output and gradient is finite on this batch, "
                "so it is born in the loss.", "Keep log/exp/division/sqrt in the loss away from 0 and overflow "
                "(clamp, add an epsilon, use the stable torch forms).", step, evidence={"loss": _num(loss)},
                place="loss")]
        return [self.finding(
            "error", f"At step {step} {what}; it is first produced by {where!r} {how} (its inputs were finite).",
            f"Look at {where!r}: clamp the argument of log/sqrt/division/exp, add an epsilon, lower the "
            "learning rate or clip gradients if its inputs grow.", step, evidence={"loss": _num(loss)},
            place="module", where=where, node=where)]

    def _trace(self, args, kwargs):
        """Run the step's batch again (the model, its buffers and torch's random state put back after)."""
        model, taps = self.doctor.model, self.doctor.taps
        state = ModelState(model)
        taps.recording = False
        try:
            with torch.enable_grad():
                where, calls, out = forward_source(model, args, kwargs)
                if where is not None:
                    return where, "in the forward pass"
                return backward_source(model, calls, out), "in the backward pass"
        finally:
            taps.recording = True
            state.restore()


def _num(v) -> float:
    return float(v) if v is not None else float("nan")
