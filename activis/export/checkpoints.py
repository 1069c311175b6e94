"""An explorer over a run in a page: every checkpoint's data, so the checkpoint slider works there.

In the notebook a checkpoint moves the matrix, the projection (to the checkpoint's aligned layout) and
the instance panel to ``store.at(step)`` (`activis.widgets.explorer_timeline`). A page has no kernel,
so it holds what those moves read: each checkpoint's activations of every layer, its aligned layouts
(of the layers whose layouts were computed; the others keep one layout, as in the notebook), its
predictions and scores, its colourings, the tooltip text that changed and the stored subsets' members.
Buffers equal to the latest checkpoint's are stored once (`PageState.add_buffer` shares equal bytes).

Past `MAX_CHECKPOINT_BYTES` of activations in all (a page of about 25 MB once base64-encoded) the other
checkpoints travel as float16, then only an evenly spaced few of them (the first, the shown and the
latest always), and the page says so.
"""

from __future__ import annotations

import numpy as np

from ..dynamics import instance_quantities
from ..widgets.projection_view import color_encoding, color_options
from .explorer import hover_fields
from .state import PageState

# every checkpoint's activations a page holds at most, the latest's (the page's own data) included
MAX_CHECKPOINT_BYTES = 18 << 20


def checkpoint_data(explorer, state: PageState, base: dict) -> tuple[dict | None, str]:
    """Each kept checkpoint's data for the page (``base`` is the latest checkpoint's `explorer_data`),
    and a note saying what was left out ("" when nothing was)."""
    timeline = explorer.timeline
    if timeline is None or len(timeline.steps) < 2:
        return None, ""
    timeline.wait_for_layouts()  # the selected layer's aligned layouts, as the notebook shows them
    steps, shown, store = timeline.steps, explorer.checkpoint, explorer.store
    values = {layer: store.n_instances * store.layer_spec(layer).neurons for layer in store.layers}
    per_step = sum(v * (2 if store.activations(layer).dtype == np.float16 else 4) for layer, v in values.items())
    room = max(0, MAX_CHECKPOINT_BYTES - per_step)  # what the latest checkpoint leaves to the others
    halve = per_step * (len(steps) - 1) > room
    halved = 2 * sum(values.values()) if halve else per_step
    kept = _kept_steps(steps, shown, room // max(1, halved))
    notes = []
    if halved < per_step:
        notes.append("checkpoints other than the latest hold their activations as float16")
    if len(kept) < len(steps):
        notes.append(f"{len(kept)} of {len(steps)} checkpoints kept (steps {', '.join(map(str, kept))})")
    entries = [_step_data(explorer, step, state, base, halve and step != steps[-1]) for step in kept]
    note = f"This page holds the run's checkpoints: {'; '.join(notes)}." if notes else ""
    return {"steps": kept, "shown": shown, "at": entries}, note


def _kept_steps(steps: list[int], shown: int, room: int) -> list[int]:
    """All steps when ``room`` other checkpoints fit, else the first, the shown, the latest and evenly spaced ones."""
    if len(steps) - 1 <= room:
        return list(steps)
    must = {steps[0], shown, steps[-1]}
    spare = max(0, room + 1 - len(must))
    picks = np.linspace(0, len(steps) - 1, spare + 2).round().astype(int)[1:-1] if spare else []
    return sorted(must | {steps[i] for i in picks})


def _step_data(explorer, step: int, state: PageState, base: dict, halve: bool) -> dict:
    timeline, projection = explorer.timeline, explorer.projection
    at = timeline.store_at(step)
    rows = projection._rows
    layers = {}
    for layer in at.layers:
        stored = at.activations(layer)
        dtype = np.float16 if halve or stored.dtype == np.float16 else np.float32
        aligned = timeline.layout(step, layer)
        if aligned is not None and rows is not None:
            aligned = np.asarray(aligned)[rows]
        layers[layer] = {
            "dtype": np.dtype(dtype).name,
            "activations": state.add_buffer(np.ascontiguousarray(stored, dtype=dtype)),
            "positions": None if aligned is None else state.add_buffer(np.ascontiguousarray(aligned,
                                                                                            dtype=np.float32)),
        }
    table = {"pred": np.asarray(at.column("pred"), dtype=np.int32),
             "confidence": np.asarray(at.column("confidence"), dtype=np.float32)}
    if "label_score" in base["instances"]:
        table["label_score"] = np.asarray(at.column("label_score"), dtype=np.float32)
    colourings = {}
    for option in color_options(at):
        if option == "neuron" or option not in base["colourings"]:
            continue
        codes, palette, legend = color_encoding(at, option, rows=rows, classes=projection.colours.get("classes"))
        colourings[option] = {"codes": state.add_buffer(np.ascontiguousarray(codes, dtype=np.uint8)),
                              "palette": palette, "legend": legend}
    hover = hover_fields(at)
    changed = {str(j): values for j, values in enumerate(hover["values"])
               if j < len(base["hover"]["values"]) and values != base["hover"]["values"][j]}
    # a subset over predictions holds other instances at another checkpoint
    subsets = {name: state.add_buffer(np.asarray(explorer.subsets.indices_in(name, at), dtype=np.int32))
               for name in explorer.subsets.names}
    entry = {"step": int(step), "layers": layers, "instances": {k: state.add_buffer(v) for k, v in table.items()},
             "colourings": colourings, "hover": changed, "subsets": subsets}
    per_sample = timeline.per_sample
    if per_sample is not None:  # the per-instance instruments at this checkpoint, as the view holds them
        values = instance_quantities(at)[list(per_sample.quantity_names)].to_numpy(np.float32).T
        entry["per_sample"] = {"values": state.add_buffer(np.ascontiguousarray(values)), "shape": list(values.shape)}
    return entry
