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

    def dot_mean(self) -> torch.Tensor:
        """``g_i · g`` with g the mean gradient, through the two Gram matrices when that is cheaper."""
        B, m, n = self.batch_size, self.u.shape[1], self.v.shape[1]
        if B * (m + n) < m * n:
            return ((self.u @ self.u.T) * (self.v @ self.v.T)).mean(1)
        return self.dot(self.u.T @ self.v / B)

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

    def dot_mean(self) -> torch.Tensor:
        return self.dot(self.grads.mean(0))

    def sum_sq(self) -> torch.Tensor:
        return self.grads.square().sum(0)

    def hist1d(self, bins: Bins) -> torch.Tensor:
        flat = self.grads.reshape(-1)
        out = torch.zeros(bins.bins, dtype=torch.int64, device=flat.device)
        for start in range(0, flat.numel(), _CHUNK):
            out += torch.bincount(bins.index(flat[start:start + _CHUNK]), minlength=bins.bins)
        return out

    def hist2d(self, param: torch.Tensor, gbins: Bins, pbins: Bins) -> torch.Tensor:
        pidx = pbins.index(param).reshape(-1)
        flat = self._flat()
        rows = max(1, _CHUNK // max(1, flat.shape[1]))
        out = torch.zeros(gbins.bins * pbins.bins, dtype=torch.int64, device=flat.device)
        for start in range(0, flat.shape[0], rows):
            gidx = gbins.index(flat[start:start + rows])
            out += torch.bincount((gidx * pbins.bins + pidx).reshape(-1), minlength=out.numel())
        return out.reshape(gbins.bins, pbins.bins)


def _ragged(counts: torch.Tensor):
    """Enumerate ``counts[r]`` items for every row r, in chunks of at most ``_CHUNK`` items.

    Yields ``(row, rank)``: for every item its row and its rank 0..counts[row]-1 within the row.
    """
    rows = counts.nonzero().squeeze(1)
    if rows.numel() == 0:
        return
    c = counts[rows]
    ends = c.cumsum(0)
    total = int(ends[-1])
    start_item, first = 0, 0
    while start_item < total:
        last = int(torch.searchsorted(ends, start_item + _CHUNK, right=True))
        last = max(last, first + 1)  # one row never exceeds _CHUNK items (it is one vector)
        rr, cc = rows[first:last], c[first:last]
        row = torch.repeat_interleave(rr, cc)
        offsets = torch.repeat_interleave(cc.cumsum(0) - cc, cc)
        yield row, torch.arange(row.numel(), device=row.device) - offsets
        start_item, first = int(ends[last - 1]), last


def _outer_hist1d(u: torch.Tensor, v: torch.Tensor, bins: Bins) -> torch.Tensor:
    """Histogram of all products ``u[i, a] * v[i, b]`` without forming them.

    Counts are cumulative over bin edges: C[k] = #{products < e_k}. For one row x = u[i, a] the
    products lie between x*min(v_i) and x*max(v_i), so only the few edges inside that interval
    need a binary search in the sorted v_i; edges below count 0 and edges above count all of v_i.
    """
    if u.shape[1] > v.shape[1]:  # search in the longer factor, one query per element of the shorter
        u, v = v, u
    B, m = u.shape
    n = v.shape[1]
    k_bins, lo, w = bins.bins, bins.lo, bins.width
    vs = v.double().sort(1).values
    x = u.double()
    ends = torch.stack([x * vs[:, :1], x * vs[:, -1:]])
    first = ((ends.amin(0) - lo) / w).floor_().add_(1).clamp_(1, k_bins).long().reshape(-1)
    after = ((ends.amax(0) - lo) / w).floor_().add_(1).clamp_(1, k_bins).long().reshape(-1)
    cum = torch.bincount(after, minlength=k_bins + 1).cumsum(0) * n
    # every sample's sorted values shifted into its own interval: one search over one flat array
    span = float(vs.abs().max()) + 1.0
    shift = 4.0 * span * torch.arange(B, dtype=torch.float64, device=vs.device)
    flat = (vs + shift[:, None]).reshape(-1)
    xf = x.reshape(-1)
    for row, rank in _ragged(after - first):
        k = first[row] + rank
        xs = xf[row]
        sample = torch.div(row, m, rounding_mode="floor")
        q = ((lo + k * w) / xs).clamp_(-2 * span, 2 * span) + shift[sample]
        base = sample * n
        below = torch.searchsorted(flat, q, side="left") - base  # x > 0: v < e/x
        above = n - (torch.searchsorted(flat, q, side="right") - base)  # x < 0: v > e/x
        cum.index_add_(0, k, torch.where(xs > 0, below, above))
    return cum[1:] - cum[:-1]


def _outer_hist2d(u: torch.Tensor, v: torch.Tensor, param: torch.Tensor, gbins: Bins,
                  pbins: Bins) -> torch.Tensor:
    """2D histogram of (u[i, a] * v[i, b], param[a, b]) over all i, a, b without forming the products.

    Products smaller in magnitude than the distance from 0 to the nearest bin edge land in one of
    the two bins beside 0 by their sign alone; per element those signs are counted by one or two
    matrix products of sign indicators. Only the few larger products are enumerated and binned.
    """
    if not gbins.lo < 0 < gbins.hi:
        return Dense(u[:, :, None] * v[:, None, :]).hist2d(param, gbins, pbins)
    B, n = v.shape
    neg_bin, pos_bin, radius = gbins.zero_bins()
    pidx = pbins.index(param)  # (out, in)
    up, un = (u > 0).to(u.dtype), (u < 0).to(u.dtype)
    vp, vn = (v > 0).to(v.dtype), (v < 0).to(v.dtype)
    negatives = un.T @ vp
    if bool(vn.any()):
        negatives += up.T @ vn
    per_bin = torch.bincount(pidx.reshape(-1), minlength=pbins.bins).double() * B
    central_neg = torch.bincount(pidx.reshape(-1), weights=negatives.reshape(-1).double(),
                                 minlength=pbins.bins)
    central_pos = per_bin - central_neg
    hist = torch.zeros(gbins.bins * pbins.bins, dtype=torch.float64, device=u.device)
    # large products: the b with |v_ib| >= radius / |u_ia|, i.e. a suffix of v_i sorted by magnitude
    av, order = v.abs().double().sort(1)
    thresholds = radius / u.abs().double()
    counts = n - torch.searchsorted(av, thresholds, side="left")
    m = u.shape[1]
    uf = u.reshape(-1)
    for row, rank in _ragged(counts.reshape(-1)):
        i = torch.div(row, m, rounding_mode="floor")
        a = row - i * m
        b = order[i, n - counts.reshape(-1)[row] + rank]
        prod = uf[row] * v[i, b]
        p = pidx[a, b]
        hist += torch.bincount(gbins.index(prod) * pbins.bins + p, minlength=hist.numel()).double()
        negative = prod < 0
        central_neg -= torch.bincount(p[negative], minlength=pbins.bins).double()
        central_pos -= torch.bincount(p[~negative], minlength=pbins.bins).double()
    hist = hist.reshape(gbins.bins, pbins.bins)
    hist[neg_bin] += central_neg
    hist[pos_bin] += central_pos
    return hist.round().long()
