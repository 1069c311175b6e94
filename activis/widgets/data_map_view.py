"""DataMapView: Dataset Cartography's map (variability x confidence) of a store's checkpoints, brushable.

One point per instance of `activis.data_map_of(store)`, coloured by correctness or forgetting, with the
three regions labelled. A box brushed in the map is ``brushed`` (instance indices); in an explorer it
becomes the shared Selection's brush (source ``"data_map"``), and the map rings the instances other
views brush. The buttons turn a region or "forgotten ≥ 2" into a named subset in one click.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import traitlets
from ipywidgets import widget_serialization

from ..dynamics import ambiguous, forgotten, hard_to_learn
from ..subsets import Subsets
from ._arrays import array_serialization
from ._base import Choice, View, bundle
from .errors import ViewError, unknown
from .selection import Selection, as_indices

SOURCE = "data_map"  # this view's name in the shared Selection's clauses
# the one-click subsets: button label -> the dynamics subset it makes
SUBSET_MAKERS = {"forgotten ≥ 2": lambda dm: forgotten(dm, 2), "hard to learn": hard_to_learn,
                 "ambiguous": ambiguous}


class DataMapView(View):
    """``DataMapView(data_map, subsets=None)``: ``data_map`` is a frame of `activis.data_map` / `data_map_of`."""

    _esm = bundle("data_map_view")
    height = traitlets.Int(360).tag(sync=True)

    confidence = traitlets.Any(None).tag(sync=True, **array_serialization)  # float32 per instance
    variability = traitlets.Any(None).tag(sync=True, **array_serialization)
    correctness = traitlets.Any(None).tag(sync=True, **array_serialization)
    forgetting = traitlets.Any(None).tag(sync=True, **array_serialization)  # int32
    color_by = Choice(["correctness", "forgetting"], default_value="correctness").tag(sync=True)
    brushed = traitlets.Any(None).tag(sync=True, **array_serialization)  # int32 indices of the box brush
    subset_buttons = traitlets.List(traitlets.Unicode()).tag(sync=True)
    shared_selection = traitlets.Instance(Selection, allow_none=True).tag(sync=True, **widget_serialization)

    def __init__(self, data_map: pd.DataFrame, *, subsets: Subsets | None = None, **kwargs):
        missing = {"confidence", "variability", "correctness", "forgetting"} - set(getattr(data_map, "columns", []))
        if missing:
            raise ViewError(f"DataMapView shows a frame of activis.data_map(...) or data_map_of(store); this one "
                            f"lacks {', '.join(sorted(missing))}.")
        self._data_map = data_map
        self._subsets = subsets
        super().__init__(confidence=data_map["confidence"].to_numpy(np.float32),
                         variability=data_map["variability"].to_numpy(np.float32),
                         correctness=data_map["correctness"].to_numpy(np.float32),
                         forgetting=data_map["forgetting"].to_numpy(np.int32),
                         subset_buttons=list(SUBSET_MAKERS) if subsets is not None else [], **kwargs)
        self.on_msg(self._on_message)

    @property
    def data_map(self) -> pd.DataFrame:
        return self._data_map

    @traitlets.validate("brushed")
    def _valid_brushed(self, proposal):
        value = proposal["value"]
        if value is None:
            return None
        indices = as_indices(value)
        if indices.size and indices.max() >= len(self._data_map):
            raise ViewError(f"brushed holds instance {int(indices.max())}; the data map has {len(self._data_map)}.")
        return indices

    def data(self) -> pd.DataFrame:
        """The map's points, one row per instance: confidence, variability, correctness, forgetting."""
        from ..export.charts import data_map_data

        return data_map_data(self._data_map)

    def chart(self, color_by: str | None = None):
        """The map as an Altair chart (coloured as the view is, or by ``color_by``)."""
        from ..export.charts import data_map_chart

        return data_map_chart(self._data_map, color_by or self.color_by)

    def brush(self, indices) -> None:
        """Brush these instances, as a box in the map does (None clears)."""
        self.brushed = indices

    def add_subset(self, kind: str) -> str:
        """Add the subset a button names ("forgotten ≥ 2", "hard to learn", "ambiguous"); returns its name."""
        if kind not in SUBSET_MAKERS:
            raise unknown(f"No data-map subset {kind!r}", kind, list(SUBSET_MAKERS), "Choose one of")
        if self._subsets is None:
            raise ViewError("This data map has no subsets to add to: give it subsets=activis.Subsets(store).")
        subset = SUBSET_MAKERS[kind](self._data_map)
        self._subsets.add(subset.name, subset)
        return subset.name

    def _on_message(self, _widget, content, _buffers) -> None:
        if isinstance(content, dict) and content.get("add_subset") in SUBSET_MAKERS:
            self.add_subset(content["add_subset"])
