"""The numbers inside the model: non-finite values, unstable exp/log, the initial scale along depth,
saturated sigmoids and tanhs, and dead ReLUs."""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from .. import inputs
from .base import Check, kind_of, zero_initialised

_PARAMETRISED = ("linear", "conv1d", "conv2d", "conv3d", "bilinear")
_UNBOUNDED = {"linear", "conv1d", "conv2d", "conv3d", "matmul", "mm", "bmm", "add", "sub", "mul", "input", "addmm"}


def _finite(v: torch.Tensor) -> bool:
    return bool(torch.isfinite(v).all()) if v.dtype.is_floating_point else True


class NonFinite(Check):
    """No NaN or Inf in inputs, labels, node outputs, the loss or the gradients; where one appears first."""

    id, title = "non_finite", "NaN or Inf"
    cause = "numerical"
    _change = ("Lower the learning rate, clip gradients, and keep exp/log/sqrt/division away from overflow and "
               "zero (clamp the argument, add an epsilon, use the stable torch forms).")

    def run(self, ctx):
        X, Y = inputs.flat(ctx.data.X), ctx.data.Y
        for what, value in (("inputs", X), ("labels", Y)):
            if not _finite(value):
                bad = int((~torch.isfinite(value)).sum())
                return [self.finding(
                    "error", f"The {what} contain {bad} NaN or Inf values.",
                    f"Clean the {what} before training: drop or impute the rows with missing values.",
                    evidence={"non_finite": bad, "values": value.numel()}, place="data", where=what,
                    node=ctx.input_node() if what == "inputs" else None)]
        values = ctx.record(ctx.x)
        output_finite = _finite(ctx.output())
        for n in ctx.graph.nodes:
            v = values.get(n.name)
            if v is None or n.op == "placeholder" or _finite(v):
                continue
            fed = [i for i in n.inputs if i in values]
            if not fed and output_finite:  # a constant made -inf on purpose (a causal mask), absorbed downstream
                continue
            if all(_finite(values[i]) for i in fed):
                bad = int((~torch.isfinite(v)).sum())
                return [self.finding(
                    "error", f"{n.name!r} ({n.kind}) turns finite inputs into {bad} NaN/Inf values.", self._change,
                    evidence={"non_finite": bad, "values": v.numel()}, place="node", where=n.name, node=n.name)]
        loss, grads = ctx.one_backward()
        if not torch.isfinite(loss):
            return [self.finding("error", f"The loss is {float(loss)} on finite outputs.", self._change,
                                 evidence={"loss": float(loss)}, place="loss", node=ctx.output_node())]
        bad_params = [n for n, g in grads.items() if g is not None and not _finite(g)]
        if not bad_params:
            return []
        node = self._gradient_source(ctx)
        return [self.finding(
            "error", f"The gradient is NaN/Inf in {len(bad_params)} parameters ({', '.join(bad_params[:3])})"
            + (f"; it first appears in the backward pass of {node!r}." if node else "."), self._change,
            evidence={"parameters": len(bad_params)}, place="node" if node else "parameter",
            where=node or bad_params[0], node=node or ctx.node_of_param(bad_params[0]))]

    @staticmethod
    def _gradient_source(ctx) -> str | None:
        """The node whose backward turns a finite gradient at its output into a non-finite one at an input."""
        _, grads = ctx.gradient_records()
        for n in reversed(ctx.graph.nodes):
            g = grads.get(n.name)
            if g is not None and not _finite(g):
                continue
            if any(i in grads and not _finite(grads[i]) for i in n.inputs):
                return n.name
        return None


class UnstableMath(Check):
    """exp and log applied to values that can overflow or reach zero."""

    id, title = "unstable_math", "exp/log of unbounded values"
    cause = "numerical"

    def run(self, ctx):
        values = ctx.record(ctx.x)
        findings = []
        for n in ctx.graph.nodes:
            op = kind_of(n)
            if op not in ("exp", "log", "log2", "log10") or not n.inputs or n.inputs[0] not in values:
                continue
            arg = values[n.inputs[0]]
            producer = ctx.graph.node(n.inputs[0])
            source = kind_of(producer)
            evidence = {"argument_min": float(arg.min()), "argument_max": float(arg.max())}
            if op == "exp":
                if evidence["argument_max"] > 30 or source in _UNBOUNDED:
                    findings.append(self.finding(
                        "warning" if evidence["argument_max"] > 30 else "note",
                        f"exp at {n.name!r} takes an unbounded value ({producer.kind} output, up to "
                        f"{evidence['argument_max']:.3g}); float32 overflows above 88.",
                        "Use a stable form (softmax, logsumexp, softplus) or clamp the argument.",
                        evidence=evidence, place="node", where=n.name, node=n.name))
            elif source in ("softmax", "sigmoid"):
                findings.append(self.finding(
                    "warning", f"log at {n.name!r} of a {producer.kind} underflows to -inf for confident predictions.",
                    f"Use F.log_softmax (or logsigmoid) instead of log({producer.kind}(...)).",
                    evidence=evidence, place="node", where=n.name, node=n.name))
            elif evidence["argument_min"] <= 0 or source in _UNBOUNDED:
                findings.append(self.finding(
                    "error" if evidence["argument_min"] <= 0 else "warning",
                    f"log at {n.name!r} takes an unbounded value ({producer.kind} output, min "
                    f"{evidence['argument_min']:.3g}): NaN below 0, -inf at 0.",
                    "Make the argument positive (softplus, exp, clamp(min=eps)) or add an epsilon.",
                    evidence=evidence, place="node", where=n.name, node=n.name))
        return findings


def _rms(v: torch.Tensor) -> float:
    return float(v.float().pow(2).mean().sqrt())


class InitScale(Check):
    """Activations and gradients keep their scale from layer to layer at initialisation."""

    id, title = "init_scale", "Initialisation scale"
    cause = "initialisation"
    layer_gain = 30.0  # one layer scaling by more than this (or less than its inverse)
    total_gain = 1e3  # the whole stack

    def run(self, ctx):
        values, grads = ctx.gradient_records()
        zeroed = zero_initialised(ctx.model)
        layers = [n for n in ctx.graph.nodes if n.op == "call_module" and kind_of(n) in _PARAMETRISED
                  and n.name in values and n.inputs and n.inputs[0] in values and n.target not in zeroed]
        if len(layers) < 2:
            return []
        gains = []
        for n in layers:
            before, after = _rms(values[n.inputs[0]]), _rms(values[n.name])
            gains.append(after / before if before > 0 else math.inf)
        worst = max(range(len(layers)), key=lambda i: abs(math.log10(max(gains[i], 1e-30))))
        start, end = _rms(values[layers[0].inputs[0]]), _rms(values[layers[-1].name])
        total = end / start if start > 0 else math.inf
        bad_layer = not (1 / self.layer_gain <= gains[worst] <= self.layer_gain)
        if bad_layer or not (1 / self.total_gain <= total <= self.total_gain):
            n = layers[worst]
            way = "grows" if gains[worst] > 1 else "shrinks"
            return [self.finding(
                "warning", f"Activations {way} by a factor {gains[worst]:.3g} at {n.name!r} "
                f"({total:.3g} over the {len(layers)} layers) at initialisation.",
                f"Initialise {n.target} with the fan-in scale (nn.init.kaiming_normal_ for ReLU, xavier for "
                "tanh), or add normalisation (BatchNorm/LayerNorm).",
                evidence={"layer_gain": gains[worst], "total_gain": total, "layers": len(layers)},
                place="node", where=n.name, node=n.name)]
        with_grads = [n for n in layers if n.name in grads]
        if zeroed or len(with_grads) < 2 or not _chain(ctx.graph, [n.name for n in with_grads]):
            return []  # along parallel branches (attention's query, key, value) depth has no one direction
        first, last = _rms(grads[with_grads[0].name]), _rms(grads[with_grads[-1].name])
        ratio = first / last if last > 0 else math.inf
        if 1 / self.total_gain <= ratio <= self.total_gain:
            return []
        n = with_grads[0]
        way = "vanish" if ratio < 1 else "explode"
        return [self.finding(
            "warning", f"Gradients {way} towards the input: the first layer's is {ratio:.3g} times the last's.",
            "Use ReLU-family activations with He initialisation, normalisation layers or residual connections; "
            "clip gradients if they explode.",
            evidence={"first_over_last": ratio, "layers": len(with_grads)}, place="node", where=n.name, node=n.name,
            cause="vanishing_gradients" if ratio < 1 else "initialisation")]


def _chain(graph, names: list[str]) -> bool:
    """Whether each of these nodes feeds the next (a path through depth, not parallel branches)."""
    wanted = set(names)
    above: dict[str, set[str]] = {}  # node -> the wanted nodes upstream of it
    for n in graph.nodes:
        up: set[str] = set()
        for i in n.inputs:
            up |= above.get(i, set()) | ({i} & wanted)
        above[n.name] = up
    return all(a in above.get(b, set()) for a, b in zip(names, names[1:]))


class Saturation(Check):
    """Sigmoid and tanh inputs mostly in the flat tails (|z| > 5 for sigmoid, > 3 for tanh)."""

    id, title = "saturation", "Saturated activations"
    cause = "saturation"
    tails = {"sigmoid": 5.0, "tanh": 3.0}
    fraction = 0.5

    def run(self, ctx):
        values = ctx.record(inputs.first(ctx.data.X, 256), train=True, seed=ctx.seed)  # as training meets them
        findings = []
        for n in ctx.graph.nodes:
            op = kind_of(n)
            if op not in self.tails or not n.inputs or n.inputs[0] not in values:
                continue
            z = values[n.inputs[0]]
            share = float((z.abs() > self.tails[op]).float().mean())
            if share > self.fraction:
                findings.append(self.finding(
                    "warning", f"{share:.0%} of the inputs of {n.name!r} ({n.kind}) are in its flat tails: "
                    "their gradient is nearly zero.",
                    "Scale the inputs and the preceding layer's weights down, add normalisation before it, or use "
                    "a non-saturating activation (ReLU, GELU).",
                    evidence={"saturated_fraction": share, "tail": self.tails[op]},
                    place="node", where=n.name, node=n.name))
        return findings


class DeadReLU(Check):
    """ReLU units that are never active on the sample (>= 256 samples where available), in training mode: an
    untrained BatchNorm's running statistics (0 and 1) leave raw inputs unnormalised in eval mode, which
    training never sees.

    Over 40 %: PyTorch's default initialisation leaves up to about 22 % of a second 64-unit layer dead
    on the digits (30 seeds), He initialisation fewer; a bias or weight scale gone wrong, most or all."""

    id, title = "dead_relu", "Dead ReLUs"
    cause = "dead_units"
    fraction = 0.4
    # A layer fed few or small inputs (an 8-wide code into 32 units) leaves many units dead under PyTorch's own
    # initialisation, which training revives as the inputs move; only a layer deader than its default-initialised
    # twins on the same inputs is the model's doing. 5 re-initialisations bound that spread (a few points either
    # side on the digits); 0.1 above the deadest keeps a chance draw from crossing it.
    resets, above_default = 5, 0.1

    def run(self, ctx):
        x = inputs.first(ctx.data.X, 256)
        samples = inputs.count(x)
        values = ctx.record(x, train=True, seed=ctx.seed)  # as training meets them (below)
        findings = []
        for n in ctx.graph.nodes:
            if kind_of(n) != "relu" or n.name not in values:
                continue
            v = values[n.name]
            if v.dim() < 2 or v.shape[0] != samples or not _finite(v):
                continue
            unit = -1 if v.dim() == 3 else 1
            active = (v > 0).movedim(unit, 0).reshape(v.shape[unit], -1).any(1)
            dead = 1.0 - float(active.float().mean())
            if dead > self.fraction and dead > self._default_dead(ctx, n, values, unit) + self.above_default:
                findings.append(self.finding(
                    "error" if dead >= 0.9 else "warning",
                    f"{dead:.0%} of the units of {n.name!r} are never active on {samples} samples: they pass no "
                    "gradient.",
                    "Check the preceding layer's bias and weight scale (He initialisation), lower the learning "
                    "rate, or use LeakyReLU/GELU.",
                    evidence={"dead_fraction": dead, "units": active.numel(), "samples": samples},
                    place="node", where=n.name, node=n.name))
        return findings

    def _default_dead(self, ctx, relu, values, unit) -> float:
        """The largest share of dead units of the ReLU's own Linear or convolution re-initialised the PyTorch
        way, on the inputs it receives here (0 when it is fed by anything else)."""
        if not relu.inputs:
            return 0.0
        layer = ctx.graph.node(relu.inputs[0])
        if layer.op != "call_module" or not layer.inputs or layer.inputs[0] not in values:
            return 0.0
        module = ctx.model.get_submodule(layer.target)
        if not isinstance(module, nn.Linear | nn.modules.conv._ConvNd):
            return 0.0
        feed, deadest = values[layer.inputs[0]], 0.0
        with torch.random.fork_rng(), torch.no_grad():
            for k in range(self.resets):
                torch.manual_seed(ctx.seed + k)
                twin = copy.deepcopy(module)
                twin.reset_parameters()
                pre = twin(feed)
                active = (pre > 0).movedim(unit, 0).reshape(pre.shape[unit], -1).any(1)
                deadest = max(deadest, 1.0 - float(active.float().mean()))
        return deadest

