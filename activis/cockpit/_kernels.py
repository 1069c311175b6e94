"""Compiled loops of the cockpit: the per-sample gradient histograms (see `persample`) and the
parameter distances.

Every kernel bins a value ``p`` as the reference does, ``floor((float64(p) - lo) / width)`` clamped
to the edge bins, and every product ``x * y`` is formed in the factors' own precision, as in the
materialised tensor. That formula is monotone in ``p``, so per dtype the bins have exact thresholds
``P[j]`` (the smallest value binned at or above ``j``): comparisons with them replace the division
for the two bins beside 0 where nearly all values of a trained network land (the *band*
``[P[c0], P[c0 + 2])`` split at ``T = P[c0 + 1]``).

A row ``x * y_i`` of a Linear layer's per-sample gradient (a scalar times one sample's input) is
classified from its extreme products alone (rounding is monotone too): all in one band bin, split
by sign at ``T`` (then counted from the sample's sign counts), mostly so but with some products
outside the band (the sign count corrected by what left the band: in 1D counted per crossed bin
edge by bisection in the sample's sorted inputs, in 2D by enumerating only the inputs large
enough to leave it, grouped by magnitude), or anything else (non-finite values, products too small to keep their
sign's side of ``T``), which is binned product by product.

`persample` and `fused` import this module (and numba) on first use; the compiled code is cached
on disk. It stays one file past the house's ~600 lines on purpose: numba checks a cached kernel
only against the file that defines it, so a kernel calling compiled helpers of another file would
keep running their old machine code after that file changed (an upgrade that touches only it).
"""

from __future__ import annotations

import functools
import warnings

import numba
import numpy as np

# row classes
_LOWER, _UPPER, _SPLIT, _CORRECTED, _DIRECT = range(5)


@functools.lru_cache(maxsize=64)
def band(bins: int, lo: float, width: float, dtype: str) -> tuple[np.ndarray, int]:
    """Thresholds ``P`` (P[0] = -inf, P[bins:] = +inf) of a binning for values of ``dtype``, and the
    lower bin ``c0`` of the band: the two bins beside the threshold closest to 0."""
    ftype = np.dtype(dtype)
    itype = np.int32 if ftype.itemsize == 4 else np.int64
    sign = np.int64(np.iinfo(itype).min)

    def from_key(keys):  # order-preserving integer keys -> floats (-0.0 just below +0.0)
        signed = (keys ^ np.uint64(1 << 63)).view(np.int64)
        bits = np.where(signed >= 0, signed, ~signed | sign)
        return bits.astype(itype).view(ftype)

    def key(value):
        bits = np.int64(np.array(value, dtype=ftype).view(itype))
        return np.uint64((bits if bits >= 0 else ~(bits & ~sign)) + np.int64(0)) ^ np.uint64(1 << 63)

    def index(values):
        return np.clip(np.floor((values.astype(np.float64) - lo) / width), 0, bins - 1)

    j = np.arange(1, bins)  # P[j] = the smallest value with index >= j, bisected on the keys
    below = np.full(j.size, key(-np.inf), dtype=np.uint64)
    above = np.full(j.size, key(np.inf), dtype=np.uint64)
    while np.any(above - below > 1):
        mid = below + (above - below) // np.uint64(2)
        reached = index(from_key(mid)) >= j
        above = np.where(reached, mid, above)
        below = np.where(reached, below, mid)
    thresholds = np.concatenate([[-np.inf], from_key(above), [np.inf, np.inf]]).astype(ftype)
    zero = int(index(np.zeros(1))[0])
    if bins == 1 or zero == 0:
        c0 = 0
    elif zero == bins - 1 or -float(thresholds[zero]) <= float(thresholds[zero + 1]):
        c0 = zero - 1
    else:
        c0 = zero
    return thresholds, c0


def _jit(func, **options):
    """Compiled once per machine and cached on disk. The histograms use no fastmath: their bins are
    those of IEEE arithmetic."""
    try:
        return numba.njit(cache=True, nogil=True, **options)(func)
    except RuntimeError as exc:  # no writable cache location: compile in each process instead
        if not _uncached:
            _uncached.append(exc)
            warnings.warn(f"numba cannot cache the cockpit's compiled code ({exc}); each new process compiles it "
                          "(seconds). Set NUMBA_CACHE_DIR to a writable directory to avoid this.",
                          stacklevel=2)
        return numba.njit(nogil=True, **options)(func)


_uncached: list = []


def _inline(func):
    return _jit(func, inline="always")


# --------------------------------------------------------------------------- compiled helpers
@_inline
def _bin(p, lo, width, last):
    """The reference's bin of p (NaN: 0, the callers count NaNs apart), branch-free."""
    t = np.floor((np.float64(p) - lo) / width)
    t = t if t >= 0.0 else 0.0
    return int(t if t <= last else last)


@_inline
def _direct_row(xa, y, lo, width, last, bins):
    """Bins of all products xa * y into ``bins`` (vectorised); returns the number of NaN products."""
    nans = 0
    for b in range(y.size):
        p = xa * y[b]
        nans += p != p
        bins[b] = _bin(p, lo, width, last)
    return nans


@_inline
def _popcount(w):
    w = w - ((w >> np.uint64(1)) & np.uint64(0x5555555555555555))
    w = (w & np.uint64(0x3333333333333333)) + ((w >> np.uint64(2)) & np.uint64(0x3333333333333333))
    w = (w + (w >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return int((w * np.uint64(0x0101010101010101)) >> np.uint64(56))


@_inline
def _sample_stats(y):
    """Extremes, the values of each sign closest to 0, sign counts and finiteness of one sample,
    in one branch-free (vectorised) pass."""
    inf = np.full(1, np.inf, dtype=y.dtype)[0]
    ymin, ymax = inf, -inf
    max_neg, min_pos = -inf, inf  # meaningful only where n_neg, n_pos > 0: in y's dtype
    n_neg = n_pos = 0
    finite = True
    for b in range(y.size):
        v = y[b]
        finite &= v - v == 0
        ymin = v if v < ymin else ymin  # comparisons, not min(): they compile to vector min/max
        ymax = v if v > ymax else ymax
        n_neg += v < 0
        n_pos += v > 0
        neg = v if v < 0 else -inf
        pos = v if v > 0 else inf
        max_neg = neg if neg > max_neg else max_neg
        min_pos = pos if pos < min_pos else min_pos
    return ymin, ymax, max_neg, min_pos, n_neg, n_pos, finite


@_inline
def _sorted_stats(s):
    """`_sample_stats` of a sample from its sorted values (NaN sorts last), by bisection."""
    n = s.size
    n_neg = np.searchsorted(s, 0, side="left")
    n_pos = n - np.searchsorted(s, 0, side="right")
    inf = np.full(1, np.inf, dtype=s.dtype)[0]
    max_neg = s[n_neg - 1] if n_neg > 0 else -inf
    min_pos = s[n - n_pos] if n_pos > 0 else inf
    finite = (s[0] - s[0] == 0) & (s[n - 1] - s[n - 1] == 0)
    return s[0], s[n - 1], max_neg, min_pos, n_neg, n_pos, finite


@_inline
def _row_class(x, ymin, ymax, max_neg, min_pos, n_neg, n_pos, n, L, T, U):
    """Class of the row x * y and its count in the lower band bin under the sign rule.

    The sign rule: for T <= 0 the lower bin holds the products of opposite signs, for T > 0 all
    but those of equal signs. It holds when the product of each sign closest to 0 keeps its side of
    T (then every product of that sign does: rounding is monotone).
    """
    if not np.isfinite(x):
        return _DIRECT, 0
    lo_p, hi_p = x * ymin, x * ymax
    if x < 0:
        lo_p, hi_p = hi_p, lo_p
    in_band = lo_p >= L and hi_p < U
    if in_band and hi_p < T:
        return _LOWER, 0
    if in_band and lo_p >= T:
        return _UPPER, 0
    if T <= 0:
        opposite, nearest = (n_neg, max_neg) if x > 0 else (n_pos, min_pos)
        clean = opposite == 0 or x * nearest < T
        lower = opposite
    else:
        same, nearest = (n_pos, min_pos) if x > 0 else (n_neg, max_neg)
        clean = same == 0 or x * nearest >= T
        lower = n - same
    if not clean:
        return _DIRECT, 0
    return (_SPLIT if in_band else _CORRECTED), lower


# --------------------------------------------------------------------------- kernels
@_inline
def _nearest(negative_zero, n_neg, max_neg, n_pos, min_pos):
    """The sign rule's count and the value of y nearest T, for x > 0 and for x <= 0 (see `_row_class`)."""
    if negative_zero:
        return n_neg, max_neg, n_pos, min_pos
    return n_pos, min_pos, n_neg, max_neg


@_inline
def _row_extent(xa, ymin, ymax, cnt_p, near_p, cnt_n, near_n, negative_zero, T):
    """The smallest and largest product of the row xa * y, its sign-rule count and whether the rule
    holds for it; branch-free, so that a loop over rows vectorises."""
    p1, p2 = xa * ymin, xa * ymax
    positive = xa > 0
    cnt = cnt_p if positive else cnt_n
    near = xa * (near_p if positive else near_n)
    clean = (cnt == 0) | ((near < T) if negative_zero else (near >= T))
    return min(p1, p2), max(p1, p2), cnt, clean


@_jit
def dense_hist1d(flat, P, c0, lo, width, hist):
    """Count the values of ``flat`` into ``hist``; returns the number of NaNs.

    Per block, the bins of all values in one branch-free (vectorised) pass, then counted into four
    interleaved copies of the histogram: runs of values in one bin do not wait on each other.
    """
    last = P.size - 3
    block = 1024
    bins = np.empty(block, dtype=np.int64)
    copies = np.zeros((4, hist.size), dtype=np.int64)
    nans = 0
    for start in range(0, flat.size, block):
        size = min(flat.size, start + block) - start
        for k in range(size):
            p = flat[start + k]
            nans += p != p
            bins[k] = _bin(p, lo, width, last)
        quads = size - size % 4
        for k in range(0, quads, 4):
            copies[0, bins[k]] += 1
            copies[1, bins[k + 1]] += 1
            copies[2, bins[k + 2]] += 1
            copies[3, bins[k + 3]] += 1
        for k in range(quads, size):
            copies[0, bins[k]] += 1
    for j in range(hist.size):
        hist[j] += copies[0, j] + copies[1, j] + copies[2, j] + copies[3, j]
    return nans


@_jit
def dense_hist2d(grads, pidx, P, c0, lo, width, hist):
    """2D counts of (grads[i, d], parameter bin pidx[d]) into hist (gradient bins, parameter bins).

    Per sample, the band's two bins counted per d in a branch-free (vectorised) pass that also
    flags the values outside the band, one byte each: the few there are binned one by one, found
    eight flags at a time.
    """
    L, T, U = P[c0], P[c0 + 1], P[c0 + 2]
    last = P.size - 3
    B, D = grads.shape
    lower = np.zeros(D, dtype=np.int64)
    upper = np.zeros(D, dtype=np.int64)
    outside = np.zeros((D + 7) // 8 * 8, dtype=np.uint8)
    eights = outside.view(np.uint64)
    nans = 0
    for i in range(B):
        row = grads[i]
        inside = 0
        for d in range(D):  # branch-free: vectorised
            p = row[d]
            lo_hit = (p >= L) & (p < T)
            hi_hit = (p >= T) & (p < U)
            lower[d] += lo_hit
            upper[d] += hi_hit
            outside[d] = not (lo_hit | hi_hit)
            inside += lo_hit | hi_hit
        if inside < D:
            for w in range(eights.size):
                if eights[w]:
                    for d in range(8 * w, min(D, 8 * w + 8)):
                        if outside[d]:
                            p = row[d]
                            nans += p != p
                            hist[_bin(p, lo, width, last), pidx[d]] += 1
    for d in range(D):
        hist[c0, pidx[d]] += lower[d]
        hist[c0 + 1, pidx[d]] += upper[d]
    return nans


@_inline
def _at_least(xa, s, t):
    """#{j: xa * s[j] >= t} for ascending s, by a branch-free bisection (the rounded products are
    monotone along s: rising for xa > 0, falling for xa < 0)."""
    base, size = 0, s.size
    rising = xa > 0
    while size > 1:
        half = size >> 1
        hit = xa * s[base + half - 1] >= t
        base += half if hit != rising else 0  # move right while the predicate has not turned
        size -= half
    hit = xa * s[base] >= t
    first = base + (1 if hit != rising else 0)  # the first index where the predicate turns
    return s.size - first if rising else first


@_jit
def outer_hist1d(x, y, ys, slot, P, c0, lo, width, hist):
    """Histogram of all products x[i, a] * y[i, b]; returns the number of NaN products.

    Rows whose products stay in the band count in O(1) by the sign rule, in a branch-free pass
    (the row classes come in no predictable order). A row with products outside the band counts
    those by bisection, per bin edge it crosses, in its sample's sorted values ``ys[slot[i]]``
    (the rounded products of a row are monotone along them), and the rest of the row by the sign
    rule less what left the band: no product is formed one by one. Samples without a sorted row
    (``slot[i] < 0``: none of their products can leave the band) never need one.
    """
    L, T, U = P[c0], P[c0 + 1], P[c0 + 2]
    last = P.size - 3
    B, m = x.shape
    n = y.shape[1]
    negative_zero = T <= 0  # T <= 0: the lower bin holds opposite signs; T > 0: all but equal signs
    simple_rows = np.empty(m, dtype=np.bool_)
    bins = np.empty(n, dtype=np.int64)
    lower = upper = 0  # the two band bins, kept out of memory
    nans = 0
    for i in range(B):
        xi, yi = x[i], y[i]
        if slot[i] >= 0:
            ymin, ymax, max_neg, min_pos, n_neg, n_pos, finite = _sorted_stats(ys[slot[i]])
        else:
            ymin, ymax, max_neg, min_pos, n_neg, n_pos, finite = _sample_stats(yi)
        cnt_p, near_p, cnt_n, near_n = _nearest(negative_zero, n_neg, max_neg, n_pos, min_pos)
        for a in range(m):  # branch-free: vectorised
            xa = xi[a]
            lo_p, hi_p, cnt, clean = _row_extent(xa, ymin, ymax, cnt_p, near_p, cnt_n, near_n, negative_zero, T)
            rule = cnt if negative_zero else n - cnt
            below, above = hi_p < T, lo_p >= T
            simple = finite & (xa - xa == 0) & (lo_p >= L) & (hi_p < U) & (below | above | clean)
            lw = n if below else (0 if above else rule)
            lower += lw if simple else 0
            upper += n - lw if simple else 0
            simple_rows[a] = simple
        for a in range(m):
            if simple_rows[a]:
                continue
            xa = xi[a]
            c, lw = _row_class(xa, ymin, ymax, max_neg, min_pos, n_neg, n_pos, n, L, T, U)
            if not finite or (c == _CORRECTED and slot[i] < 0):
                c = _DIRECT
            if c == _DIRECT:
                nans += _direct_row(xa, yi, lo, width, last, bins)
                for b in range(n):
                    hist[bins[b]] += 1
                continue
            above = below = 0
            if c == _CORRECTED:
                s = ys[slot[i]]
                p1, p2 = xa * ymin, xa * ymax
                lo_p, hi_p = min(p1, p2), max(p1, p2)
                if hi_p >= U:  # edges P[c0 + 2] .. P[top]: bins c0 + 2 .. top
                    top = _bin(hi_p, lo, width, last)
                    above = prev = _at_least(xa, s, U)
                    for k in range(c0 + 3, top + 1):
                        now = _at_least(xa, s, P[k])
                        hist[k - 1] += prev - now
                        prev = now
                    hist[top] += prev
                if lo_p < L:  # edges P[c0] .. P[bottom + 1]: bins c0 - 1 .. bottom
                    bottom = _bin(lo_p, lo, width, last)
                    below = prev = n - _at_least(xa, s, L)
                    for k in range(c0 - 1, bottom, -1):
                        now = n - _at_least(xa, s, P[k])
                        hist[k] += prev - now
                        prev = now
                    hist[bottom] += prev
            elif c == _LOWER:
                lw = n
            elif c == _UPPER:
                lw = 0
            lower += lw - below
            upper += n - lw - above
    hist[c0] += lower
    hist[c0 + 1] += upper
    return nans


_MAGNITUDE_SHIFT = 49  # a float64's bits >> 49: its binary exponent and 3 leading mantissa bits
_MAGNITUDE_CLASSES = 1 << 14


@_inline
def _by_magnitude(y, xmax, reach, order, values, found, magnitudes, starts, cursor, tops):
    """Into ``order`` (their values into ``values``) the b whose products with some |x| <= xmax can
    leave the band (|x * y_b| >= reach), grouped by decreasing magnitude class: group j is
    ``order[starts[j]:starts[j + 1]]`` and ``tops[j]`` the largest |y| in it or after it, so a row
    stops at the first group whose largest product stays in the band (a counting sort: O(n)).
    Returns the number of groups."""
    count = 0
    for b in range(y.size):  # branch-free compaction
        found[count] = b
        magnitudes[count] = np.abs(np.float64(y[b]))
        count += xmax * np.abs(y[b]) >= reach
    if count == 0:
        return 0
    keys = magnitudes[:count].view(np.int64)  # monotone in the magnitude
    kmin = kmax = keys[0] >> _MAGNITUDE_SHIFT
    for k in range(count):
        key = keys[k] >> _MAGNITUDE_SHIFT
        kmin = key if key < kmin else kmin
        kmax = key if key > kmax else kmax
    groups = kmax - kmin + 1
    starts[:groups + 1] = 0
    for k in range(count):
        starts[kmax - (keys[k] >> _MAGNITUDE_SHIFT) + 1] += 1
    for j in range(groups):
        starts[j + 1] += starts[j]
    cursor[:groups] = starts[:groups]
    tops[:groups] = 0
    for k in range(count):
        j = kmax - (keys[k] >> _MAGNITUDE_SHIFT)
        b = found[k]
        order[cursor[j]] = b
        values[cursor[j]] = y[b]
        cursor[j] += 1
        tops[j] = max(tops[j], np.abs(y[b]))
    for j in range(groups - 2, -1, -1):
        tops[j] = max(tops[j], tops[j + 1])
    return groups


@_inline
def _flush(cols, moves, used, pidx, pbins, copies):
    """Count ``used`` moves (2 * bin + 1 if the sign rule put the product in the lower band bin)
    at the parameter bin of flat element ``cols[k]``, in four interleaved copies."""
    for k in range(used):
        copies[k & 3, moves[k] * pbins + pidx[cols[k]]] += 1


@_jit
def outer_hist2d(x, y, pidx, P, c0, lo, width, hist):
    """2D counts of (x[i, a] * y[i, b], parameter bin pidx[a, b]); returns the number of NaN products.

    Each row x[i, a] * y[i] is classified in a branch-free pass over a. Sign-rule rows (in the
    band or not) are counted per element (a, b) by popcounts of sample bitsets: the samples where
    x[i, a] > 0 (<= 0) against those where y[i, b] puts the product in the lower bin; then per row,
    per parameter bin, by masked sums (a row's parameters span few bins). The products of a row
    that leave the band are then moved from their sign-rule bin to their own: only those, found
    among the sample's inputs grouped by magnitude. Rows without a rule are binned one by one.
    """
    L, T, U = P[c0], P[c0 + 1], P[c0 + 2]
    reach = min(-np.float64(L), np.float64(U))
    last = P.size - 3
    negative_zero = T <= 0  # T <= 0: the lower bin holds opposite signs; T > 0: all but equal signs
    B, m = x.shape
    n = y.shape[1]
    pbins = hist.shape[1]
    words = (B + 63) // 64
    zero, one = np.uint64(0), np.uint64(1)
    codes = np.empty((B, m), dtype=np.int8)  # row classes
    y_bits = np.zeros((2, words, n), dtype=np.uint64)  # lower bin with x > 0, with x <= 0
    visited = np.empty(m, dtype=np.int64)
    order = np.empty(n, dtype=np.int64)
    found = np.empty(n, dtype=np.int64)
    magnitudes = np.empty(n, dtype=np.float64)
    values = np.empty(n, dtype=y.dtype)
    starts = np.empty(_MAGNITUDE_CLASSES + 1, dtype=np.int64)
    cursor = np.empty(_MAGNITUDE_CLASSES, dtype=np.int64)
    tops = np.empty(_MAGNITUDE_CLASSES, dtype=y.dtype)
    bins = np.empty(n, dtype=np.int64)
    capacity = 4 * n + 4096
    cols = np.empty(capacity, dtype=np.int64)
    moves = np.empty(capacity, dtype=np.int64)
    copies = np.zeros((4, 2 * hist.size), dtype=np.int64)  # (bin, lower under the rule, parameter bin)
    flat_pidx = pidx.reshape(-1)
    used = 0
    nans = 0
    for i in range(B):
        xi, yi, ci = x[i], y[i], codes[i]
        word, bit = i // 64, one << np.uint64(i % 64)
        ymin, ymax, max_neg, min_pos, n_neg, n_pos, finite = _sample_stats(yi)
        for b in range(n):  # vectorised
            v = yi[b]
            with_pos = (v < 0) if negative_zero else not (v > 0)
            with_neg = (v > 0) if negative_zero else not (v < 0)
            y_bits[0, word, b] |= bit if with_pos else zero
            y_bits[1, word, b] |= bit if with_neg else zero
        cnt_p, near_p, cnt_n, near_n = _nearest(negative_zero, n_neg, max_neg, n_pos, min_pos)
        visits = 0
        for a in range(m):  # branch-free, arithmetic and no float reduction: vectorised
            xa = xi[a]
            lo_p, hi_p, _, clean = _row_extent(xa, ymin, ymax, cnt_p, near_p, cnt_n, near_n, negative_zero, T)
            ok = finite & (xa - xa == 0)
            in_band = (lo_p >= L) & (hi_p < U)
            lower_row = ok & in_band & (hi_p < T)
            upper_row = ok & in_band & (lo_p >= T)
            ruled = ok & clean & (not (lower_row | upper_row))
            direct = not (lower_row | upper_row | ruled)
            c = (lower_row * _LOWER + upper_row * _UPPER + ruled * (_SPLIT + (not in_band) * (_CORRECTED - _SPLIT))
                 + direct * _DIRECT)
            ci[a] = c
            visits = c if c > visits else visits
        if visits < _CORRECTED:
            continue
        xmax = none = np.zeros(1, x.dtype)[0]
        count = 0
        for a in range(m):  # branch-free: the rows to visit, the largest |x| of those corrected
            visited[count] = a
            count += ci[a] >= _CORRECTED
            ax = np.abs(xi[a]) if ci[a] == _CORRECTED else none
            xmax = ax if ax > xmax else xmax
        groups = 0
        if xmax > 0:
            groups = _by_magnitude(yi, xmax, reach, order, values, found, magnitudes, starts, cursor, tops)
        for a in visited[:count]:
            xa = xi[a]
            if ci[a] == _DIRECT:
                nans += _direct_row(xa, yi, lo, width, last, bins)
                for b in range(n):
                    hist[bins[b], pidx[a, b]] += 1
                continue
            ax = np.abs(xa)
            j = 0
            while j < groups and ax * tops[j] >= reach:
                j += 1
            stop = starts[j] if j else 0  # the products past it stay in the band
            if used + stop > capacity:
                _flush(cols, moves, used, flat_pidx, pbins, copies)
                used = 0
            positive = xa > 0
            for k in range(stop):  # vectorised; products in the band move from their bin to itself
                yb = values[k]
                if negative_zero:
                    rule_lower = (yb < 0) if positive else (yb > 0)
                else:
                    rule_lower = not (yb > 0) if positive else not (yb < 0)
                cols[used + k] = a * n + order[k]
                moves[used + k] = 2 * _bin(xa * yb, lo, width, last) + rule_lower
            used += stop
    _flush(cols, moves, used, flat_pidx, pbins, copies)
    for g in range(hist.shape[0]):  # each moved product: into its bin, out of its sign-rule bin
        for lower in range(2):
            for pid in range(pbins):
                k = (2 * g + lower) * pbins + pid
                count = copies[0, k] + copies[1, k] + copies[2, k] + copies[3, k]
                hist[g, pid] += count
                hist[c0 + 1 - lower, pid] -= count

    below = np.zeros(m, dtype=np.int64)  # per element a: rows all in the lower band bin
    above = np.zeros(m, dtype=np.int64)  # all in the upper one, or under the sign rule
    ruled_rows = np.zeros(m, dtype=np.int64)
    x_bits = np.zeros((2, words, m), dtype=np.uint64)  # sign-rule rows with x > 0, with x <= 0
    for i in range(B):  # one vectorised loop per array
        ci, xi = codes[i], x[i]
        word, bit = i // 64, one << np.uint64(i % 64)
        for a in range(m):
            below[a] += ci[a] == _LOWER
        for a in range(m):
            above[a] += (ci[a] == _UPPER) | (ci[a] == _SPLIT) | (ci[a] == _CORRECTED)
        for a in range(m):
            ruled_rows[a] += (ci[a] == _SPLIT) | (ci[a] == _CORRECTED)
        for a in range(m):
            ruled = (ci[a] == _SPLIT) | (ci[a] == _CORRECTED)
            x_bits[0, word, a] |= bit if ruled & (xi[a] > 0) else zero
            x_bits[1, word, a] |= bit if ruled & (not (xi[a] > 0)) else zero
    hits = np.zeros(n, dtype=np.int64)  # per b: sign-rule products of row a in the lower bin
    for a in range(m):
        row = pidx[a]
        pmin = pmax = row[0]
        for b in range(n):
            pmin = row[b] if row[b] < pmin else pmin
            pmax = row[b] if row[b] > pmax else pmax
        total = 0
        if ruled_rows[a]:
            for w in range(words):
                xp, xn = x_bits[0, w, a], x_bits[1, w, a]
                yp, yn = y_bits[0, w], y_bits[1, w]
                for b in range(n):
                    h = _popcount((xp & yp[b]) | (xn & yn[b]))
                    hits[b] = h + (hits[b] if w else 0)
                    total += h
        else:
            hits[:] = 0
        if pmax - pmin < 8:  # per parameter bin, the last one by difference
            rest, rest_hits = n, total
            for pid in range(pmin, pmax):
                cnt = s = 0
                for b in range(n):
                    hit = row[b] == pid
                    cnt += hit
                    s += hits[b] if hit else 0
                hist[c0, pid] += below[a] * cnt + s
                hist[c0 + 1, pid] += above[a] * cnt - s
                rest -= cnt
                rest_hits -= s
            hist[c0, pmax] += below[a] * rest + rest_hits
            hist[c0 + 1, pmax] += above[a] * rest - rest_hits
        else:
            for b in range(n):
                hist[c0, row[b]] += below[a] + hits[b]
                hist[c0 + 1, row[b]] += above[a] - hits[b]
    return nans


@_jit
def param_bins(values, lo, width, bins, out):
    """The reference's bin of every parameter value (`Bins.index`), in one vectorised pass."""
    last = bins - 1
    for k in range(values.size):
        out[k] = _bin(values[k], lo, width, last)


def _dense_hist1d_split(flat, P, c0, lo, width, hist, chunks):
    """`dense_hist1d` on ``chunks`` slices at once, one thread each."""
    parts = np.zeros((chunks, hist.size), dtype=np.int64)
    nans = np.zeros(chunks, dtype=np.int64)
    for c in numba.prange(chunks):
        nans[c] = dense_hist1d(flat[c * flat.size // chunks:(c + 1) * flat.size // chunks], P, c0, lo, width,
                               parts[c])
    for c in range(chunks):
        hist += parts[c]
    return nans.sum()


def _outer_hist1d_split(x, y, ys, slot, P, c0, lo, width, hist, chunks):
    """`outer_hist1d` on ``chunks`` slices of the samples at once, one thread each."""
    parts = np.zeros((chunks, hist.size), dtype=np.int64)
    nans = np.zeros(chunks, dtype=np.int64)
    B = x.shape[0]
    for c in numba.prange(chunks):
        first, stop = c * B // chunks, (c + 1) * B // chunks
        nans[c] = outer_hist1d(x[first:stop], y[first:stop], ys, slot[first:stop], P, c0, lo, width, parts[c])
    for c in range(chunks):
        hist += parts[c]
    return nans.sum()


def _outer_hist2d_split(x, y, pidx, P, c0, lo, width, hist, chunks):
    """`outer_hist2d` on ``chunks`` slices of the samples at once, one thread each."""
    parts = np.zeros((chunks, hist.shape[0], hist.shape[1]), dtype=np.int64)
    nans = np.zeros(chunks, dtype=np.int64)
    B = x.shape[0]
    for c in numba.prange(chunks):
        first, stop = c * B // chunks, (c + 1) * B // chunks
        nans[c] = outer_hist2d(x[first:stop], y[first:stop], pidx, P, c0, lo, width, parts[c])
    for c in range(chunks):
        hist += parts[c]
    return nans.sum()


def _dense_hist2d_split(grads, pidx, P, c0, lo, width, hist, chunks):
    """`dense_hist2d` on ``chunks`` slices of the samples at once, one thread each."""
    parts = np.zeros((chunks, hist.shape[0], hist.shape[1]), dtype=np.int64)
    nans = np.zeros(chunks, dtype=np.int64)
    B = grads.shape[0]
    for c in numba.prange(chunks):
        first, stop = c * B // chunks, (c + 1) * B // chunks
        nans[c] = dense_hist2d(grads[first:stop], pidx, P, c0, lo, width, parts[c])
    for c in range(chunks):
        hist += parts[c]
    return nans.sum()


dense_hist1d_split = _jit(_dense_hist1d_split, parallel=True)
outer_hist1d_split = _jit(_outer_hist1d_split, parallel=True)
outer_hist2d_split = _jit(_outer_hist2d_split, parallel=True)
dense_hist2d_split = _jit(_dense_hist2d_split, parallel=True)


def _squared_distance(a, b):
    """sum((a - b)**2) in float64, in one pass over both."""
    total = 0.0
    for k in range(a.size):
        d = np.float64(a[k]) - np.float64(b[k])
        total += d * d
    return total


def _ratio_sum(num, den, eps):
    """sum(num / (den + eps)) in float64."""
    total = 0.0
    for k in range(num.size):
        total += np.float64(num[k]) / (np.float64(den[k]) + eps)
    return total


# reassociation only: the sums may be reordered (and so vectorised), every term is IEEE
squared_distance = _jit(_squared_distance, fastmath={"reassoc", "nsz"})
ratio_sum = _jit(_ratio_sum, fastmath={"reassoc", "nsz"})


def _parameter_pass(theta, initial, previous, snapshot, use_initial, use_previous, copy):
    """sum((theta - initial)**2) and sum((theta - previous)**2) in float64, and theta copied into
    snapshot, each only when asked, in one pass: a step's comparisons read the parameters once."""
    to_initial = to_previous = 0.0
    for k in range(theta.size):
        t = theta[k]
        if use_initial:
            d = np.float64(t) - np.float64(initial[k])
            to_initial += d * d
        if use_previous:
            d = np.float64(t) - np.float64(previous[k])
            to_previous += d * d
        if copy:
            snapshot[k] = t
    return to_initial, to_previous


parameter_pass = _jit(_parameter_pass, fastmath={"reassoc", "nsz"})


def _inner_and_square(a, b):
    """sum(a * b) and sum(b**2) in float64, in one pass over both."""
    ab = bb = 0.0
    for k in range(a.size):
        y = np.float64(b[k])
        ab += np.float64(a[k]) * y
        bb += y * y
    return ab, bb


inner_and_square = _jit(_inner_and_square, fastmath={"reassoc", "nsz"})
