"""Per-sample gradients of convolutions and the Gauss-Newton diagonal: the former kernels against
the current ones, on CPU, ratios measured in the same run.

    python benchmarks/bench_persample.py [--rounds 10] [--threads 1]

The models are bench_cockpit.py's (MLP 784-512-256-10 and the small CNN: 5x5 convolutions 1->16 on
28 x 28 and 16->32 on 14 x 14, batch 128, on the same MNIST-like digits). Three figures:

1. per-sample weight and bias gradients of each convolution (what the economy configuration needs
   every step): im2col (``F.unfold``) + einsum, the former `layer_grads`, against `layer_grads`
   (the faster, timed on first use, of a grouped weight-gradient kernel with the batch folded into
   the groups and im2col), for the CNN's layers and for three other shapes;
2. every sample's loss-Hessian square root (cross-entropy, 10 classes): C batched Hessian-vector
   products + eigh, the former `_loss_hessian_roots`, against the verified closed form;
3. the exact Gauss-Newton diagonal of one step: the former `ggn_diagonal` (its code is kept here:
   eigh roots, one vmapped backward of all columns, im2col per-layer sums of stacked columns)
   against `ggn_diagonal`, each also against a plain training step.

Candidates and baselines alternate within each round so that the load of a shared machine hits
both alike; medians are compared.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F
from bench_cockpit import BATCH, arguments, cnn, digits_28, mlp
from torch import nn

from activis.cockpit import hessian
from activis.cockpit.taps import Taps, layer_grads


def unfold_layer_grads(module, a, g):
    """The former `layer_grads` of a Conv2d (zero numeric padding): im2col, then one einsum."""
    if isinstance(module, nn.Linear):
        return layer_grads(module, a, g)
    lead = g.shape[: g.dim() - a.dim()]
    B = a.shape[0]
    cols = F.unfold(a, module.kernel_size, dilation=module.dilation, padding=module.padding,
                    stride=module.stride)
    cols = cols.reshape(B, module.groups, -1, cols.shape[-1])
    gg = g.reshape(*lead, B, module.groups, -1, cols.shape[-1])
    out = {"weight": torch.einsum("...bgop,bgkp->...bgok", gg, cols).reshape(*lead, B, *module.weight.shape)}
    if module.bias is not None:
        out["bias"] = gg.sum(-1).reshape(*lead, B, -1)
    return out


def timed(f) -> float:
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def alternate(candidates: dict, rounds: int, warmup: int = 2) -> dict[str, float]:
    """Median seconds of each callable, called in turn every round."""
    times = {name: [] for name in candidates}
    for r in range(warmup + rounds):
        for name, f in candidates.items():
            t = timed(f)
            if r >= warmup:
                times[name].append(t)
    return {name: statistics.median(ts) for name, ts in times.items()}


class Step:
    """One model on one batch: a plain training step, and a tapped forward for the GGN diagonal."""

    def __init__(self, factory, x, y):
        torch.manual_seed(0)
        self.model, self.x, self.y = factory(), x, y
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)

    def plain(self):
        self.opt.zero_grad()
        F.cross_entropy(self.model(self.x), self.y).backward()
        self.opt.step()

    def tapped(self):
        """A forward pass with taps, kept: the GGN diagonal runs on its graph (retained)."""
        taps = Taps(self.model)
        return taps, F.cross_entropy(self.model(self.x), self.y, reduction="none")


# other shapes, random data: where im2col is the faster kernel, `layer_grads` must not be slower
SHAPES = {
    "ResNet stage 4: 128 -> 128, 3x3, 8 x 8": (lambda: nn.Conv2d(128, 128, 3, padding=1), (128, 128, 8, 8)),
    "downsampling: 64 -> 128, 3x3, stride 2, 16 x 16": (lambda: nn.Conv2d(64, 128, 3, stride=2, padding=1),
                                                          (128, 64, 16, 16)),
    "depthwise: 64 channels, 3x3, 16 x 16": (lambda: nn.Conv2d(64, 64, 3, padding=1, groups=64),
                                             (128, 64, 16, 16)),
}


def compare_conv_grads(label, module, a, g, rounds):
    old, new = unfold_layer_grads(module, a, g), layer_grads(module, a, g)  # the first call times the kernels
    err = max(float((old[k] - new[k]).abs().max() / old[k].abs().max()) for k in old)
    t = alternate({"former": lambda: unfold_layer_grads(module, a, g), "now": lambda: layer_grads(module, a, g)},
                  rounds)
    print(f"  {label:<50} former {t['former'] * 1e3:6.1f}   now {t['now'] * 1e3:6.1f}   "
          f"{t['former'] / t['now']:5.1f}x faster   (max relative difference {err:.1e})")


def bench_conv_grads(x, y, rounds):
    step = Step(cnn, x, y)
    taps, losses = step.tapped()
    taps.armed = True  # keep the output gradients of this backward
    losses.mean().backward()
    print("\n1. per-sample conv gradients, batch 128 (median ms; ratio former / now)")
    for layer in taps.layers:
        if isinstance(layer.module, nn.Conv2d):
            m, call = layer.module, layer.calls[0]
            label = f"CNN layer {layer.name}: {m.in_channels} -> {m.out_channels}, 5x5, {call.input.shape[-1]} x " \
                    f"{call.input.shape[-1]}"
            compare_conv_grads(label, m, call.input, call.grad, rounds)
    taps.remove()
    torch.manual_seed(0)
    for label, (factory, shape) in SHAPES.items():
        module = factory()
        a = torch.randn(shape)
        compare_conv_grads(label, module, a, torch.randn(module(a).shape), rounds)


def former_roots(losses, output):
    """The former `_loss_hessian_roots`: C batched Hessian-vector products, then eigh."""
    (first,) = torch.autograd.grad(losses.sum(), output, create_graph=True)
    return hessian._eigen_roots(first, output)


def bench_roots(x, y, rounds):
    step = Step(mlp, x, y)
    output = step.model(x)
    losses = F.cross_entropy(output, y, reduction="none")
    t = alternate({"former": lambda: former_roots(losses, output),
                   "now": lambda: hessian._loss_hessian_roots(losses, output),
                   "plain": step.plain}, rounds)
    print("\n2. loss-Hessian roots, cross-entropy, 10 classes, batch 128 (median ms)")
    print(f"  former (C HVPs + eigh) {t['former'] * 1e3:6.2f}   now (closed form, verified) "
          f"{t['now'] * 1e3:6.2f}   {t['former'] / t['now']:5.1f}x faster   "
          f"(MLP plain step {t['plain'] * 1e3:.1f})")


def former_layer_ggn(module, calls, signs):
    """The former `_layer_ggn`: per-sample gradients of chunks of columns through im2col, stacked,
    squared and weighted by the signs."""
    if len(calls) == 1 and isinstance(module, nn.Linear) and calls[0][0].input.dim() == 2:
        call, deltas = calls[0]
        weighted = (deltas.square() * signs[:, :, None]).sum(0)
        out = {"weight": weighted.T @ call.input.square()}
        if module.bias is not None:
            out["bias"] = weighted.sum(0)
        return out
    out = {}
    B = signs.shape[1]
    step = max(1, (1 << 24) // max(1, B * module.weight.numel()))
    for c in range(0, signs.shape[0], step):
        parts = [unfold_layer_grads(module, call.input, deltas[c:c + step]) for call, deltas in calls]
        for kind in parts[0]:
            g = sum(part[kind] for part in parts)
            w = signs[c:c + step].reshape(*signs[c:c + step].shape, *([1] * (g.dim() - 2)))
            out[kind] = out.get(kind, 0) + (g.square() * w).sum((0, 1))
    return out


def former_ggn_diagonal(taps, params, losses):
    """The former `ggn_diagonal` (every parameter in a tapped layer): C Hessian-vector products +
    eigh for the roots, all columns in one vmapped backward, `former_layer_ggn` per layer."""
    output = taps.output
    (first,) = torch.autograd.grad(losses.sum(), output, create_graph=True)
    roots, signs = hessian._eigen_roots(first, output)
    roots, signs = roots.permute(2, 0, 1), signs.T
    calls = [(layer, call) for layer in taps.layers for call in layer.calls]
    deltas = torch.autograd.grad(output, [c.output for _, c in calls], roots, retain_graph=True,
                                 is_grads_batched=True, allow_unused=True, materialize_grads=True)
    per_layer = {}
    for layer in taps.layers:
        mine = [(c, d) for (lay, c), d in zip(calls, deltas) if lay is layer]
        per_layer[id(layer)] = former_layer_ggn(layer.module, mine, signs)
    return [per_layer[id(taps.owner[id(p)][0])][taps.owner[id(p)][1]] / output.shape[0] for p in params]


def bench_ggn(name, factory, x, y, rounds):
    step, plain = Step(factory, x, y), Step(factory, x, y)  # the plain forwards must not reach the taps
    taps, losses = step.tapped()
    params = list(step.model.parameters())
    names = [n for n, _ in step.model.named_parameters()]

    def ggn():
        return hessian.ggn_diagonal(taps, params, names, losses, chunk_size=32)

    old, new = former_ggn_diagonal(taps, params, losses), ggn()
    err = max(float((a - b).abs().max() / a.abs().max()) for a, b in zip(old, new))
    t = alternate({"former": lambda: former_ggn_diagonal(taps, params, losses), "now": ggn,
                   "plain": plain.plain}, rounds)
    print(f"  {name}: plain step {t['plain'] * 1e3:6.1f}   former {t['former'] * 1e3:6.1f} "
          f"({t['former'] / t['plain']:5.2f}x a step)   now {t['now'] * 1e3:6.1f} "
          f"({t['now'] / t['plain']:5.2f}x a step)   {t['former'] / t['now']:5.1f}x faster   "
          f"(max relative difference {err:.1e})")
    taps.remove()


def main():
    args = arguments(__doc__, rounds=10)
    x, y = digits_28(1)[0]
    assert x.shape[0] == BATCH
    bench_conv_grads(x, y, args.rounds)
    bench_roots(x, y, args.rounds)
    print("\n3. exact Gauss-Newton diagonal of one step (median ms)")
    bench_ggn("MLP", mlp, x, y, args.rounds)
    bench_ggn("CNN", cnn, x, y, args.rounds)


if __name__ == "__main__":
    main()
