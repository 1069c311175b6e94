"""The one selection that the views of an explorer share, synced to the browser.

Following Mosaic's cross-filtering: each view writes the clauses it owns (its ``*_source`` says
which view wrote a clause) and follows every clause except its own, so a brush never erases
itself. The Selection applies that rule itself: a view asks `Selection.clause` (in the browser,
``js/common/selection.js``) and gets nothing back for a clause it wrote. Because this is a widget
model, views read and write it in the browser: hovering a matrix row lights up its instances in the
projection without a round trip through the kernel.
"""

from __future__ import annotations

import numpy as np
import traitlets
from anywidget import AnyWidget

from ._arrays import array_serialization
from ._base import ChecksTraits, bundle
from .errors import ViewError, unknown


def brushed_indices(value, n: int) -> np.ndarray | None:
    """A view's ``brushed`` trait checked: None, or int32 indices of its ``n`` instances."""
    if value is None:
        return None
    indices = as_indices(value)
    if indices.size and indices.max() >= n:
        raise ViewError(f"brushed holds instance {int(indices.max())}; the view has {n} instances.")
    return indices


def as_indices(values) -> np.ndarray:
    """Instance indices as the int32 array every view sends to the browser; anything else is refused by name."""
    if values is None:
        return np.zeros(0, np.int32)
    arr = np.asarray(values)
    if arr.ndim > 1 or arr.dtype == bool or (arr.size and arr.dtype.kind not in "iu"):
        raise ViewError(f"Instance indices are a 1-D list of integers, not a {arr.dtype} array of shape "
                        f"{arr.shape}{' (for a mask, pass np.flatnonzero(mask))' if arr.dtype == bool else ''}.")
    arr = arr.reshape(-1).astype(np.int64)
    if arr.size and (arr.min() < 0 or arr.max() > np.iinfo(np.int32).max):
        bad = arr.min() if arr.min() < 0 else arr.max()
        raise ViewError(f"Instance indices are 0 or more (and below 2**31), not {bad}.")
    return arr.astype(np.int32)


def _same(a, b) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))


def _instance(index) -> int:
    if isinstance(index, bool) or not isinstance(index, int | np.integer) or index < 0:
        raise ViewError(f"An instance to pin is an integer index, 0 or more, not {index!r}.")
    return int(index)


# the views' names in the clauses they write (the ``*_source`` traits); the JS views use the same names
PROJECTION = "projection"
MATRIX = "matrix"
INSTANCES = "instances"
MISCLASSIFICATION = "misclassification"
EVALUATION = "evaluation"
CLAUSES = ("brush", "hover")
# what a reset clears, one name per mark the views draw (the legend's chips, `Selection.clear`)
MARKS = ("subset", "brush", "pinned", "hover", "neuron", "highlight")


class Selection(ChecksTraits, AnyWidget):
    """Shared selection state: layer, neuron, brushed, hovered and pinned instances, active subset."""

    _esm = bundle("selection")

    layer = traitlets.Unicode("").tag(sync=True)
    neuron = traitlets.Int(-1).tag(sync=True)
    brush = traitlets.Any(None).tag(sync=True, **array_serialization)  # int32 instance indices
    brush_source = traitlets.Unicode("").tag(sync=True)
    hover = traitlets.Any(None).tag(sync=True, **array_serialization)  # int32, transient
    hover_source = traitlets.Unicode("").tag(sync=True)
    hover_instance = traitlets.Int(-1).tag(sync=True)  # one instance hovered (temporary matrix row)
    pinned = traitlets.List(traitlets.Int()).tag(sync=True)
    subset = traitlets.Unicode("").tag(sync=True)
    subset_indices = traitlets.Any(None).tag(sync=True, **array_serialization)
    # neurons of one layer that a view points at (the misclassification view's): the matrix marks their columns
    highlight_neurons = traitlets.Any(None).tag(sync=True, **array_serialization)  # int32 neuron indices
    highlight_neurons_layer = traitlets.Unicode("").tag(sync=True)
    highlight_neurons_source = traitlets.Unicode("").tag(sync=True)
    # the checkpoint step the views show (-1: not a run): the timeline writes it in the page, so that views
    # holding every checkpoint's data (`checkpoint_frames`) redraw there before the kernel answers
    checkpoint = traitlets.Int(-1).tag(sync=True)

    @traitlets.validate("brush", "hover", "subset_indices", "highlight_neurons")
    def _check_indices(self, proposal):
        return None if proposal["value"] is None else as_indices(proposal["value"])

    @traitlets.validate("pinned")
    def _check_pinned(self, proposal):
        return list(dict.fromkeys(_instance(i) for i in proposal["value"]))

    def set_brush(self, indices, source: str) -> None:
        """Make ``indices`` (None: none) the brush, written by ``source``. The brush a page already wrote
        (the view's own trait then brings the same indices) changes nothing: views do not refilter."""
        indices = None if indices is None else as_indices(indices)  # refused before anything changes
        if source == self.brush_source and _same(indices, self.brush):
            return
        with self.hold_sync():
            self.brush_source = source
            self.brush = None if indices is None else as_indices(indices)

    def set_hover(self, indices, source: str) -> None:
        indices = None if indices is None else as_indices(indices)
        with self.hold_sync():
            self.hover_source = source
            self.hover = None if indices is None else as_indices(indices)

    def clause(self, name: str, view: str) -> np.ndarray | None:
        """The instances of clause ``name`` that ``view`` follows: None when ``view`` wrote it (Mosaic's rule)."""
        return None if self._written_by(name, view) else self._indices(name)

    def own(self, name: str, view: str) -> np.ndarray | None:
        """The instances of ``view``'s own clause ``name``: None when another view's replaced it (Mosaic's
        ``valueFor``), so a view keeps drawing its mark only while its clause stands."""
        return self._indices(name) if self._written_by(name, view) else None

    def _written_by(self, name: str, view: str) -> bool:
        if name not in CLAUSES:
            raise unknown(f"No clause {name!r}", name, CLAUSES, "Clauses")
        return getattr(self, f"{name}_source") == view

    def _indices(self, name: str) -> np.ndarray | None:
        value = getattr(self, name)
        return None if value is None else np.asarray(value, dtype=np.int64)

    def set_neuron_highlight(self, neurons, layer: str, source: str) -> None:
        neurons = None if neurons is None else as_indices(neurons)
        with self.hold_sync():
            self.highlight_neurons_source = source
            self.highlight_neurons_layer = layer if neurons is not None else ""
            self.highlight_neurons = None if neurons is None else as_indices(neurons)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._reset_handler = None
        self.on_msg(self._on_message)

    def clear(self, mark: str | None = None) -> None:
        """Clear one mark (a name of `MARKS`), or every one: afterwards no clause is left."""
        if mark is not None and mark not in MARKS:
            raise unknown(f"No mark {mark!r} to clear", mark, MARKS, "Marks")
        values = {"subset": {"subset": "", "subset_indices": None},
                  "brush": {"brush": None, "brush_source": ""},
                  "pinned": {"pinned": []},
                  "hover": {"hover": None, "hover_source": "", "hover_instance": -1},
                  "neuron": {"neuron": -1},
                  "highlight": {"highlight_neurons": None, "highlight_neurons_layer": "",
                                "highlight_neurons_source": ""}}
        with self.hold_sync():
            for name in MARKS if mark is None else (mark,):
                for trait, value in values[name].items():
                    setattr(self, trait, value)

    def on_reset(self, handler) -> None:
        """Who answers the legend's reset and its chips' clear buttons: ``handler(mark)`` (None: all).
        An explorer clears its views' own marks too (a lasso drawn, a confusion cell outlined)."""
        self._reset_handler = handler

    def _on_message(self, _widget, content, _buffers) -> None:
        if not isinstance(content, dict) or content.get("action") != "reset":
            return
        mark = content.get("mark")
        if mark is not None and mark not in MARKS:
            return  # a message from the page is input: an unknown mark is ignored, not raised into the kernel
        (self._reset_handler or self.clear)(mark)

    def pin(self, index: int) -> None:
        if _instance(index) not in self.pinned:
            self.pinned = [*self.pinned, _instance(index)]

    def unpin(self, index: int) -> None:
        self.pinned = [i for i in self.pinned if i != _instance(index)]
