"""Per-neuron statistics of many subsets at one layer (S^T A) in one chunked pass."""

from __future__ import annotations

import contextlib
import functools
import mmap
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .errors import SubsetError

STATS = ("mean", "active", "std")
DEFAULT_CHUNK_BYTES = 64 << 20
# when the requested subsets together hold at most this fraction of the store, their rows are
# read directly (a gather) instead of a pass over the whole layer
GATHER_FRACTION = 0.125
# rows whose mean is the per-neuron shift (see _Accumulator)
SHIFT_ROWS = 256
# rows of one pattern per float32 partial sum: measured on 100,000 ReLU rows, 20 subsets, the largest
# relative error of a std was 5e-5 at 4096 rows, 6e-6 at 256 (a flush costs ~1 % of the pass); at most
# 255, the largest count a pattern's uint8 active counters hold
FLUSH_ROWS = 255
# rows are converted / multiplied in blocks of about this size, so that they stay in the CPU's cache
KERNEL_CHUNK_BYTES = 1 << 20
# rows of a memory-mapped layer are summed this many bytes per compiled call, the next block's
# read from disk started before (see _read_ahead)
READ_AHEAD_BYTES = 8 << 20
METHODS = ("auto", "patterns", "matmul")
# float16 exponent e -> the float32 factor of its (integer) mantissa: 2^(e - 25), and 2^-24 for subnormals
HALF_SCALES = np.ldexp(np.float32(1), np.maximum(np.arange(32), 1) - 25).astype(np.float32)
# the pattern pass runs one thread per this many rows, up to one per CPU
THREAD_ROWS = 32768
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
def _kernels():
    """The compiled loops (see `_kernels`); numba is imported, and their code loaded, only here."""
    from . import _kernels

    return _kernels


def _membership_patterns(masks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group instances by which subsets they belong to.

    Returns (pattern id per instance, -1 for instances in none; K x P membership of patterns).
    Each instance's membership is packed into 64-bit words and hashed (compiled: one pass, ids in
    order of first appearance), words combined pairwise for K > 64.
    """
    kernels = _kernels()
    k, n = masks.shape
    bits = np.ascontiguousarray(masks).view(np.uint8)
    codes, ids, first = np.empty(n, np.uint64), np.empty(n, np.int64), np.empty(n, np.int64)
    pattern = None
    for lo in range(0, k, 64):
        kernels.membership_words(bits[lo:lo + 64], codes)
        if pattern is not None:  # (earlier words' pattern, this word) as one code
            n_words = kernels.factorize(codes, ids, first)
            np.multiply(pattern.astype(np.uint64), np.uint64(n_words), out=codes)
            codes += ids.astype(np.uint64)
        n_patterns = kernels.factorize(codes, ids, first)
        pattern = ids.copy()
    members = masks[:, first[:n_patterns]]  # K x P
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

    def add_rows(self, row: int, block: np.ndarray, threshold: float, sign: int = 1) -> None:
        """Add (``sign`` 1) or take away (-1) these instances' rows to row ``row``'s sums."""
        raw = np.asarray(block, dtype=np.float64)
        centred = raw - self.shift
        self.totals[row] += sign * centred.sum(axis=0)
        if self.squares is not None:
            self.squares[row] += sign * np.einsum("ij,ij->j", centred, centred)
            self.active[row] += sign * np.count_nonzero(raw > threshold, axis=0)

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
                    threshold: float = 0.0, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                    method: str = "auto") -> dict[str, np.ndarray]:
    """Per-neuron statistics of K boolean masks over an instances x neurons array.

    Reads ``activations`` (typically a memory map) in chunks of at most ``chunk_bytes``: heap use
    stays near ``chunk_bytes`` plus the K x neurons results whatever the array's size. When the
    subsets are small together their rows are gathered; otherwise all share one pass, which adds
    each row once to its membership pattern's sums (``method="patterns"``, compiled) or multiplies
    the K x chunk membership matrix with each chunk (``"matmul"``, BLAS). ``"auto"`` takes the
    patterns unless their sums would outgrow the chunk budget (see benchmarks/bench_aggregation.py).
    """
    stats = _check_stats(stats)
    if method not in METHODS:
        raise SubsetError(f"Unknown aggregation method {method!r}; choose from {', '.join(METHODS)}.")
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
        _full_pass(activations, masks[nonempty], nonempty, acc, threshold, chunk_bytes, method)
    return acc.finish(sizes, stats)


def _full_pass(activations, masks, rows, acc: _Accumulator, threshold: float, chunk_bytes: int,
               method: str) -> None:
    """One chunked pass over the array for the subsets in ``rows``: pattern kernel or S^T A products."""
    pattern, members = _membership_patterns(masks)
    moments = acc.squares is not None
    n_neurons = activations.shape[1]
    threads = max(1, min(_cpu_count(), len(pattern) // THREAD_ROWS))
    pattern_bytes = threads * members.shape[1] * n_neurons * (12 * (3 if moments else 1) + 4)
    if method == "auto":
        method = "patterns" if pattern_bytes <= max(chunk_bytes, PATTERN_BYTES) else "matmul"
    if method == "patterns":
        _pattern_pass(activations, pattern, members, rows, acc, threshold, chunk_bytes)
    else:
        with _one_blas_thread():
            _matmul_pass(activations, masks, pattern, rows, acc, threshold, chunk_bytes)


def _chunks(pattern: np.ndarray, rows_per_chunk: int, start: int = 0, stop: int | None = None):
    """(lo, hi) row ranges, skipping those where nobody belongs to a requested subset (never read)."""
    stop = len(pattern) if stop is None else stop
    for lo in range(start, stop, rows_per_chunk):
        hi = min(stop, lo + rows_per_chunk)
        if pattern[lo:hi].max() >= 0:
            yield lo, hi


def _pattern_pass(activations, pattern, members, rows, acc: _Accumulator, threshold: float,
                  chunk_bytes: int) -> None:
    """Each row added once, to its membership pattern's sums; patterns then summed into subsets.

    Large layers are split into contiguous row ranges summed side by side (the kernel releases
    the GIL), each with its own pattern sums, added together at the end.
    """
    n = len(pattern)
    n_threads = max(1, min(_cpu_count(), n // THREAD_ROWS))
    bounds = np.linspace(0, n, n_threads + 1).astype(int)
    parts = [(activations, pattern, members.shape[1], threshold, acc.shift, acc.squares is not None, chunk_bytes,
              lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
    _kernels()  # compiled (or loaded from numba's cache) once, before any thread needs it
    if n_threads == 1:
        total = _pattern_sums(*parts[0])
    else:
        with ThreadPoolExecutor(n_threads) as pool:
            total = sum(pool.map(lambda args: _pattern_sums(*args), parts))
    # patterns into subsets: K x P membership times P x (sums x neurons)
    with _one_blas_thread():
        subset_sums = (members.astype(np.float64) @ total.reshape(len(total), -1)).reshape(len(rows), -1,
                                                                                           total.shape[2])
    acc.totals[rows] += subset_sums[:, 0]
    if acc.squares is not None:
        acc.squares[rows] += subset_sums[:, 1]
        acc.active[rows] += subset_sums[:, 2]


def _pattern_sums(activations, pattern, n_patterns: int, threshold: float, shift: np.ndarray, moments: bool,
                  chunk_bytes: int, start: int, stop: int) -> np.ndarray:
    """Per pattern, over rows start:stop: float64 sums of x - shift, its square and x > threshold
    (P x 1 or 3 x neurons), summed around each pattern's first row here and re-centred at the end
    (see `_kernels.finish`).

    Float32 rows are read in place and float16 ones converted inside the compiled loop, a few
    megabytes per call, the next block's read from disk started (see `_read_ahead`) before this
    one is summed; other dtypes are converted here, block by block."""
    kernels = _kernels()
    n_neurons = activations.shape[1]
    partial = np.zeros((n_patterns, 3 if moments else 2, n_neurons), np.float32)
    active = np.zeros((n_patterns, n_neurons if moments else 0), np.uint8)
    sums = np.zeros((n_patterns, 3 if moments else 1, n_neurons))
    counts, since = np.zeros(n_patterns, np.int64), np.zeros(n_patterns, np.int64)
    flush_rows = min(FLUSH_ROWS, np.iinfo(active.dtype).max)  # the uint8 counts must not wrap
    args = (np.float32(threshold), moments, flush_rows, partial, active, counts, since, sums)
    rows_per_chunk = max(1, min(int(chunk_bytes), KERNEL_CHUNK_BYTES) // (n_neurons * 4))
    buffer = np.empty((min(rows_per_chunk, stop - start), n_neurons), np.float32)
    dtype = activations.dtype
    compiled = dtype == np.float32 or (dtype == np.float16 and activations.flags.c_contiguous)
    block_rows = max(rows_per_chunk, READ_AHEAD_BYTES // max(1, activations.strides[0])) if compiled else rows_per_chunk
    with _read_ahead(activations) as read_ahead:
        read_ahead(start, start + block_rows)
        for lo, hi in _chunks(pattern, block_rows, start, stop):
            read_ahead(hi, min(stop, hi + block_rows))
            if not compiled:
                out = buffer[: hi - lo]
                np.copyto(out, activations[lo:hi], casting="unsafe")
                kernels.accumulate(out, pattern[lo:hi], *args)
                continue
            rows = np.asarray(activations[lo:hi])
            rows = rows.view(np.uint16) if dtype == np.float16 else rows.view()
            rows.flags.writeable = False  # one compiled signature for memory maps and arrays alike
            if dtype == np.float16:
                kernels.accumulate_half(rows, HALF_SCALES, buffer, pattern[lo:hi], *args)
            else:
                kernels.accumulate(rows, pattern[lo:hi], *args)
    kernels.finish(partial, active, counts, sums, shift)
    return sums


@contextlib.contextmanager
def _read_ahead(activations):
    """A function asking the OS to start reading rows lo:hi of a memory-mapped layer from disk
    (``posix_fadvise(WILLNEED)``), so that the disk works while the CPU sums the rows before
    them; it does nothing for arrays in memory (or where the OS has no such call)."""
    path = getattr(activations, "filename", None)
    if not path or not hasattr(os, "posix_fadvise") or not isinstance(activations.base, mmap.mmap):
        yield lambda lo, hi: None
        return
    fd = os.open(path, os.O_RDONLY)
    row_bytes, offset = activations.strides[0], activations.offset

    def read_ahead(lo: int, hi: int) -> None:
        if hi > lo:
            os.posix_fadvise(fd, offset + lo * row_bytes, (hi - lo) * row_bytes, os.POSIX_FADV_WILLNEED)

    try:
        yield read_ahead
    finally:
        os.close(fd)


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _one_blas_thread():
    """Products of this size finish before BLAS threads are useful; on a busy machine they only spin."""
    return _blas_controller().limit(limits=1, user_api="blas")


@functools.cache
def _blas_controller():
    """threadpoolctl's view of the loaded BLAS libraries, made once: making it scans every loaded library
    (~10 ms with torch loaded), which every aggregation (a brush row, a checkpoint switch) paid."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _matmul_pass(activations, masks, pattern, rows, acc: _Accumulator, threshold: float, chunk_bytes: int) -> None:
    """S^T A per chunk as matrix products (BLAS): the chunk x K membership matrix, transposed, times
    the centred chunk and its square (float64: without per-pattern shifts, float32 sums of squares
    would cancel for a tight subset) and times the (x > threshold) indicator (float32: exact counts)."""
    n_neurons = activations.shape[1]
    moments = acc.squares is not None
    rows_per_chunk = max(1, min(int(chunk_bytes), KERNEL_CHUNK_BYTES * 4) // (n_neurons * 8))
    shape = (min(rows_per_chunk, len(pattern)), n_neurons)
    centred, square = np.empty(shape), np.empty(shape)
    indicator = np.empty(shape, np.float32)
    membership, membership32 = np.empty((len(masks), shape[0])), np.empty((len(masks), shape[0]), np.float32)
    for lo, hi in _chunks(pattern, rows_per_chunk):
        block = activations[lo:hi]
        m, c = membership[:, : hi - lo], centred[: hi - lo]
        np.copyto(m, masks[:, lo:hi])
        np.subtract(block, acc.shift, out=c)
        acc.totals[rows] += m @ c
        if moments:
            acc.squares[rows] += m @ np.square(c, out=square[: hi - lo])
            m32, i32 = membership32[:, : hi - lo], indicator[: hi - lo]
            np.copyto(m32, m)
            np.greater(block, np.float32(threshold), out=i32, casting="unsafe")
            acc.active[rows] += m32 @ i32


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
