"""A large store in a page: a stratified sample of its instances, said on the page.

A page holds every layer's activations as float32; 100,000 instances of a 512-unit layer alone are
200 MB, far more than a page to attach or open. Past ``max_instances`` the export writes the sampled
rows into a temporary store (every class kept, the misclassified first: `activis.analysis.sample_instances`)
and exports an Explorer over it with the same layer, projection method and subsets. Each sampled
instance keeps its row number in the full store as the ``store_index`` column, shown in its tooltip.
"""

from __future__ import annotations

import contextlib
import pathlib
import tempfile

import numpy as np

from ..analysis import sample_instances
from ..store import write_store
from ..subsets import Subsets
from ..widgets.instance_panel import _STORE_COLUMNS


@contextlib.contextmanager
def sampled_explorer(explorer, max_instances: int):
    """An Explorer over a stratified sample of ``explorer``'s store, and the page's note saying so."""
    from ..widgets.explorer import Explorer

    store = explorer.store
    rows = sample_instances(store, max_instances, seed=0)
    with tempfile.TemporaryDirectory(prefix="activis-export-") as folder:
        table = store.instances
        metadata = table.iloc[rows][[c for c in table.columns if c not in _STORE_COLUMNS]].reset_index(drop=True)
        metadata.insert(0, "store_index", rows)
        inputs = store.inputs
        sample = write_store(
            pathlib.Path(folder) / "sample.activis",
            {layer: np.asarray(store.activations(layer)[rows]) for layer in store.layers},
            labels=np.asarray(store.column("label"))[rows], outputs=np.asarray(store.outputs)[rows],
            class_names=list(store.class_names) or None, metadata=metadata,
            layer_specs={layer: store.layer_spec(layer) for layer in store.layers},
            inputs=None if inputs is None else np.asarray(inputs[rows]), graph=store.graph,
            output_kind=store.output_kind)
        subsets = Subsets(sample)
        position = {int(r): i for i, r in enumerate(rows)}
        for name in explorer.subsets.names:
            definition = explorer.subsets[name].definition
            if definition.get("kind") == "query":
                subsets.add(name, definition["expr"])
            else:
                kept = [position[i] for i in explorer.subsets.indices(name).tolist() if i in position]
                subsets.add(name, indices=np.asarray(kept, dtype=np.int64))
        projection = explorer.projection
        view = Explorer(sample, layer=explorer.selection.layer, subsets=subsets, graph=explorer.graph,
                        method=projection.method, projection_params=dict(projection._params),
                        max_instances=explorer.instances.max_instances)
        note = (f"A sample: {len(rows):,} of {store.n_instances:,} instances (every class, the misclassified "
                f"first); store_index is each one's row in the full store.")
        try:
            yield view, note
        finally:
            for child in view.views:
                child.close()
