"""Thin anywidget views over backend objects. They hold no data of their own."""

from .graph_view import GraphView

__all__ = ["GraphView"]
