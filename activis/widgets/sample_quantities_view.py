"""SampleQuantitiesView: the per-instance instruments at one checkpoint (loss, gradient norm at the logits).

The cockpit's per-sample quantities, per instance (`activis.instance_quantities` of ``store.at(step)``):
one histogram each. Dragging across a histogram brushes the instances whose value lies in that range
(``brushed``); in an explorer that is the shared Selection's brush (source ``"per_sample"``), so the
projection, the matrix and the instance panel follow it, and the histograms overlay the instances
another view brushed (every clause but mine).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import traitlets
from ipywidgets import widget_serialization

from ..dynamics.per_instance import QUANTITIES
from ._arrays import array_serialization
from ._base import View, bundle, is_among
from .errors import ViewError, unknown
from .selection import Selection, brushed_indices

SOURCE = "per_sample"  # this view's name in the shared Selection's clauses


class SampleQuantitiesView(View):
    """``SampleQuantitiesView(instance_quantities(store.at(step)), step=step)``."""

    _esm = bundle("sample_quantities_view")
    height = traitlets.Int(200).tag(sync=True)

    step = traitlets.Int(-1).tag(sync=True)  # the checkpoint the values are of (-1: unknown)
    quantity_names = traitlets.List(traitlets.Unicode()).tag(sync=True)
    quantity_titles = traitlets.List(traitlets.Unicode()).tag(sync=True)
    values = traitlets.Any(None).tag(sync=True, **array_serialization)  # (quantities, instances) float32
    brush_quantity = traitlets.Unicode("").tag(sync=True)  # the quantity brushed, "" for none
    brush_range = traitlets.List(traitlets.Float(), maxlen=2).tag(sync=True)  # [lo, hi] or []
    brushed = traitlets.Any(None).tag(sync=True, **array_serialization)  # int32 indices in the range
    shared_selection = traitlets.Instance(Selection, allow_none=True).tag(sync=True, **widget_serialization)

    def __init__(self, quantities: pd.DataFrame, *, step: int = -1, **kwargs):
        super().__init__(**kwargs)
        self.set_values(quantities, step)

    def set_values(self, quantities: pd.DataFrame, step: int = -1) -> None:
        """Show another checkpoint's values; a brushed range stays and selects that checkpoint's instances in it."""
        names = [q for q in QUANTITIES if q in getattr(quantities, "columns", [])]
        if not names:
            raise ViewError(f"SampleQuantitiesView shows a frame of activis.instance_quantities(...) with "
                            f"{' or '.join(QUANTITIES)}; this one has neither.")
        self._frame = quantities
        with self.hold_sync():
            self.quantity_names = names
            self.quantity_titles = [QUANTITIES[q] for q in names]
            self.values = quantities[names].to_numpy(np.float32).T.copy()
            self.step = int(step)
            if self.brush_quantity and len(self.brush_range) == 2:
                self.brushed = self._in_range(self.brush_quantity, *self.brush_range)

    @property
    def quantities(self) -> pd.DataFrame:
        return self._frame

    def brush(self, quantity: str | None = None, lo: float | None = None, hi: float | None = None) -> np.ndarray | None:
        """Brush the instances whose ``quantity`` lies in [lo, hi], as a drag across its histogram does
        (no arguments: clear); returns their indices."""
        if quantity is None:
            with self.hold_sync():
                self.brush_quantity, self.brush_range, self.brushed = "", [], None
            return None
        if quantity not in self.quantity_names:
            raise unknown(f"No per-instance quantity {quantity!r}", quantity, self.quantity_names, "Quantities")
        if lo is None or hi is None or not np.isfinite([lo, hi]).all():
            raise ViewError(f"brush needs a finite range lo, hi of {quantity}, not {lo!r}, {hi!r}.")
        lo, hi = sorted((float(lo), float(hi)))
        indices = self._in_range(quantity, lo, hi)
        with self.hold_sync():
            self.brush_quantity, self.brush_range, self.brushed = quantity, [lo, hi], indices
        return indices

    def _in_range(self, quantity: str, lo: float, hi: float) -> np.ndarray:
        values = self._frame[quantity].to_numpy()
        return np.flatnonzero((values >= lo) & (values <= hi)).astype(np.int32)

    @traitlets.validate("brushed")
    def _valid_brushed(self, proposal):
        return brushed_indices(proposal["value"], len(self._frame))

    def data(self) -> pd.DataFrame:
        """The per-instance quantities drawn, one row per instance (``instance``), at checkpoint ``step``, with
        whether the brush holds it."""
        frame = self._frame[self.quantity_names].reset_index(drop=True)
        frame.insert(0, "instance", np.arange(len(frame)))
        return frame.assign(step=self.step, brushed=is_among(frame["instance"], self.brushed))
