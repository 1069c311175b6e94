"""activis: see what a trained PyTorch model does, and debug how it trained, in a notebook.

The backend (graph, store, capture, subsets, projection, cockpit) is plain Python; the views in
`activis.widgets` are thin anywidget front-ends over it and are imported only when asked for.
"""

from __future__ import annotations

from .graph import ComputationGraph, GraphTraceWarning, UnknownLayerError, extract_graph

__version__ = "0.1.0"

_WIDGETS = {"GraphView"}

__all__ = ["ComputationGraph", "GraphTraceWarning", "UnknownLayerError", "extract_graph", "__version__",
           *sorted(_WIDGETS)]


def __getattr__(name: str):
    # widgets pull in anywidget and the JS bundles; the backend must work without them
    if name in _WIDGETS:
        from . import widgets

        return getattr(widgets, name)
    raise AttributeError(f"module 'activis' has no attribute {name!r}")
