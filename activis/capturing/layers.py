"""Which values a capture taps, and how each becomes a row of neurons per instance.

Capture works by graph node: the chosen nodes get a tap inserted right after them in a copy of
the ``torch.fx`` graph (which also snapshots the value before any in-place operation further on
can change it). Modules inside an fx leaf module, and every layer of a model fx could not trace,
are tapped with forward hooks instead.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..graph import ComputationGraph
from ..store import LayerSpec, NonFinite, check_finite
from .masks import _Steps
from .options import CHANNEL_REDUCTIONS, CaptureError, _Options
from .pipeline import _Slot

FLOAT16_TINY = float(np.finfo(np.float16).tiny)  # smallest normal: below it float16 keeps fewer digits, or 0
# a float32 |x| read as an integer, minus 1 (unsigned): below this bound is a nonzero value below FLOAT16_TINY
_TINY_BOUND = np.float32(FLOAT16_TINY).view(np.uint32) - np.uint32(1)
# the largest float32 magnitude, read as an integer, that each storage dtype holds as a finite value
_FITS = {"float16": np.float32(np.finfo(np.float16).max).view(np.uint32), "float32": np.uint32(0x7F7FFFFF)}


def _scan(rows: torch.Tensor) -> tuple[int, int] | None:
    """(the largest magnitude as float32 bits, how many values float16 keeps with fewer digits or as 0)
    of float32 rows on the CPU, in one compiled pass; None for other rows."""
    if rows.dtype != torch.float32 or not rows.is_contiguous() or rows.device.type != "cpu":
        return None
    peak, tiny = _compiled_scan()(rows.detach().numpy().reshape(-1).view(np.uint32), _TINY_BOUND)
    return int(peak), int(tiny)


@functools.cache
def _compiled_scan():
    """`_tiny.scan`, imported (with numba) the first time a capture meets float32 rows, then looked up no more."""
    from ._tiny import scan

    return scan


def _count_tiny(rows: torch.Tensor) -> int:
    """How many values are nonzero but below float16's smallest normal (they lose digits, or become 0).

    Float32 rows are counted in the compiled pass of `_scan`: torch's abs, <, != and & with their
    four temporaries took a tenth of a small MLP's forward (more with two threads on a busy machine)."""
    scanned = _scan(rows)
    if scanned is None:
        return int(torch.count_nonzero((rows.abs() < FLOAT16_TINY) & (rows != 0)))
    return scanned[1]


@dataclass
class _Point:
    """Where a layer's value comes from: an fx node, or the n-th call of a module (hooks)."""

    name: str
    node: str | None  # graph node (for the store and the graph view)
    fx: bool
    module: str | None = None
    call: int | None = None  # which call of the module per forward; None: the last
    channels_first: bool = False  # a 3-D value (N, C, L) made by a 1-d convolution, norm or pool
    image_layout: str | None = None  # a 4-D value: "channels" (N, C, H, W), "channels_last" (N, H, W, C), unknown
    # a hooks graph records leaf modules: a block's value is judged by the last one run inside it,
    # when its shape per instance is the block's
    made_by: str | None = None
    made_shape: list[int] | None = None


def _resolve(graph: ComputationGraph, name: str) -> _Point:
    point = _locate(graph, name)
    source = point.made_by or point.node
    node = graph.node(source) if source is not None and source in graph else None
    point.image_layout = _image_layout(graph, node, graph.modules[point.module].type if point.module else None)
    return point


# modules that act on the last dimension: a 4-D value they make is (N, H, W, C)
LAST_DIMENSION = {"Linear", "LayerNorm", "linear", "layer_norm", "RMSNorm", "rms_norm"}


def _image_layout(graph: ComputationGraph, node, module_type: str | None) -> str | None:
    """Where a 4-D value keeps its channels, judged from what made it: a 2-d convolution, norm or pool
    (channels second), a Linear or a LayerNorm on the last dimension, or a permute that moved the
    channels there (channels last); looking back through operations that keep the shape."""
    if node is None:
        return None if module_type is None else "channels_last" if module_type in LAST_DIMENSION \
            else "channels" if module_type.endswith("2d") else None
    for _ in range(32):
        kind = graph.modules[node.target].type if node.op == "call_module" and node.target in graph.modules \
            else node.kind
        if kind.endswith("2d") or kind in ("conv2d", "max_pool2d", "avg_pool2d", "batch_norm"):
            return "channels"
        if kind in LAST_DIMENSION:
            return "channels_last"
        parent = graph.node(node.inputs[0]) if node.inputs and node.inputs[0] in graph else None
        if parent is None or parent.shape is None or node.shape is None or len(node.shape) != 4:
            return None
        if kind in ("permute", "permute.default", "transpose", "transpose.int") and parent.shape != node.shape:
            if parent.shape[1] == node.shape[3] and parent.shape[2:] == node.shape[1:3]:
                return "channels_last"
            if parent.shape[3] == node.shape[1] and parent.shape[1:3] == node.shape[2:]:
                return "channels"
            return None
        if parent.shape != node.shape:
            return None
        node = parent
    return None


def _locate(graph: ComputationGraph, name: str) -> _Point:
    by_target = [n for n in graph.nodes if n.op == "call_module" and n.target == name]
    if graph.method in ("fx", "export"):
        if name in graph and graph.node(name).op in ("call_module", "call_function", "call_method"):
            return _Point(name, name, True, channels_first=_channels_first(graph, graph.node(name)))
        if by_target:
            return _Point(name, by_target[-1].name, True, channels_first=_channels_first(graph, by_target[-1]))
        if name in graph.modules and name:
            inner = [n for n in graph.nodes_of_module(name) if n.capturable]
            if inner:
                return _Point(name, inner[-1].name, True, channels_first=_channels_first(graph, inner[-1]))
            if not graph.nodes_of_module(name):  # inside a module fx keeps whole: hook it
                return _Point(name, None, False, module=name, channels_first=_is_1d(graph.modules[name].type))
    else:
        if name in graph and graph.node(name).op == "call_module":
            node = graph.node(name)
            calls = [n for n in graph.nodes if n.op == "call_module" and n.target == node.target]
            return _Point(name, name, False, module=node.target, call=calls.index(node),
                          channels_first=_channels_first(graph, node))
        if name in graph.modules and name:
            if by_target:
                return _Point(name, by_target[-1].name, False, module=name,
                              channels_first=_channels_first(graph, by_target[-1]))
            inner = [n for n in graph.nodes_of_module(name) if n.capturable]
            if not inner:  # it did not run on the example
                return _Point(name, None, False, module=name, channels_first=_is_1d(graph.modules[name].type))
            return _Point(name, None, False, module=name, channels_first=_channels_first(graph, inner[-1]),
                          made_by=inner[-1].name, made_shape=list(inner[-1].shape[1:]))
    graph.resolve_layer(name)  # raises UnknownLayerError listing valid names and close matches
    raise CaptureError(f"Layer {name!r} has no output that can be captured.")


def _is_1d(module_type: str) -> bool:
    return module_type.endswith("1d")


def _channels_first(graph: ComputationGraph, node) -> bool:
    """Whether a 1-d convolution, norm or pool made this value, looking back through operations
    that keep its shape (a ReLU or a residual add after a Conv1d keeps the Conv1d's layout)."""
    for _ in range(16):
        if node.op == "call_module" and node.target in graph.modules and _is_1d(graph.modules[node.target].type):
            return True
        parent = graph.node(node.inputs[0]) if node.inputs and node.inputs[0] in graph else None
        if parent is None or parent.shape != node.shape:
            return False
        node = parent
    return False


def _describe(value, depth=0) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor{tuple(value.shape)} {str(value.dtype).replace('torch.', '')}"
    if isinstance(value, Mapping) and depth < 2:
        return "dict{" + ", ".join(f"{k!r}: {_describe(v, depth + 1)}" for k, v in value.items()) + "}"
    if isinstance(value, (tuple, list)) and depth < 2:
        return f"{type(value).__name__}(" + ", ".join(f"[{i}] {_describe(v, depth + 1)}"
                                                      for i, v in enumerate(value)) + ")"
    return type(value).__name__


def _select(value, element: list | None, what: str, option: str):
    for key in element or []:
        try:
            if isinstance(value, Mapping):
                value = value[key]
            elif isinstance(value, (tuple, list)):
                value = value[int(key)]
            elif isinstance(key, str):
                value = getattr(value, key)
            else:
                raise TypeError
        except (KeyError, IndexError, AttributeError, TypeError, ValueError):
            raise CaptureError(f"{what} has no element {key!r}: it is {_describe(value)}.") from None
    if not isinstance(value, torch.Tensor):
        raise CaptureError(f"{what} is {_describe(value)}, not one tensor; choose the element to keep with {option}.")
    return value


class _LayerPlan:
    """How one layer's value becomes a row of neurons; its spec is fixed by the first value seen."""

    def __init__(self, point: _Point, opts: _Options):
        self.point = point
        self.name = point.name
        self.element = opts.select.get(point.name)
        self.reduction = opts.reduce.get(point.name)
        self.layout = opts.layout.get(point.name)
        self.channel_reduction = opts.channel_reduction
        self.sequence_reduction = opts.sequence_reduction
        self.dtype = opts.dtype
        self.np_dtype = np.dtype(opts.dtype)
        self.spec: LayerSpec | None = None
        # a sequence or 1-d feature map with as many steps as the padding mask is reduced over the real ones;
        # None: no mask, or no steps (an image)
        self.masked: bool | None = None

    def tensor(self, value) -> torch.Tensor:
        if not isinstance(value, torch.Tensor) or self.element:
            value = _select(value, self.element, f"Layer {self.name!r}", f"select={{{self.name!r}: ...}}")
        if not value.is_floating_point():
            raise CaptureError(f"Layer {self.name!r} outputs {_describe(value)}: only floating-point values are "
                               "activations.")
        return value

    def derive(self, value: torch.Tensor, n: int) -> LayerSpec:
        if value.dim() == 0 or value.shape[0] != n:
            raise CaptureError(f"Layer {self.name!r} outputs {_describe(value)}: its first dimension is not the "
                               f"batch ({n} instances). Choose another layer (an RNN needs batch_first=True).")
        shape = [int(s) for s in value.shape[1:]]
        layout = self.layout
        if value.dim() <= 2:
            kind, reduction = "unit", "none"
            if self.reduction not in (None, "none"):
                raise CaptureError(f"Layer {self.name!r} outputs one vector per instance; reduce={self.reduction!r} "
                                   "does not apply to it.")
        else:
            layout = self.layout or self._layout_of(value)
            if layout in ("channels", "channels_last"):
                kind, reduction = "channel", self.reduction or self.channel_reduction
                if reduction not in CHANNEL_REDUCTIONS:
                    raise CaptureError(f"Layer {self.name!r} is a feature map (N, C, ...): reduce it by "
                                       f"{' or '.join(CHANNEL_REDUCTIONS)}, not {reduction!r}.")
            else:
                kind, reduction = "feature", self.reduction or self.sequence_reduction
                if value.dim() != 3:
                    raise CaptureError(f"Layer {self.name!r} of shape {tuple(value.shape)} is not a sequence "
                                       "(N, T, F).")
            if reduction == "none":
                kind = "unit"
        if layout == "channels_last" and value.dim() != 4:
            raise CaptureError(f"Layer {self.name!r} outputs {_describe(value)}: layout 'channels_last' is for "
                               "(N, H, W, C) feature maps; use 'channels' or 'sequence'.")
        last = kind == "channel" and layout == "channels_last"
        channels = shape[-1:] if last else shape[:1]
        neurons = int(np.prod(shape if reduction == "none" else channels if kind == "channel" else shape[-1:],
                              dtype=np.int64)) if shape else 1
        self.spec = LayerSpec(neurons=neurons, dtype=self.dtype, neuron_kind=kind, reduction=reduction,
                              shape=shape, node=self.point.node, element=self.element,
                              layout="channels_last" if last else None)
        return self.spec

    def _layout_of(self, value: torch.Tensor) -> str:
        made = self.point.made_shape
        judged = made is None or list(value.shape[1:]) == made  # the value is the one the layout was judged by
        if value.dim() == 3:
            return "channels" if self.point.channels_first and judged else "sequence"
        if value.dim() > 4:
            return "channels"
        if self.point.image_layout is None or not judged:
            raise CaptureError(f"Layer {self.name!r} outputs {_describe(value)}, and the graph does not tell whether "
                               "it is (N, C, H, W) or channels-last (N, H, W, C); say which with layout="
                               f"{{{self.name!r}: 'channels'}} or {{{self.name!r}: 'channels_last'}}.")
        return self.point.image_layout

    def rows(self, value: torch.Tensor, steps: _Steps | None = None) -> torch.Tensor:
        """(n, neurons) view or reduction of one batch's value (over the real ``steps`` of a padded sequence)."""
        spec = self.spec
        n = value.shape[0]
        if spec.reduction == "none" or spec.neuron_kind == "unit":
            same = list(value.shape[1:]) == spec.shape
        else:  # positions may vary between batches (image sizes, sequence lengths); neurons may not
            same = value.dim() == len(spec.shape) + 1 and self._neurons_of(value) == spec.neurons
        if not same:
            raise CaptureError(f"Layer {self.name!r} changed shape from {spec.shape} to {list(value.shape[1:])} "
                               "per instance between batches.")
        if spec.reduction == "none" or value.dim() <= 2:
            return value.reshape(n, -1)
        # a sequence (N, T, F) or a 1-d feature map (N, C, L) has steps that a padding mask may tell apart
        axis = 1 if spec.neuron_kind == "feature" else 2 if value.dim() == 3 and spec.layout is None else None
        if steps is not None and axis is not None and self.masked is None:  # fixed on the first batch, like the spec
            self.masked = value.shape[axis] == steps.length
        if self.masked:
            if value.shape[axis] != steps.length:
                raise CaptureError(f"Layer {self.name!r} had as many steps as the padding mask on the first "
                                   f"instances, but has {value.shape[axis]} for a mask of {steps.length} on the "
                                   f"batch from row {steps.row}: its steps are not the inputs' steps. Capture it "
                                   f"with reduce={{{self.name!r}: 'none'}}, or pass sequence_mask=False.")
            return steps.reduce(value if axis == 1 else value.transpose(1, 2), spec.reduction)
        if spec.neuron_kind == "channel":
            if spec.layout == "channels_last":
                value = value.movedim(-1, 1)
            # over the flattened positions: torch's sum and amax along one inner axis are 2-3x faster
            # here than mean or amax over several axes
            positions = value.flatten(2)
            if spec.reduction == "max":
                return positions.amax(dim=-1)
            wide = torch.float32 if value.dtype in (torch.float16, torch.bfloat16) else None
            return positions.sum(dim=-1, dtype=wide) / positions.shape[-1]
        if spec.reduction == "mean":
            return value.mean(dim=1)
        if spec.reduction == "max":
            return value.amax(dim=1)
        return value[:, 0] if spec.reduction == "first" else value[:, -1]

    def check(self, stored: np.ndarray, rows: torch.Tensor) -> NonFinite | None:
        """What `check_finite` finds in one batch's ``stored`` values, and float16's underflow in ``rows``.

        Float32 rows on the CPU take one compiled pass over ``rows``: the stored values are looked at
        only when some value does not fit the storage dtype (NaN, Inf or too large), the rare case."""
        scanned = _scan(rows)
        if scanned is None:
            found = check_finite(stored, lambda: rows.detach().float().cpu().numpy())
            tiny = _count_tiny(rows) if self.dtype == "float16" and rows.dtype != torch.float16 else 0
        else:
            peak, tiny = scanned
            found = check_finite(stored, lambda: rows.detach().numpy()) if peak > _FITS[self.dtype] else None
            tiny = tiny if self.dtype == "float16" else 0
        if tiny:
            found = found or NonFinite(per_row=np.zeros(len(stored), dtype=np.int32))
            found.underflow = tiny
        return found

    def _neurons_of(self, value) -> int:
        first = self.spec.neuron_kind == "channel" and self.spec.layout != "channels_last"
        return int(value.shape[1] if first else value.shape[-1])


@dataclass
class _Current:
    """The slot the taps write into: one object that the taps and the session share."""

    slot: _Slot | None = None
    steps: _Steps | None = None  # the batch's real steps, when its inputs are padded


class _Tap(nn.Module):
    """Called with a layer's value right where the model computes it; copies it into the current slot.

    Called once per layer and batch, so it does only that: ``__call__`` is `forward` itself (no
    module hooks to look up), and the checks of the stored values are one compiled pass."""

    def __init__(self, plan: _LayerPlan, current: _Current):
        super().__init__()
        self.plan = plan
        self.current = current

    def forward(self, value):
        plan, slot = self.plan, self.current.slot
        value = plan.tensor(value)
        if plan.spec is None:
            plan.derive(value, slot.n)
        rows = plan.rows(value, self.current.steps)
        stored = slot.target(plan.name, plan.spec.neurons, plan.np_dtype)
        torch.from_numpy(stored).copy_(rows)
        slot.note(plan.name, plan.check(stored, rows))

    __call__ = forward


def _fx_runner(graph: ComputationGraph, taps: list[tuple[str, _Tap]]) -> nn.Module:
    """A copy of the traced graph with each (node name, tap) tap called right after its node."""
    import torch.fx as fx

    gm = graph.graph_module
    new = fx.Graph()
    values: dict = {}
    result = new.graph_copy(gm.graph, values)
    new.output(result)
    new._codegen = gm.graph._codegen  # an exported module's: takes and returns the model's own structures
    modules: dict[str, object] = {}
    by_name = {n.name: n for n in new.nodes}
    for i, (node_name, tap) in enumerate(taps):
        node = by_name[node_name]
        target = f"_activis_tap_{i}"
        modules[target] = tap
        with new.inserting_after(node):
            new.call_module(target, (node,))
    for node in new.nodes:
        if node.target in modules:
            continue
        if node.op == "call_module":
            modules[node.target] = gm.get_submodule(node.target)
        elif node.op == "get_attr":
            owner, _, attr = node.target.rpartition(".")
            modules[node.target] = getattr(gm.get_submodule(owner) if owner else gm, attr)
    return fx.GraphModule(modules, new, class_name=f"{graph.model_type}Capture")


def _hook(module: nn.Module, tap: _Tap, call: int | None):
    """A forward hook that taps the ``call``-th call (or every call: the last one wins)."""
    calls = [0]

    def hook(_module, _inputs, output):
        index = calls[0]
        calls[0] += 1
        if call is None or index == call:
            tap(output)

    handle = module.register_forward_hook(hook)
    handle.calls = calls
    return handle

