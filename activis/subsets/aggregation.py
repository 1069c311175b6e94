"""Per-neuron statistics of many subsets at one layer (S^T A) in one chunked pass."""

from __future__ import annotations

import functools
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
# rows whose mean is the per-neuron shift (see _Accumulator); rows of one pattern per float32 partial sum
SHIFT_ROWS = 256
FLUSH_ROWS = 4096
# rows are converted / multiplied in blocks of about this size, so that they stay in the CPU's cache
KERNEL_CHUNK_BYTES = 1 << 20
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
def _kernel():
    """Compile (once, cached on disk) the pattern-sum kernel; numba is imported only here."""
    import numba

    def jit(func):
        try:
            return numba.njit(cache=True, nogil=True, fastmath=True)(func)
        except RuntimeError:  # no writable cache location: compile in each process instead
            return numba.njit(nogil=True, fastmath=True)(func)

    @jit
    def half_to_float(bits, scales, out):
        # float16 bit patterns (uint16) to float32 by arithmetic the compiler vectorises (numpy
        # converts float16 one value at a time, slower than reading them): exponent e scales the
        # mantissa (with its implicit 1 unless e = 0) by scales[e]; e = 31 is inf or nan
        n_rows, n_neurons = bits.shape
        for i in range(n_rows):
            source, target = bits[i], out[i]
            for j in range(n_neurons):
                h = np.int32(source[j])
                exponent = (h >> 10) & 31
                mantissa = h & 1023
                value = np.float32(mantissa + (1024 if exponent > 0 else 0)) * scales[exponent]
                if exponent == 31:
                    value = np.float32(np.inf) if mantissa == 0 else np.float32(np.nan)
                target[j] = -value if h & 0x8000 else value

    # (no jitted function calls another: numba's cache misses, every process, on a function that
    # refers to another dispatcher from this closure)
    @jit
    def flush_all(partial, sums):
        for p in range(partial.shape[0]):
            for s in range(partial.shape[1]):
                for j in range(partial.shape[2]):
                    sums[p, s, j] += partial[p, s, j]
                    partial[p, s, j] = 0.0

    @jit
    def pattern_sums(block, pattern, threshold, moments, flush_rows, shifts, partial, counts, sums, scratch):
        # Each row is added to its pattern's float32 partials of d = x - (the pattern's first row),
        # d*d and x > threshold (small d keep float32 honest: one instance alone has d = 0), flushed
        # into float64 ``sums`` every ``flush_rows`` rows of that pattern. Two loops over few arrays
        # each, so that the compiler vectorises them (it does not vectorise one loop over six).
        n_rows, n_neurons = block.shape
        for i in range(n_rows):
            p = pattern[i]
            if p < 0:
                continue
            row = block[i]
            shift = shifts[p]
            if counts[p] == 0:
                shift[:] = row
            part_total = partial[p, 0]
            if moments:
                part_active = partial[p, 2]
                for j in range(n_neurons):
                    x = row[j]
                    scratch[j] = x - shift[j]
                    part_active[j] += np.float32(1.0) if x > threshold else np.float32(0.0)
                part_square = partial[p, 1]
                for j in range(n_neurons):
                    d = scratch[j]
                    part_total[j] += d
                    part_square[j] += d * d
            else:
                for j in range(n_neurons):
                    part_total[j] += row[j] - shift[j]
            counts[p] += 1
            if counts[p] % flush_rows == 0:  # into float64, before float32 partials lose precision
                for s in range(partial.shape[1]):
                    for j in range(n_neurons):
                        sums[p, s, j] += partial[p, s, j]
                        partial[p, s, j] = 0.0

    return pattern_sums, flush_all, half_to_float


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
        if (pattern[lo:hi] >= 0).any():
            yield lo, hi


def _float32_rows(activations, lo: int, hi: int, buffer: np.ndarray) -> np.ndarray:
    """Rows lo:hi as float32, converted into ``buffer`` (a cache-sized scratch) when stored narrower."""
    block = activations[lo:hi]
    if block.dtype == np.float32:
        return np.asarray(block)
    out = buffer[: hi - lo]
    if block.dtype == np.float16 and block.flags.c_contiguous:
        _kernel()[2](np.asarray(block).view(np.uint16), HALF_SCALES, out)
    else:
        np.copyto(out, block, casting="unsafe")
    return out


def _pattern_pass(activations, pattern, members, rows, acc: _Accumulator, threshold: float,
                  chunk_bytes: int) -> None:
    """Each row added once, to its membership pattern's sums; patterns then summed into subsets.

    Large layers are split into contiguous row ranges summed side by side (the kernel releases
    the GIL), each with its own pattern sums, added together at the end.
    """
    n = len(pattern)
    n_threads = max(1, min(_cpu_count(), n // THREAD_ROWS))
    bounds = np.linspace(0, n, n_threads + 1).astype(int)
    parts = [(activations, pattern, members.shape[1], threshold, acc.squares is not None, chunk_bytes, lo, hi)
             for lo, hi in zip(bounds[:-1], bounds[1:])]
    _kernel()  # compiled (or loaded from numba's cache) once, before any thread needs it
    if n_threads == 1:
        results = [_pattern_sums(*parts[0])]
    else:
        with ThreadPoolExecutor(n_threads) as pool:
            results = list(pool.map(lambda args: _pattern_sums(*args), parts))
    # re-centre each pattern's sums on the common shift (the parallel-variance identity, in
    # float64), then add patterns into subsets: K x P membership times P x (sums x neurons)
    total = None
    for sums, counts, shifts in results:
        offset = shifts - acc.shift
        counts = counts.astype(np.float64)[:, None]
        if acc.squares is not None:
            sums[:, 1] += (2 * sums[:, 0] + counts * offset) * offset
        sums[:, 0] += counts * offset
        total = sums if total is None else total + sums
    with _one_blas_thread():
        subset_sums = (members.astype(np.float64) @ total.reshape(len(total), -1)).reshape(len(rows), -1,
                                                                                           total.shape[2])
    acc.totals[rows] += subset_sums[:, 0]
    if acc.squares is not None:
        acc.squares[rows] += subset_sums[:, 1]
        acc.active[rows] += subset_sums[:, 2]


def _pattern_sums(activations, pattern, n_patterns: int, threshold: float, moments: bool, chunk_bytes: int,
                  start: int, stop: int):
    """Per pattern, over rows start:stop: float64 sums of d, d*d and x > threshold with d = x - the
    pattern's first row here (P x 1 or 3 x neurons), row counts, and those first rows."""
    n_neurons = activations.shape[1]
    pattern_sums, flush_all, _ = _kernel()
    rows_per_chunk = max(1, min(int(chunk_bytes), KERNEL_CHUNK_BYTES) // (n_neurons * 4))
    buffer = np.empty((min(rows_per_chunk, stop - start), n_neurons), np.float32)
    n_sums = 3 if moments else 1
    partial = np.zeros((n_patterns, n_sums, n_neurons), np.float32)
    sums = np.zeros((n_patterns, n_sums, n_neurons))
    counts = np.zeros(n_patterns, np.int64)
    shifts = np.zeros((n_patterns, n_neurons), np.float32)
    scratch = np.empty(n_neurons, np.float32)
    for lo, hi in _chunks(pattern, rows_per_chunk, start, stop):
        block = _float32_rows(activations, lo, hi, buffer).view()
        block.flags.writeable = False  # one compiled signature for memory maps and buffers alike
        pattern_sums(block, pattern[lo:hi], np.float32(threshold), moments, FLUSH_ROWS, shifts, partial, counts,
                     sums, scratch)
    flush_all(partial, sums)
    return sums, counts, shifts


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
