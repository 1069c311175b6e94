"""The statistics of one changing set of instances (a brush), kept up to date by the rows that changed.

A lasso that grows by a few points should not re-read the thousands it already covered: the sums
behind the mean, std and fraction active are kept, and each update adds the rows that came and
takes away the rows that went, read directly in the layer's stored dtype (nothing else is read or
converted). When more rows changed than the new set holds, it is summed afresh instead.
"""

from __future__ import annotations

import numpy as np

from .aggregation import DEFAULT_CHUNK_BYTES, KERNEL_CHUNK_BYTES, SHIFT_ROWS, STATS, _Accumulator


class RunningAggregate:
    """Mean, fraction active (> ``threshold``) and std of a set of rows of one layer, updated in place."""

    def __init__(self, activations, threshold: float = 0.0, chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        self._activations = activations
        self.threshold = float(threshold)
        n_neurons = activations.shape[1]
        shift = np.asarray(activations[:SHIFT_ROWS], dtype=np.float64).mean(axis=0) if len(activations) else None
        self._shift = np.zeros(n_neurons) if shift is None else np.nan_to_num(shift)
        # float64 blocks that stay in the CPU's cache through the few passes over them
        self._rows_per_chunk = max(1, min(int(chunk_bytes), KERNEL_CHUNK_BYTES) // (n_neurons * 8))
        self.indices = np.zeros(0, np.int64)
        self.rows_read = 0  # rows read since creation: what an update cost
        self._reset()

    def _reset(self) -> None:
        self._acc = _Accumulator(1, self._shift, moments=True)

    def update(self, indices) -> dict[str, np.ndarray]:
        """Make the set these (sorted, unique, in range) instance indices; returns the statistics."""
        new = np.asarray(indices, dtype=np.int64)
        added = np.setdiff1d(new, self.indices, assume_unique=True)
        removed = np.setdiff1d(self.indices, new, assume_unique=True)
        if added.size + removed.size >= new.size:  # mostly new rows: a fresh sum reads fewer
            self._reset()
            added, removed = new, removed[:0]
        self._add(added, 1)
        self._add(removed, -1)
        self.indices = new
        return self.stats()

    def _add(self, rows: np.ndarray, sign: int) -> None:
        for lo in range(0, len(rows), self._rows_per_chunk):
            block = self._activations[rows[lo:lo + self._rows_per_chunk]]
            self._acc.add_rows(0, block, self.threshold, sign)
        self.rows_read += len(rows)

    def stats(self) -> dict[str, np.ndarray]:
        """float32 statistics of the current set, one value per neuron (NaN when the set is empty)."""
        result = self._acc.finish(np.array([len(self.indices)]), STATS)
        return {stat: values[0] for stat, values in result.items()}
