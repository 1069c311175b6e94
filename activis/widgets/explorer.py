"""Explorer: the graph, matrix, projection, instance and subset views of one store, coordinated.

The views share one `Selection` (layer, neuron, brushed / hovered / pinned instances, active
subset). Each view writes the clauses it owns and follows every other clause, never its own (the
rule Mosaic's cross-filtering uses), so a lasso in the projection narrows the instance panel and
adds a "selection" row to the matrix but never erases itself. Hover highlights travel between the
views inside the browser (through the shared Selection model); what needs the activations (a
matrix row for a set of instances, a neuron's values) is computed here, in the kernel. The links are
one table, `Explorer.LINKS`, resolved by one coordinator (`links.Coordinator`, ``explorer.links``).
"""

from __future__ import annotations

import ipywidgets as widgets
import traitlets

from ..graph import UnknownLayerError
from ..projection import METHODS
from ..subsets import Subsets
from . import row_keys
from ._base import ChecksTraits, after_first_frame, class_count
from .activation_matrix import ActivationMatrix
from .colours import palette
from .errors import ViewError, check_layer, check_store
from .evaluation_panel import evaluation_panel_for
from .explorer_timeline import ExplorerTimeline
from .graph_view import GraphView
from .instance_panel import InstancePanel
from .links import Coordinator, Link
from .matrix_stack import MatrixStack
from .misclassification_view import MisclassificationView
from .projection_view import ProjectionView
from .selection import INSTANCES, MATRIX, PROJECTION, Selection, as_indices
from .slice_suggestions import SliceSuggestions
from .subset_panel import SubsetPanel


class LayerNotCaptured(UnknownLayerError):
    """A graph selection whose layer the store does not hold: one kind of `UnknownLayerError`."""


def store_layer_for(store, graph, name: str) -> str:
    """The captured layer a graph selection means: itself, its node, or the last one inside a module."""
    if name in store.layers:
        return name
    by_node = {store.manifest["layers"][layer].get("node"): layer for layer in store.layers}
    if name in by_node:
        return by_node[name]
    if graph is not None:
        inside = {n.name for n in graph.nodes_of_module(name)} if name in graph.modules else set()
        if name in graph:
            node = graph.node(name)
            if node.op == "call_module":
                inside |= {n.name for n in graph.nodes if n.target == node.target}
        captured = [layer for layer in store.layers if store.manifest["layers"][layer].get("node") in inside]
        if captured:
            return captured[-1]
    raise LayerNotCaptured(f"{name!r} was not captured; captured layers: {', '.join(store.layers)}. "
                           "Capture it with activis.capture(..., layers=[...]).")


class Explorer(ChecksTraits, widgets.VBox):
    """One dashboard over a store; every view is also reachable alone (``explorer.matrix`` …).

    ``layers=["fc1", "fc2"]`` stacks those layers' matrices under the main one, with its rows
    (`matrix_stack.MatrixStack`, ``explorer.stack``; "+ layer…" in the page adds one).

    Over a store with checkpoints (or with ``run=``, a run record or its folder) it adds a timeline row:
    ``checkpoint`` is the step shown, and `explorer_timeline.ExplorerTimeline` links the rest.
    """

    checkpoint = traitlets.Int(0).tag(sync=True)
    choices_of = {"checkpoint": "store.checkpoints"}

    def __init__(self, store, *, layer: str | None = None, subsets: Subsets | None = None, graph=None,
                 method: str = "umap", max_instances: int = 1000, projection_params: dict | None = None,
                 run=None, layers=()):
        check_store("Explorer", store)
        if not store.layers:
            raise ViewError(f"Store {store.path} holds no layers to explore.")
        layer = check_layer(store, store.layers[-1] if layer in (None, "") else layer)
        if subsets is not None and not isinstance(subsets, Subsets):
            raise ViewError(f"subsets= is the Subsets of this store (activis.Subsets(store)), not "
                            f"{type(subsets).__name__}.")
        if method not in METHODS:
            raise ViewError(f"method={method!r} is not valid; choose one of {', '.join(map(repr, METHODS))}.")
        self.store = store
        self.subsets = subsets if subsets is not None else Subsets(store)
        self.graph = graph if graph is not None else store.graph
        self.selection = Selection(layer=layer)
        self.graph_view = None
        if self.graph is not None:
            captured = [store.manifest["layers"][name].get("node") or name for name in store.layers]
            self.graph_view = GraphView(self.graph, captured_layers=captured, height=GRAPH_H,
                                        selected_layer=store.manifest["layers"][layer].get("node") or layer)
        # over a large layer its class rows come after the first frame (computed in a thread, with progress)
        self.matrix = ActivationMatrix(store, layer, subsets=self.subsets, height=MATRIX_H, background=True)
        self.projection = ProjectionView(store, layer, method, params=projection_params, height=MAIN_H)
        self.instances = InstancePanel(store, max_instances=max_instances, height=MAIN_H)
        self.subset_panel = SubsetPanel(self.subsets, height=SIDE_H)
        self.slice_suggestions = SliceSuggestions(self.subsets, layer=layer, height=SIDE_H)
        self.why = MisclassificationView(store, layer, height=SIDE_H)
        self.evaluation = None  # built after the first frame (_add_evaluation)
        self.status = widgets.Label("")
        self.colours = palette(class_count(store))
        for view in self.views:
            view.colours = self.colours  # one set of class colours for every view
        # more layers' matrices under the main one, with its rows (``layers=``, or "+ layer…" in the page)
        self.stack = MatrixStack(self.matrix, layers)
        self._link()
        self.selection.on_reset(self.reset)
        super().__init__(children=self._layout(), layout=widgets.Layout(width="100%"))
        self.add_class("activis-explorer")
        after_first_frame(self._add_evaluation)
        self.timeline = None
        if run is not None or len(store.checkpoints) > 1:
            self._add_timeline(run, projection_params)

    def _add_evaluation(self) -> None:
        """The evaluation panel's tab (None without labels). Its inputs alone take a second at a million
        instances, so it comes after the first frame; its curves and intervals later still, from a thread."""
        self.evaluation = evaluation_panel_for(self.store, self.selection, height=560, background=True)
        if self.evaluation is not None:
            self.links.add_views(evaluation=self.evaluation)
            self.side_tabs.children = (*self.side_tabs.children, _boxed(self.evaluation, "100%"))
            self.side_tabs.set_title(len(self.side_tabs.children) - 1, "Evaluation")

    def _add_timeline(self, run, projection_params: dict | None) -> None:
        """The checkpoint row (timeline, data map, CKA, cockpit) and its links, after the other views."""
        self.set_trait("checkpoint", self.store.checkpoints[-1])
        self.timeline = ExplorerTimeline(self, run, aligned_params=projection_params)
        self.children = (*self.children, self.timeline.box)

    @property
    def cockpit(self):
        """The CockpitPanel over the run's step log (None without a run with one)."""
        return None if self.timeline is None else self.timeline.cockpit

    @property
    def data_map(self):
        """The data-map view of the store's checkpoints (None with fewer than two)."""
        return None if self.timeline is None else self.timeline.data_map

    @property
    def cka(self):
        """The layers x checkpoints CKA heatmap (None with fewer than two checkpoints)."""
        return None if self.timeline is None else self.timeline.cka

    @traitlets.validate("checkpoint")
    def _valid_checkpoint(self, proposal):
        steps = self.store.checkpoints
        if proposal["value"] not in steps:
            raise ViewError(f"checkpoint={proposal['value']!r} is not a checkpoint of {self.store.path}; "
                            f"checkpoints: {', '.join(map(str, steps))}.")
        return proposal["value"]

    def _layout(self) -> list:
        """The four main views on one screen (a notebook column at 1400 x 900): the graph, then the
        matrix at full width, then the projection beside the instance panel; the side panels below, as
        tabs. Each view has its own fixed height, so no view sets another's (a hover row in the matrix
        moves nothing under the mouse) and no row is taller than its tallest view."""
        full = widgets.ToggleButton(False, description="Full width", tooltip="the explorer over the whole notebook "
                                    "panel, at its full width (this button again to return)", icon="expand",
                                    layout=widgets.Layout(width="auto", flex="0 0 auto"))
        full.add_class("activis-explorer-full-toggle")
        full.observe(lambda c: (self.add_class if c["new"] else self.remove_class)("activis-explorer-full"), "value")
        self.full_window = full
        self.selection.layout = widgets.Layout(flex="1 1 auto", min_width="0")
        bar = widgets.HBox([self.selection, self.stack.control, full, self.status], layout=widgets.Layout(width="100%",
                                                                                    align_items="center"))
        side = [(self.subset_panel, "Subsets"), (self.slice_suggestions, "Slices"),
                (self.why, "Why misclassified")]
        self.side_tabs = widgets.Tab(children=[_boxed(view, "100%") for view, _ in side],
                                     titles=[title for _, title in side], layout=widgets.Layout(width="100%"))
        self.side_tabs.add_class("activis-explorer-side")
        children = [bar]
        if self.graph_view is not None:
            children.append(_boxed(self.graph_view, "100%"))
        return [*children, _boxed(self.matrix, "100%"), self.stack,
                widgets.HBox([_boxed(self.projection, "50%"), _boxed(self.instances, "50%")],
                             layout=widgets.Layout(width="100%")),
                self.side_tabs]

    def reset(self, mark: str | None = None) -> None:
        """Clear every selection the views draw (or one ``mark`` of `selection.MARKS`): the subset, the
        brush (a lasso, a confusion cell, a score range), the pins, the hover rows, the neuron colouring
        and the highlighted neurons -- in the Selection and in the views that drew them."""
        every = mark is None
        self.selection.clear(mark)
        if every or mark == "subset":
            self.subset_panel.active = ""
            self.matrix.selected_row = ""
        if every or mark == "neuron":
            self.matrix.selected_neuron = -1
        if every or mark == "brush":
            if self.projection.selected_indices is not None and len(self.projection.selected_indices):
                self.projection.select(None)
            if self.evaluation is not None:
                self.evaluation.selected_cell, self.evaluation.selected_range = [], []
        if every or mark == "hover":
            self.projection.hovered_index = -1
            self.instances.hovered_index = -1
        if every or mark in ("pinned", "highlight"):
            self.why.clear()

    @property
    def views(self) -> list:
        """Every activis view of the explorer."""
        views = [self.matrix, self.projection, self.instances, self.subset_panel, self.slice_suggestions, self.why]
        return views if self.graph_view is None else [self.graph_view, *views]

    def save_html(self, path, *, title: str = "activis explorer"):
        """The explorer as one self-contained HTML file that still cross-filters (`activis.save_html`)."""
        from ..export import save_html

        return save_html(path, self, title=title)

    # ------------------------------------------------------------------ links
    # Every link between the views, once (`links.Coordinator` resolves them, in this order). A view's
    # clause goes through the Selection, which applies Mosaic's rule: its owner never follows it.
    LINKS = (
        # layer: the graph, the matrix or the projection picks it; the Selection fans it out
        Link("graph_view", "selected_layer", call="_on_graph_layer"),
        Link("selection", "layer", call="_on_layer"),
        Link("matrix", "layer", to="selection.layer", when=bool),
        Link("projection", "layer", to="selection.layer", when=bool),
        # neuron: a matrix column -> the projection's colour and the instance panel's order
        Link("matrix", "selected_neuron", to="selection.neuron"),
        Link("selection", "neuron", call="_on_neuron"),
        # hover: the views light up each other's hovered instances in the browser; an instance hovered
        # in the projection or the instance panel gives a temporary matrix row (that needs the kernel)
        Link("projection", "hovered_index", to="selection.hover_instance"),
        Link("instances", "hovered_index", to="selection.hover_instance"),
        Link("selection", "hover_instance", call="_on_hover_instance"),
        # pins: a click on a point or a square pins the instance as a matrix row; a lasso brushes
        Link("projection", "selected_indices", call="_on_projection_select"),
        Link("instances", "pinned", to="selection.pinned"),
        Link("matrix", "row_keys", call="_on_matrix_rows"),
        Link("selection", "pinned", call="_on_pinned"),
        # brush: whoever wrote it, the instance panel filters and the matrix adds a "selection" row
        Link("selection", ("brush", "brush_source"), call="_on_brush"),
        # subsets: picking one highlights it everywhere; an adopted slice is picked like any subset
        Link("subset_panel", "active", call="_on_subset_pick"),
        Link("slice_suggestions", "adopted", to="subset_panel.active", when=bool),
        Link("selection", "layer", to="slice_suggestions.layer"),
        Link("matrix", "selected_row", call="_on_matrix_row_pick"),
        # the misclassification view: a click on a bar picks its neuron everywhere
        Link("why", "selected_neuron", to="selection.neuron"),
    )

    def _link(self) -> None:
        """Name the views and resolve the table; the timeline adds its own views and links later."""
        self.links = Coordinator(self.selection, explorer=self, graph_view=self.graph_view, matrix=self.matrix,
                                 projection=self.projection, instances=self.instances,
                                 subset_panel=self.subset_panel, slice_suggestions=self.slice_suggestions,
                                 why=self.why)  # the evaluation panel joins when it is built
        self.links.add(self.LINKS, host=self)

    def _on_graph_layer(self, change) -> None:
        try:
            self.selection.layer = store_layer_for(self.store, self.graph, change["new"])
            self.status.value = ""
        except LayerNotCaptured as exc:
            self.status.value = str(exc)

    def _on_layer(self, change) -> None:
        layer = change["new"]
        self.matrix.layer = layer
        self.projection.layer = layer
        self.why.layer = layer  # re-explains the instance at the new layer
        if self.graph_view is not None and self._graph_layer() != layer:
            self.graph_view.selected_layer = self.store.manifest["layers"][layer].get("node") or layer
        self.selection.neuron = -1
        self._refresh_brush_row()

    def _graph_layer(self) -> str | None:
        """The captured layer the graph's selection stands for (None: nothing captured there)."""
        try:
            return store_layer_for(self.store, self.graph, self.graph_view.selected_layer)
        except LayerNotCaptured:
            return None

    def _on_neuron(self, change) -> None:
        neuron = change["new"]
        if neuron >= 0:
            self.projection.neuron = neuron
            self.projection.color_by = "neuron"
            self.instances.sort_by_neuron(self.selection.layer, neuron)
        else:
            self.projection.color_by = "label"
            self.instances.sort_by(None)

    def _on_hover_instance(self, change) -> None:
        index = change["new"]
        if index >= 0:
            self.matrix.add_rows_from_indices(row_keys.HOVER, f"hover #{index}", [index])
        elif row_keys.HOVER in self.matrix.row_keys:
            self.matrix.remove_row(row_keys.HOVER)

    def _on_projection_select(self, change) -> None:
        indices = as_indices(change["new"])
        if indices.size == 1 and self.projection.lasso is None:  # a click on one point pins it
            self.selection.pin(int(indices[0]))
        else:  # a lasso, a box or a legend pick brushes; Clear (Esc, a click on nothing) clears the brush
            self.selection.set_brush(indices if indices.size else None, PROJECTION)

    def _on_pinned(self, change) -> None:
        pinned = list(change["new"])
        if list(self.instances.pinned) != pinned:
            self.instances.pinned = pinned
        shown = row_keys.instances_in(self.matrix.row_keys)
        for index in pinned:
            if index not in shown:
                self.matrix.add_instance(index)
        for index in shown - set(pinned):
            self.matrix.remove_row(row_keys.instance_row(index))
        new = [i for i in pinned if i not in set(change["old"] or [])]
        if new:
            self.explain(new[-1])
        elif self.why.index not in pinned:  # the explained instance was unpinned: explain the last pin left
            if pinned:
                self.explain(pinned[-1])
            else:
                self.why.clear()

    def _on_matrix_rows(self, change) -> None:
        """A pinned instance row removed in the matrix unpins the instance everywhere."""
        removed = row_keys.instances_in(change["old"]) - row_keys.instances_in(change["new"])
        if removed:
            self.selection.pinned = [i for i in self.selection.pinned if i not in removed]

    def _on_brush(self, _change) -> None:
        self.instances.filter(self.selection.clause("brush", INSTANCES))
        self._refresh_brush_row()

    def _refresh_brush_row(self) -> None:
        brushed = self.selection.clause("brush", MATRIX)
        if brushed is None or not brushed.size:
            if row_keys.BRUSH in self.matrix.row_keys:
                self.matrix.remove_row(row_keys.BRUSH)
            return
        self.matrix.add_rows_from_indices(row_keys.BRUSH, f"selection ({brushed.size})", brushed)

    def _on_subset_pick(self, change) -> None:
        name = change["new"]
        self.selection.subset = name
        self.selection.subset_indices = as_indices(self.subsets.indices(name)) if name else None
        if name and row_keys.subset_row(name) not in self.matrix.row_keys:
            self.matrix.add_subset(name)

    def _on_matrix_row_pick(self, change) -> None:
        subset, instance = row_keys.subset_of(change["new"]), row_keys.instance_of(change["new"])
        if subset is not None and self.subset_panel.active != subset:
            self.subset_panel.active = subset
        elif instance is not None:
            self.explain(instance)

    # ------------------------------------------------------------------ analysis
    @property
    def last_explanation(self):
        """The `InstanceExplanation` the misclassification view shows (None when none)."""
        return self.why.explanation

    def explain(self, index: int):
        """Why instance ``index`` was classified as it was, at the current layer (a DataFrame).

        Shows it in the misclassification view (which follows later layer switches), and its
        true-class and compared-class rows in the matrix beside its own row. None when the store
        cannot answer (the view says why).
        """
        result = self.why.explain(int(index), self.selection.layer)
        self.side_tabs.selected_index = self.side_tabs.children.index(self.why)  # the side tab that shows it
        if result is None:
            return None
        names = self.store.class_names
        for cls in (result.true_class, result.compared_class):
            subset = f"true {names[cls] if cls < len(names) else cls}"
            if subset not in self.subsets:
                self.subsets.add(subset, f"label == {int(cls)}")
            if row_keys.subset_row(subset) not in self.matrix.row_keys:
                self.matrix.add_subset(subset)
        return result.neurons


GRAPH_H, MATRIX_H, MAIN_H, SIDE_H = 170, 250, 300, 320  # the explorer's rows (px): 4 views in 760 px


def _boxed(view, width: str):
    # a fixed height: a view that grows (a hover row in the matrix) must not shift the views under the mouse
    view.layout = widgets.Layout(width=width, min_width="0", height=f"{view.height}px", overflow="hidden")
    return view
