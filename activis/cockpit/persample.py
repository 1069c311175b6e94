"""Per-sample gradients of one parameter tensor, and the reductions the instruments need.

The instruments never need the B x D matrix of per-sample gradients itself, only reductions of it:
squared norms, dot products with a direction, elementwise second moments and histograms. Two
representations cover every layer:

* `Outer`: a Linear weight seen once with a (B, in) input has g_i = u_i v_iᵀ, where u_i is the
  output gradient of the per-sample loss and v_i the layer input. Every reduction has a closed
  form from u and v that costs about one matrix product, and the histograms are counted exactly
  without forming a single product (see `_outer_hist1d` and `_outer_hist2d`).
* `Dense`: any other parameter, with its per-sample gradients materialised as a (B, *shape)
  tensor (a convolution through unfolded inputs, a bias, the ``torch.func`` fallback).

Histograms follow the reference: a value x falls into bin ``floor((x - lo) / width)`` clamped to
``[0, bins - 1]``, i.e. values outside the range are counted in the edge bins.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

# enumerated (row, element) pairs per chunk: bounds the temporary memory of the histograms
_CHUNK = 1 << 22


@dataclass(frozen=True)
class Bins:
    """A uniform binning of ``[lo, hi]`` into ``bins`` bins."""

    bins: int
    lo: float
    hi: float

    def __post_init__(self):
        if self.bins < 1 or not self.lo < self.hi:
            raise ValueError(f"A histogram needs bins >= 1 and lo < hi, got {self}.")

    @property
    def width(self) -> float:
        return (self.hi - self.lo) / self.bins

    def index(self, x: torch.Tensor) -> torch.Tensor:
        """Bin of every element, values outside the range clamped into the edge bins."""
        return ((x.double() - self.lo) / self.width).floor_().clamp_(0, self.bins - 1).long()

    def zero_bins(self) -> tuple[int, int, float]:
        """Bins of small negative and small non-negative values, and the radius that keeps them there."""
        pos = int(self.index(torch.zeros(1)))
        lower = self.lo + pos * self.width
        neg = pos - 1 if pos > 0 and abs(lower) <= 1e-9 * self.width else pos
        return neg, pos, min(self.lo + (pos + 1) * self.width, -(self.lo + neg * self.width))


class Outer:
    """Per-sample gradients ``g_i = u_i v_iᵀ`` of a Linear weight, never formed."""

    def __init__(self, u: torch.Tensor, v: torch.Tensor):
        self.u, self.v = u, v  # (B, out), (B, in)

    @property
    def batch_size(self) -> int:
        return self.u.shape[0]

    def sq_norms(self) -> torch.Tensor:
        return self.u.square().sum(1) * self.v.square().sum(1)

    def dot(self, direction: torch.Tensor) -> torch.Tensor:
        """``g_i · direction`` for every sample."""
        return ((self.u @ direction) * self.v).sum(1)

    def dot_mean(self, of: Outer | None = None) -> torch.Tensor:
        """``g_i · mean_j g'_j``, the mean over the samples of ``of`` (default: this batch), through
        the Gram matrices of the two batches when that is cheaper than forming the mean."""
        other = self if of is None else of
        B, m, n = other.batch_size, self.u.shape[1], self.v.shape[1]
        if B * (m + n) < m * n:
            return ((self.u @ other.u.T) * (self.v @ other.v.T)).mean(1)
        return self.dot(other.u.T @ other.v / B)

    def sum_sq(self) -> torch.Tensor:
        """``sum_i g_i**2`` elementwise."""
        return self.u.square().T @ self.v.square()

    def hist1d(self, bins: Bins) -> torch.Tensor:
        return _outer_hist1d(self.u, self.v, bins)

    def hist2d(self, param: torch.Tensor, gbins: Bins, pbins: Bins) -> torch.Tensor:
        return _outer_hist2d(self.u, self.v, param, gbins, pbins)


class Dense:
    """Per-sample gradients held as a (B, *shape) tensor."""

    def __init__(self, grads: torch.Tensor):
        self.grads = grads

    @property
    def batch_size(self) -> int:
        return self.grads.shape[0]

    def _flat(self) -> torch.Tensor:
        return self.grads.reshape(self.batch_size, -1)

    def sq_norms(self) -> torch.Tensor:
        return self._flat().square().sum(1)

    def dot(self, direction: torch.Tensor) -> torch.Tensor:
        return self._flat() @ direction.reshape(-1)

    def dot_mean(self, of: Dense | None = None) -> torch.Tensor:
        return self.dot((self if of is None else of).grads.mean(0))

    def sum_sq(self) -> torch.Tensor:
        return self.grads.square().sum(0)

    def hist1d(self, bins: Bins) -> torch.Tensor:
        flat = _numpy(self.grads).reshape(-1)
        out = np.zeros(bins.bins, dtype=np.int64)
        for start in range(0, flat.size, _CHUNK):
            out += np.bincount(_bin_index(flat[start:start + _CHUNK], bins), minlength=bins.bins)
        return torch.from_numpy(out)

    def hist2d(self, param: torch.Tensor, gbins: Bins, pbins: Bins) -> torch.Tensor:
        pidx = pbins.index(param).reshape(-1)
        flat = self._flat()
        rows = max(1, _CHUNK // max(1, flat.shape[1]))
        out = torch.zeros(gbins.bins * pbins.bins, dtype=torch.int64, device=flat.device)
        for start in range(0, flat.shape[0], rows):
            gidx = gbins.index(flat[start:start + rows])
            out += torch.bincount((gidx * pbins.bins + pidx).reshape(-1), minlength=out.numel())
        return out.reshape(gbins.bins, pbins.bins)


def _ragged(counts: np.ndarray):
    """Enumerate ``counts[r]`` items for every row r, in chunks of at most ``_CHUNK`` items.

    Yields ``(row, rank)``: for every item its row and its rank 0..counts[row]-1 within the row.
    """
    rows = np.flatnonzero(counts)
    if rows.size == 0:
        return
    c = counts[rows]
    ends = np.cumsum(c)
    first = 0
    while first < rows.size:
        done = ends[first - 1] if first else 0
        last = max(int(np.searchsorted(ends, done + _CHUNK, side="right")), first + 1)
        cc = c[first:last]
        row = np.repeat(rows[first:last], cc)
        yield row, np.arange(row.size) - np.repeat(np.cumsum(cc) - cc, cc)
        first = last


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


def _outer_hist1d(u: torch.Tensor, v: torch.Tensor, bins: Bins) -> torch.Tensor:
    """Histogram of all products ``u[i, a] * v[i, b]`` without forming them.

    Counts are cumulative over bin edges: C[k] = #{products < e_k}. A row x = u[i, a] whose
    products all lie closer to 0 than the nearest nonzero edge (|x| max|v_i| < that distance: most
    rows of a healthy network) adds all of v_i to every positive edge and nothing to the others.
    An edge at 0 counts the products of negative sign, per sample a product of sign counts. For the
    remaining rows, the products lie between x*min(v_i) and x*max(v_i): edges below count none of
    the row, edges above all of it, and only the edges inside need a binary search in the sorted
    v_i (numpy's sort: torch's CPU sort of short rows is two orders of magnitude slower). Where
    rows cross so many edges that the searches would cost more, those rows are binned directly.
    """
    if u.shape[1] > v.shape[1]:  # search in the longer factor, one query per element of the shorter
        u, v = v, u
    x, y = _numpy(u), _numpy(v)
    m, n = x.shape[1], y.shape[1]
    k_bins, lo, w = bins.bins, bins.lo, bins.width
    edges = lo + w * np.arange(k_bins + 1)
    k0 = round(-lo / w)
    zero_edge = 0 < k0 < k_bins and abs(edges[k0]) <= 1e-9 * w
    reach = np.abs(edges[1:-1])
    nearest = float(reach[reach > 1e-9 * w].min()) if (reach > 1e-9 * w).any() else float("inf")
    ymin, ymax = y.min(1), y.max(1)
    big = np.abs(x) * np.maximum(-ymin, ymax)[:, None] >= nearest
    rows = np.flatnonzero(big)
    cum = np.zeros(k_bins + 1, dtype=np.int64)
    cum[1:-1][edges[1:-1] > 0] += (x.size - rows.size) * n  # the rows of small products
    cum[k_bins] = x.size * n
    if rows.size:
        sample = rows // m
        xb = x.ravel()[rows].astype(np.float64)
        p1, p2 = xb * ymin[sample], xb * ymax[sample]
        first = _edge_above(np.minimum(p1, p2), lo, w, k_bins)
        after = _edge_above(np.maximum(p1, p2), lo, w, k_bins)
        counts = after - first
        at0 = None
        if zero_edge:  # edge 0 is counted below for all rows at once
            at0 = (first <= k0) & (k0 < after)
            counts -= at0
        if counts.sum() * 2 * np.log2(n + 1) > rows.size * n:  # many edges per row: bin them directly
            direct = np.concatenate([(xb[i:i + 4096, None] * y[sample[i:i + 4096]]).ravel()
                                     for i in range(0, rows.size, 4096)])
            cum[1:] += np.cumsum(np.bincount(_bin_index(direct, bins), minlength=k_bins))
        else:
            cum += np.cumsum(np.bincount(after, minlength=k_bins + 1)) * n
            _search_edges(cum, y, sample, xb, first, counts, at0, k0, lo, w, n)
    cum[k_bins] = x.size * n
    if zero_edge:  # products below 0: x > 0 with y < 0, and x < 0 with y > 0
        cum[k0] = int((np.count_nonzero(x > 0, 1) * np.count_nonzero(y < 0, 1)
                       + np.count_nonzero(x < 0, 1) * np.count_nonzero(y > 0, 1)).sum())
    return torch.from_numpy(np.diff(cum))


def _negative_products(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """(out, in) counts of samples i with u[i, a] * v[i, b] < 0, by matrix products of signs."""
    if not bool((v < 0).any()):  # post-ReLU inputs: negative exactly where u < 0 and v > 0
        return (u < 0).to(u.dtype).T @ (v > 0).to(v.dtype)
    # negatives = (nonzero pairs - sum of sign products) / 2; the nonzero pairs need no matrix
    # product when either factor has no zeros
    signs = torch.sign(u).T @ torch.sign(v)
    nu, nv = (u != 0).to(u.dtype), (v != 0).to(v.dtype)
    if bool(nv.all()):
        nonzero = nu.sum(0)[:, None].expand_as(signs)
    elif bool(nu.all()):
        nonzero = nv.sum(0)[None, :].expand_as(signs)
    else:
        nonzero = nu.T @ nv
    return (nonzero - signs) / 2


def _bin_index(values: np.ndarray, bins: Bins) -> np.ndarray:
    """`Bins.index` in numpy, computed in float64 (few temporaries: these arrays can be large)."""
    x = values.astype(np.float64)
    x -= bins.lo
    x /= bins.width
    np.floor(x, out=x)
    np.clip(x, 0, bins.bins - 1, out=x)
    return x.astype(np.intp)


def _edge_above(values: np.ndarray, lo: float, w: float, k_bins: int) -> np.ndarray:
    """Index of the first bin edge strictly above each value, clamped to 1..k_bins (in place)."""
    values -= lo
    values /= w
    np.floor(values, out=values)
    np.clip(values, 0, k_bins - 1, out=values)
    return values.astype(np.int64) + 1


def _search_edges(cum, y, sample, xb, first, counts, at0, k0, lo, w, n) -> None:
    """Add, for every row and every edge e inside its products' range, #{b: x y_b < e} to cum."""
    need = np.unique(sample[counts > 0])
    if need.size == 0:
        return
    ys = np.sort(y[need], axis=1).astype(np.float64)
    span = float(np.abs(ys).max()) + 1.0
    shift = 4.0 * span * np.arange(need.size)
    flat = (ys + shift[:, None]).ravel()  # every sample in its own interval: one flat search
    slot_of = np.zeros(y.shape[0], dtype=np.int64)
    slot_of[need] = np.arange(need.size)
    for row, rank in _ragged(counts):
        k = first[row] + rank
        if at0 is not None:
            k += at0[row] & (k >= k0)  # the edge at 0 is counted by signs
        xs = xb[row]
        slot = slot_of[sample[row]]
        q = np.clip((lo + k * w) / xs, -2 * span, 2 * span)
        q += shift[slot]
        negative = xs < 0
        found = np.empty(q.size, dtype=np.int64)
        for side, mask in (("left", ~negative), ("right", negative)):  # x > 0: #{y < e/x}; x < 0: #{y <= e/x}
            picked = np.flatnonzero(mask)
            order = picked[np.argsort(q[picked])]  # sorted keys: numpy's search is several times faster
            found[order] = np.searchsorted(flat, q[order], side=side)
        found -= slot * n
        found[negative] = n - found[negative]  # x < 0: #{y > e/x}
        cum += np.bincount(k, weights=found, minlength=cum.size).astype(np.int64)


def _outer_hist2d(u: torch.Tensor, v: torch.Tensor, param: torch.Tensor, gbins: Bins,
                  pbins: Bins) -> torch.Tensor:
    """2D histogram of (u[i, a] * v[i, b], param[a, b]) over all i, a, b without forming the products.

    Products smaller in magnitude than the distance from 0 to the nearest bin edge land in one of
    the two bins beside 0 by their sign alone; per element those signs are counted by one matrix
    product of sign indicators (two when both factors have zeros and negatives). Only the few
    larger products are enumerated and binned.
    """
    if not gbins.lo < 0 < gbins.hi:
        return Dense(u[:, :, None] * v[:, None, :]).hist2d(param, gbins, pbins)
    neg_bin, pos_bin, radius = gbins.zero_bins()
    negatives = _negative_products(u, v)
    x, y = _numpy(u), _numpy(v)
    m, n = x.shape[1], y.shape[1]
    pidx = _bin_index(_numpy(param), pbins)  # (out, in)
    per_bin = np.bincount(pidx.ravel(), minlength=pbins.bins) * float(x.shape[0])
    central_neg = np.bincount(pidx.ravel(), weights=_numpy(negatives).ravel(), minlength=pbins.bins)
    central_pos = per_bin - central_neg
    hist = np.zeros(gbins.bins * pbins.bins)
    # large products: the b with |y_ib| >= radius / |x_ia|, a suffix of y_i sorted by magnitude
    ax = np.abs(x)
    samples = np.unique(np.nonzero(ax * np.abs(y).max(1, keepdims=True) >= radius)[0])
    if samples.size:
        order = np.argsort(np.abs(y[samples]), axis=1)
        ay = np.take_along_axis(np.abs(y[samples]), order, axis=1)
        with np.errstate(divide="ignore"):
            limits = np.minimum(radius / ax[samples], 2 * ay[:, -1:] + 1)  # never past the sample's own interval
        shift = 4 * (float(ay[:, -1].max()) + 1) * np.arange(samples.size)[:, None]
        flat_limits = (limits + shift).ravel()
        order_q = np.argsort(flat_limits)  # sorted keys: numpy's search is several times faster
        found = np.empty(flat_limits.size, dtype=np.int64)
        found[order_q] = np.searchsorted((ay + shift).ravel(), flat_limits[order_q], side="left")
        flat_counts = n - (found - np.repeat(np.arange(samples.size) * n, m))
        xf = x[samples].ravel()
        for row, rank in _ragged(flat_counts):
            s = row // m
            b = order[s, n - flat_counts[row] + rank]
            prod = xf[row] * y[samples[s], b]
            p = pidx[row - s * m, b]
            g = np.clip(np.floor((prod - gbins.lo) / gbins.width), 0, gbins.bins - 1).astype(np.int64)
            hist += np.bincount(g * pbins.bins + p, minlength=hist.size)
            negative = prod < 0
            central_neg -= np.bincount(p[negative], minlength=pbins.bins)
            central_pos -= np.bincount(p[~negative], minlength=pbins.bins)
    hist = hist.reshape(gbins.bins, pbins.bins)
    hist[neg_bin] += central_neg
    hist[pos_bin] += central_pos
    return torch.from_numpy(np.rint(hist).astype(np.int64))
