"""GraphView: the computation graph as a left-to-right DAG, collapsed to top-level modules."""

from __future__ import annotations

import traitlets

from ..graph import ComputationGraph
from ._base import View, bundle
from .errors import ViewError, check_type, did_you_mean, listing, unknown

SEVERITIES = ("error", "warning", "note")


class GraphView(View):
    """Interactive overview of a `ComputationGraph`.

    Click a node to select it (``selected_layer``: a graph node name, or a module path for a
    collapsed module); double-click a module to expand or collapse it. Setting
    ``selected_layer`` from Python highlights the node; ``captured_layers`` marks the nodes
    whose activations are in the store.

    ``markers`` puts a badge on nodes: ``{node name or module path: {"severity": "error" | "warning" |
    "note", "count": int, "title": str}}`` (the training doctor marks the layers its findings are
    about). A collapsed module shows the worst marker inside it with the counts summed; hovering
    shows the titles.
    """

    _esm = bundle("graph_view")

    graph = traitlets.Dict().tag(sync=True)
    selected_layer = traitlets.Unicode("").tag(sync=True)
    expanded = traitlets.List(traitlets.Unicode()).tag(sync=True)
    captured_layers = traitlets.List(traitlets.Unicode()).tag(sync=True)
    markers = traitlets.Dict().tag(sync=True)
    layout_ms = traitlets.Float(0.0).tag(sync=True)  # measured in the browser, for benchmarks

    def __init__(self, graph: ComputationGraph, **kwargs):
        check_type("GraphView", graph, ComputationGraph,
                   "a ComputationGraph (activis.extract_graph(model, example_input) or store.graph)")
        self._graph = graph  # before the traits: checking markers given here needs the graph
        super().__init__(graph=graph.to_dict(), **kwargs)

    @traitlets.validate("markers")
    def _check_markers(self, proposal):
        checked = {}
        for name, marker in proposal["value"].items():
            if name not in self._graph and name not in self._graph.modules:
                known = [n.name for n in self._graph.nodes] + [p for p in self._graph.modules if p]
                raise ViewError(f"Marker for {name!r}: no such node or module in the graph."
                                f"{did_you_mean(name, known)} Nodes and modules: {listing(known)}.")
            if not isinstance(marker, dict) or marker.get("severity") not in SEVERITIES:
                raise ViewError(f"Marker for {name!r} needs a severity, one of {', '.join(SEVERITIES)}; "
                                f"got {marker!r}.")
            count = marker.get("count", 1)
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ViewError(f"Marker for {name!r}: count must be a whole number >= 0, not {count!r}.")
            checked[str(name)] = {"severity": marker["severity"], "count": count, "title": str(marker.get("title", ""))}
        return checked

    @property
    def computation_graph(self) -> ComputationGraph:
        return self._graph

    def expand(self, *paths: str) -> None:
        """Show the insides of these modules (their parents are expanded too)."""
        wanted = list(self.expanded)
        for path in paths:
            if path not in self._graph.modules:
                raise unknown(f"Unknown module {path!r}", path, [p for p in self._graph.modules if p], "Modules")
            parts = path.split(".")
            for i in range(1, len(parts) + 1):
                prefix = ".".join(parts[:i])
                if prefix not in wanted:
                    wanted.append(prefix)
        self.expanded = wanted

    def collapse(self, *paths: str) -> None:
        """Fold these modules (and everything inside them) back into one box."""
        self.expanded = [p for p in self.expanded
                         if not any(p == c or p.startswith(c + ".") for c in paths)]

    def expand_all(self) -> None:
        self.expanded = [p for p, m in self._graph.modules.items() if p and m.children]

    def data(self):
        """The graph's nodes, one row each in graph order: name, op, module, output shape, whether the store
        captured it, its marker (the doctor's badge: severity, count, title; a called module's own marker
        counts) and whether it is the selected node."""
        import pandas as pd

        rows = []
        for node in self._graph.nodes:
            marker = self.markers.get(node.name) or (self.markers.get(node.module_path, {})
                                                     if node.op == "call_module" else {})
            rows.append({"name": node.name, "op": node.op, "kind": node.kind, "module": node.module_path,
                         "shape": None if node.shape is None else tuple(node.shape),
                         "captured": node.name in self.captured_layers, "marker": marker.get("severity", ""),
                         "marker_count": marker.get("count", 0), "marker_title": marker.get("title", ""),
                         "selected": node.name == self.selected_layer})
        return pd.DataFrame(rows, columns=["name", "op", "kind", "module", "shape", "captured", "marker",
                                           "marker_count", "marker_title", "selected"])
