"""Does information flow? The output's dependence on the input, every parameter's gradient, and
whether the same input gives the same output (randomness left on)."""

from __future__ import annotations

import torch
from torch import nn

from .. import inputs
from ..context import same_rows
from .base import Check, Skip, consumers, kind_of, reachable_from_input, same_values, zero_initialised

# operations whose output carries no gradient back to their input
_CUTS = {"detach", "argmax", "argmin", "round", "floor", "ceil", "sign", "eq", "ne", "gt", "ge", "lt", "le",
         "long", "int", "bool", "item", "numpy", "no_grad", "_set_grad_enabled"}


class InputDependence(Check):
    """Two different samples must give two different outputs; where they become equal, information is lost."""

    id, title = "input_dependence", "Output does not depend on the input"
    cause = "information_lost"

    def run(self, ctx):
        x, batch = ctx.x, inputs.count(ctx.x)
        if same_rows(inputs.flat(x).float(), batch):
            raise Skip("every sample of the batch is the same input")
        values = ctx.record(x)
        out_name = ctx.output_node()
        out = values.get(out_name)
        if out is None or same_rows(out, batch) is not True or zero_initialised(ctx.model):
            return []
        reached = reachable_from_input(ctx.graph)
        lost = None
        for n in ctx.graph.nodes:
            v = values.get(n.name)
            if n.name not in reached or n.op == "placeholder" or v is None or same_rows(v, batch) is not True:
                continue
            varied = [i for i in n.inputs if i in values and same_rows(_float(values[i]), batch) is False]
            if varied or not any(i in values for i in n.inputs):
                lost = n
                break
        node = lost.name if lost is not None else out_name
        how = {"mul": "a multiplication by zero", "detach": "a detached value"}.get(kind_of(lost), "") if lost else ""
        message = (f"Every sample gives the same output; the samples' values become equal at {node!r}"
                   + (f" ({how})" if how else "") + ".")
        return [self.finding(
            "error", message,
            f"Look at {node!r}: a multiplication by zero, an overwritten or discarded value, a constant or "
            "detached branch; the operation must pass on what differs between samples.",
            evidence={"samples": batch, "output_spread": float(out.reshape(batch, -1).std(0).max())},
            place="node", where=node, node=node)]


def _float(v: torch.Tensor) -> torch.Tensor:
    return v if v.dtype.is_floating_point else v.float()


class GradientCoverage(Check):
    """After one backward pass every trainable parameter has a gradient, and not an all-zero one."""

    id, title = "gradient_coverage", "Parameters without gradient"
    cause = "gradient_cut"

    def run(self, ctx):
        loss, grads = ctx.one_backward()
        if not loss.requires_grad and all(g is None for g in grads.values()):
            return [self.finding(
                "error", "The loss does not depend on any parameter: nothing will train.",
                "Remove the torch.no_grad()/detach() around the model's forward pass or the loss.",
                evidence={"parameters": len(grads)}, place="loss")]
        if not torch.isfinite(loss):
            raise Skip("the loss is not finite (see non_finite)")
        by_module: dict[str, list[tuple[str, str]]] = {}
        zeroed = bool(zero_initialised(ctx.model))  # a zero-initialised layer downstream zeroes these on purpose
        # A bias with an all-zero gradient in a module whose weight gets one: the loss does not change when that
        # output shifts (the last bias of a siamese tower, cancelled in the difference of two passes).
        reached = {_module(name) for name, g in grads.items() if g is not None and bool((g != 0).any())}
        for name, g in grads.items():
            shift = name.endswith("bias") and _module(name) in reached
            state = "none" if g is None else "zero" if bool((g == 0).all()) and not zeroed and not shift else None
            if state:
                by_module.setdefault(_module(name), []).append((name, state))
        findings = _frozen_between_trained(self, ctx)
        if not by_module:
            return findings
        after = consumers(ctx.graph)
        for params in by_module.values():
            names = [n for n, _ in params]
            none = all(s == "none" for _, s in params)
            node = ctx.node_of_param(names[0])
            cut = _cut_after(ctx.graph, after, node)
            where = f" after {cut!r}" if cut else ""
            if none:
                message = (f"{', '.join(names)} get no gradient: " + (
                    f"the gradient is cut{where}." if cut else
                    "the module is skipped, or its output does not reach the loss (detach, no_grad, "
                    "a non-differentiable operation)."))
            else:
                message = f"{', '.join(names)} get an all-zero gradient{where}."
            findings.append(self.finding(
                "error" if none else "warning", message,
                "Make sure the layer's output reaches the loss through differentiable operations: no "
                "detach()/no_grad()/argmax/round in forward, no layer overwritten or skipped.",
                evidence={"parameters": len(names), "no_gradient": sum(s == "none" for _, s in params),
                          "all_zero": sum(s == "zero" for _, s in params)},
                place="parameter", where=names[0], node=cut or node))
        return findings


_WEIGHT_LAYERS = (nn.Linear, nn.modules.conv._ConvNd, nn.RNNBase)


def _frozen_between_trained(check: Check, ctx) -> list:
    """A weight layer left with requires_grad=False below a layer that trains: a freeze meant to be undone
    (the unfreeze cell never ran). A deliberate freeze is the input side (a backbone, the embeddings), most of
    the weight layers (a fine-tune), a layer beside a trainable branch on the same input (LoRA, adapters), or
    kept out of the optimizer; a layer frozen mid-stack while the layers before it train and the optimizer
    was handed it is none of those."""
    modules = dict(ctx.model.named_modules())
    layers = {path: list(m.parameters(recurse=False)) for path, m in modules.items()
              if isinstance(m, _WEIGHT_LAYERS) and list(m.parameters(recurse=False))}
    frozen = {path for path, ps in layers.items() if not any(p.requires_grad for p in ps)}
    if not frozen or 2 * len(frozen) >= len(layers):
        return []
    held = {id(p) for g in ctx.optimizer.param_groups for p in g["params"]} if ctx.optimizer is not None else None
    graph, after = ctx.graph, consumers(ctx.graph)
    nodes = {n.name: n for n in graph.nodes}

    def weight_layer(name):
        n = nodes.get(name)
        return n.target if n is not None and n.op == "call_module" and n.target in layers else None

    def reached(starts, skip) -> set[str]:
        seen, frontier = set(), list(starts)
        while frontier:
            name = frontier.pop()
            for nxt in after.get(name, []):
                if nxt not in seen and nxt != skip:
                    seen.add(nxt)
                    frontier.append(nxt)
        return seen

    trained_above: set[str] = set()  # nodes with a trainable weight layer upstream (or being one)
    findings = []
    for n in graph.nodes:
        upstream = any(i in trained_above for i in n.inputs)
        path = weight_layer(n.name)
        if upstream and path in frozen and (held is None or any(id(p) in held for p in layers[path])):
            below = reached([n.name], None)
            beside = {weight_layer(m) for m in reached(n.inputs, n.name) - below} - {None}
            if not beside - frozen:  # no trainable layer on a parallel branch of the same input
                findings.append(check.finding(
                    "warning", f"{path} is frozen (requires_grad=False) while the layers before it train"
                    + (" and the optimizer was given its parameters" if held is not None else "")
                    + ": a freeze left on by mistake?",
                    f"Re-enable its gradient ({path}.requires_grad_(True)), or keep frozen layers out of the "
                    "optimizer to say it is on purpose.",
                    evidence={"frozen_parameters": sum(p.numel() for p in layers[path])},
                    place="parameter", where=f"{path}.{next(iter(modules[path]._parameters))}", node=n.name))
        if upstream or (path is not None and path not in frozen):
            trained_above.add(n.name)
    return findings


def _module(parameter: str) -> str:
    return parameter.rsplit(".", 1)[0] if "." in parameter else ""


def _cut_after(graph, after, start: str) -> str | None:
    """The first non-differentiable operation downstream of ``start``, if any."""
    if start not in graph:
        return None
    seen, frontier = {start}, [start]
    while frontier:
        name = frontier.pop(0)
        node = graph.node(name)
        if name != start and kind_of(node) in _CUTS:
            return name
        for nxt in after.get(name, []):
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    return None


class Randomness(Check):
    """In eval mode the same input gives the same output; in training mode, the same under a fixed seed."""

    id, title = "randomness", "Randomness left on"
    cause = "randomness"

    def run(self, ctx):
        findings = []
        x = ctx.x
        stray = [n for n, m in ctx.model.named_modules() if not ctx.model.training and m.training
                 and isinstance(m, torch.nn.modules.dropout._DropoutNd | torch.nn.modules.batchnorm._BatchNorm)]
        if stray:
            findings.append(self.finding(
                "warning", f"The model is in eval mode but {', '.join(stray[:3])} are in training mode.",
                "Call model.eval() after any module's .train(), and do not set .training by hand.",
                evidence={"modules": len(stray)}, place="module", where=stray[0], node=ctx.node_of_module(stray[0])))
        passes = [  # (two recorded passes, severity, what differs, the change to try)
            (lambda: (ctx.record(x, seed=1), ctx.record(x, seed=2)), "error",
             "Two evaluations of the same input in eval mode differ",
             "Make {node!r} deterministic in eval mode: nn.Dropout instead of F.dropout(x) (which is on by "
             "default; pass training=self.training), no sampling in forward when not training."),
            (lambda: (ctx.record(x, train=True, seed=ctx.seed), ctx.record(x, train=True, seed=ctx.seed)),
             "warning", "Two training-mode passes under the same torch seed differ",
             "Draw the randomness at {node!r} from torch's generator (torch.rand*, not numpy or random), so "
             "that a fixed seed repeats a run."),
        ]
        for record, severity, what, change in passes:
            a, b = record()
            node = _first_difference(ctx.graph, a, b)
            if node is not None:
                findings.append(self.finding(
                    severity, f"{what}, from {node!r} on.", change.format(node=node),
                    evidence={"max_difference": _difference(ctx, a, b)}, place="node", where=node, node=node))
                break
        return findings


def _first_difference(graph, a: dict, b: dict) -> str | None:
    for n in graph.nodes:
        if n.name in a and n.name in b and a[n.name].shape == b[n.name].shape and not same_values(a[n.name], b[n.name]):
            return n.name
    return None


def _difference(ctx, a, b) -> float:
    out = ctx.output_node()
    if out in a and out in b:
        return float((a[out].float() - b[out].float()).abs().max())
    return float("nan")
