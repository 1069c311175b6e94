"""Per-neuron statistics of many subsets at one layer (S^T A) in one chunked pass."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .errors import SubsetError

STATS = ("mean", "active", "std")
DEFAULT_CHUNK_BYTES = 64 << 20
# when the requested subsets together hold at most this fraction of the store, their rows are
# read directly (a gather) instead of a pass over the whole layer
GATHER_FRACTION = 0.125
# rows whose mean is the per-neuron shift (see _Accumulator); rows per float32 partial sum
SHIFT_ROWS = 256
FLUSH_ROWS = 8192
# pattern accumulators may use the chunk budget or this much, whichever is larger; beyond it
# (very many distinct membership patterns) the pass multiplies the dense membership matrix instead
PATTERN_BYTES = 32 << 20


@dataclass(frozen=True)
class Aggregate:
    """Per-neuron statistics of K rows (subsets) at one layer; arrays are K x neurons float32.

    ``mean`` is the subset's mean activation, ``active`` the fraction of its instances with the
    neuron above ``threshold``, ``std`` the population standard deviation. An empty subset's row
    is NaN. Stats that were not asked for are None.
    """

    layer: str
    names: list[str]
    sizes: np.ndarray
    threshold: float
    mean: np.ndarray | None = None
    active: np.ndarray | None = None
    std: np.ndarray | None = None

    def __getitem__(self, stat: str) -> np.ndarray:
        value = getattr(self, stat, None) if stat in STATS else None
        if value is None:
            done = [s for s in STATS if getattr(self, s) is not None]
            raise SubsetError(f"Statistic {stat!r} was not computed; this aggregate has {', '.join(done)}.")
        return value

    @property
    def n_neurons(self) -> int:
        return int(next(getattr(self, s) for s in STATS if getattr(self, s) is not None).shape[1])

    def to_frame(self, stat: str = "mean") -> pd.DataFrame:
        """Rows named by subset, one column per neuron."""
        return pd.DataFrame(self[stat], index=pd.Index(self.names, name="subset"))


@functools.cache
def _kernel():
    """Compile (once, cached on disk) the pattern-sum kernel; numba is imported only here."""
    import numba

    def jit(func):
        try:
            return numba.njit(cache=True, nogil=True, fastmath=True)(func)
        except RuntimeError:  # no writable cache location: compile in each process instead
            return numba.njit(nogil=True, fastmath=True)(func)

    @jit
    def pattern_sums(block, pattern, threshold, moments, flush_rows, shifts, seen, totals, squares, active,
                     part_totals, part_squares, part_active, touched):
        # Per pattern, sums of d = x - (the pattern's first row): small d keep float32 exact enough
        # (one instance alone has d = 0). float32 partials are flushed into float64 every
        # flush_rows rows: twice the SIMD width and half the cache traffic of float64, no drift.
        n_rows, n_neurons = block.shape
        for start in range(0, n_rows, flush_rows):
            for i in range(start, min(n_rows, start + flush_rows)):
                p = pattern[i]
                if p < 0:
                    continue
                touched[p] = True
                values = block[i]
                shift = shifts[p]
                if not seen[p]:
                    seen[p] = True
                    for j in range(n_neurons):
                        shift[j] = values[j]
                part_total = part_totals[p]
                if moments:
                    part_square = part_squares[p]
                    part_act = part_active[p]
                    for j in range(n_neurons):
                        x = values[j] - shift[j]
                        part_total[j] += x
                        part_square[j] += x * x
                        part_act[j] += np.float32(1.0) if values[j] > threshold else np.float32(0.0)
                else:
                    for j in range(n_neurons):
                        part_total[j] += values[j] - shift[j]
            for p in range(touched.shape[0]):
                if not touched[p]:
                    continue
                touched[p] = False
                for j in range(n_neurons):
                    totals[p, j] += part_totals[p, j]
                    part_totals[p, j] = 0.0
                if moments:
                    for j in range(n_neurons):
                        squares[p, j] += part_squares[p, j]
                        active[p, j] += part_active[p, j]
                        part_squares[p, j] = 0.0
                        part_active[p, j] = 0.0

    return pattern_sums


def _membership_patterns(masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group instances by which subsets they belong to.

    Returns (pattern id per instance, -1 for instances in none; K x P membership of patterns).
    Each instance's membership is packed into 64-bit words and hashed (pandas.factorize: linear
    time, ids in order of first appearance), words combined pairwise for K > 64.
    """
    k, n = masks.shape
    codes = None
    for lo in range(0, k, 64):
        word = np.zeros(n, np.uint64)
        for bit, row in enumerate(masks[lo:lo + 64]):
            word |= row.view(np.uint8).astype(np.uint64) << np.uint64(bit)
        word_codes, word_values = pd.factorize(word)
        codes = word_codes if codes is None else pd.factorize(codes * len(word_values) + word_codes)[0]
    # ids appear in increasing order, so a pattern's first instance is where the running max grows
    first = np.flatnonzero(np.r_[True, codes[1:] > np.maximum.accumulate(codes)[:-1]])
    members = masks[:, first]  # K x P
    pattern = codes.astype(np.intp)
    empty = ~members.any(axis=0)
    if empty.any():  # the "in none of them" pattern is skipped by the kernel
        keep = np.flatnonzero(~empty)
        remap = np.full(members.shape[1], -1, np.intp)
        remap[keep] = np.arange(len(keep))
        pattern = remap[pattern]
        members = members[:, keep]
    return pattern, members


class _Accumulator:
    """Float64 sums of (x - shift), of their squares and of active counts for K rows.

    ``shift`` is a per-neuron estimate of the mean; summing shifted values keeps the variance
    (E[d^2] - E[d]^2) from cancelling when a neuron's mean is large next to its spread.
    """

    def __init__(self, k: int, shift: np.ndarray, moments: bool):
        self.shift = shift
        self.totals = np.zeros((k, len(shift)))
        self.squares = np.zeros((k, len(shift))) if moments else None
        self.active = np.zeros((k, len(shift))) if moments else None

    def add_rows(self, row: int, block: np.ndarray, threshold: float) -> None:
        raw = np.asarray(block, dtype=np.float64)
        centred = raw - self.shift
        self.totals[row] += centred.sum(axis=0)
        if self.squares is not None:
            self.squares[row] += np.einsum("ij,ij->j", centred, centred)
            self.active[row] += np.count_nonzero(raw > threshold, axis=0)

    def finish(self, sizes: np.ndarray, stats: Sequence[str]) -> dict[str, np.ndarray]:
        with np.errstate(invalid="ignore", divide="ignore"):
            count = sizes.astype(np.float64)[:, None]
            centred_mean = self.totals / count
            out = {"mean": centred_mean + self.shift}
            if self.squares is not None:
                out["std"] = np.sqrt(np.maximum(self.squares / count - centred_mean ** 2, 0.0))
                out["active"] = self.active / count
        return {s: out[s].astype(np.float32) for s in stats}


def aggregate_masks(activations: np.ndarray, masks: np.ndarray, *, stats: Sequence[str] = STATS,
                    threshold: float = 0.0, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> dict[str, np.ndarray]:
    """Per-neuron statistics of K boolean masks over an instances x neurons array.

    Reads ``activations`` (typically a memory map) in chunks of about ``chunk_bytes``: heap use
    stays near ``chunk_bytes`` plus the K x neurons results whatever the array's size. When the
    subsets are small together their rows are gathered; otherwise all share one pass.
    """
    stats = _check_stats(stats)
    masks = np.asarray(masks, dtype=bool)
    n, n_neurons = activations.shape
    if masks.ndim != 2 or masks.shape[1] != n:
        raise SubsetError(f"masks must be K x {n} booleans, got shape {masks.shape}")
    moments = any(s != "mean" for s in stats)
    shift = np.asarray(activations[:SHIFT_ROWS], dtype=np.float64).mean(axis=0) if n else np.zeros(n_neurons)
    acc = _Accumulator(len(masks), np.nan_to_num(shift), moments)
    sizes = masks.sum(axis=1)
    if sizes.sum() <= GATHER_FRACTION * n:
        rows_per_chunk = max(1, int(chunk_bytes) // (n_neurons * 8))
        for k in np.flatnonzero(sizes):
            index = np.flatnonzero(masks[k])
            for lo in range(0, len(index), rows_per_chunk):
                acc.add_rows(k, activations[index[lo:lo + rows_per_chunk]], threshold)
    elif n:
        nonempty = np.flatnonzero(sizes)
        _full_pass(activations, masks[nonempty], nonempty, acc, threshold, chunk_bytes)
    return acc.finish(sizes, stats)


def _full_pass(activations, masks, rows, acc: _Accumulator, threshold: float, chunk_bytes: int) -> None:
    """One chunked pass over the array for the subsets in ``rows``: pattern kernel or dense S^T A."""
    n, n_neurons = activations.shape
    pattern, members = _membership_patterns(masks)
    moments = acc.squares is not None
    n_patterns = members.shape[1]
    rows_per_chunk = max(1, int(chunk_bytes) // (n_neurons * 4))
    convert = activations.dtype != np.float32
    buffer = np.empty((min(rows_per_chunk, n), n_neurons), np.float32) if convert else None

    # pattern accumulators: float64 totals + float32 partials, 1 or 3 of each
    use_kernel = n_patterns * n_neurons * 12 * (3 if moments else 1) <= max(chunk_bytes, PATTERN_BYTES)
    if use_kernel:
        kernel = _kernel()
        shape = (n_patterns, n_neurons) if moments else (1, 1)
        shifts = np.zeros((n_patterns, n_neurons), np.float32)
        seen = np.zeros(n_patterns, np.bool_)
        totals = np.zeros((n_patterns, n_neurons))
        squares, active = np.zeros(shape), np.zeros(shape)
        part_totals = np.zeros((n_patterns, n_neurons), np.float32)
        part_squares, part_active = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
        touched = np.zeros(n_patterns, np.bool_)
    for lo in range(0, n, rows_per_chunk):
        hi = min(n, lo + rows_per_chunk)
        chunk_pattern = pattern[lo:hi]
        if not (chunk_pattern >= 0).any():
            continue  # nobody here belongs to a requested subset: do not even read these rows
        block = activations[lo:hi]
        if convert:
            np.copyto(buffer[: hi - lo], block, casting="unsafe")  # float16 -> float32 before any math
            block = buffer[: hi - lo]
        block = np.asarray(block).view()
        block.flags.writeable = False  # one compiled signature for memory maps and buffers alike
        if use_kernel:
            kernel(block, chunk_pattern, np.float32(threshold), moments, FLUSH_ROWS, shifts, seen, totals,
                   squares, active, part_totals, part_squares, part_active, touched)
        else:  # float64: this path has no per-pattern shift to keep float32 sums of squares honest
            membership = masks[:, lo:hi].astype(np.float64)
            centred = block - acc.shift
            acc.totals[rows] += membership @ centred
            if moments:
                acc.squares[rows] += membership @ np.square(centred)
                acc.active[rows] += membership @ (block > threshold)
    if use_kernel:
        # re-centre each pattern's sums on the common shift (the parallel-variance identity), in
        # float64, then add patterns into subsets: K x P membership times P x N pattern sums
        counts = np.bincount(pattern[pattern >= 0], minlength=n_patterns).astype(np.float64)[:, None]
        offset = shifts - acc.shift
        member_matrix = members.astype(np.float64)
        acc.totals[rows] += member_matrix @ (totals + counts * offset)
        if moments:
            acc.squares[rows] += member_matrix @ (squares + 2 * offset * totals + counts * offset ** 2)
            acc.active[rows] += member_matrix @ active


def _check_stats(stats) -> tuple[str, ...]:
    stats = (stats,) if isinstance(stats, str) else tuple(stats)
    bad = [s for s in stats if s not in STATS]
    if bad or not stats:
        raise SubsetError(f"Unknown statistic(s) {bad}; choose from {', '.join(STATS)}.")
    return stats


def _layer_signature(activations) -> tuple:
    """What identifies the bytes behind a layer: a store overwritten in place gets a new signature."""
    filename = getattr(activations, "filename", None)
    if filename:
        st = os.stat(filename)
        return (str(filename), st.st_size, st.st_mtime_ns)
    return ("memory", id(activations))
