"""GraphView: the computation graph as a left-to-right DAG, collapsed to top-level modules."""

from __future__ import annotations

import traitlets

from ..graph import ComputationGraph
from ._base import View, bundle


class GraphView(View):
    """Interactive overview of a `ComputationGraph`.

    Click a node to select it (``selected_layer``: a graph node name, or a module path for a
    collapsed module); double-click a module to expand or collapse it. Setting
    ``selected_layer`` from Python highlights the node; ``captured_layers`` marks the nodes
    whose activations are in the store.
    """

    _esm = bundle("graph_view")

    graph = traitlets.Dict().tag(sync=True)
    selected_layer = traitlets.Unicode("").tag(sync=True)
    expanded = traitlets.List(traitlets.Unicode()).tag(sync=True)
    captured_layers = traitlets.List(traitlets.Unicode()).tag(sync=True)
    layout_ms = traitlets.Float(0.0).tag(sync=True)  # measured in the browser, for benchmarks

    def __init__(self, graph: ComputationGraph, **kwargs):
        super().__init__(graph=graph.to_dict(), **kwargs)
        self._graph = graph

    @property
    def computation_graph(self) -> ComputationGraph:
        return self._graph

    def expand(self, *paths: str) -> None:
        """Show the insides of these modules (their parents are expanded too)."""
        wanted = list(self.expanded)
        for path in paths:
            if path not in self._graph.modules:
                known = ", ".join(p for p in self._graph.modules if p)
                raise KeyError(f"Unknown module {path!r}; modules: {known}")
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
