"""What an exported Explorer needs to cross-filter without a kernel.

In the notebook a lasso asks Python for the brushed instances' mean activations; in a page there is
no Python, so the page gets the data those answers are computed from: every layer's activations
(float32), the projection of every layer, each colouring the projection offers, the stored subsets'
members, the instances' table as the panels show it, and which store layer each graph node means.
The page then computes a brushed row as Python does (mean, fraction active, std over the rows).
"""

from __future__ import annotations

import numpy as np

from ..analysis import sample_instances
from ..projection import project
from ..widgets import colours
from ..widgets.explorer import LayerNotCaptured, store_layer_for
from ..widgets.instance_panel import make_thumbnails
from ..widgets.projection_view import CONTINUOUS_LEVELS, _short, color_encoding, color_options
from .errors import ExportError
from .state import PageState

# a page holds every layer's activations as float32; past this it would not open in a browser tab
MAX_ACTIVATION_BYTES = 256 << 20


def explorer_data(explorer, state: PageState) -> dict:
    """The Explorer's data for the page's coordinator (arrays as buffer numbers in ``state``)."""
    store = explorer.store
    n = store.n_instances
    total = sum(n * store.layer_spec(layer).neurons * 4 for layer in store.layers)
    if total > MAX_ACTIVATION_BYTES:
        raise ExportError(f"The store's activations take {total / 2**20:,.0f} MiB as float32; a page holds at most "
                          f"{MAX_ACTIVATION_BYTES / 2**20:,.0f} MiB. Export a smaller store (write_store of a sample).")
    projection = explorer.projection
    rows = projection._rows
    params = {} if projection.method == "pca" else dict(projection._params)
    layers = []
    for layer in store.layers:
        spec = store.layer_spec(layer)
        stored = store.activations(layer)
        # float16 layers travel as float16 (half the bytes, the same values); the page widens them once
        dtype = np.float16 if stored.dtype == np.float16 else np.float32
        activations = np.ascontiguousarray(stored, dtype=dtype)
        positions = project(store, layer, projection.method, instances=rows, **params).wait()
        layers.append({
            "name": layer, "neurons": int(spec.neurons), "neuron_kind": spec.neuron_kind,
            "node": store.manifest["layers"][layer].get("node") or layer,
            "dtype": np.dtype(dtype).name, "activations": state.add_buffer(activations),
            "positions": state.add_buffer(np.ascontiguousarray(positions, dtype=np.float32)),
        })
    return {
        "n": int(n),
        "layers": layers,
        "colourings": _colourings(store, rows, projection.colours.get("classes")),
        "subsets": _subsets(explorer.subsets, state),
        "graph_layers": _graph_layers(explorer),
        "hover": hover_fields(store),
        "instances": _instance_table(explorer.instances, state),
        "threshold": float(explorer.matrix.threshold),
        "ramps": {"sequential": colours.ramp(colours.VIRIDIS, CONTINUOUS_LEVELS) + [colours.MISSING],
                  "diverging": colours.ramp(colours.DIVERGING, CONTINUOUS_LEVELS) + [colours.MISSING]},
    }


def _colourings(store, rows, classes) -> dict:
    """Colour codes, palette and legend of every colouring but "neuron" (the page computes that one)."""
    out = {}
    for option in color_options(store):
        if option == "neuron":
            continue
        codes, palette, legend = color_encoding(store, option, rows=rows, classes=classes)
        out[option] = {"codes": codes.tolist(), "palette": palette, "legend": legend}
    return out


def _subsets(subsets, state: PageState) -> dict:
    return {name: {"indices": state.add_buffer(np.asarray(subsets.indices(name), dtype=np.int32)),
                   "description": subsets[name].describe()} for name in subsets.names}


def _graph_layers(explorer) -> dict:
    """Which store layer a click on each graph node or module selects (what the notebook resolves)."""
    graph = explorer.graph
    if graph is None:
        return {}
    names = [node.name for node in graph.nodes] + list(graph.modules)
    out = {}
    for name in dict.fromkeys(names):
        try:
            out[name] = store_layer_for(explorer.store, graph, name)
        except LayerNotCaptured:
            continue
    return out


def hover_fields(store) -> dict:
    """The projection's tooltip fields of every instance, as text (the notebook formats them the same way)."""
    table = store.instances
    titles = {"label_name": "true class", "pred_name": "prediction", "confidence": "confidence", "correct": "correct"}
    if "label_name" not in table.columns:
        titles = {"label": "true class", "pred": "prediction", **titles}
    skip = {"label", "pred", "label_name", "pred_name", "confidence", "correct"}
    first = [(title, column) for column, title in titles.items() if column in table.columns]
    rest = [(str(column), column) for column in table.columns if column not in skip]
    return {"titles": [title for title, _ in first + rest],
            "values": [[_short(value) for value in table[column].tolist()] for _, column in first + rest]}


def _instance_table(panel, state: PageState) -> dict:
    """The instance panel's data for every instance, so that a brush in the page can show any of them."""
    store = panel.store
    everything = np.arange(store.n_instances)
    table = {
        "label": np.asarray(store.column("label"), dtype=np.int32),
        "pred": np.asarray(store.column("pred"), dtype=np.int32),
        "confidence": np.asarray(store.column("confidence"), dtype=np.float32),
    }
    try:
        table["label_score"] = np.asarray(store.column("label_score"), dtype=np.float32)
    except KeyError:
        pass
    out = {name: state.add_buffer(values) for name, values in table.items()}
    cards = panel._card_values(everything)
    numbers = cards.pop("numbers")
    out["numbers"] = None if numbers is None else state.add_buffer(np.ascontiguousarray(numbers, dtype=np.float64))
    out["number_columns"] = 0 if numbers is None else int(numbers.shape[1])
    out["cards"] = cards
    if panel._image_layout is not None:
        thumbs = make_thumbnails(np.asarray(store.inputs), panel._image_layout)
        out["thumbs"] = state.add_buffer(thumbs)
        out["thumb_shape"] = list(thumbs.shape[1:])
    out["max_instances"] = int(panel.max_instances)
    out["sample"] = state.add_buffer(sample_instances(store, panel.max_instances, seed=panel.seed)
                                     .astype(np.int32))
    return out
