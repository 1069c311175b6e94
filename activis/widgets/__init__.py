"""Thin anywidget views over backend objects. They hold no data of their own.

Imported on first use: each view loads its own bundle and its own backend module.
"""

from __future__ import annotations

import importlib

_VIEWS = {
    "GraphView": "graph_view",
    "ActivationMatrix": "activation_matrix",
    "ProjectionView": "projection_view",
    "InstancePanel": "instance_panel",
    "SubsetPanel": "subset_panel",
    "Selection": "selection",
    "Explorer": "explorer",
    "CockpitPanel": "cockpit_panel",
    "MisclassificationView": "misclassification_view",
    "DoctorReport": "doctor_report",
    "SliceSuggestions": "slice_suggestions",
    "EvaluationPanel": "evaluation_panel",
    "RunsPanel": "runs_panel",
    "TimelineView": "timeline_view",
    "DataMapView": "data_map_view",
    "CKAView": "cka_view",
    "SampleQuantitiesView": "sample_quantities_view",
    "ViewError": "errors",
}

__all__ = sorted(_VIEWS)


def __getattr__(name: str):
    module = _VIEWS.get(name)
    if module is None:
        raise AttributeError(f"module 'activis.widgets' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


def __dir__():
    return __all__
