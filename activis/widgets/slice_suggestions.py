"""SliceSuggestions: the slices where the model fails, found in the background, adopted with a click."""

from __future__ import annotations

import threading

import traitlets

from ..slices import SliceError, SliceReport, discover_slices
from ..slices.discover import check_options
from ..subsets import Subsets
from ._base import View, bundle, kernel_loop
from .errors import ViewError, check_type


class SliceSuggestions(View):
    """Suggested slices of a store: `activis.discover_slices` run in a thread, its ranked list, adopt buttons.

    "Find slices" (or `run`) searches the metadata and, when ``layer`` is set, that layer's
    activation space; ``progress`` follows the search while the kernel stays free. Adopting a slice
    defines it in ``subsets`` under its name (`Subsets.add` with the slice's definition, so the
    subset holds exactly its members) and sets ``adopted`` to that name, which the Explorer turns
    into a matrix row and a highlight in every view. ``options`` go to `discover_slices`.
    """

    _esm = bundle("slice_suggestions")

    height = traitlets.Int(300).tag(sync=True)
    items = traitlets.List(traitlets.Dict()).tag(sync=True)  # Slice.to_dict() of each suggestion, ranked
    state = traitlets.Enum(("idle", "running", "done", "stopped", "failed"), "idle").tag(sync=True)
    progress = traitlets.Float(0.0).tag(sync=True)
    message = traitlets.Unicode("").tag(sync=True)
    layer = traitlets.Unicode("").tag(sync=True)  # "" searches the metadata only
    metric = traitlets.Unicode("error").tag(sync=True)
    adopted = traitlets.Unicode("").tag(sync=True)  # the subset the last adopted slice became
    summary = traitlets.Unicode("").tag(sync=True)
    source = traitlets.Unicode("").tag(sync=True)  # which outcomes a search reads ("step 10" in an explorer)

    def __init__(self, subsets: Subsets, *, layer: str | None = None, options: dict | None = None, **kwargs):
        check_type("SliceSuggestions", subsets, Subsets, "the Subsets of a store (activis.Subsets(store))")
        store = subsets.store
        if layer is not None and (not isinstance(layer, str) or layer not in store.layers):
            raise SliceError(f"Unknown layer {layer!r}; captured layers: {', '.join(store.layers) or 'none'}.")
        options = check_options(options)
        super().__init__(layer=layer or "", **kwargs)
        self._subsets = subsets
        self._options = options
        self._report: SliceReport | None = None
        self._searched = ""  # the source the last search read
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.on_msg(self._on_request)

    @property
    def report(self) -> SliceReport | None:
        """The last finished search (None before the first)."""
        return self._report

    def run(self, wait: bool = False) -> None:
        """Start a search in the background (a running one is left to finish); ``wait`` blocks until done."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                thread = self._thread
            else:
                self._stop = threading.Event()
                self._searched = self.source
                self.state, self.progress, self.message = "running", 0.0, "starting"
                thread = self._thread = threading.Thread(target=self._search, args=(self._stop,), daemon=True,
                                                         name="activis-slices")
                thread.start()
        if wait:
            thread.join()

    def follow_source(self, label: str) -> None:
        """The subsets read another store now (an explorer's checkpoint, ``label`` e.g. "step 10"): the
        next search reads it, and slices found before say where they were found."""
        self.source = str(label)
        if self._report is not None and self._searched != self.source:
            self.message = f"these slices were found at {self._searched or 'another checkpoint'}; Run searches {label}"

    def stop(self) -> None:
        """Ask a running search to stop; it reports the slices found so far."""
        self._stop.set()

    def adopt(self, index: int, name: str | None = None):
        """Define suggestion ``index`` (0 = the first) as a subset; returns the `Subset`."""
        if self._report is None or not 0 <= int(index) < len(self._report):
            count = 0 if self._report is None else len(self._report)
            raise ViewError(f"No suggestion {index}; there are {count} (run the search first).")
        found = self._report[int(index)]
        subset = found.adopt(self._subsets, name)
        self.adopted = ""  # re-adopting the same slice still notifies
        self.adopted = subset.name
        return subset

    # ------------------------------------------------------------------ the search thread
    def _search(self, stop: threading.Event) -> None:
        options = {"metric": self.metric, **self._options}
        try:
            report = discover_slices(self._subsets.store, self.layer or None, stop=stop,
                                     progress=lambda f, m: self._later(self._show_progress, f, m), **options)
        except Exception as exc:  # noqa: BLE001 - shown in the view, never lost in a thread
            self._later(self._show_failure, f"{type(exc).__name__}: {exc}")
            return
        self._report = report  # at once: run(wait=True) then adopt() works inside one cell
        self._later(self._show_report, report, stop.is_set())

    def _later(self, fn, *args) -> None:
        """Run fn in the kernel's own event loop: comm messages from another thread can interleave with a
        running cell's (the projection view does the same)."""
        loop = kernel_loop()
        if loop is not None and threading.current_thread() is not threading.main_thread():
            loop.add_callback(fn, *args)
        else:
            fn(*args)

    def _show_progress(self, fraction: float, message: str) -> None:
        if self.state == "running":
            with self.hold_sync():
                self.progress, self.message = float(fraction), message

    def _show_failure(self, message: str) -> None:
        with self.hold_sync():
            self.state, self.message = "failed", message

    def _show_report(self, report: SliceReport, stopped: bool) -> None:
        tested = ", ".join(f"{n:,} {family} candidates" for family, n in report.tested.items())
        with self.hold_sync():
            self.items = [s.to_dict() for s in report]
            self.summary = (f"{len(report)} slice(s) where {report.metric} is significantly worse "
                            f"({report.correction} over {tested or 'no candidates'}, alpha {report.alpha}; "
                            f"{report.seconds:.1f} s{'' if report.complete else ', search incomplete'})")
            self.message = "; ".join(report.notes)
            self.progress = 1.0
            self.state = "stopped" if stopped else "done"

    def _on_request(self, _widget, content, _buffers) -> None:
        action = content.get("action")
        try:
            if action == "run":
                self.run()
            elif action == "stop":
                self.stop()
            elif action == "adopt":
                self.adopt(int(content["index"]))
            else:
                self.message = f"unknown request {action!r}"
        except Exception as exc:  # noqa: BLE001 - shown in the view
            self.message = f"error: {exc}"

    def data(self):
        """The suggestions listed, ranked: one row per slice (``suggestion``, the number `adopt` takes) with its
        statistics (size, fraction, the metric in the slice and overall, lift, p-values) and description; empty
        before the first search finishes."""
        import pandas as pd

        if self._report is None:
            return pd.DataFrame()
        return self._report.to_frame().rename_axis("suggestion").reset_index()
