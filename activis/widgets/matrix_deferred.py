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


class _Job:
    """One background computation: what it computes, and its result once there."""

    def __init__(self, request: tuple, pending: list[Subset]):
        self.request, self.pending = request, pending
        self.cancel, self.finished = threading.Event(), threading.Event()
        self.stats = None


class DeferredRows:
    """Answers a matrix's request for subset rows: cached rows at once, the others computed in a thread.

    Results reach the matrix only in the kernel's thread: through the kernel's loop in a notebook, and
    in a script at the next request or `wait` (a thread refreshing the view beside the caller would race it).
    """

    def __init__(self, subsets: Subsets, on_progress, on_done, min_values: int | None = None):
        self._subsets = subsets
        self._on_progress = on_progress  # called with text ("" when done), in the kernel's thread
        self._on_done = on_done  # called when rows arrived, in the kernel's thread
        self.min_values = DEFER_VALUES if min_values is None else int(min_values)
        self._job: _Job | None = None  # the running job

    @property
    def computing(self) -> bool:
        """Whether rows are being computed now."""
        return self._job is not None

    def aggregate(self, layer: str, items: list[Subset], threshold: float) -> Aggregate:
        """All three statistics of these rows; rows not ready yet are NaN (drawn empty) and on their way."""
        subsets = self._subsets
        activations = subsets.store.activations(layer)
        if activations.size <= self.min_values:
            self._stop()  # another (large) layer's rows are no longer wanted
            return subsets.aggregate(layer, items, stats=STATS, threshold=threshold)
        if self._job is not None and self._job.finished.is_set():
            self._remember(self._job)  # a script's finished job: its rows are taken here
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
        """Block until the rows being computed are in the view (for scripts and tests; a notebook just watches
        the view). True when nothing is left to compute."""
        job = self._job
        if job is None:
            return True
        if not job.finished.wait(timeout):
            return False
        self._deliver(job)
        return not self.computing

    def close(self) -> None:
        self._stop()

    # ------------------------------------------------------------------ the job
    def _start(self, layer: str, pending: list[Subset], threshold: float) -> None:
        keys = {cache_key(self._subsets, layer, s, threshold): s for s in pending}  # equal rows computed once
        request = (layer, float(threshold), tuple(keys))
        if self._job is not None and request == self._job.request:
            return  # already on its way
        self._stop()
        job = self._job = _Job(request, list(keys.values()))
        masks = np.stack([self._subsets.mask(s) for s in job.pending])  # evaluated here, in the kernel's thread
        activations = self._subsets.store.activations(layer)
        what = f"computing {len(job.pending)} row{'s' if len(job.pending) != 1 else ''} over " \
               f"{activations.shape[0]:,} instances"
        self._on_progress(f"{what}… 0 %")

        loop = kernel_loop()  # progress and the result reach the view through it (a script takes them at wait)

        def report(fraction: float) -> None:
            if loop is not None:
                loop.add_callback(self._report, job, f"{what}… {fraction:.0%}".replace("%", " %"))

        def work() -> None:
            try:
                job.stats = aggregate_in_steps(activations, masks, threshold=threshold, progress=report,
                                               cancelled=job.cancel.is_set)
            except Cancelled:
                return
            job.finished.set()
            if loop is not None:
                loop.add_callback(self._deliver, job)

        self._in_kernel(run_in_background, work)  # in a kernel, once this message's answer (a first frame) is out

    def _stop(self) -> None:
        if self._job is not None:
            self._job.cancel.set()
            self._job = None
            self._on_progress("")

    def _report(self, job: _Job, text: str) -> None:
        if job is self._job and not job.finished.is_set():
            self._on_progress(text)

    def _remember(self, job: _Job) -> None:
        """A finished job's rows into the Subsets' cache; it is no longer running."""
        self._job = None
        remember(self._subsets, job.request[0], job.pending, job.request[1], job.stats)
        self._on_progress("")

    def _deliver(self, job: _Job) -> None:
        """A finished job's rows into the cache and the view, in the kernel's thread (unless a newer job took over)."""
        if job is self._job:
            self._remember(job)
            self._on_done()

    @staticmethod
    def _in_kernel(callback, *args) -> None:
        """Run in the kernel's own loop (comm messages from another thread can interleave), else here."""
        loop = kernel_loop()
        if loop is not None:
            loop.add_callback(callback, *args)
        else:
            callback(*args)
