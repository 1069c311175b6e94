"""InstancePanel: a store's instances as squares by true class, misclassified on the right (ActiVis §4.3-C)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import traitlets
from ipywidgets import widget_serialization

from ..analysis import as_indices, sample_instances
from ._arrays import array_serialization, array_to_json
from ._base import View, bundle, class_count, is_among
from .colours import palette
from .errors import ViewError, check_index, check_layer, check_neuron, check_same_instances, check_store
from .selection import Selection

# the instances table's own columns; anything else is the user's metadata and goes in the hover card
_STORE_COLUMNS = {"label", "pred", "correct", "confidence", "label_score", "nonfinite", "label_name", "pred_name"}
THUMB_SIDE = 32  # thumbnails are block-averaged down to at most this many pixels a side
CARD_FEATURES = 64  # input features sent per instance for a tabular store (the card shows the first ones)
TEXT_CHARS = 200
MAX_INSTANCES = 20_000  # beyond this a canvas of squares stops being readable


def _nested_to_json(value, widget=None):
    """A dict whose numpy arrays travel as binary buffers (ipywidgets extracts nested memoryviews)."""
    if isinstance(value, np.ndarray):
        return array_to_json(value)
    if isinstance(value, dict):
        return {k: _nested_to_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nested_to_json(v) for v in value]
    return value


def image_layout(input_shape, images=None) -> tuple[int, int, int, str] | None:
    """(channels, height, width, order) when the stored inputs are images, else None.

    ``images``: None decides from the shape ((H, W), (C, H, W) with C of 1 or 3, or (H, W, C));
    False never draws thumbnails; a shape such as (8, 8) reads flat inputs as images.
    """
    if images is False or input_shape is None:
        return None
    shape = tuple(int(s) for s in (images if images not in (None, True) else input_shape))
    if images not in (None, True) and int(np.prod(shape)) != int(np.prod(input_shape)):
        raise ViewError(f"images={shape} has {int(np.prod(shape))} values per instance; the stored inputs have "
                         f"{int(np.prod(input_shape))} (shape {tuple(input_shape)}).")
    if len(shape) == 2:
        return 1, shape[0], shape[1], "chw"
    if len(shape) == 3 and shape[0] in (1, 3):
        return shape[0], shape[1], shape[2], "chw"
    if len(shape) == 3 and shape[2] in (1, 3):
        return shape[2], shape[0], shape[1], "hwc"
    if images not in (None, True):
        raise ViewError(f"images={shape} is not an image shape: use (H, W), (C, H, W) or (H, W, C) with C = 1 or 3.")
    return None


def make_thumbnails(raw: np.ndarray, layout: tuple[int, int, int, str]) -> np.ndarray:
    """Instances x h x w x c uint8 thumbnails, block-averaged to at most THUMB_SIDE pixels a side.

    uint8 inputs keep their values; other inputs are scaled by the sample's range per channel, so
    that digits stored as 0..16 or images normalised around zero come out with full contrast.
    """
    c, hgt, wid, order = layout
    if order == "chw":
        images = raw.reshape(len(raw), c, hgt, wid)
    else:
        images = raw.reshape(len(raw), hgt, wid, c).transpose(0, 3, 1, 2)
    factor = max(1, -(-max(hgt, wid) // THUMB_SIDE))
    if factor > 1:
        h2, w2 = hgt // factor, wid // factor
        images = images[:, :, : h2 * factor, : w2 * factor].astype(np.float32)
        images = images.reshape(len(raw), c, h2, factor, w2, factor).mean(axis=(3, 5))
    if raw.dtype != np.uint8:
        images = np.nan_to_num(images.astype(np.float32))
        lo = images.min(axis=(0, 2, 3), keepdims=True) if len(images) else 0
        hi = images.max(axis=(0, 2, 3), keepdims=True) if len(images) else 1
        images = (images - lo) / np.where(hi > lo, hi - lo, 1) * 255
    return np.ascontiguousarray(np.clip(np.rint(images), 0, 255).astype(np.uint8).transpose(0, 2, 3, 1))


class InstancePanel(View):
    """Instances of a store as squares grouped by true class (ActiVis's instance selection panel).

    In each class group the correctly classified instances fill columns from the left and the
    misclassified from the right, both sorted by confidence (most confident first), or by
    ``sort_values`` when given (e.g. one neuron's activations: its top-activating instances come
    first). Fill colour is the true class, border colour the predicted class. Image inputs are drawn
    as thumbnails; hovering shows the instance's card (classes, confidence, metadata, thumbnail).

    About ``max_instances`` are shown: a stratified sample that keeps the misclassified ones (see
    `activis.analysis.sample_instances`) plus every pinned instance.

    Linkable traits: ``pinned`` (click toggles), ``hovered_index`` (-1 when none),
    ``highlighted_indices`` (drawn emphasised, the rest dimmed), ``filter_indices`` (narrow the panel
    to these instances, resampled within them), ``sort_values`` (one value per store instance, or
    None). Indices are always the store's row indices.
    """

    _esm = bundle("instance_panel")

    # what the browser draws, derived from the store here (never edited there)
    _sample = traitlets.Dict().tag(sync=True, to_json=_nested_to_json)
    _sort_keys = traitlets.Any(None).tag(sync=True, **array_serialization)
    class_names = traitlets.List(traitlets.Unicode()).tag(sync=True)
    thumbnails = traitlets.Bool(True).tag(sync=True)  # draw image thumbnails inside the squares
    sort_label = traitlets.Unicode("").tag(sync=True)

    # selections other views read and drive
    pinned = traitlets.List(traitlets.Int()).tag(sync=True)
    hovered_index = traitlets.Int(-1).tag(sync=True)
    highlighted_indices = traitlets.Any(None).tag(sync=True, **array_serialization)
    # instances flagged with a corner mark and why (an explorer: "prediction changed since step 5")
    marked_indices = traitlets.Any(None).tag(sync=True, **array_serialization)
    mark_label = traitlets.Unicode("").tag(sync=True)
    filter_indices = traitlets.Any(None)
    sort_values = traitlets.Any(None)
    # an explorer's Selection: other views' hovers and the active subset light squares up in the browser
    shared_selection = traitlets.Instance(Selection, allow_none=True).tag(sync=True, **widget_serialization)
    max_instances = traitlets.Int(1000)
    seed = traitlets.Int(0)

    def __init__(self, store, max_instances: int = 1000, seed: int = 0, *, images=None, **kwargs):
        self._store = check_store("InstancePanel", store)
        self._image_layout = image_layout(store.input_shape, images) if store.inputs is not None else None
        if images not in (None, False) and self._image_layout is None:
            raise ViewError("images= was given but the store keeps no inputs (capture them with keep_inputs).")
        self._shown = np.zeros(0, dtype=np.int64)
        self._ready = False  # the traits set by __init__ would each draw a sample otherwise
        kwargs.setdefault("colours", palette(class_count(store)))
        super().__init__(class_names=[str(c) for c in store.class_names], max_instances=max_instances, seed=seed,
                         **kwargs)
        self._ready = True
        self._resample()

    # ----------------------------------------------------------- properties
    @property
    def store(self):
        return self._store

    @property
    def shown(self) -> np.ndarray:
        """Store indices of the instances the panel draws (sorted)."""
        return self._shown.copy()

    # -------------------------------------------------------------- actions
    def pin(self, *indices: int) -> None:
        """Pin instances (they stay in the panel, marked, and are the rows other views compare)."""
        n = self._store.n_instances
        self.pinned = list(dict.fromkeys([*self.pinned, *(check_index(i, n) for i in indices)]))

    def unpin(self, *indices: int) -> None:
        drop = {check_index(i, self._store.n_instances) for i in indices}
        self.pinned = [p for p in self.pinned if p not in drop]

    def clear_pins(self) -> None:
        self.pinned = []

    def highlight(self, indices) -> None:
        """Emphasise these instances (indices or a boolean mask; None or empty clears)."""
        self.highlighted_indices = indices

    def mark(self, indices, label: str = "") -> None:
        """Flag these instances with a corner mark, ``label`` saying why (None or empty clears)."""
        with self.hold_sync():
            self.marked_indices = indices
            self.mark_label = label if self.marked_indices is not None else ""

    def filter(self, indices) -> None:
        """Show only these instances (indices or a boolean mask), resampled within them; None shows all."""
        self.filter_indices = indices

    def sort_by(self, values, label: str = "") -> None:
        """Sort each group by ``values`` (one per store instance, highest first) instead of confidence; None resets."""
        with self.hold_sync():
            self.sort_label = label if values is not None else ""
            self.sort_values = values

    def sort_by_neuron(self, layer: str, neuron: int) -> None:
        """Sort by one neuron's activation: its top-activating instances of each class come first."""
        layer = check_layer(self._store, layer)  # a graph node's name becomes the store's
        neuron = check_neuron(self._store, layer, neuron)
        acts = self._store.activations(layer)
        column = np.empty(len(acts), dtype=np.float32)
        step = max(1, (16 << 20) // max(1, acts.shape[1] * acts.dtype.itemsize))
        for lo in range(0, len(acts), step):  # row blocks: a strided column read would touch every page anyway
            column[lo:lo + step] = acts[lo:lo + step, neuron]
        self.sort_by(column, label=f"{layer} · neuron {neuron}")

    def set_store(self, store) -> None:
        """Show the same instances as another store of them has them (a checkpoint: ``store.at(step)``)."""
        self._store = check_same_instances("InstancePanel", self._store, store)
        self._resample()

    def refresh(self) -> None:
        """Re-read the store (a capture may still be appending) and draw a fresh sample."""
        self._store.reload()
        self._resample()

    # ----------------------------------------------------------- validation
    @traitlets.validate("pinned")
    def _check_pinned(self, proposal):
        n = self._store.n_instances
        return list(dict.fromkeys(check_index(p, n) for p in proposal["value"]))

    @traitlets.validate("highlighted_indices", "marked_indices")
    def _check_highlighted(self, proposal):
        value = proposal["value"]
        if value is None:
            return None
        idx = as_indices(value, self._store.n_instances, proposal["trait"].name).astype(np.int32)
        return idx if len(idx) else None

    @traitlets.validate("filter_indices")
    def _check_filter(self, proposal):
        value = proposal["value"]
        return None if value is None else as_indices(value, self._store.n_instances, "filter_indices")

    @traitlets.validate("sort_values")
    def _check_sort_values(self, proposal):
        value = proposal["value"]
        if value is None:
            return None
        try:
            arr = np.asarray(value, dtype=np.float32).reshape(-1)
        except (TypeError, ValueError):
            raise ViewError(f"sort_values needs numbers, one per store instance, not {type(value).__name__}.") from None
        n = self._store.n_instances
        if len(arr) != n:
            raise ViewError(f"sort_values needs one value per store instance ({n}), not {len(arr)}.")
        return arr

    @traitlets.validate("max_instances")
    def _check_max(self, proposal):
        value = int(proposal["value"])
        if not 1 <= value <= MAX_INSTANCES:
            raise ViewError(f"max_instances must be between 1 and {MAX_INSTANCES:,}, not {value}.")
        return value

    # -------------------------------------------------------------- syncing
    @traitlets.observe("filter_indices", "max_instances", "seed")
    def _on_sampling_change(self, _change):
        self._resample()

    @traitlets.observe("pinned")
    def _on_pinned(self, change):
        # a pin from Python may name an instance outside the sample: bring it in; unpinning keeps the layout
        if not np.isin(np.asarray(change["new"], dtype=np.int64), self._shown).all():
            self._resample()

    @traitlets.observe("sort_values")
    def _on_sort_values(self, _change):
        self._send_sort_keys()

    def _send_sort_keys(self) -> None:
        values = self.sort_values
        self._sort_keys = None if values is None else values[self._shown]

    def _resample(self) -> None:
        if not self._ready:
            return
        store = self._store
        shown = sample_instances(store, self.max_instances, seed=self.seed, include=self.pinned,
                                 within=self.filter_indices)
        self._shown = shown
        labels = np.asarray(store.column("label"), dtype=np.int64)
        preds = np.asarray(store.column("pred"), dtype=np.int64)
        # per class: what the filter holds plus the pins, which are shown whatever the filter (counted
        # without them, a pinned digit of another class read "1 shown of 0")
        candidates = slice(None) if self.filter_indices is None else self.filter_indices if not self.pinned \
            else np.union1d(self.filter_indices, np.asarray(self.pinned, np.int64))  # (a union costs a sort)
        lab_c, pred_c = labels[candidates], preds[candidates]
        known = lab_c >= 0
        n_classes = max(len(self.class_names), int(labels.max(initial=-1)) + 1, int(preds.max(initial=-1)) + 1)
        data = {
            "index": shown.astype(np.int32),
            "label": labels[shown].astype(np.int32),
            "pred": preds[shown].astype(np.int32),
            "confidence": np.asarray(store.column("confidence"))[shown].astype(np.float32),
            "total": int(store.n_instances),
            "candidates": int(len(lab_c) if self.filter_indices is None else len(self.filter_indices)),
            "filtered": self.filter_indices is not None,
            "class_totals": np.bincount(lab_c[known], minlength=n_classes).astype(np.int32),
            "class_wrong": np.bincount(lab_c[known & (lab_c != pred_c)], minlength=n_classes).astype(np.int32),
        }
        try:
            data["label_score"] = np.asarray(store.column("label_score"))[shown].astype(np.float32)
        except KeyError:  # format-1 stores did not keep it
            pass
        data.update(self._card_values(shown))
        if self._image_layout is not None:
            data["thumbs"] = make_thumbnails(np.asarray(store.inputs[shown]), self._image_layout)
        with self.hold_sync():
            self._sample = data
            self._send_sort_keys()

    def _card_values(self, shown: np.ndarray) -> dict:
        """Metadata (and tabular input features) of the shown instances: numbers as one binary matrix, text as text."""
        table = self._store.instances
        meta = table.iloc[shown][[c for c in table.columns if c not in _STORE_COLUMNS]]
        numbers, names, integer, texts = [], [], [], []
        for name in meta.columns:
            col = meta[name]
            if pd.api.types.is_bool_dtype(col) or pd.api.types.is_numeric_dtype(col):
                numbers.append(col.to_numpy(dtype=np.float64, na_value=np.nan))
                names.append(str(name))
                integer.append(bool(pd.api.types.is_integer_dtype(col) or pd.api.types.is_bool_dtype(col)))
            else:
                values = col.astype("string").fillna("—").str.slice(0, TEXT_CHARS)
                texts.append({"name": str(name), "values": values.tolist()})
        left_out = 0
        inputs = self._store.inputs
        if inputs is not None and self._image_layout is None:
            width = inputs.shape[1]
            take = min(width, CARD_FEATURES)
            left_out = width - take
            block = np.asarray(inputs[shown][:, :take], dtype=np.float64)
            numbers.extend(block.T)
            names.extend(f"input[{j}]" for j in range(take))
            integer.extend([inputs.dtype.kind in "iub"] * take)
        matrix = np.stack(numbers, axis=1) if numbers else None
        if matrix is not None:  # half the bytes on every resample (a checkpoint move) when float32 loses nothing
            narrow = matrix.astype(np.float32)
            if np.array_equal(narrow.astype(np.float64), matrix, equal_nan=True):
                matrix = narrow
        return {"numbers": matrix, "number_names": names, "number_integer": integer, "texts": texts,
                "features_left_out": left_out}

    def data(self) -> pd.DataFrame:
        """The instances drawn (`shown`), one row each with the store's fields (classes, confidence, metadata),
        whether each is pinned, highlighted or marked, and the value it is sorted by when ``sort_by`` is set."""
        shown = self._shown
        frame = self._store.instances.iloc[shown].reset_index(drop=True)
        frame.insert(0, "instance", shown)
        frame["pinned"] = is_among(shown, self.pinned)
        frame["highlighted"] = is_among(shown, self.highlighted_indices)
        frame["marked"] = is_among(shown, self.marked_indices)
        if self.sort_values is not None:
            frame[f"sorted by: {self.sort_label or 'values'}"] = self.sort_values[shown]
        return frame
