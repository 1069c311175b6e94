"""The matrix's subset rows over a large layer, computed in a thread after the first frame.

At a million instances the class rows are one pass over the whole layer (seconds): an explorer
that waited for them would paint nothing until then. Over a layer of more than ``min_values``
activations, rows not yet in the Subsets' cache are drawn empty at once (their labels and sizes are
there), computed range by range in a thread (`activis.subsets.progressive`), with the view's
``progress`` saying how far, and filled in when done; the rows then sit in the Subsets' cache, so
nothing computes them again. Brush, hover and pinned-instance rows never wait: they read only their
own rows.
"""

from __future__ import annotations

import threading

import numpy as np

from ..subsets import STATS, Aggregate, Subset, Subsets
from ..subsets.progressive import Cancelled, aggregate_in_steps, cache_key, is_cached, remember
from ._base import kernel_loop

# layers of more activations than this (1M x 50, 200,000 x 256) have their subset rows computed in the background
DEFER_VALUES = 50_000_000


def run_in_background(work) -> None:
    """Start ``work`` in a daemon thread (a module function, so that tests can hold it back)."""
    threading.Thread(target=work, name="activis-matrix-rows", daemon=True).start()


class DeferredRows:
    """Answers a matrix's request for subset rows: cached rows at once, the others computed in a thread."""

    def __init__(self, subsets: Subsets, on_progress, on_done, min_values: int | None = None):
        self._subsets = subsets
        self._on_progress = on_progress  # called with text ("" when done), in the kernel's thread
        self._on_done = on_done  # called when rows arrived, in the kernel's thread
        self.min_values = DEFER_VALUES if min_values is None else int(min_values)
        self._request = None  # what the running job computes
        self._cancel = threading.Event()
        self._finished = threading.Event()
        self._finished.set()
        self._result = None
        self._delivering = threading.RLock()

    @property
    def computing(self) -> bool:
        """Whether rows are being computed now."""
        return self._request is not None

    def aggregate(self, layer: str, items: list[Subset], threshold: float) -> Aggregate:
        """All three statistics of these rows; rows not ready yet are NaN (drawn empty) and on their way."""
        subsets = self._subsets
        activations = subsets.store.activations(layer)
        if activations.size <= self.min_values:
            return subsets.aggregate(layer, items, stats=STATS, threshold=threshold)
        waiting = [not is_cached(subsets, layer, s, threshold) for s in items]
        if any(waiting):
            self._start(layer, [s for s, w in zip(items, waiting) if w], threshold)
        else:
            self._stop()
        at = [i for i, w in enumerate(waiting) if not w]
        done = subsets.aggregate(layer, [items[i] for i in at], stats=STATS, threshold=threshold)
        values = {s: np.full((len(items), activations.shape[1]), np.nan, np.float32) for s in STATS}
        for s in STATS:
            values[s][at] = done[s]
        sizes = [subsets.size(s) for s in items]
        return Aggregate(layer=layer, names=[s.name or s.describe() for s in items], sizes=np.array(sizes, np.int64),
                         threshold=float(threshold), **values)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the rows being computed are in (for scripts and tests; a notebook just watches the
        view). True when nothing is left to compute."""
        if not self._finished.wait(timeout):
            return False
        self._deliver()
        return not self.computing

    def close(self) -> None:
        self._stop()

    # ------------------------------------------------------------------ the job
    def _start(self, layer: str, pending: list[Subset], threshold: float) -> None:
        keys = {cache_key(self._subsets, layer, s, threshold): s for s in pending}  # equal rows computed once
        pending = list(keys.values())
        request = (layer, float(threshold), tuple(keys))
        if request == self._request:
            return  # already on its way
        self._stop()
        self._request = request
        cancel, finished = threading.Event(), threading.Event()
        self._cancel, self._finished = cancel, finished
        masks = np.stack([self._subsets.mask(s) for s in pending])  # evaluated here, in the kernel's thread
        activations = self._subsets.store.activations(layer)
        what = f"computing {len(pending)} row{'s' if len(pending) != 1 else ''} over {activations.shape[0]:,} instances"
        self._on_progress(f"{what}… 0 %")

        def report(fraction: float) -> None:
            self._in_kernel(self._report, request, f"{what}… {fraction:.0%}".replace("%", " %"))

        def work() -> None:
            try:
                stats = aggregate_in_steps(activations, masks, threshold=threshold, progress=report,
                                           cancelled=cancel.is_set)
            except Cancelled:
                return
            self._result = (request, pending, stats)
            finished.set()
            self._in_kernel(self._deliver)

        run_in_background(work)

    def _stop(self) -> None:
        if self._request is not None:
            self._cancel.set()
            self._finished.set()  # nobody waits on a cancelled job
            self._request = None
            self._on_progress("")

    def _report(self, request, text: str) -> None:
        if request == self._request:
            self._on_progress(text)

    def _deliver(self) -> None:
        """Rows that arrived go into the Subsets' cache and the view; runs once per job, in the kernel's thread."""
        with self._delivering:
            result, self._result = self._result, None
            if result is None:
                return
            request, pending, stats = result
            if request != self._request:
                return  # a newer request took its place
            self._request = None
            remember(self._subsets, request[0], pending, request[1], stats)
            self._on_progress("")
            self._on_done()

    @staticmethod
    def _in_kernel(callback, *args) -> None:
        """Run in the kernel's own loop (comm messages from another thread can interleave), else here."""
        loop = kernel_loop()
        if loop is not None:
            loop.add_callback(callback, *args)
        else:
            callback(*args)
