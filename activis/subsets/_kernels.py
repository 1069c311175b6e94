"""Compiled loops of the subset aggregation (see `aggregation`): membership patterns and their sums.

`aggregation` imports this module (and numba) on first use; the compiled code is cached on disk.
Kernels that call each other live in this one file: numba checks a cached kernel only against the
file that defines it, so a kernel calling compiled helpers of another file would keep running
their old machine code after that file changed.
"""

from __future__ import annotations

import numba
import numpy as np


def _jit(func):
    try:
        return numba.njit(cache=True, nogil=True, fastmath=True)(func)
    except RuntimeError:  # no writable cache location: compile in each process instead
        return numba.njit(nogil=True, fastmath=True)(func)


@_jit
def half_to_float(bits, scales, out):
    """float16 bit patterns (uint16) to float32 by arithmetic the compiler vectorises (numpy
    converts float16 one value at a time, slower than reading them): exponent e scales the
    mantissa (with its implicit 1 unless e = 0) by scales[e]; e = 31 is inf or nan."""
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


@_jit
def membership_words(masks, codes):
    """Pack up to 64 rows of K x N booleans (viewed as uint8) into one uint64 per instance.

    Blocks of instances keep the words being built in the CPU's cache across the K rows, built as
    32-bit halves (twice the vector lanes of 64-bit words)."""
    k, n = masks.shape
    block = 2048
    half = np.zeros(block, np.uint32)
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        out, word = codes[lo:hi], half[: hi - lo]
        for lo_bit in range(0, max(k, 1), 32):
            word[:] = 0
            for bit in range(lo_bit, min(k, lo_bit + 32)):
                row, shift = masks[bit, lo:hi], np.uint32(bit - lo_bit)
                for i in range(hi - lo):
                    word[i] |= np.uint32(row[i]) << shift
            if lo_bit == 0:
                for i in range(hi - lo):
                    out[i] = np.uint64(word[i])
            else:
                for i in range(hi - lo):
                    out[i] |= np.uint64(word[i]) << np.uint64(32)


@_jit
def factorize(codes, ids, first):
    """Ids 0, 1, ... in order of first appearance of each distinct uint64 code, and in ``first`` the
    instance where each id first appears; returns how many ids.

    An open-addressing hash table sized to the distinct codes (a few hundred for tens of subsets):
    it stays in the CPU's cache, so this is one pass at memory speed."""
    size = 1024
    keys = np.zeros(size, np.uint64)
    values = np.full(size, -1, np.int64)
    n_unique = 0
    multiplier = np.uint64(0x9E3779B97F4A7C15)
    for i in range(codes.shape[0]):
        code = codes[i]
        slot = np.int64((code * multiplier) >> np.uint64(40)) & (size - 1)
        while values[slot] >= 0 and keys[slot] != code:
            slot = (slot + 1) & (size - 1)
        if values[slot] < 0:
            keys[slot] = code
            values[slot] = n_unique
            first[n_unique] = i
            n_unique += 1
            if 2 * n_unique > size:  # keep the table at most half full: rebuild it twice as large
                size *= 2
                old_keys, old_values = keys, values
                keys = np.zeros(size, np.uint64)
                values = np.full(size, -1, np.int64)
                for s in range(old_values.shape[0]):
                    if old_values[s] >= 0:
                        new = np.int64((old_keys[s] * multiplier) >> np.uint64(40)) & (size - 1)
                        while values[new] >= 0:
                            new = (new + 1) & (size - 1)
                        keys[new] = old_keys[s]
                        values[new] = old_values[s]
                ids[i] = n_unique - 1
                continue
        ids[i] = values[slot]
    return n_unique


@_jit
def accumulate(rows, pattern, threshold, moments, flush_rows, partial, active, counts, since, sums):
    """Add each float32 row to its membership pattern's partial sums.

    ``partial[p]`` holds, per neuron, the pattern's shift (its first row here, set when first met),
    then the float32 sums of d = x - shift and of d * d (small d keep float32 honest: one instance
    alone has d = 0), ``active[p]`` the uint8 counts of x > threshold (a quarter of the bytes of a
    float32 count: the pass's cost is moving the patterns' sums through the caches); they go into
    the float64 ``sums[p]`` every ``flush_rows`` (at most 255) rows of that pattern. The pattern's
    block is contiguous, so one row touches one run of memory; the active count has a loop of its
    own so that the compiler vectorises both.
    """
    n_rows, n_neurons = rows.shape
    for i in range(n_rows):
        p = pattern[i]
        if p < 0:
            continue
        row = rows[i]
        block = partial[p]
        shift, total = block[0], block[1]
        if counts[p] == 0:
            shift[:] = row
        if moments:
            square, count = block[2], active[p]
            for j in range(n_neurons):
                d = row[j] - shift[j]
                total[j] += d
                square[j] += d * d
            for j in range(n_neurons):
                count[j] += row[j] > threshold
        else:
            for j in range(n_neurons):
                total[j] += row[j] - shift[j]
        counts[p] += 1
        since[p] += 1
        if since[p] >= flush_rows:
            since[p] = 0
            _flush(partial, active, sums, p)


@_jit
def _flush(partial, active, sums, p):
    target = sums[p]
    for s in range(partial.shape[1] - 1):
        source, out = partial[p, s + 1], target[s]
        for j in range(out.shape[0]):
            out[j] += source[j]
            source[j] = 0.0
    if active.shape[1]:
        count, out = active[p], target[2]
        for j in range(out.shape[0]):
            out[j] += count[j]
            count[j] = 0


@_jit
def finish(partial, active, counts, sums, shift):
    """Flush every pattern's partial sums into ``sums`` and re-centre them from the pattern's own
    shift onto the common per-neuron ``shift`` (float64; the parallel-variance identity): with
    o = own shift - shift, sum(x - shift) = sum(d) + n o and sum((x - shift)^2) = sum(d^2) + (2 sum(d) + n o) o.
    One compiled pass over the sums instead of half a dozen temporary arrays of them."""
    moments = sums.shape[1] > 1
    for p in range(partial.shape[0]):
        _flush(partial, active, sums, p)
        n, own, total = np.float64(counts[p]), partial[p, 0], sums[p, 0]
        square = sums[p, 1 if moments else 0]  # (the total itself when only means are summed: unused)
        for j in range(total.shape[0]):
            offset = np.float64(own[j]) - shift[j]
            if moments:
                square[j] += (2.0 * total[j] + n * offset) * offset
            total[j] += n * offset


@_jit
def accumulate_half(bits, scales, buffer, pattern, threshold, moments, flush_rows, partial, active, counts, since,
                    sums):
    """`accumulate` for float16 rows (their uint16 bits), converted block by block into ``buffer``
    (a cache-sized float32 scratch); blocks where no row belongs to a pattern are not read."""
    n_rows = bits.shape[0]
    block_rows = buffer.shape[0]
    for lo in range(0, n_rows, block_rows):
        hi = min(n_rows, lo + block_rows)
        wanted = False
        for i in range(lo, hi):
            if pattern[i] >= 0:
                wanted = True
                break
        if not wanted:
            continue
        out = buffer[: hi - lo]
        half_to_float(bits[lo:hi], scales, out)
        accumulate(out, pattern[lo:hi], threshold, moments, flush_rows, partial, active, counts, since, sums)
