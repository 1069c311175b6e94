"""Taps on a model: the layer inputs and output gradients the backward pass computes anyway.

For a Linear or Conv layer the per-sample gradient of the loss l_i is built from the layer's input
a_i and the gradient δ_i of l_i with respect to the layer's output; autograd hands us δ_i / B
for the mean loss. Forward hooks keep a reference to each call's input and register a tensor hook
on its output (before any in-place op can touch it); the tensor hook keeps the output gradient
while a tracked backward runs. Parameters outside such layers get their per-sample gradients from
``torch.func.vmap(grad(...))`` over a per-sample re-run of the model (`fallback_grads`).
"""

from __future__ import annotations

import contextvars
import functools
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .persample import Dense, Outer


class Unavailable(RuntimeError):
    """A quantity cannot be computed for this model or step; the message says why."""


_TAPPED = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


@dataclass
class Call:
    """One call of a tapped layer: its input, output and (after backward) output gradient."""

    input: torch.Tensor
    output: torch.Tensor
    version: int  # the output's version counter when recorded: a later in-place op changes it
    grad: torch.Tensor | None = None


@dataclass
class Layer:
    module: nn.Module
    name: str
    calls: list[Call] = field(default_factory=list)


def _conv_input(module: nn.Module, a: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
    """The call's input and the zero padding that make the layer a plain convolution, as the
    module's own forward does: other padding modes and uneven 'same' padding pad the input first."""
    dims = len(module.kernel_size)
    if module.padding == "valid":
        return a, (0,) * dims
    uneven = module.padding == "same" and any(d * (k - 1) % 2 for d, k in zip(module.dilation, module.kernel_size))
    if module.padding_mode != "zeros" or uneven:
        mode = "constant" if module.padding_mode == "zeros" else module.padding_mode
        return F.pad(a, module._reversed_padding_repeated_twice, mode=mode), (0,) * dims
    if module.padding == "same":
        return a, tuple(d * (k - 1) // 2 for d, k in zip(module.dilation, module.kernel_size))
    return a, tuple(module.padding)


def _tappable(module: nn.Module) -> bool:
    return isinstance(module, _TAPPED) and any(p.requires_grad for p in module.parameters(False))


def _grouped_weight_grads(module: nn.Module, a: torch.Tensor, padding: tuple, g: torch.Tensor) -> torch.Tensor:
    """The batch folded into the convolution's groups: one weight-gradient kernel call over a
    (1, B * in, ...) input with B * groups groups computes every sample's gradient at once, without
    the unfolded input that im2col writes (kernel-size times the input)."""
    B, weight = a.shape[0], module.weight
    folded = weight.new_empty(()).expand(B * weight.shape[0], *weight.shape[1:])  # only its shape is read
    _, grads, _ = torch.ops.aten.convolution_backward(
        g.reshape(1, -1, *g.shape[2:]), a.reshape(1, -1, *a.shape[2:]), folded, None, module.stride,
        padding, module.dilation, False, (0,) * len(padding), B * module.groups, (False, True, False))
    return grads.reshape(B, *weight.shape)


def _unfold(a: torch.Tensor, kernel: tuple, dilation: tuple, padding: tuple, stride: tuple) -> torch.Tensor:
    """``F.unfold`` (B, C * kh * kw, positions) as one copy of a strided view of the padded input:
    2-4x faster than im2col on a CPU (measured: 0.8 against 3.9 ms for 1 -> 16 channels on 28 x 28)."""
    if any(padding):
        a = F.pad(a, (padding[1], padding[1], padding[0], padding[0]))
    B, C, H, W = a.shape
    (kh, kw), (dh, dw), (sh, sw) = kernel, dilation, stride
    oh, ow = (H - dh * (kh - 1) - 1) // sh + 1, (W - dw * (kw - 1) - 1) // sw + 1
    sb, sc, sy, sx = a.stride()
    view = a.as_strided((B, C, kh, kw, oh, ow), (sb, sc, sy * dh, sx * dw, sy * sh, sx * sw))
    return view.reshape(B, C * kh * kw, oh * ow)


def _unfolded_weight_grads(module: nn.Module, a: torch.Tensor, padding: tuple, g: torch.Tensor) -> torch.Tensor:
    """im2col, then one batched product per sample and group (Conv1d and Conv2d only)."""
    conv1d = a.dim() == 3

    def pair(values, one):  # a Conv1d is a Conv2d with a kernel of height one
        return (one, values[0]) if conv1d else tuple(values)

    if conv1d:
        a, g = a.unsqueeze(2), g.unsqueeze(2)
    B, groups = a.shape[0], module.groups
    cols = _unfold(a, pair(module.kernel_size, 1), pair(module.dilation, 1), pair(padding, 0),
                   pair(module.stride, 1))  # (B, in * kernel size, positions)
    cols = cols.reshape(B, groups, -1, cols.shape[-1])
    grads = torch.einsum("bgop,bgkp->bgok", g.reshape(B, groups, -1, cols.shape[-1]), cols)
    return grads.reshape(B, *module.weight.shape)


# geometry -> the faster of the two kernels for it, found by timing both on first use
_FASTER: dict[tuple, object] = {}


def _conv_weight_grads(module: nn.Module, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Per-sample weight gradients (B, *weight.shape) of one convolution call from its output gradient.

    Two exact kernels, and which is faster depends on the shapes and the machine (one CPU thread:
    the grouped kernel is 3x faster for 16 -> 32 channels, 5x5, on 14 x 14, and 15x for a depthwise
    convolution; im2col is 2x faster for 128 -> 128 channels, 3x3, on 8 x 8). The first call of a
    geometry times both and keeps the faster; Conv3d has no im2col.
    """
    a, padding = _conv_input(module, a)
    if a.dim() == 5:
        return _grouped_weight_grads(module, a, padding, g)
    # batch and input sizes rounded up to powers of two: inputs of varying length (sequences, the last
    # batch of an epoch) share a few timings instead of timing both kernels at every new size
    sizes = tuple(1 << (n - 1).bit_length() for n in (a.shape[0], *a.shape[2:]))
    key = (sizes, tuple(module.weight.shape), tuple(module.stride), padding, tuple(module.dilation),
           module.groups, a.dtype, a.device)
    kernel = _FASTER.get(key)
    if kernel is not None:
        return kernel(module, a, padding, g)
    timings = {}
    for _ in range(3):  # alternating, the best of three each: a burst of load on a shared machine hits both
        for kernel in (_grouped_weight_grads, _unfolded_weight_grads):
            start = time.perf_counter()
            result = kernel(module, a, padding, g)
            if result.is_cuda:
                torch.cuda.synchronize(result.device)
            timings[kernel] = min(timings.get(kernel, float("inf")), time.perf_counter() - start)
    _FASTER[key] = min(timings, key=timings.get)
    return result


def layer_grads(module: nn.Module, a: torch.Tensor, g: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-sample gradients of one call, materialised: ``{"weight": (*lead, B, *shape), "bias": ...}``.

    ``a`` is the call's input (B, ...); ``g`` an output gradient with any leading dimensions before
    the batch (the GGN diagonal passes one per output column). The tensors are fresh: the caller may
    overwrite them.
    """
    lead = g.shape[: g.dim() - a.dim()]
    B = a.shape[0]
    out = {}
    if isinstance(module, nn.Linear):
        a3 = a.reshape(B, -1, a.shape[-1])
        g3 = g.reshape(*lead, B, -1, g.shape[-1])
        out["weight"] = torch.einsum("...bto,bti->...boi", g3, a3)
        bias = g3.sum(-2)
    else:
        # one kernel call per leading index: folding the columns into the output channels as well
        # makes the grouped kernel twice as slow (measured)
        weights = [_conv_weight_grads(module, a, column) for column in g.reshape(-1, *g.shape[len(lead):])]
        out["weight"] = (weights[0] if len(weights) == 1 else torch.stack(weights)).reshape(*lead, *weights[0].shape)
        bias = g.flatten(len(lead) + 2).sum(-1)
    if module.bias is not None:
        out["bias"] = bias
    return out


class Taps:
    """Hooks on a model that keep, per forward, what the instruments need from the backward pass."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.layers: list[Layer] = []
        self.owner: dict[int, tuple[Layer, str]] = {}  # id(param) -> (layer, "weight" | "bias")
        self.args: tuple = ()
        self.kwargs: dict = {}
        self.output = None
        self.output_grad: torch.Tensor | None = None
        self.armed = False  # keep output gradients (a tracked backward is running)
        self.recording = True  # off while the fallback re-runs the model per sample
        self._handles = [
            model.register_forward_pre_hook(self._on_model_input, with_kwargs=True),
            model.register_forward_hook(self._on_model_output),
        ]
        for name, module in model.named_modules():
            if _tappable(module):
                layer = Layer(module, name)
                self.layers.append(layer)
                for kind in ("weight", "bias"):
                    p = getattr(module, kind, None)
                    if isinstance(p, nn.Parameter) and p.requires_grad:
                        self.owner[id(p)] = (layer, kind)
                self._handles.append(module.register_forward_hook(functools.partial(self._on_call, layer)))

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self.clear()

    def clear(self) -> None:
        for layer in self.layers:
            layer.calls = []
        self.args, self.kwargs, self.output, self.output_grad = (), {}, None, None

    def _active(self) -> bool:
        return self.recording and torch.is_grad_enabled()

    def _on_model_input(self, _module, args, kwargs):
        if self._active():
            self.clear()
            self.args, self.kwargs = args, kwargs

    def _on_model_output(self, _module, _args, out):
        if self._active() and isinstance(out, torch.Tensor) and out.requires_grad:
            self.output = out
            out.register_hook(self._keep_output_grad)

    def _keep_output_grad(self, grad):
        if self.armed:
            self.output_grad = grad.detach()

    def _on_call(self, layer: Layer, _module, inputs, output):
        if not self._active() or not isinstance(output, torch.Tensor) or not output.requires_grad:
            return
        call = Call(inputs[0].detach(), output, output._version)
        layer.calls.append(call)
        output.register_hook(functools.partial(self._keep_grad, call))

    def _keep_grad(self, call: Call, grad):
        if self.armed:
            call.grad = grad.detach() if call.grad is None else call.grad + grad.detach()

    # ------------------------------------------------------------ per-sample gradients
    def per_sample(self, params: list[torch.Tensor], batch_size: int) -> list[Outer | Dense | None]:
        """Per-sample gradients of the mean loss's samples for every tapped parameter (None elsewhere)."""
        result: list[Outer | Dense | None] = [None] * len(params)
        cache: dict[int, dict] = {}
        for index, p in enumerate(params):
            if id(p) not in self.owner:
                continue
            layer, kind = self.owner[id(p)]
            calls = layer.calls
            if not calls or any(c.grad is None for c in calls):
                raise Unavailable(f"layer {layer.name!r} saw no gradient in this backward pass; "
                                  "was the loss computed from this forward pass?")
            if any(c.input.shape[0] != batch_size for c in calls):
                raise Unavailable(f"layer {layer.name!r} received {calls[0].input.shape[0]} rows, "
                                  f"not the batch size {batch_size}")
            single = len(calls) == 1 and calls[0].input.dim() == 2 and isinstance(layer.module, nn.Linear)
            if single and kind == "weight":
                result[index] = Outer(calls[0].grad * batch_size, calls[0].input)
                continue
            if single:  # the bias of a Linear layer: its per-sample gradients are the output gradients
                result[index] = Dense(calls[0].grad * batch_size)
                continue
            if id(layer) not in cache:  # summed over the calls and scaled in place: fresh tensors
                parts = [layer_grads(layer.module, c.input, c.grad) for c in calls]
                for part in parts[1:]:
                    for k, g in part.items():
                        parts[0][k] += g
                cache[id(layer)] = {k: g.mul_(batch_size) for k, g in parts[0].items()}
            result[index] = Dense(cache[id(layer)][kind])
        return result


_RERUN: contextvars.ContextVar[bool] = contextvars.ContextVar("activis_per_sample_rerun", default=False)


def rerunning() -> bool:
    """True while `fallback_grads` re-runs the model under ``torch.func.vmap``: forward hooks that keep
    state across calls (the doctor's) must skip this pass, since it is no training step and a tensor kept
    from inside vmap breaks the next real forward ("your tensor may have escaped...")."""
    return _RERUN.get()


def fallback_grads(model: nn.Module, names: list[str], args: tuple, output_grad: torch.Tensor,
                   chunk_size: int) -> dict[str, torch.Tensor]:
    """Per-sample gradients of the named parameters with ``torch.func.vmap(grad(...))``.

    Each sample's gradient is that of ``output_gradient_i · model(x_i)``: with the loss's output
    gradient held fixed this is exactly the gradient of l_i, and no loss function is needed.
    """
    from torch.func import functional_call, grad, vmap

    batch = output_grad.shape[0]
    params = {n: p.detach() for n, p in model.named_parameters()}
    buffers = dict(model.named_buffers())
    wanted = {n: params[n] for n in names}
    in_dims = tuple(0 if isinstance(x, torch.Tensor) and x.dim() > 0 and x.shape[0] == batch else None
                    for x in args)

    def sample_objective(trainable, sample_args, go):
        inputs = tuple(x.unsqueeze(0) if d == 0 else x for x, d in zip(sample_args, in_dims))
        out = functional_call(model, ({**params, **trainable}, buffers), inputs)
        return (out.squeeze(0) * go).sum()

    per_sample = vmap(grad(sample_objective), in_dims=(None, in_dims, 0), chunk_size=chunk_size)
    token = _RERUN.set(True)
    try:
        return per_sample(wanted, tuple(x.detach() if isinstance(x, torch.Tensor) else x for x in args),
                          output_grad)
    finally:
        _RERUN.reset(token)
