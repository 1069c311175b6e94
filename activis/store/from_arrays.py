"""`write_store`: a complete store from arrays already in memory, for tests, demos and imported activations.

It goes through the same `StoreWriter` as a capture, so a store written from arrays is read, checked
and explored exactly like a captured one.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping

import numpy as np

from . import checkpoints as axis
from .errors import StoreError
from .manifest import MANIFEST, LayerSpec
from .reader import ActivationStore, open_store
from .writer import StoreWriter


def _check_rows(activations: Mapping[str, np.ndarray], labels: np.ndarray, outputs: np.ndarray) -> None:
    """Refuse arrays that do not line up before anything is written: one row per instance everywhere."""
    if labels.ndim != 1:
        raise StoreError(f"labels is one class index per instance (1-D), not shape {labels.shape}.")
    n = len(labels)
    if outputs.ndim != 2:
        raise StoreError(f"outputs is instances x classes (2-D), not shape {outputs.shape}.")
    if len(outputs) != n:
        raise StoreError(f"outputs has {len(outputs)} rows for {n} labels: outputs, labels and every layer "
                         "have one row per instance.")
    for name, values in activations.items():
        shape = np.shape(values)
        if len(shape) not in (1, 2):
            raise StoreError(f"Layer {name!r} has shape {shape}; write_store takes 2-D arrays, instances x "
                             "neurons: flatten or reduce the other dimensions first.")
        if shape[0] != n:
            raise StoreError(f"Layer {name!r} has {shape[0]} rows for {n} labels: outputs, labels and every layer "
                             "have one row per instance.")


def write_store(path, activations: Mapping[str, np.ndarray], *, labels, outputs, class_names=None,
                metadata=None, layer_specs: Mapping[str, LayerSpec] | None = None, inputs=None,
                overwrite: bool = False, graph=None, output_kind: str = "logits",
                checkpoint: int | None = None) -> ActivationStore:
    """Write a complete store from arrays in memory: for tests, demos and imported activations.

    Values that do not fit the layers' storage dtype (float16 by default) are saturated and
    counted, like in a capture (see `ActivationStore.nonfinite`). With ``checkpoint`` (a training
    step) the store has a checkpoint axis; given a store at ``path``, the arrays become its checkpoint
    ``checkpoint`` (the same instances: their labels must be the store's; ``metadata``, ``inputs``
    and ``class_names`` are the store's and are not written again).
    """
    outputs = np.asarray(outputs, dtype=np.float32)
    if outputs.ndim == 1:
        outputs = outputs[:, None]
    labels = np.asarray(labels)
    _check_rows(activations, labels, outputs)
    specs = layer_specs or {name: LayerSpec(neurons=int(np.shape(a)[1]) if np.ndim(a) > 1 else 1)
                            for name, a in activations.items()}
    inputs_arr = None if inputs is None else np.asarray(inputs)
    if inputs_arr is not None and inputs_arr.dtype.kind == "f":
        inputs_arr = inputs_arr.astype(np.float32, copy=False)
    if checkpoint is not None and not overwrite and (pathlib.Path(path) / MANIFEST).exists():
        store = open_store(path)
        if len(labels) != store.n_expected or sorted(activations) != sorted(store.layers):
            raise StoreError(f"A checkpoint of {path} holds its {store.n_expected} instances and its layers "
                             f"{store.layers}; these arrays have {len(labels)} rows and layers {list(activations)}.")
        axis.add_checkpoint(pathlib.Path(path), axis.check_step(checkpoint))
        with StoreWriter.resume(path, step=checkpoint) as writer:
            try:
                writer.append(activations=activations, label=labels, outputs=outputs)
            except StoreError:
                writer.close()
                axis.drop_checkpoint(pathlib.Path(path), checkpoint)
                raise
            return writer.finish()
    writer = StoreWriter(path, layers=specs, n_outputs=outputs.shape[1], class_names=class_names,
                         n_expected=len(labels), metadata=metadata, graph=graph, overwrite=overwrite,
                         output_kind=output_kind,
                         input_shape=None if inputs_arr is None else inputs_arr.shape[1:],
                         input_dtype=None if inputs_arr is None else inputs_arr.dtype, checkpoint=checkpoint)
    with writer:
        writer.append(activations=activations, label=labels, outputs=outputs, inputs=inputs_arr)
        return writer.finish()
