"""Stacked layers: several layers' activation matrices with the same rows, each sorted on its own (ActiVis).

ActiVis stacks the matrices of the layers a user picks, one under another, so that a subset's
pattern can be followed through the network. A `MatrixStack` keeps more `ActivationMatrix` panels
in step with one matrix (an explorer's): the same rows in the same order (subsets, pinned instances,
a brush or hover row, read only where they changed), the same statistic, threshold and reference
row. The neurons differ from layer to layer, so each panel orders its own: sorting by a row orders
every layer's neurons by that row, and a panel's own sort or clustering stays its own until the
main matrix's order changes. A row removed or added in any panel is removed or added in all.
"""

from __future__ import annotations

import ipywidgets as widgets

from .activation_matrix import ActivationMatrix
from .errors import ViewError, check_layer, unknown

FOLLOWED = ("statistic", "threshold", "order_mode", "sort_by_row", "difference_to")
PANEL_H = 200  # px: a stacked panel is shorter than the main matrix, its rows are the same
ADD_PROMPT = "+ layer…"


class MatrixStack(widgets.VBox):
    """More layers under ``matrix``, with its rows. ``layers`` is the matrix's layer then the stacked ones.

    ``stack.layers = ["conv2", "fc1", "fc2"]`` shows three layers (the first in ``matrix`` itself);
    `add_layer` / `remove_layer` change one; ``control`` is a dropdown that adds a layer from the page.
    """

    def __init__(self, matrix: ActivationMatrix, layers=(), *, panel_height: int = PANEL_H):
        if not isinstance(matrix, ActivationMatrix):
            raise ViewError(f"MatrixStack stacks layers under an ActivationMatrix, not {type(matrix).__name__}.")
        self.matrix = matrix
        self.panel_height = int(panel_height)
        self.panels: list[ActivationMatrix] = []
        self._held: dict[int, dict] = {}  # per panel: index-row key -> the indices array it was given
        self._syncing = False
        self.control = widgets.Dropdown(options=[ADD_PROMPT], value=ADD_PROMPT, tooltip="stack another layer's "
                                        "matrix under this one, with the same rows",
                                        layout=widgets.Layout(width="auto", flex="0 0 auto"))
        self.control.add_class("activis-stack-add")
        self.control.observe(self._on_pick, "value")
        super().__init__(children=[], layout=widgets.Layout(width="100%"))
        self.add_class("activis-matrix-stack")
        matrix.observe(self._sync_all, ["values", *FOLLOWED])
        matrix.observe(self._refresh_control, "layer")
        for layer in layers:
            self.add_layer(layer)
        self._refresh_control()

    @property
    def layers(self) -> list[str]:
        return [self.matrix.layer, *(p.layer for p in self.panels)]

    @layers.setter
    def layers(self, layers) -> None:
        layers = [check_layer(self.matrix.store, name) for name in layers]
        if not layers or len(set(layers)) != len(layers):
            raise ViewError(f"layers= is one or more different layers of the store, the first shown by the main "
                            f"matrix; got {layers!r}. Layers: {', '.join(self.matrix.store.layers)}.")
        for panel in list(self.panels):
            if panel.layer not in layers[1:]:
                self.remove_layer(panel.layer)
        self.matrix.layer = layers[0]
        for name in layers[1:]:
            if name not in self.layers:
                self.add_layer(name)
        order = {name: i for i, name in enumerate(layers)}
        self.panels.sort(key=lambda p: order[p.layer])
        self.children = tuple(self.panels)

    def add_layer(self, layer: str) -> ActivationMatrix:
        """Stack one more layer (its matrix, with the main matrix's rows); returns its panel."""
        layer = check_layer(self.matrix.store, layer)
        if layer in self.layers:
            raise ViewError(f"Layer {layer!r} is shown already; shown: {', '.join(self.layers)}.")
        main = self.matrix
        index_rows = main.index_rows()
        panel = ActivationMatrix(main.store, layer, subsets=main.subsets, background=True, height=self.panel_height,
                                 rows=[k for k in main.row_keys if k not in index_rows])
        panel.colours = main.colours
        self.panels.append(panel)
        self._held[id(panel)] = {}
        self._sync(panel)
        panel.observe(lambda change, panel=panel: self._from_panel(panel), "row_keys")
        panel.layout = widgets.Layout(width="100%", min_width="0", height=f"{self.panel_height}px", overflow="hidden")
        self.children = tuple(self.panels)
        self._refresh_control()
        return panel

    def remove_layer(self, layer: str) -> None:
        """Take a stacked layer away (the main matrix's layer stays: it follows the explorer's)."""
        panel = next((p for p in self.panels if p.layer == layer), None)
        if panel is None:
            raise unknown(f"No stacked layer {layer!r}", layer, [p.layer for p in self.panels], "Stacked layers")
        self.panels.remove(panel)
        del self._held[id(panel)]
        self.children = tuple(self.panels)
        panel.close()
        self._refresh_control()

    def close(self) -> None:
        if getattr(self, "matrix", None) is not None:  # also called by __del__ of a half-built stack
            self.matrix.unobserve(self._sync_all, ["values", *FOLLOWED])
            self.matrix.unobserve(self._refresh_control, "layer")
            for panel in self.panels:
                panel.close()
            self.control.close()
        super().close()

    # ------------------------------------------------------------------ keeping the rows the same
    def _sync_all(self, _change=None) -> None:
        for panel in self.panels:
            self._sync(panel)

    def _sync(self, panel: ActivationMatrix) -> None:
        """The main matrix's rows and settings in one panel: an index row is handed over only when it changed."""
        if self._syncing:
            return
        self._syncing = True
        try:
            main, held = self.matrix, self._held[id(panel)]
            if panel.store is not main.store:  # the explorer moved to another checkpoint: every layer moves with it
                panel.set_store(main.store)
            for key, (label, indices) in main.index_rows().items():
                if held.get(key) is not indices:
                    panel.add_rows_from_indices(key, label, indices)
                    held[key] = indices
            if list(panel.row_keys) != list(main.row_keys):
                panel.row_keys = list(main.row_keys)
            for name in FOLLOWED:
                if getattr(panel, name) != getattr(main, name):
                    setattr(panel, name, getattr(main, name))
        finally:
            self._syncing = False

    def _from_panel(self, panel: ActivationMatrix) -> None:
        """A row removed or added in a panel (its × button, its "+ subset") is removed or added in every matrix."""
        if self._syncing or list(panel.row_keys) == list(self.matrix.row_keys):
            return
        self.matrix.row_keys = list(panel.row_keys)  # the main matrix checks the keys, then every panel follows
        self._sync_all()

    # ------------------------------------------------------------------ the page's "+ layer" control
    def _refresh_control(self, _change=None) -> None:
        shown = set(self.layers)
        self.control.options = [ADD_PROMPT, *(name for name in self.matrix.store.layers if name not in shown)]
        self.control.value = ADD_PROMPT

    def _on_pick(self, change) -> None:
        if change["new"] not in (None, ADD_PROMPT):
            self.add_layer(change["new"])

    def data(self):
        """Every stacked matrix's `ActivationMatrix.data`, top to bottom: one block of the same rows per layer
        (column ``layer``). Neuron columns are each layer's own ("unit 3" of that layer, NaN past its width);
        a panel's own ``data()`` keeps its neurons in the order drawn. A row still computed in the background
        shows NaN (``panel.deferred.wait()`` first)."""
        import pandas as pd

        return pd.concat([m.data() for m in (self.matrix, *self.panels)], ignore_index=True)
