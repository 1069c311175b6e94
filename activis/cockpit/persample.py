"""Per-sample gradients of one parameter tensor, and the reductions the instruments need.

The instruments never need the B x D matrix of per-sample gradients itself, only reductions of it:
squared norms, dot products with a direction, elementwise second moments and histograms. Two
representations cover every layer:

* `Outer`: a Linear weight seen once with a (B, in) input has g_i = u_i v_iᵀ, where u_i is the
  output gradient of the per-sample loss and v_i the layer input. Every reduction has a closed
  form from u and v that costs about one matrix product, and the histograms are counted exactly
  without forming most products (see `_kernels`).
* `Dense`: any other parameter, with its per-sample gradients materialised as a (B, *shape)
  tensor (a convolution through unfolded inputs, a bias, the ``torch.func`` fallback).

Histograms follow the reference: a value x falls into bin ``floor((x - lo) / width)`` clamped to
``[0, bins - 1]``, i.e. values outside the range are counted in the edge bins, computed in float64
on the value as the materialised tensor holds it (a product rounded to the factors' precision).
Both representations count bit for bit the same; compiled loops (numba) do the counting.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import torch

from ..run.log import CockpitError


@dataclass(frozen=True)
class Bins:
    """A uniform binning of ``[lo, hi]`` into ``bins`` bins."""

    bins: int
    lo: float
    hi: float

    def __post_init__(self):
        if self.bins < 1 or not self.lo < self.hi:
            raise CockpitError(f"A histogram needs bins >= 1 and lo < hi, got {self}.")

    @property
    def width(self) -> float:
        return (self.hi - self.lo) / self.bins

    def index(self, x: torch.Tensor) -> torch.Tensor:
        """Bin of every element, values outside the range clamped into the edge bins."""
        return ((x.double() - self.lo) / self.width).floor_().clamp_(0, self.bins - 1).long()

    def band(self, dtype: np.dtype) -> tuple[np.ndarray, int]:
        """Exact thresholds of the bins for values of ``dtype``, and the lower bin beside 0."""
        from ._kernels import band

        return band(self.bins, self.lo, self.width, np.dtype(dtype).str)


def _common(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Both in float32 when their dtypes differ: under autocast a layer's input is bfloat16/float16 and its
    output gradient float32 (one dtype, half precision included, is kept as it is)."""
    return (a, b) if a.dtype == b.dtype else (a.float(), b.float())


class Outer:
    """Per-sample gradients ``g_i = u_i v_iᵀ`` of a Linear weight, never formed."""

    def __init__(self, u: torch.Tensor, v: torch.Tensor):
        self.u, self.v = _common(u, v)  # (B, out), (B, in)

    @property
    def batch_size(self) -> int:
        return self.u.shape[0]

    def sq_norms(self) -> torch.Tensor:
        return self.u.square().sum(1) * self.v.square().sum(1)

    def dot(self, direction: torch.Tensor) -> torch.Tensor:
        """``g_i · direction`` for every sample."""
        u, direction = _common(self.u, direction)
        return ((u @ direction) * self.v).sum(1)

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
        """Histogram of all products u[i, a] * v[i, b], most of them never formed."""
        factors = _factors(self.u, self.v)
        if factors is None:
            return self._materialised().hist1d(bins)
        x, y = factors if factors[0].shape[1] <= factors[1].shape[1] else factors[::-1]  # rows: the shorter
        P, c0 = bins.band(x.dtype)
        ys, slot = _sorted_leaving(x, y, P, c0)
        hist = np.zeros(bins.bins + 1, dtype=np.int64)
        return _counted(hist, _split("outer_hist1d", x.shape[0] * (x.shape[1] + y.shape[1]),
                                     x, y, ys, slot, P, c0, bins.lo, bins.width, hist))

    def hist2d(self, param: torch.Tensor, gbins: Bins, pbins: Bins) -> torch.Tensor:
        """2D histogram of (u[i, a] * v[i, b], param[a, b]) over all i, a, b."""
        factors = _factors(self.u, self.v)
        if factors is None:
            return self._materialised().hist2d(param, gbins, pbins)
        x, y = factors
        P, c0 = gbins.band(x.dtype)
        hist = np.zeros((gbins.bins + 1, pbins.bins), dtype=np.int64)
        return _counted(hist, _split("outer_hist2d", x.shape[0] * (x.shape[1] + y.shape[1]),
                                     x, y, _param_bins(param, pbins), P, c0, gbins.lo, gbins.width, hist))

    def _materialised(self) -> Dense:
        return Dense(self.u[:, :, None] * self.v[:, None, :])


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
        return torch.linalg.vector_norm(self._flat(), dim=1).square()  # no (B, D) temporary of squares

    def dot(self, direction: torch.Tensor) -> torch.Tensor:
        flat, direction = _common(self._flat(), direction.reshape(-1))
        return flat @ direction

    def dot_mean(self, of: Dense | None = None) -> torch.Tensor:
        return self.dot((self if of is None else of).grads.mean(0))

    def sum_sq(self) -> torch.Tensor:
        return self.grads.square().sum(0)

    def hist1d(self, bins: Bins) -> torch.Tensor:
        flat = _values(self.grads.reshape(-1))
        P, c0 = bins.band(flat.dtype)
        hist = np.zeros(bins.bins + 1, dtype=np.int64)
        return _counted(hist, _split("dense_hist1d", flat.size, flat, P, c0, bins.lo, bins.width, hist))

    def hist2d(self, param: torch.Tensor, gbins: Bins, pbins: Bins) -> torch.Tensor:
        grads = _values(self._flat())
        P, c0 = gbins.band(grads.dtype)
        hist = np.zeros((gbins.bins + 1, pbins.bins), dtype=np.int64)
        return _counted(hist, _split("dense_hist2d", grads.size, grads, _param_bins(param, pbins).reshape(-1),
                                     P, c0, gbins.lo, gbins.width, hist))


def _kernels():
    from . import _kernels  # numba is imported (and the kernels loaded) on the first histogram

    return _kernels


_PARALLEL_WORK = 1 << 16  # values or rows below which a thread costs more than it saves
_parallel_lock = threading.Lock()  # numba's thread pool serves one parallel call at a time


def _split(kernel: str, work: int, *args) -> int:
    """Run a histogram kernel on as many threads as torch uses (one: the kernel itself).

    numba's OpenMP pool shares the OpenMP runtime with torch, and starting it sets the runtime's
    thread count to numba's: torch's own setting is put back after every parallel call."""
    kernels = _kernels()
    torch_threads = torch.get_num_threads()
    threads = min(torch_threads, kernels.numba.config.NUMBA_NUM_THREADS)  # the config: starts no pool
    if threads < 2 or work < _PARALLEL_WORK:
        return getattr(kernels, kernel)(*args)
    with _parallel_lock:
        try:
            return getattr(kernels, kernel + "_split")(*args, threads)
        finally:
            if torch.get_num_threads() != torch_threads:
                torch.set_num_threads(torch_threads)


def _values(t: torch.Tensor) -> np.ndarray:
    """A contiguous CPU array of float32 or float64 values (half precision widens exactly)."""
    t = t.detach()
    if t.dtype not in (torch.float32, torch.float64):
        t = t.float()
    return np.ascontiguousarray(t.cpu().numpy())


def _factors(u: torch.Tensor, v: torch.Tensor) -> tuple[np.ndarray, np.ndarray] | None:
    """u and v as arrays of the dtype of their products, or None when the products are rounded to
    a precision the kernels do not compute in (half precision: they are then materialised)."""
    dtype = torch.promote_types(u.dtype, v.dtype)
    if dtype not in (torch.float32, torch.float64):
        return None
    return _values(u.to(dtype)), _values(v.to(dtype))


def _sorted_leaving(x: np.ndarray, y: np.ndarray, P: np.ndarray, c0: int) -> tuple[np.ndarray, np.ndarray]:
    """The sorted rows of y of the samples some of whose products x * y can leave the histogram's
    band (a superset: |x| |y| within a rounding of the band's reach), and each sample's row in them
    (-1: none). numpy sorts all rows at once several times faster than a compiled loop per row."""
    reach = min(-float(P[c0]), float(P[c0 + 2]))
    with np.errstate(invalid="ignore", over="ignore"):
        spread = np.abs(x).max(1).astype(np.float64) * np.abs(y).max(1)
    leaving = np.flatnonzero(~(spread < reach * (1 - 1e-6)))  # NaN and inf count as leaving
    slot = np.full(x.shape[0], -1, dtype=np.int64)
    slot[leaving] = np.arange(leaving.size)
    if leaving.size == 0:
        return np.empty((1, y.shape[1]), dtype=y.dtype), slot
    return np.sort(y[leaving], axis=1), slot


def _param_bins(param: torch.Tensor, bins: Bins) -> np.ndarray:
    """`Bins.index` of every parameter, compiled: torch's float64 temporaries cost more than the
    histogram of the gradients."""
    out = np.empty(tuple(param.shape), dtype=np.int32)
    _kernels().param_bins(_values(param.reshape(-1)), bins.lo, bins.width, bins.bins, out.reshape(-1))
    return out


def _counted(hist: np.ndarray, nans: int) -> torch.Tensor:
    """The histogram without its spare last bin row (written only by rules that cannot hold there),
    or Unavailable when some values were NaN: a histogram of them would silently miss them."""
    if nans:
        from .taps import Unavailable

        raise Unavailable(f"{nans} per-sample gradient values are NaN (has the training diverged?)")
    return torch.from_numpy(hist[:-1])
