"""Curvature of the mean batch loss: Hessian-vector products, the top eigenvalue, the diagonal.

* `HessianOperator`: products with the Hessian through the gradient's graph (double backward), the
  graph the user keeps with ``loss.backward(create_graph=True)``.
* `power_iteration` is the reference's; `lanczos` (``scipy.sparse.linalg.eigsh``, which='LA')
  is the accurate option: power iteration finds the eigenvalue of largest magnitude and stops on
  a loose criterion, so it can sit several percent below lambda_max.
* The Hessian diagonal, exactly where it can be had: the Gauss-Newton diagonal for networks that
  are piecewise linear in every parameter (there the two diagonals are equal), the full Hessian
  one column at a time for small models; otherwise a Hutchinson estimate, labelled as such.
"""

from __future__ import annotations

import math
import operator
import warnings

import numpy as np
import torch
from torch import nn

from .fused import inner_and_square
from .taps import Taps, Unavailable, fallback_grads, layer_grads


class HessianOperator:
    """Products with the Hessian of the mean batch loss w.r.t. the tracked parameters."""

    def __init__(self, params: list[torch.Tensor], grads: list[torch.Tensor]):
        if not all(g is not None and g.requires_grad for g in grads):
            raise Unavailable("the gradient carries no graph: call "
                              "loss.backward(create_graph=cockpit.create_graph(step)) in a tracked step")
        self.params, self.grads = params, grads
        self.dim = sum(p.numel() for p in params)
        self.products = 0

    def matvec(self, vecs: list[torch.Tensor]) -> list[torch.Tensor]:
        self.products += 1
        return list(torch.autograd.grad(self.grads, self.params, vecs, retain_graph=True))

    def split(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """Views of one flat vector shaped like the parameters."""
        return [c.view(p.shape) for c, p in zip(flat.split([p.numel() for p in self.params]), self.params)]

    def flat_matvec(self, flat: torch.Tensor) -> torch.Tensor:
        """H @ flat for one flat vector (what scipy's Lanczos works on)."""
        return torch.cat([h.reshape(-1) for h in self.matvec(self.split(flat))])

    def matmat(self, mats: list[torch.Tensor]) -> list[torch.Tensor]:
        """Products with k vectors at once: ``mats[p]`` has shape (k, *param.shape)."""
        self.products += mats[0].shape[0]
        return list(torch.autograd.grad(self.grads, self.params, mats, retain_graph=True,
                                        is_grads_batched=True))


def power_iteration(op: HessianOperator, start: list[torch.Tensor] | None = None, *, maxiter: int = 100,
                    rtol: float = 1e-3, atol: float = 1e-6,
                    generator: torch.Generator | None = None) -> tuple[float, list[torch.Tensor]]:
    """The reference's power iteration: start uniform in [0, 1), stop when lambdas agree.

    Returns (eigenvalue, eigenvector). ``start`` replaces the random start (a warm start from the
    previous step's eigenvector usually converges in a few products). The vector stays in pieces
    shaped like the parameters: joining them into one costs a copy per product, and the Rayleigh
    quotient and the norm come from one compiled pass over the product.
    """
    if start is None:
        start = [torch.rand(p.shape, generator=generator, dtype=p.dtype).to(p.device) for p in op.params]
    vec = [s.to(p, copy=True) for s, p in zip(start, op.params)]  # ours to scale in place
    torch._foreach_mul_(vec, 1.0 / math.sqrt(inner_and_square(vec, vec)[1]))
    eigval = math.inf
    for _ in range(maxiter):
        new = op.matvec(vec)
        new_eigval, square = inner_and_square(vec, new)
        if square == 0.0:  # H v = 0: v lies in the null space, the iteration cannot go on
            return new_eigval, vec
        torch._foreach_mul_(new, 1.0 / math.sqrt(square))  # in place: fresh vectors cost more
        vec = new
        if abs(eigval - new_eigval) <= atol + rtol * abs(new_eigval):  # torch.allclose's rule
            return new_eigval, vec
        eigval = new_eigval
    warnings.warn(f"HessMaxEV: power iteration did not converge in {maxiter} iterations", stacklevel=3)
    return eigval, vec


def lanczos(op: HessianOperator, start: list[torch.Tensor] | None = None,
            tol: float = 0.0) -> tuple[float, list[torch.Tensor]]:
    """lambda_max (largest algebraic eigenvalue) with ARPACK's Lanczos method."""
    from scipy.sparse.linalg import LinearOperator, eigsh

    params = op.params

    def split(x: np.ndarray) -> list[torch.Tensor]:
        return op.split(torch.from_numpy(np.ascontiguousarray(x)).to(params[0]))

    def matvec(x):
        flat = torch.from_numpy(np.ascontiguousarray(np.ravel(x))).to(params[0])
        return op.flat_matvec(flat).double().cpu().numpy()

    v0 = None if start is None else torch.cat([s.reshape(-1) for s in start]).double().cpu().numpy()
    linop = LinearOperator((op.dim, op.dim), matvec=matvec, dtype=np.float64)
    values, vectors = eigsh(linop, k=1, which="LA", v0=v0, tol=tol)
    return float(values[0]), split(vectors[:, 0])


def full_diagonal(op: HessianOperator, chunk: int = 256) -> list[torch.Tensor]:
    """The exact Hessian diagonal from Hessian columns, ``chunk`` unit vectors at a time."""
    params = op.params
    sizes = [p.numel() for p in params]
    diag = torch.empty(op.dim, dtype=params[0].dtype, device=params[0].device)
    for start in range(0, op.dim, chunk):
        idx = torch.arange(start, min(start + chunk, op.dim), device=diag.device)
        basis = torch.zeros(idx.numel(), op.dim, dtype=diag.dtype, device=diag.device)
        basis[torch.arange(idx.numel()), idx] = 1.0
        mats = [b.reshape(idx.numel(), *p.shape) for b, p in zip(basis.split(sizes, 1), params)]
        cols = torch.cat([c.reshape(idx.numel(), -1) for c in op.matmat(mats)], 1)
        diag[idx] = cols[torch.arange(idx.numel()), idx]
    return [d.reshape(p.shape) for d, p in zip(diag.split(sizes), params)]


def hutchinson_diagonal(op: HessianOperator, samples: int,
                        generator: torch.Generator | None = None) -> list[torch.Tensor]:
    """Unbiased estimate of the Hessian diagonal: mean of z * Hz over Rademacher vectors z."""
    mats = [(torch.randint(0, 2, (samples, *p.shape), generator=generator) * 2 - 1).to(p) for p in op.params]
    return [(z * hz).mean(0) for z, hz in zip(mats, op.matmat(mats))]


# ---------------------------------------------------------------- Gauss-Newton diagonal
def _loss_hessian_roots(losses: torch.Tensor, output: torch.Tensor, mc_samples: int | None = None,
                        generator: torch.Generator | None = None):
    """Square-root columns and eigenvalue signs of every sample's loss Hessian w.r.t. its output.

    Returns (roots (K, B, *out), signs (K, B)) with H_i = sum_k sign_ki root_ki root_kiᵀ; columns
    whose eigenvalue is zero for every sample are dropped (cross-entropy has one). With
    ``mc_samples``, each sample's columns are instead mixed by random signs into that many columns
    (per eigenvalue sign), whose outer products equal H_i in expectation: one backpropagated
    column instead of C, for an unbiased estimate.
    """
    if not losses.requires_grad:
        raise Unavailable("individual_losses carry no graph to the model output")
    B = output.shape[0]
    try:
        (first,) = torch.autograd.grad(losses.sum(), output, create_graph=True)
    except RuntimeError as e:
        raise Unavailable(f"individual_losses are not differentiable w.r.t. the model output ({e})") from e
    found = _softmax_roots(first, output) if first.grad_fn is not None else None
    roots, signs = found if found is not None else _eigen_roots(first, output)
    if mc_samples:
        mixed, mixed_signs = [], []
        for sign in (1.0, -1.0):
            if not bool((signs == sign).any()):
                continue
            flips = torch.randint(0, 2, (mc_samples, *signs.shape), generator=generator) * 2 - 1
            weights = flips.to(roots) * (signs == sign) / mc_samples ** 0.5  # (S, B, K)
            mixed.append(torch.einsum("sbk,bck->bcs", weights, roots))
            mixed_signs.append(torch.full((B, mc_samples), sign, dtype=roots.dtype, device=roots.device))
        roots, signs = torch.cat(mixed, 2), torch.cat(mixed_signs, 1)
    return roots.permute(2, 0, 1).reshape(-1, *output.shape), signs.T


def _eigen_roots(first: torch.Tensor, output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Any loss: every sample's Hessian from C batched Hessian-vector products, then eigh.

    Returns (roots (B, C, K), signs (B, K)); eigenvalues that are zero for every sample are dropped.
    """
    B, C = output.shape[0], first[0].numel()
    basis = torch.eye(C, dtype=output.dtype, device=output.device)
    seeds = basis[:, None, :].expand(C, B, C).reshape(C, *output.shape)
    if first.grad_fn is None:  # a loss linear in the output has zero curvature
        rows = torch.zeros_like(seeds)
    else:
        (rows,) = torch.autograd.grad(first, output, seeds, retain_graph=True, is_grads_batched=True,
                                      allow_unused=True, materialize_grads=True)
    hess = rows.reshape(C, B, C).permute(1, 0, 2)
    hess = (hess + hess.transpose(1, 2)) / 2
    values, vectors = torch.linalg.eigh(hess)  # (B, C), (B, C, C)
    # round-off is not curvature: cross-entropy's zero eigenvalue comes out as +-1e-9
    values = torch.where(values.abs() <= 1e-6 * values.abs().amax(1, keepdim=True), 0.0, values)
    keep = values.abs().amax(0) > 0
    return (vectors * values.abs().sqrt()[:, None, :])[:, :, keep], values.sign()[:, keep]


def _softmax_roots(first: torch.Tensor, output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Closed-form roots when every sample's loss Hessian is w_i (diag(p_i) - p_i p_iᵀ), p_i = softmax
    of its output: softmax cross-entropy with any targets, label smoothing or class weights (w_i).

    Verified, not assumed: one Hessian-vector product along a random direction must equal that
    form, with w_i fitted per sample, to round-off (a Hessian of another form passes this test only
    for directions in a set of measure zero); otherwise None, and the general route is taken.
    The square root needs no eigendecomposition: with q = sqrt(p) (a unit vector), diag(p) - ppᵀ
    = D (I - qqᵀ) D for D = diag(q), and the Householder reflection that maps q to -e_C has
    C - 1 orthonormal columns spanning q's complement, so D times them is a root with C - 1
    columns, as many as the eigendecomposition keeps.
    """
    if output.dim() != 2 or output.shape[1] < 2:
        return None
    x = output.detach()
    probe = torch.randn(x.shape, generator=torch.Generator().manual_seed(0), dtype=x.dtype).to(x.device)
    (hv,) = torch.autograd.grad(first, output, probe, retain_graph=True, allow_unused=True,
                                materialize_grads=True)
    p = torch.softmax(x, 1)
    # the fit in float64: a confident sample's products are far below float32's smallest square
    p64, probe64, hv64 = p.double(), probe.double(), hv.double()
    mean = (p64 * probe64).sum(1, keepdim=True)
    mv = p64 * (probe64 - mean)
    norm = mv.square().sum(1)
    w = torch.where(norm > 0, (hv64 * mv).sum(1) / norm.clamp_min(torch.finfo(torch.float64).tiny), 0.0)
    # the round-off of p_j (v_j - mean) is relative to p_j (|v_j| + |mean|), not to the result, which
    # cancels for a confident sample: the tolerance is measured on that scale
    scale = w.abs() * (p64 * (probe64.abs() + mean.abs())).amax(1)
    if not bool(((hv64 - w[:, None] * mv).abs().amax(1) <= 1e3 * torch.finfo(x.dtype).eps * scale).all()):
        return None
    w = w.to(x.dtype)
    q = p.sqrt()
    v = q.clone()
    v[:, -1] += 1.0  # v = q + e_C: the reflection I - 2vvᵀ/vᵀv maps q to -e_C
    reflection = -2 * v[:, :, None] * v[:, None, :-1] / (v.square().sum(1))[:, None, None]
    reflection[:, :-1].diagonal(dim1=1, dim2=2).add_(1.0)  # (B, C, C - 1)
    roots = w.abs().sqrt()[:, None, None] * q[:, :, None] * reflection
    return roots, w.sign()[:, None].expand(-1, roots.shape[2])


def ggn_diagonal(taps: Taps, params: list[torch.Tensor], names: list[str], losses: torch.Tensor,
                 chunk_size: int, mc_samples: int | None = None,
                 generator: torch.Generator | None = None) -> list[torch.Tensor]:
    """Exact diagonal of the generalised Gauss-Newton matrix of the mean loss (or, with
    ``mc_samples``, its unbiased Monte-Carlo estimate).

    Runs before the user's backward, while the forward graph is intact: the loss Hessian's
    square-root columns are backpropagated to every tapped layer output, and the per-sample
    squared gradients are summed with closed forms where there are some.
    """
    output = taps.output
    if output is None:
        raise Unavailable("the model output is not a single tensor with a graph")
    B = output.shape[0]
    roots, signs = _loss_hessian_roots(losses, output, mc_samples, generator)
    calls = [(layer, call) for layer in taps.layers for call in layer.calls]
    for layer, call in calls:
        if call.output._version != call.version:
            raise Unavailable(f"the output of layer {layer.name!r} is modified in place (an inplace "
                              "activation?); the Gauss-Newton diagonal needs it intact")
    # columns per backward: all at once (vmapped) suits Linear layers, but through the pooling and
    # ReLU masks of a convolutional network the vmapped backward loops and broadcasts; there one
    # plain backward per column is faster (CNN of bench_persample.py: ~20% less; MLP: ~25% more)
    step = roots.shape[0] if all(isinstance(lay.module, nn.Linear) for lay in taps.layers) else 1
    per_layer = {id(layer): _LayerGGN(layer.module) for layer in taps.layers}
    for c in range(0, roots.shape[0], step):
        deltas = torch.autograd.grad(output, [call.output for _, call in calls],
                                     roots[c:c + step] if step > 1 else roots[c], retain_graph=True,
                                     is_grads_batched=step > 1, allow_unused=True, materialize_grads=True)
        if step == 1:
            deltas = [d.unsqueeze(0) for d in deltas]
        for layer in taps.layers:
            mine = [(call, d) for (lay, call), d in zip(calls, deltas) if lay is layer]
            if mine:
                per_layer[id(layer)].add(mine, signs[c:c + step])
    sums = {key: layer_ggn.result() for key, layer_ggn in per_layer.items()}
    diag: list[torch.Tensor | None] = [None] * len(params)
    rest = []
    for i, p in enumerate(params):
        if id(p) in taps.owner:
            layer, kind = taps.owner[id(p)]
            diag[i] = sums[id(layer)][kind] / B if kind in sums[id(layer)] else torch.zeros_like(p)
        else:
            rest.append(i)
    if rest:
        wanted = [names[i] for i in rest]
        total = {n: 0.0 for n in wanted}
        taps.recording = False
        try:
            for k in range(roots.shape[0]):
                grads = fallback_grads(taps.model, wanted, taps.args, roots[k].detach(), chunk_size)
                for n in wanted:
                    w = signs[k].reshape(-1, *([1] * (grads[n].dim() - 1)))
                    total[n] = total[n] + (grads[n].square() * w).sum(0)
        finally:
            taps.recording = True
        for i, n in zip(rest, wanted):
            diag[i] = total[n] / B
    return [d.detach() for d in diag]


class _LayerGGN:
    """sum_{c,i} sign_ci (per-sample gradient for column c)**2 for one layer, summed over its calls,
    accumulated chunk of columns by chunk.

    A Linear layer called once on (B, in) inputs has the closed form (sum_c sign_c δ_c²)ᵀ a²: its
    squared output gradients are summed over the columns, and the product is taken once, at the end.
    """

    def __init__(self, module: nn.Module):
        self.module = module
        self.sums: dict[str, torch.Tensor] = {}
        self.outer: tuple[torch.Tensor, torch.Tensor] | None = None  # (sum_c sign_c δ_c² (B, out), input)

    def add(self, calls, signs: torch.Tensor) -> None:
        module = self.module
        if len(calls) == 1 and isinstance(module, nn.Linear) and calls[0][0].input.dim() == 2:
            call, deltas = calls[0]
            squares = deltas.square()
            # softmax cross-entropy's loss Hessian is positive semi-definite: all signs are +1, and
            # the sum needs no product with them (half the passes over the columns)
            weighted = squares.sum(0) if bool((signs == 1).all()) else (squares * signs[:, :, None]).sum(0)
            self.outer = (weighted if self.outer is None else self.outer[0] + weighted, call.input)
            return
        B = signs.shape[1]
        # columns per chunk: bounded memory; a convolution takes one kernel call per column anyway,
        # and one column at a time is then a chunk that needs no stacking
        step = max(1, (1 << 24) // max(1, B * module.weight.numel())) if isinstance(module, nn.Linear) else 1
        for c in range(0, signs.shape[0], step):
            parts = [layer_grads(module, call.input, deltas[c:c + step]) for call, deltas in calls]
            for kind in parts[0]:
                g = parts[0][kind] if len(parts) == 1 else sum(part[kind] for part in parts)  # (columns, B, *shape)
                # squared in place (layer_grads returns fresh tensors), summed with the signs in one product
                term = signs[c:c + step].reshape(1, -1) @ g.square_().reshape(g.shape[0] * B, -1)
                self.sums[kind] = self.sums.get(kind, 0) + term.reshape(g.shape[2:])

    def result(self) -> dict[str, torch.Tensor]:
        if self.outer is None:
            return self.sums
        weighted, a = self.outer
        out = {"weight": weighted.T @ a.square()}
        if self.module.bias is not None:
            out["bias"] = weighted.sum(0)
        return out


# ---------------------------------------------------------------- piecewise linearity
_PL_LEAVES = (
    nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ReLU, nn.LeakyReLU, nn.ReLU6, nn.Hardtanh,
    nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d,
    nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d, nn.AdaptiveMaxPool1d,
    nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d, nn.Flatten, nn.Unflatten, nn.Identity, nn.Dropout,
    nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d,
)
_PL_FUNCTIONS = {
    operator.add, operator.sub, operator.neg, operator.getitem, torch.add, torch.sub, torch.flatten,
    torch.cat, torch.stack, torch.relu, torch.reshape, torch.nn.functional.relu,
    torch.nn.functional.leaky_relu, torch.nn.functional.max_pool1d, torch.nn.functional.max_pool2d,
    torch.nn.functional.avg_pool1d, torch.nn.functional.avg_pool2d,
    torch.nn.functional.adaptive_avg_pool1d, torch.nn.functional.adaptive_avg_pool2d,
    torch.nn.functional.dropout, getattr,
}
_PL_METHODS = {"view", "reshape", "flatten", "size", "permute", "transpose", "contiguous", "relu",
               "unsqueeze", "squeeze", "add", "sub", "sum", "mean", "__getitem__"}


def not_piecewise_linear(model: nn.Module) -> str | None:
    """Why the model output is not piecewise linear in each parameter, or None when it is.

    Then the Hessian's diagonal equals the Gauss-Newton diagonal (the model's own second
    derivatives vanish on the diagonal). Checked on the torch.fx graph: leaf modules and
    functions must be linear or piecewise linear, and no parametrised module may be called twice.
    """
    import torch.fx

    try:
        graph = torch.fx.symbolic_trace(model).graph
    except Exception as e:  # noqa: BLE001 - any tracing failure means: cannot prove it
        return f"the model cannot be traced with torch.fx ({type(e).__name__})"
    calls: dict[str, int] = {}
    for node in graph.nodes:
        if node.op == "call_module":
            module = model.get_submodule(node.target)
            if not isinstance(module, _PL_LEAVES):
                return f"module {node.target!r} ({type(module).__name__}) is not piecewise linear"
            calls[node.target] = calls.get(node.target, 0) + 1
            if calls[node.target] > 1 and any(True for _ in module.parameters()):
                return f"module {node.target!r} is called twice (its weights enter quadratically)"
        elif node.op == "call_function":
            scalar_scale = node.target in (operator.mul, operator.truediv, torch.mul) and sum(
                isinstance(a, torch.fx.Node) for a in node.args) == 1
            if node.target not in _PL_FUNCTIONS and not scalar_scale:
                return f"function {getattr(node.target, '__name__', node.target)} is not piecewise linear"
        elif node.op == "call_method" and node.target not in _PL_METHODS:
            return f"method .{node.target}() is not piecewise linear"
        elif node.op == "get_attr":
            return f"parameter or buffer {node.target!r} is used outside a module"
    return None
