"""ProjectionView: every instance on a 2D map of its activations at one layer, coloured and linkable."""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import traitlets
from ipywidgets import widget_serialization

from ..analysis import as_indices
from ..projection import ProjectionJob, Projector, instance_rows
from . import colours
from ._arrays import array_serialization
from ._base import View, after_first_frame, bundle, class_count, is_among, kernel_loop
from .errors import ViewError, check_layer, check_neuron, check_same_instances, check_store, unknown
from .format import format_number
from .selection import Selection

MISSING = 255  # colour code of instances without a value (unlabelled, NaN metadata)
MAX_CATEGORIES = 60  # more distinct values: the most frequent 59 and "other"
CONTINUOUS_LEVELS = 255
_CATEGORICAL_MAX_UNIQUE = 12  # a numeric column with more distinct values is drawn as continuous


def color_encoding(store, color_by: str, *, layer: str | None = None, neuron: int = 0,
                   rows: np.ndarray | None = None,
                   classes: list[str] | None = None) -> tuple[np.ndarray, list[str], dict]:
    """Colour codes (uint8 per instance), the palette (code -> CSS colour) and a legend description.

    ``color_by`` is "label", "pred", "correct", "neuron" (the activation of ``neuron`` at
    ``layer``, continuous) or any column of ``store.instances``. One byte per instance crosses to
    the browser whatever the encoding; continuous values are quantised to 255 levels (the tooltip
    shows exact values). ``classes``: the class colours (a view's ``colours["classes"]``; by default
    `activis.widgets.colours.class_colours`). Other views can use this to colour instances the same way.
    """
    table = store.instances if rows is None else store.instances.iloc[rows]
    names = store.class_names
    if color_by in ("label", "pred"):
        values = table[color_by].to_numpy()
        k = max(len(names), int(values.max()) + 1 if len(values) else 0)
        labels = [names[i] if i < len(names) else str(i) for i in range(k)]
        title = "true class" if color_by == "label" else "prediction"
        return _categorical(np.where(values >= 0, values, -1), labels, title, classes)
    if color_by == "correct":
        labelled = table["label"].to_numpy() >= 0
        values = np.where(labelled, (~table["correct"].to_numpy()).astype(int), -1)
        codes, _, legend = _categorical(values, ["correct", "misclassified"], "correct / misclassified")
        return codes, colours.CORRECTNESS + [colours.MISSING] * (256 - len(colours.CORRECTNESS)), legend
    if color_by == "neuron":
        if layer is None:
            raise ViewError("Colouring by neuron needs a layer.")
        neuron = check_neuron(store, layer, neuron)
        acts = store.activations(layer)
        column = np.asarray(acts[:, neuron] if rows is None else acts[rows, neuron], dtype=np.float64)
        return _continuous(column, f"neuron {neuron} of {layer}")
    if not isinstance(color_by, str) or color_by not in table.columns:
        raise unknown(f"Cannot colour by {color_by!r}", color_by, color_options(store), "Choose one of")
    column = table[color_by]
    if pd.api.types.is_bool_dtype(column) or not pd.api.types.is_numeric_dtype(column) \
            or column.nunique(dropna=True) <= _CATEGORICAL_MAX_UNIQUE:
        codes, uniques = pd.factorize(column, sort=True)
        return _categorical(codes, [str(u) for u in uniques], color_by)
    return _continuous(column.to_numpy(dtype=np.float64, na_value=np.nan), color_by)


def color_options(store) -> list[str]:
    """What a view can colour by for this store."""
    skip = {"label", "pred", "correct", "label_name", "pred_name"}
    return ["label", "pred", "correct", "neuron"] + [c for c in store.instances.columns if c not in skip]


def _categorical(values: np.ndarray, labels: list[str], title: str,
                 classes: list[str] | None = None) -> tuple[np.ndarray, list[str], dict]:
    values = np.asarray(values, dtype=np.int64)
    valid = values >= 0
    counts = np.bincount(values[valid], minlength=len(labels))
    if len(labels) > MAX_CATEGORIES:  # keep the most frequent, fold the rest into "other"
        keep = np.argsort(-counts, kind="stable")[: MAX_CATEGORIES - 1]
        remap = np.full(len(labels), MAX_CATEGORIES - 1)
        remap[keep] = np.arange(len(keep))
        values = np.where(valid, remap[np.where(valid, values, 0)], -1)
        labels = [labels[i] for i in keep] + [f"other ({len(counts) - len(keep)} values)"]
        counts = np.bincount(values[valid], minlength=len(labels))
    codes = np.where(valid, values, MISSING).astype(np.uint8)
    palette = colours.class_colours(len(labels), classes if len(labels) <= MAX_CATEGORIES else None)
    palette += [colours.MISSING] * (256 - len(labels))
    entries = [{"code": i, "label": labels[i], "count": int(counts[i])} for i in range(len(labels)) if counts[i]]
    missing = int((~valid).sum())
    if missing:
        entries.append({"code": MISSING, "label": "missing", "count": missing})
    return codes, palette, {"kind": "categorical", "title": title, "entries": entries}


def _continuous(values: np.ndarray, title: str) -> tuple[np.ndarray, list[str], dict]:
    """Quantise to 255 levels (clipped to the 0.5-99.5th percentiles when the tails are long).

    Values of both signs get a diverging scale centred on 0 (a ReLU-free activation: negative blue,
    positive red); otherwise viridis.
    """
    finite = np.isfinite(values)
    codes = np.full(len(values), MISSING, dtype=np.uint8)
    legend = {"kind": "continuous", "title": title, "missing": int((~finite).sum())}
    if not finite.any():
        legend["domain"] = [0.0, 0.0]
        return codes, colours.ramp(colours.VIRIDIS, CONTINUOUS_LEVELS) + [colours.MISSING], legend
    v = values[finite]
    lo, hi = float(v.min()), float(v.max())
    p_lo, p_hi = (float(x) for x in np.percentile(v, [0.5, 99.5]))
    if p_hi > p_lo and hi - lo > 1.5 * (p_hi - p_lo):  # long tails would wash out the rest
        lo, hi = p_lo, p_hi
    diverging = lo < 0 < hi
    if diverging:
        lo, hi = -max(-lo, hi), max(-lo, hi)
    span = (hi - lo) or 1.0
    codes[finite] = np.clip(np.round((v - lo) / span * (CONTINUOUS_LEVELS - 1)), 0, CONTINUOUS_LEVELS - 1)
    legend["domain"] = [lo, hi]
    legend["scale"] = "diverging" if diverging else "sequential"
    if lo > v.min() or hi < v.max():
        legend["note"] = f"(clipped; full range {format_number(v.min())} to {format_number(v.max())})"
    ramp = colours.ramp(colours.DIVERGING if diverging else colours.VIRIDIS, CONTINUOUS_LEVELS)
    return codes, ramp + [colours.MISSING], legend


class ProjectionView(View):
    """Every instance as a dot on a 2D map (PCA, UMAP or t-SNE) of its activations at ``layer``.

    The PCA layout appears at once; UMAP / t-SNE run in the background with a progress bar, and the
    view moves to their layout when it is ready. Colour by ``color_by`` ("label", "pred",
    "correct", "neuron" with ``neuron``, or any instance column), always with a legend. Hover shows
    an instance; click selects one; Lasso / Box (or shift-drag) select a set: ``selected_indices``
    (int32 instance indices). ``highlight(indices)`` rings instances on top without resending
    positions; ``filter_indices`` fades everything outside a set (for cross-filtering).

    With an explorer's `Selection` in ``shared_selection`` the browser follows the other views
    directly: their hovered instances (or the active subset) are ringed in place of
    ``highlighted_indices``, an instance hovered elsewhere gets the hover ring, and points
    outside another view's brush are faded; this view's own clauses never filter itself.
    """

    _esm = bundle("projection_view")

    layer = traitlets.Unicode("").tag(sync=True)
    layers = traitlets.List(traitlets.Unicode()).tag(sync=True)
    method = traitlets.Unicode("umap").tag(sync=True)
    shown_method = traitlets.Unicode("").tag(sync=True)
    positions = traitlets.Any(None).tag(sync=True, **array_serialization)
    instance_ids = traitlets.Any(None).tag(sync=True, **array_serialization)

    color_by = traitlets.Unicode("label").tag(sync=True)
    color_options = traitlets.List(traitlets.Unicode()).tag(sync=True)
    neuron = traitlets.Int(0).tag(sync=True)
    n_neurons = traitlets.Int(0).tag(sync=True)
    color_codes = traitlets.Any(None).tag(sync=True, **array_serialization)
    palette = traitlets.List(traitlets.Unicode()).tag(sync=True)
    legend = traitlets.Dict().tag(sync=True)
    point_size = traitlets.Float(0.0).tag(sync=True)  # css px; 0 picks by the number of points
    # every checkpoint's aligned layout (checkpoints x instances x 2 float32), colour codes (checkpoints x
    # instances uint8; None when the palette differs between them), legend and label, in
    # ``checkpoint_steps``' order: the page redraws from them when the timeline moves (`checkpoint_frames`)
    checkpoint_steps = traitlets.List(traitlets.Int()).tag(sync=True, saved=False)
    checkpoint_positions = traitlets.Any(None).tag(sync=True, saved=False, **array_serialization)
    checkpoint_codes = traitlets.Any(None).tag(sync=True, saved=False, **array_serialization)
    checkpoint_methods = traitlets.List(traitlets.Unicode()).tag(sync=True, saved=False)
    checkpoint_legends = traitlets.List(traitlets.Dict()).tag(sync=True, saved=False)

    status = traitlets.Unicode("").tag(sync=True)
    stage = traitlets.Unicode("").tag(sync=True)
    progress = traitlets.Float(0.0).tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)
    # how the shown layout was made when that is not the plain method (a UMAP fitted on a sample)
    note = traitlets.Unicode("").tag(sync=True)

    selected_indices = traitlets.Any(None).tag(sync=True, **array_serialization)
    highlighted_indices = traitlets.Any(None).tag(sync=True, **array_serialization)
    filter_indices = traitlets.Any(None).tag(sync=True, **array_serialization)
    hovered_index = traitlets.Int(-1).tag(sync=True)
    hover_details = traitlets.Dict().tag(sync=True)
    # the lasso or box (m x 2, layout coordinates) that made the current selection; None otherwise
    lasso = traitlets.Any(None).tag(sync=True, **array_serialization)
    shared_selection = traitlets.Instance(Selection, allow_none=True).tag(sync=True, **widget_serialization)

    def __init__(self, store, layer: str | None = None, method: str = "umap", *, color_by: str = "label",
                 neuron: int = 0, instances=None, projector: Projector | None = None,
                 params: dict | None = None, **kwargs):
        check_store("ProjectionView", store)
        if not store.layers:
            raise ViewError("This store has no captured layers to project.")
        if projector is not None and not isinstance(projector, Projector):
            raise ViewError(f"projector= is an activis.Projector of this store, not {type(projector).__name__}.")
        if params is not None and not isinstance(params, dict):
            raise ViewError(f"params= is a dict of the method's parameters, not {type(params).__name__}.")
        self._store = store
        self._owns_projector = projector is None
        self._projector = projector or Projector(store)
        self._params = dict(params or {})
        self._job: ProjectionJob | None = None
        self._unsubscribe = None
        self._lock = threading.RLock()
        self._external_layout = False
        rows = instance_rows(instances, store.n_instances)
        self._rows = rows
        layer = check_layer(store, store.layers[-1] if layer in (None, "") else layer)
        super().__init__(layers=store.layers, layer=layer, method=method, color_by=color_by, neuron=neuron,
                         color_options=color_options(store), colours=colours.palette(class_count(store)),
                         instance_ids=None if rows is None else rows.astype(np.int32), **kwargs)
        self._recolor()
        self.observe(self._on_projection_change, ["layer", "method"])
        self.observe(self._on_color_change, ["color_by", "neuron", "colours"])
        self.observe(self._on_hover, ["hovered_index"])
        # in a kernel the projection starts once the first frame is out: a thread started here would
        # take the CPU from the views still being built (at a million instances, most of their time)
        after_first_frame(self._first_request)

    # ------------------------------------------------------------------ public
    @property
    def store(self):
        return self._store

    @property
    def projector(self) -> Projector:
        return self._projector

    @property
    def job(self) -> ProjectionJob | None:
        """The projection job behind what is shown (or being computed)."""
        return self._job

    @property
    def selection(self) -> np.ndarray:
        """Selected instance indices (sorted int32; empty when nothing is selected)."""
        return np.zeros(0, np.int32) if self.selected_indices is None else np.asarray(self.selected_indices)

    def select(self, indices) -> None:
        """Select instances (indices or a boolean mask over all instances); None clears."""
        checked = self._checked(indices)
        with self.hold_sync():
            self.lasso = None  # the selection no longer comes from a lasso
            self.selected_indices = checked

    def highlight(self, indices) -> None:
        """Ring these instances on top of the map (positions are not resent); None clears."""
        self.highlighted_indices = self._checked(indices)

    def filter(self, indices) -> None:
        """Fade every instance outside ``indices``; None shows all."""
        self.filter_indices = self._checked(indices)

    def set_store(self, store) -> None:
        """Colour and describe the instances as another store of them has them (a checkpoint:
        ``store.at(step)``); the positions stay until `show_layout` or a new projection replaces them."""
        self._store = check_same_instances("ProjectionView", self._store, store)
        self._recolor()

    def show_layout(self, positions, method: str) -> None:
        """Show these positions (one row per instance shown, e.g. an aligned layout of one checkpoint) in place of
        the projector's, until the layer or the method changes."""
        positions = np.asarray(positions, dtype=np.float32)
        n = self._store.n_instances if self._rows is None else len(self._rows)
        if positions.shape != (n, 2):
            raise ViewError(f"A layout is one (x, y) per instance shown: shape ({n}, 2), not {positions.shape}.")
        with self._lock, self.hold_sync():
            self._external_layout = True  # the projector's job no longer writes the positions
            self.positions = positions
            self.shown_method = method

    def refresh(self) -> None:
        """Re-read a store that is still being captured and project its new instances."""
        self._store.reload()
        self._recolor()
        self._request()

    def close(self):
        """Close the view; stop its projection unless the projector is shared."""
        if getattr(self, "_owns_projector", False):  # also called by __del__ of a half-built view
            self._projector.cancel()
        if getattr(self, "_unsubscribe", None):
            self._unsubscribe()
        super().close()

    @traitlets.validate("layer")
    def _valid_layer(self, proposal):
        return check_layer(self._store, proposal["value"])

    @traitlets.validate("neuron")
    def _valid_neuron(self, proposal):
        return check_neuron(self._store, self.layer, proposal["value"])

    @traitlets.validate("point_size")
    def _valid_point_size(self, proposal):
        if not proposal["value"] >= 0:
            raise ViewError(f"point_size is in CSS pixels, 0 or more (0 picks one), not {proposal['value']}.")
        return proposal["value"]

    # ------------------------------------------------------------------ projection
    def _checked(self, indices) -> np.ndarray | None:
        if indices is None:
            return None
        return as_indices(indices, self._store.n_instances, "instance indices").astype(np.int32)

    def _on_projection_change(self, change) -> None:
        try:
            self._request()
        except Exception:  # an unknown layer or method: keep showing what is shown, then say why
            self.set_trait(change["name"], change["old"])
            raise
        if change["name"] == "layer":
            if self.neuron >= self.n_neurons:
                self.neuron = 0  # recolours through its observer
            elif self.color_by == "neuron":
                self._recolor()

    def _first_request(self) -> None:
        """The first projection (a layout `show_layout` put up meanwhile stays); none for a view closed meanwhile."""
        if self.comm is not None:
            self._request(keep_layout=True)

    def _request(self, keep_layout: bool = False) -> None:
        """Ask the projector for the layer's layout; ``keep_layout``: one `show_layout` put up before the first
        request (an aligned layout) stays."""
        with self._lock:
            params = self._params if self.method != "pca" else {}
            previous = self._job
            # subscribed before the job starts, so that no early preview is missed; updates from
            # the job's thread wait for this lock, so they see the new job in place
            job = self._projector.request(self.layer, self.method, instances=self._rows,
                                          on_change=self._on_job, **params)
            if job is previous:
                return
            if self._unsubscribe:
                self._unsubscribe()
            self._job = job
            self._external_layout = self._external_layout and keep_layout
            self.n_neurons = int(self._store.activations(self.layer).shape[1])
            self.error = ""
            if not self._external_layout:
                self.shown_method = self.note = ""
            self._unsubscribe = job.on_change(self._on_job)  # already subscribed: just the unsubscriber
        self._on_job(job)

    def _on_job(self, job: ProjectionJob) -> None:
        """Mirror the job in the view. Called in the job's thread: in a kernel the update is handed to
        the kernel's own event loop, because comm messages sent from another thread can interleave
        with a running cell's messages (a notebook run by nbclient then waited forever)."""
        loop = kernel_loop()
        if loop is not None and threading.current_thread() is not threading.main_thread():
            loop.add_callback(self._mirror_job, job)
        else:
            self._mirror_job(job)

    def _mirror_job(self, job: ProjectionJob) -> None:
        with self._lock:
            if job is not self._job:
                return
            with self.hold_sync():
                self.status, self.stage, self.progress = job.status, job.stage, float(job.progress)
                if self._external_layout:
                    return
                if job.status == "done" and self.shown_method != job.method:
                    self.positions = job.positions
                    self.shown_method = job.method
                    self.note = _layout_note(job.info)
                elif job.preview is not None and not self.shown_method:
                    self.positions = job.preview
                    self.shown_method = "pca"
                if job.status == "failed":
                    self.error = f"{job.method.upper()} failed: {job.error}"

    # ------------------------------------------------------------------ colour and hover
    def _on_color_change(self, change) -> None:
        try:
            self._recolor()
        except (KeyError, IndexError, ValueError):
            # keep the view consistent with what it shows, then tell the user
            self.set_trait(change["name"], change["old"])
            raise

    def encoding_at(self, store) -> tuple[np.ndarray, list[str], dict]:
        """The colour codes, palette and legend this view would show over another store of the same instances
        (a checkpoint: ``store.at(step)``)."""
        return color_encoding(store, self.color_by, layer=self.layer, neuron=self.neuron, rows=self._rows,
                              classes=self.colours.get("classes"))

    def _recolor(self) -> None:
        codes, palette, legend = self.encoding_at(self._store)
        with self._lock, self.hold_sync():
            self.palette = palette
            self.legend = legend
            self.color_codes = codes

    def _on_hover(self, change) -> None:
        index = change["new"]
        if index < 0 or index >= self._store.n_instances:
            return
        row = self._store.instances.iloc[index]
        fields = []
        names = {"label_name": "true class", "pred_name": "prediction", "confidence": "confidence",
                 "correct": "correct"}
        if "label_name" not in row.index:
            names = {"label": "true class", "pred": "prediction", **names}
        for column, title in names.items():
            if column in row.index:
                fields.append([title, _short(row[column])])
        if self.color_by == "neuron":
            value = float(self._store.activations(self.layer)[index, self.neuron])
            fields.append([f"neuron {self.neuron}", format_number(value)])
        skip = {"label", "pred", "label_name", "pred_name", "confidence", "correct"}
        fields += [[str(c), _short(row[c])] for c in row.index if c not in skip]
        self.hover_details = {"index": int(index), "fields": fields}


    def data(self) -> pd.DataFrame:
        """The map as drawn: one row per instance shown with its position in the ``method`` layout (NaN before
        the first layout), its true class and prediction, the value it is coloured by (column named after the
        legend), and whether it is selected (click, lasso, box), highlighted (ringed) or faded by a filter."""
        rows = np.arange(self._store.n_instances) if self._rows is None else np.asarray(self._rows)
        table = self._store.instances.iloc[rows]
        positions = np.full((len(rows), 2), np.nan) if self.positions is None else np.asarray(self.positions)
        named = {"label": "label_name" if "label_name" in table else "label",
                 "pred": "pred_name" if "pred_name" in table else "pred"}
        if self.color_by == "neuron":
            colour = np.asarray(self._store.activations(self.layer)[rows, self.neuron])
        else:
            colour = table[named.get(self.color_by, self.color_by)].to_numpy()
        return pd.DataFrame({
            "instance": rows, "x": positions[:, 0], "y": positions[:, 1], "method": self.shown_method,
            "label": table[named["label"]].to_numpy(), "prediction": table[named["pred"]].to_numpy(),
            f"colour: {self.legend.get('title', self.color_by)}": colour,
            "selected": is_among(rows, self.selected_indices), "highlighted": is_among(rows, self.highlighted_indices),
            "faded": ~is_among(rows, self.filter_indices) if self.filter_indices is not None else False,
        })


def _layout_note(info: dict) -> str:
    if "fitted_on" not in info:
        return ""
    return (f"fitted on {info['fitted_on']:,} sampled points; the other {info['placed']:,} placed by their "
            "nearest sampled neighbours")


def _short(value, limit: int = 80) -> str:
    if isinstance(value, float | np.floating):
        text = format_number(value)
    else:
        text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"

