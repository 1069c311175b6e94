"""EvaluationPanel: ROC, PR, score distributions with a threshold, calibration and confusion, linked.

A thin view over `activis.evaluation`: the exact curves and tables are computed here, in the kernel;
the browser gets, as binary buffers, each instance's label, the focus class's score and the best
other class, so dragging the threshold recounts the confusion matrix and the metrics in the page
without a round trip. Through the shared `Selection`: a click on a confusion cell brushes the
instances "true a, predicted b", a drag over the score distributions brushes a score range, and a
selection made in another view (a brush, a subset) gets its metrics computed here and shown beside
the whole set's.
"""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import traitlets
from ipywidgets import widget_serialization

from ..evaluation import EvaluationError, evaluate
from ..evaluation.classification import score_range
from ..evaluation.inputs import Outcomes, outcomes
from ..evaluation.report import checked_threshold
from ._arrays import array_serialization
from ._base import View, bundle, kernel_loop
from .colours import palette
from .errors import ViewError
from .selection import EVALUATION, Selection, as_indices

SOURCE = EVALUATION  # brush_source of the brushes this view writes
CURVE_POINTS = 1500  # a drawn curve is thinned to about this many points; areas are exact regardless
SUMMARY_KEYS = ["accuracy", "f1_macro", "auc", "auc_macro", "auc_micro", "average_precision",
                "average_precision_macro", "ece", "bucket_auc_error"]
CLASS_METRICS = ["precision", "recall", "f1", "support", "auc", "average_precision", "bucket_auc_error"]


def thin(x: np.ndarray, y: np.ndarray, points: int = CURVE_POINTS) -> np.ndarray:
    """A curve as (2, m) float32 with m <= ~points, evenly spaced along its length (the ends kept)."""
    if x.size <= points:
        return np.stack([x, y]).astype(np.float32)
    length = np.concatenate([[0.0], np.cumsum(np.hypot(np.diff(x), np.diff(y)))])
    keep = np.unique(np.concatenate([[0, x.size - 1],
                                     np.searchsorted(length, np.linspace(0, length[-1], points))]))
    keep = keep[keep < x.size]
    return np.stack([x[keep], y[keep]]).astype(np.float32)


def _pack(curves: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Several (2, m) curves as one (2, total) float32 array and the int32 offsets between them."""
    offsets = np.concatenate([[0], np.cumsum([c.shape[1] for c in curves])]).astype(np.int32)
    data = np.concatenate(curves, axis=1) if curves else np.zeros((2, 0), np.float32)
    return data.astype(np.float32), offsets


class EvaluationPanel(View):
    """``EvaluationPanel(store)`` (or ``labels=``, ``scores=``); ``focus`` is the class whose scores are
    thresholded and drawn (class 1 when binary), ``threshold`` the decision on that score."""

    _esm = bundle("evaluation_panel")
    height = traitlets.Int(620).tag(sync=True)

    class_names = traitlets.List(traitlets.Unicode()).tag(sync=True)
    focus = traitlets.Int(1).tag(sync=True)
    # None: each instance's top-scoring class, what `activis.evaluate()` prints; a number: the focus class
    # wherever its score reaches it (dragging the threshold line sets one)
    threshold = traitlets.Float(None, allow_none=True).tag(sync=True)
    score_domain = traitlets.List(traitlets.Float()).tag(sync=True)
    # per instance, for the page: store index, true class, focus score, best other class
    index = traitlets.Any(None).tag(sync=True, **array_serialization)
    label = traitlets.Any(None).tag(sync=True, **array_serialization)
    score = traitlets.Any(None).tag(sync=True, **array_serialization)
    other = traitlets.Any(None).tag(sync=True, **array_serialization)
    argmax = traitlets.Any(None).tag(sync=True, **array_serialization)  # each instance's top class (int32)
    # exact curves (thinned for drawing): one per class, then micro; offsets split them
    roc = traitlets.Any(None).tag(sync=True, **array_serialization)
    roc_offsets = traitlets.Any(None).tag(sync=True, **array_serialization)
    pr = traitlets.Any(None).tag(sync=True, **array_serialization)
    pr_offsets = traitlets.Any(None).tag(sync=True, **array_serialization)
    reliability = traitlets.Any(None).tag(sync=True, **array_serialization)  # (bins, 3): confidence, frequency, count
    summary_names = traitlets.List(traitlets.Unicode()).tag(sync=True)
    summary = traitlets.Any(None).tag(sync=True, **array_serialization)  # float64 per summary name
    class_metric_names = traitlets.List(traitlets.Unicode()).tag(sync=True)
    class_metrics = traitlets.Any(None).tag(sync=True, **array_serialization)  # (classes, metrics) float64
    # the selection made elsewhere, evaluated: same layout, NaN where undefined
    compared_label = traitlets.Unicode("").tag(sync=True)
    compared_n = traitlets.Int(0).tag(sync=True)
    compared_summary = traitlets.Any(None).tag(sync=True, **array_serialization)
    compared_class_metrics = traitlets.Any(None).tag(sync=True, **array_serialization)
    compared_roc = traitlets.Any(None).tag(sync=True, **array_serialization)  # focus class, (2, m)
    # what the page selected here
    selected_cell = traitlets.List(traitlets.Int(), maxlen=2).tag(sync=True)  # [true, predicted] or []
    selected_range = traitlets.List(traitlets.Float(), maxlen=2).tag(sync=True)  # [lo, hi] or []
    error = traitlets.Unicode("").tag(sync=True)
    shared_selection = traitlets.Instance(Selection, allow_none=True).tag(sync=True, **widget_serialization)

    def __init__(self, source=None, *, labels=None, scores=None, subset=None, class_names=None,
                 selection: Selection | None = None, focus=None, threshold: float | None = None,
                 nonfinite: str = "wrong", background: bool = False, **kwargs):
        """``background=True``: the curves, the per-class table and its DeLong intervals (passes over
        every instance, many seconds on a million) are computed in a thread after the constructor
        returns; the page shows the score distributions and the confusion counts at once."""
        if selection is not None and not isinstance(selection, Selection):
            raise ViewError(f"selection= is the Selection the views share (activis.Selection()), "
                            f"not {type(selection).__name__}")
        self._out: Outcomes = outcomes(source, labels=labels, scores=scores, subset=subset, class_names=class_names,
                                       nonfinite=nonfinite)
        if self._out.labels.size == 0:
            raise EvaluationError("nothing to evaluate: no instance with a known label")
        threshold = checked_threshold(threshold)
        names = self._out.class_names
        self._base = evaluate(self._out)  # curves and ranking metrics: computed once, whatever the threshold
        focus = self._base.focus if focus is None else self._base.at(None, focus).focus
        lo, hi = score_range(self._out)
        super().__init__(class_names=[str(n) for n in names], colours=palette(len(names)),
                         focus=focus, score_domain=[lo, hi],
                         threshold=None if threshold is None else float(threshold), **kwargs)
        self._ready = not background
        self._compare_pending = False
        if background:
            self._send_instances()
        else:
            self._send_all()
        self.shared_selection = selection if selection is not None else Selection()
        self._watched: Selection | None = None
        self._follow(None)
        if background:
            run_in_background(self._compute_in_background)
        self.observe(self._follow, "shared_selection")
        self.observe(lambda _c: self._send_focus(), "focus")
        self.observe(lambda _c: self._compare(), "threshold")

    @property
    def outcomes(self) -> Outcomes:
        return self._out

    @property
    def selection(self) -> Selection:
        return self.shared_selection

    def evaluation(self, rows=None):
        """The `Evaluation` at the panel's focus and threshold (of some rows, positions in `outcomes`)."""
        if rows is None:
            return self._base.at(self.threshold, self.focus)
        return evaluate(self._out.take(rows), focus=self.focus, threshold=self.threshold)

    def data(self, kind: str = "roc") -> pd.DataFrame:
        """One chart's data at the panel's focus and threshold: "roc", "pr", "calibration",
        "distributions" or "confusion"."""
        from ..export.charts import evaluation_data

        return evaluation_data(self.evaluation(), kind)

    def chart(self, kind: str = "roc"):
        """The same chart as an Altair chart (``.save("roc.png")`` writes PNG, SVG or PDF offline)."""
        from ..export.charts import evaluation_chart

        return evaluation_chart(self.evaluation(), kind)

    def selected(self) -> np.ndarray | None:
        """Store indices this panel brushed last (a confusion cell or a score range), None if none."""
        sel = self.shared_selection
        return None if sel is None else sel.own("brush", SOURCE)

    def select_cell(self, true, predicted) -> np.ndarray:
        """Brush the instances of one confusion cell (what a click does in the page)."""
        e = self.evaluation()
        a, b = e._class(true), e._class(predicted)
        indices = self._out.indices[(self._out.labels == a) & (e.predictions == b)]
        self.selected_cell = [a, b]
        self.shared_selection.set_brush(indices, SOURCE)
        return indices

    # ---------------------------------------------------------------- data for the page
    def _compute_in_background(self) -> None:
        """The passes over every instance, in a thread; their results are sent from the kernel's loop."""
        curves = self._curves()
        self._base.per_class  # noqa: B018 - its DeLong intervals computed (and cached) here, off the kernel's thread
        loop = kernel_loop()
        if loop is not None:
            loop.add_callback(self._background_done, curves)
        else:
            self._background_done(curves)

    def _background_done(self, curves: dict) -> None:
        if self.comm is None:
            return  # closed meanwhile
        self._ready = True
        with self.hold_sync():
            for key, value in curves.items():
                setattr(self, key, value)
            self._send_focus()

    def _send_all(self) -> None:
        with self.hold_sync():
            for key, value in self._curves().items():
                setattr(self, key, value)
            self._send_instances()

    def _curves(self) -> dict:
        """ROC and PR of every class and the micro average (thinned), and the reliability curve."""
        e = self._base
        k = self._out.n_classes
        rocs, prs = [], []
        for cls in [*range(k), "micro"]:
            try:
                r, p = e.roc(cls), e.precision_recall(cls)
                rocs.append(thin(r["fpr"], r["tpr"]))
                prs.append(thin(p["recall"], p["precision"]))
            except EvaluationError:  # a class without positives has no curve
                rocs.append(np.zeros((2, 0), np.float32))
                prs.append(np.zeros((2, 0), np.float32))
        roc, roc_offsets = _pack(rocs)
        pr, pr_offsets = _pack(prs)
        curve = e.reliability()
        return {"roc": roc, "roc_offsets": roc_offsets, "pr": pr, "pr_offsets": pr_offsets,
                "reliability": curve[["confidence", "frequency", "count"]].to_numpy(np.float64)}

    def _send_instances(self) -> None:
        with self.hold_sync():
            self.index = self._out.indices.astype(np.int32)
            self.label = self._out.labels.astype(np.int32)
            self.argmax = self._out.predictions(None).astype(np.int32)  # the very predictions evaluate() counts
            self._send_focus()

    def _send_focus(self) -> None:
        scores = self._out.scores
        others = scores.copy()
        others[:, self.focus] = -np.inf
        with self.hold_sync():
            self.score = scores[:, self.focus].astype(np.float32)
            self.other = np.argmax(others, axis=1).astype(np.int32)
            if not self._ready:
                return  # the tables come with the curves
            summary, per_class = self._tables(self.evaluation())
            self.summary_names = [k for k in SUMMARY_KEYS if k in summary]
            self.summary = np.array([summary[k] for k in self.summary_names], np.float64)
            self.class_metric_names = CLASS_METRICS
            self.class_metrics = per_class
            self._compare()

    @staticmethod
    def _tables(e) -> tuple[dict, np.ndarray]:
        return e.summary, e.per_class[CLASS_METRICS].to_numpy(np.float64)

    # ---------------------------------------------------------------- the shared selection
    def _follow(self, _change) -> None:
        if self._watched is not None:
            self._watched.unobserve(self._on_shared, ["brush", "brush_source", "subset_indices", "subset"])
        self._watched = self.shared_selection
        if self._watched is not None:
            self._watched.observe(self._on_shared, ["brush", "brush_source", "subset_indices", "subset"])
        self._compare()

    def _on_shared(self, _change) -> None:
        sel = self.shared_selection
        if sel.clause("brush", SOURCE) is not None:  # another view's brush replaced ours
            self.selected_cell, self.selected_range = [], []
        self._compare_soon()

    def _compare_soon(self) -> None:
        """Compare once the kernel has answered the message that changed the selection.

        A brush reaches every view from one message; the matrix row and the instance panel are
        what the user watches, so in a kernel (its event loop) this panel's metrics come after
        their answers have left, and several changes in one message are compared once. Outside a
        kernel (a script, a test) the comparison is immediate: another library's running event loop
        (a browser driver's) is not the kernel's and may never run the callback.
        """
        loop = kernel_loop()
        if loop is None:
            self._compare()
            return
        if not self._compare_pending:
            self._compare_pending = True
            loop.add_callback(self._compare_pending_now)

    def _compare_pending_now(self) -> None:
        self._compare_pending = False
        if self.comm is not None:  # not closed meanwhile
            self._compare()

    def _compared(self) -> tuple[str, np.ndarray | None]:
        """The selection made elsewhere: another view's brush, else the active subset."""
        sel = self.shared_selection
        if sel is None:
            return "", None
        brushed = sel.clause("brush", SOURCE)  # another view's brush, never our own
        if brushed is not None:
            return f"selection ({sel.brush_source})", brushed
        if sel.subset and sel.subset_indices is not None:
            return sel.subset, np.asarray(sel.subset_indices, dtype=np.int64)
        return "", None

    def _compare(self) -> None:
        if not self._ready:
            return  # compared once the whole set's tables are there
        label, indices = self._compared()
        empty = {"compared_label": "", "compared_n": 0, "compared_summary": None, "compared_class_metrics": None,
                 "compared_roc": None}
        if indices is None:
            values = empty
        else:
            rows = np.flatnonzero(np.isin(self._out.indices, as_indices(indices)))
            values = {**empty, "compared_label": label, "compared_n": int(rows.size)}
            if rows.size:
                e = self.evaluation(rows)
                summary, per_class = self._tables(e)
                values["compared_summary"] = np.array([summary.get(k, np.nan) for k in self.summary_names])
                values["compared_class_metrics"] = per_class
                try:
                    r = e.roc()
                    values["compared_roc"] = thin(r["fpr"], r["tpr"])
                except EvaluationError:
                    pass  # one class only in the selection: no curve
        with self.hold_sync():
            for key, value in values.items():
                setattr(self, key, value)

    @traitlets.validate("threshold")
    def _valid_threshold(self, proposal):
        if proposal["value"] is not None and not np.isfinite(proposal["value"]):
            raise ViewError(f"threshold is a finite score, not {proposal['value']}")
        return proposal["value"]

    @traitlets.validate("focus")
    def _valid_focus(self, proposal):
        k = len(self.class_names)
        if not 0 <= proposal["value"] < k:
            raise ViewError(f"focus is a class index 0..{k - 1}, not {proposal['value']}")
        return proposal["value"]

    def close(self) -> None:
        if getattr(self, "_watched", None) is not None:
            self._watched.unobserve(self._on_shared, ["brush", "brush_source", "subset_indices", "subset"])
            self._watched = None
        super().close()


def run_in_background(work) -> None:
    """Start ``work`` in a daemon thread (a module function, so that tests can see what was deferred)."""
    threading.Thread(target=work, name="activis-evaluation", daemon=True).start()


def evaluation_panel_for(store, selection: Selection, **kwargs) -> EvaluationPanel | None:
    """An explorer's evaluation panel, or None for a store with nothing to evaluate (no labels)."""
    try:
        return EvaluationPanel(store, selection=selection, **kwargs)
    except EvaluationError:
        return None
