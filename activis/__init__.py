"""activis: see what a trained PyTorch model does, and debug how it trained, in a notebook.

The backend (graph, store, capture, subsets, projection, dynamics, analysis, cockpit) is plain Python; the
views in `activis.widgets` are thin anywidget front-ends over it. Names are imported on first use,
so that opening a store needs neither torch nor the widgets.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "ComputationGraph": "graph", "GraphTraceWarning": "graph", "UnknownLayerError": "graph",
    "extract_graph": "graph", "ModelInputError": "graph", "GraphFormatError": "graph",
    "GraphError": "graph",
    "ActivationStore": "store", "StoreError": "store", "open_store": "store", "write_store": "store",
    "capture": "capturing", "CaptureError": "capturing", "CaptureInterrupted": "capturing",
    "NonFiniteWarning": "capturing", "CaptureTargetExistsError": "capturing",
    "StoreWriter": "store", "StoreFullError": "store", "LayerSpec": "store",
    "StoreExistsError": "store", "UnknownColumnError": "store",
    "Subset": "subsets", "Subsets": "subsets", "SubsetError": "subsets", "Aggregate": "subsets",
    "sort_neurons": "subsets", "cluster_neurons": "subsets",
    "project": "projection", "Projector": "projection", "ProjectionJob": "projection",
    "ProjectionError": "projection", "ProjectionCancelled": "projection", "list_projections": "projection",
    "clear_projections": "projection",
    "explain_instance": "analysis", "confusion_pairs": "analysis", "AnalysisError": "analysis",
    "sample_instances": "analysis",
    "Cockpit": "cockpit", "read_log": "run", "load_runs": "run", "configuration": "cockpit",
    "CockpitLog": "run", "CockpitError": "run",
    "Run": "run", "RunError": "run", "open_run": "run", "compare": "run",
    "checkup": "doctor", "DoctorError": "doctor", "DoctorReport": "widgets", "watch": "doctor",
    "SetupError": "doctor", "TrainingDoctor": "doctor",
    "evaluate": "evaluation", "EvaluationError": "evaluation", "compare_runs": "run",
    "compare_stores": "evaluation",
    "discover_slices": "slices", "Slice": "slices", "SliceReport": "slices", "SliceError": "slices",
    "SliceSuggestions": "widgets",
    "data_map": "dynamics", "data_map_of": "dynamics", "cka": "dynamics", "cka_matrix": "dynamics",
    "aligned_projection": "dynamics", "DynamicsError": "dynamics", "instance_quantities": "dynamics",
    "GraphView": "widgets", "ActivationMatrix": "widgets", "ProjectionView": "widgets",
    "InstancePanel": "widgets", "SubsetPanel": "widgets", "Selection": "widgets", "Explorer": "widgets",
    "CockpitPanel": "widgets", "MisclassificationView": "widgets", "EvaluationPanel": "widgets",
    "RunsPanel": "widgets", "ViewError": "widgets", "TimelineView": "widgets", "DataMapView": "widgets",
    "CKAView": "widgets", "SampleQuantitiesView": "widgets",
    "save_html": "export", "ExportError": "export",
    "Checkpoints": "capturing.checkpoints", "DynamicsRecorder": "capturing.checkpoints",
    "read_dynamics": "run.dynamics", "load_params": "run.params",
    "ParamsError": "run.params",
}

__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'activis' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


def __dir__():
    return __all__
