"""CKAView: the layers x checkpoints heatmap of `activis.cka_matrix(store)` (which layers settle first).

A click on a cell is ``picked`` = ``{"layer": ..., "step": ...}``; an explorer selects that layer and moves
to that checkpoint.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import traitlets

from ._arrays import array_serialization
from ._base import View, bundle
from .errors import ViewError, unknown


class CKAView(View):
    """``CKAView(cka_matrix(store))``: rows are layers, columns checkpoint steps, values CKA in [0, 1]."""

    _esm = bundle("cka_view")
    height = traitlets.Int(220).tag(sync=True)

    layers = traitlets.List(traitlets.Unicode()).tag(sync=True)
    steps = traitlets.List(traitlets.Int()).tag(sync=True)
    values = traitlets.Any(None).tag(sync=True, **array_serialization)  # float32 (layers, steps)
    picked = traitlets.Dict().tag(sync=True)  # {"layer": str, "step": int} or {}
    marked_step = traitlets.Int(-1).tag(sync=True)  # the explorer's checkpoint, outlined
    marked_layer = traitlets.Unicode("").tag(sync=True)
    choices_of = {"marked_step": "steps", "marked_layer": "layers"}

    def __init__(self, matrix: pd.DataFrame, **kwargs):
        if not isinstance(matrix, pd.DataFrame) or matrix.columns.name != "step":
            raise ViewError("CKAView shows the layers x checkpoint steps frame of activis.cka_matrix(store).")
        self._matrix = matrix
        super().__init__(layers=[str(layer) for layer in matrix.index], steps=[int(s) for s in matrix.columns],
                         values=matrix.to_numpy(np.float32), **kwargs)

    def data(self) -> pd.DataFrame:
        """The heatmap's cells as a long table: layer, step, cka."""
        from ..export.charts import cka_data

        return cka_data(self._matrix)

    def chart(self):
        """The heatmap as an Altair chart."""
        from ..export.charts import cka_chart

        return cka_chart(self._matrix)

    def pick(self, layer: str, step: int) -> None:
        """Pick a cell, as a click does."""
        self.picked = {"layer": layer, "step": step}

    @traitlets.validate("picked")
    def _valid_pick(self, proposal):
        value = dict(proposal["value"])
        if not value:
            return value
        if value.get("layer") not in self.layers:
            raise unknown(f"No layer {value.get('layer')!r} in the CKA matrix", value.get("layer"), self.layers,
                          "Layers")
        if value.get("step") not in self.steps:
            raise unknown(f"No checkpoint {value.get('step')!r} in the CKA matrix", value.get("step"), self.steps,
                          "Steps")
        return {"layer": value["layer"], "step": int(value["step"])}
