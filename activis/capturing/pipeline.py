"""Reused staging buffers and the writer thread that commits them while the model computes.

Each tap converts its layer's rows straight into a reused staging buffer in the storage dtype:
memory that is written again every batch costs no page faults, which is what dominates capture
of a cheap model. A background thread writes the filled buffers into the store and commits them.
"""

from __future__ import annotations

import queue
import threading

import numpy as np

from ..store import COUNTS, NonFinite, PreparedBatch, StoreWriter

SLOTS = 3  # staging blocks: one being filled, up to two being written
# batches are handed to the writer (and committed) together up to this size, or this age
BLOCK_BYTES = 4 << 20
BLOCK_SECONDS = 0.1


class _Slot:
    """Reused buffers for a block of consecutive batches: filled by the taps, written by the writer thread.

    A block holds several batches when they are small and quick (up to `BLOCK_BYTES`, at most
    `BLOCK_SECONDS` of computing), so that the fixed costs of handing a block over and committing
    it (a thread wake-up, a manifest replace) are paid per megabytes rather than per batch. The
    buffers are allocated once and rewritten: no page faults.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.arrays: dict[str, np.ndarray] = {}
        self.label = np.full(capacity, -1, dtype=np.int64)
        self.found: dict[str, NonFinite] = {}
        self.rows = 0  # rows of the whole batches in the block
        self.start = self.n = 0  # the batch being filled
        self.filled: set[str] = set()

    def begin(self, n: int) -> None:
        """Start filling a batch of ``n`` rows (the block must have room, or be empty)."""
        if n > self.capacity - self.rows:
            assert self.rows == 0, "hand a full block over before starting another batch"
            self.capacity = n  # an iterable's batch larger than a block: this slot grows to it
            self.arrays.clear()
            self.label = np.full(n, -1, dtype=np.int64)
        self.start, self.n = self.rows, n
        self.filled = set()

    def end(self) -> None:
        self.rows += self.n

    def clear(self) -> None:
        self.rows = 0
        self.found = {}

    def target(self, name: str, width: int, dtype) -> np.ndarray:
        """The rows of the batch being filled in buffer ``name``."""
        arr = self.arrays.get(name)
        if arr is None or arr.shape[1] != width or arr.dtype != dtype:
            arr = self.arrays[name] = np.zeros((self.capacity, width), dtype=dtype)
        self.filled.add(name)
        return arr[self.start:self.start + self.n]

    def note(self, name: str, found: NonFinite | None) -> None:
        """Add what `check_finite` found in the batch to the block's counts."""
        if found is None:
            return
        total = self.found.get(name)
        if total is None:
            total = self.found[name] = NonFinite(per_row=np.zeros(self.capacity, dtype=np.int32))
        for key in COUNTS:
            setattr(total, key, getattr(total, key) + getattr(found, key))
        total.per_row[self.start:self.start + self.n] += found.per_row

    def checked(self, names) -> dict[str, NonFinite | None]:
        rows = self.rows
        return {name: None if name not in self.found else
                NonFinite(**{key: getattr(self.found[name], key) for key in COUNTS},
                          per_row=self.found[name].per_row[:rows]) for name in names}


class _Pipeline:
    """Hands filled slots to a writer thread that appends and commits them in order."""

    def __init__(self, slots: list[_Slot]):
        self.free: queue.Queue = queue.Queue()
        for slot in slots:
            self.free.put(slot)
        self.todo: queue.Queue = queue.Queue()
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        self.writer: StoreWriter | None = None
        self.rows_written = 0

    def start(self, writer: StoreWriter, batch_of) -> None:
        self.writer = writer
        self.batch_of = batch_of
        self.thread = threading.Thread(target=self._run, name="activis-capture-writer", daemon=True)
        self.thread.start()

    def acquire(self) -> _Slot:
        while True:
            if self.error is not None:
                raise self.error
            try:
                return self.free.get(timeout=0.05)
            except queue.Empty:
                continue

    def submit(self, slot: _Slot) -> None:
        """Queue a filled slot; its Python-side preparation happens here, on the caller's thread."""
        self.todo.put((slot, self.writer.prepare(**self.batch_of(slot))))

    def _run(self) -> None:
        pending = None  # the last batch written, when it is not committed yet
        while True:
            item = self.todo.get()
            try:
                if item is None:
                    if pending is not None and self.error is None:
                        self.writer.write(PreparedBatch([], pending.rows, pending.commit))
                    return
                slot, prepared = item
                if self.error is None:
                    more = not self.todo.empty()  # more batches queued: commit once, after them
                    self.writer.write(prepared, commit=not more)
                    pending = prepared if more else None
                    self.rows_written += slot.rows
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                self.error = exc
            if item is not None:
                self.free.put(item[0])

    def close(self) -> None:
        """Wait until every submitted batch is committed (or failed); raise the writer's error."""
        if self.thread is not None:
            self.todo.put(None)
            self.thread.join()
            self.thread = None
        if self.error is not None:
            raise self.error

