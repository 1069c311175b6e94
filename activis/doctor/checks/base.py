"""The common shape of a check: an id, a title, and ``run(ctx) -> findings``; `Skip` when it cannot run."""

from __future__ import annotations

import torch

from ..findings import Finding


class Skip(Exception):  # noqa: N818 - a check is skipped, not failed
    """Raised by a check that cannot run on this model or data; the message says why."""


class Check:
    """One before-training check. Subclasses set ``id``, ``title`` and implement `run`."""

    id = ""
    title = ""
    cause = ""  # what is wrong when this check fires (`activis.doctor.diagnosis.CAUSES`)

    def run(self, ctx) -> list[Finding]:
        raise NotImplementedError

    def finding(self, severity: str, message: str, change: str, *, evidence=None, place: str = "model",
                where: str = "", node: str | None = None, cause: str = "") -> Finding:
        return Finding(check=self.id, severity=severity, title=self.title, message=message,
                       evidence=dict(evidence or {}), place=place, where=where, node=node, change=change,
                       cause=cause or self.cause)


def kind_of(node) -> str:
    """A node's operation, lower case and without the in-place underscore: "relu", "linear", "exp"."""
    return node.kind.lower().rstrip("_")


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal, counting NaN as equal to NaN (a NaN is a finding of its own, not randomness)."""
    if a.shape != b.shape:
        return False
    return bool(((a == b) | (a.isnan() & b.isnan())).all()) if a.dtype.is_floating_point else torch.equal(a, b)


def consumers(graph) -> dict[str, list[str]]:
    result: dict[str, list[str]] = {n.name: [] for n in graph.nodes}
    for n in graph.nodes:
        for src in n.inputs:
            result.setdefault(src, []).append(n.name)
    return result


def reachable_from_input(graph) -> set[str]:
    """The nodes whose value depends on the model's input (not on parameters or constants alone)."""
    reached = {n.name for n in graph.nodes if n.op == "placeholder"}
    for n in graph.nodes:
        if any(i in reached for i in n.inputs):
            reached.add(n.name)
    return reached


def zero_initialised(model) -> set[str]:
    """The modules with a weight or scale all zeros on purpose (a zero-initialised head, a residual branch's last
    BatchNorm scale, ReZero's residual gates, LoRA's B): what they hide from the input and the gradient is their
    design, not a bug."""
    return {path for path, m in model.named_modules()
            if any(name != "bias" and p.numel() and not bool(p.detach().abs().sum())
                   for name, p in m.named_parameters(recurse=False))}
