"""Run a model over a dataset and write what its layers compute into an activation store.

`capture` is the only place in activis that runs the model over data. It captures by graph node:
a module called twice is two nodes with two different activations, so the chosen nodes get a tap
inserted right after them in a copy of the ``torch.fx`` graph (which also snapshots the value
before any in-place operation further on can change it). Modules inside an fx leaf module, and
every layer of a model fx could not trace, are tapped with forward hooks instead.

Each tap folds its layer's output into one row of neurons per instance (a channel's spatial mean,
a sequence feature's mean or first or last step, ...) and converts it straight into a reused
staging buffer in the storage dtype: memory that is written again every batch costs no page
faults, which is what dominates capture of a cheap model. A background thread writes the filled
buffers into the store and commits them while the model computes the next batch.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import pathlib
import queue
import threading
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, SequentialSampler, Subset, TensorDataset

from .graph import ComputationGraph, extract_graph
from .store import (
    MANIFEST,
    OUTPUT_KINDS,
    ActivationStore,
    LayerSpec,
    NonFinite,
    PreparedBatch,
    StoreWriter,
    check_finite,
    finish_shards,
    open_store,
    shard_ranges,
)

__all__ = ["capture", "CaptureError", "CaptureInterrupted", "NonFiniteWarning"]

STORAGE_DTYPES = {"float16": np.float16, "float32": np.float32}
CHANNEL_REDUCTIONS = ("mean", "max", "none")
SEQUENCE_REDUCTIONS = ("mean", "max", "first", "last", "none")
LABEL_KEYS = ("label", "labels", "target", "targets", "y")
AUTO_KEEP_INPUTS = 1024  # values per instance: a 32x32 image or a tabular row, not a photo
PROBE_ROWS = 8
SLOTS = 3  # staging blocks: one being filled, up to two being written
# batches are handed to the writer (and committed) together up to this size, or this age
BLOCK_BYTES = 4 << 20
BLOCK_SECONDS = 0.1


class CaptureError(ValueError):
    """A capture that cannot run as asked: the message says what to change."""


class CaptureInterrupted(KeyboardInterrupt):
    """Ctrl-C or a kernel interrupt stopped a capture; every batch before it is committed."""

    def __init__(self, message: str, path: pathlib.Path, committed: int):
        super().__init__(message)
        self.path = path
        self.committed = committed

    def __str__(self) -> str:
        return str(self.args[0])


class NonFiniteWarning(UserWarning):
    """Some captured values were NaN, Inf, or too large for float16 (and were saturated)."""


# ============================================================================ entry point
def capture(model: nn.Module, data, path, *, layers: Iterable[str] | None = None, labels=None, metadata=None,
            class_names: list[str] | None = None, batch_size: int | None = None, device=None,
            dtype: str = "float16", channel_reduction: str = "mean", sequence_reduction: str = "mean",
            reduce: Mapping[str, str] | None = None, layout: Mapping[str, str] | None = None,
            select: Mapping[str, object] | None = None, output_element=None, output_kind: str = "auto",
            keep_inputs: bool | str = "auto", input_key: str | None = None, label_key: str | None = None,
            num_workers: int = 0, resume: bool = False, overwrite: bool = False, durable: bool = False,
            progress: bool = True, distributed: bool | None = None) -> ActivationStore:
    """Run ``model`` over ``data`` under ``torch.inference_mode`` and write an activation store at ``path``.

    data
        A tensor or numpy array of inputs (``labels`` given separately), a tuple ``(inputs,
        labels)``, a pandas DataFrame of features, a torch ``Dataset`` (items ``x``, ``(x, y)`` or
        dicts), an ``IterableDataset``, or a ``DataLoader`` (which must not shuffle). Dict items
        take their label from ``label_key`` (default: label, labels, target, targets or y) and their
        input from ``input_key`` (default: the other keys, passed to the model by name).
    layers
        Graph node names or module paths (see ``extract_graph(model, x).layer_names()``); default:
        the outputs of the top-level blocks and the logits. An unknown name raises
        `UnknownLayerError` with the valid names and the closest matches.
    labels, metadata, class_names
        Per-instance labels (ints, or strings named in ``class_names``), a DataFrame or dict of
        columns aligned with the instances, and the class names (default: the dataset's
        ``classes``, else "0", "1", ...).
    dtype
        ``"float16"`` (default) or ``"float32"``. Values too large for float16 are saturated and
        counted, NaN and Inf are kept and counted: see ``store.nonfinite`` and the
        `NonFiniteWarning` at the end.
    channel_reduction, sequence_reduction, reduce, layout
        What a neuron is. A feature map's channel is its ``mean`` over positions (or ``max``); a
        sequence's feature is its ``mean`` over steps (or ``max``, ``first``, ``last``); ``none``
        keeps every element as a unit. ``reduce`` overrides per layer; ``layout`` says whether a
        3-D output is ``"channels"`` (N, C, L) or a ``"sequence"`` (N, T, F) where the producing
        module does not tell (1-d convolutions, norms and pools are channels).
    select, output_element
        For a layer (``select={"lstm": 0}``) or the model (``output_element="logits"``) that
        returns a tuple or dict: the index or key (a tuple for nested ones) of the tensor to keep.
    output_kind
        ``"logits"``, ``"probabilities"``, ``"log_probabilities"`` or ``"auto"`` (decided on the
        first instances). A single output column is a binary classifier.
    keep_inputs
        Keep the raw inputs (flattened) for thumbnails: ``"auto"`` keeps inputs of at most
        1,024 values per instance.
    batch_size, device, num_workers, progress
        Instances per forward pass (default 256, or the DataLoader's); where to run (default: where
        the model is; it is moved back afterwards, and its train/eval modes restored); DataLoader
        workers for a Dataset; a tqdm progress bar with instances per second.
    resume, overwrite, durable
        Batches are committed as they are written (small quick ones a few at a time, at most 4 MB or
        0.1 s of computing per commit), so a capture killed at any moment leaves a store that opens
        with every committed instance. ``resume`` continues such a store (the result equals an
        uninterrupted capture bit for bit); ``overwrite`` replaces a store; ``durable`` also syncs
        every commit to disk, so that a power cut, not only a killed process, loses nothing.
    distributed
        Under ``torchrun`` with ``torch.distributed`` initialised, each rank captures its own shard
        of the rows into the same store (default: whenever a process group is initialised).

    Returns the opened store. Ctrl-C raises `CaptureInterrupted` once the batches in flight are
    committed.
    """
    options = _Options.check(locals())
    group = _Group.of(distributed)
    session = _Session(model, data, pathlib.Path(path), options, group)
    return session.run()


# ============================================================================ options
@dataclass
class _Options:
    layers: list[str] | None
    labels: object
    metadata: object
    class_names: list[str] | None
    batch_size: int | None
    device: object
    dtype: str
    channel_reduction: str
    sequence_reduction: str
    reduce: dict
    layout: dict
    select: dict
    output_element: list | None
    output_kind: str
    keep_inputs: bool | str
    input_key: str | None
    label_key: str | None
    num_workers: int
    resume: bool
    overwrite: bool
    durable: bool
    progress: bool

    @classmethod
    def check(cls, given: dict) -> _Options:
        if given["dtype"] not in STORAGE_DTYPES:
            raise CaptureError(f"dtype must be one of {', '.join(STORAGE_DTYPES)}, not {given['dtype']!r}.")
        _one_of("channel_reduction", given["channel_reduction"], CHANNEL_REDUCTIONS[:2])
        _one_of("sequence_reduction", given["sequence_reduction"], SEQUENCE_REDUCTIONS[:4])
        for name, how in (given["reduce"] or {}).items():
            _one_of(f"reduce[{name!r}]", how, SEQUENCE_REDUCTIONS)
        for name, how in (given["layout"] or {}).items():
            _one_of(f"layout[{name!r}]", how, ("channels", "sequence"))
        _one_of("output_kind", given["output_kind"], ("auto",) + OUTPUT_KINDS)
        if given["keep_inputs"] not in (True, False, "auto"):
            raise CaptureError(f"keep_inputs must be True, False or 'auto', not {given['keep_inputs']!r}.")
        if given["resume"] and given["overwrite"]:
            raise CaptureError("resume=True continues a store and overwrite=True replaces it: choose one.")
        batch_size = given["batch_size"]
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise CaptureError(f"batch_size must be a positive integer, not {batch_size!r}.")
        layers = given["layers"]
        if isinstance(layers, str):
            layers = [layers]
        if layers is not None:
            layers = list(dict.fromkeys(layers))
            if not layers or not all(isinstance(n, str) and n for n in layers):
                raise CaptureError(f"layers must be a list of layer names, not {given['layers']!r}.")
        return cls(layers=layers, labels=given["labels"], metadata=given["metadata"],
                   class_names=None if given["class_names"] is None else [str(c) for c in given["class_names"]],
                   batch_size=batch_size, device=given["device"], dtype=given["dtype"],
                   channel_reduction=given["channel_reduction"], sequence_reduction=given["sequence_reduction"],
                   reduce=dict(given["reduce"] or {}), layout=dict(given["layout"] or {}),
                   select={k: _path(v) for k, v in (given["select"] or {}).items()},
                   output_element=None if given["output_element"] is None else _path(given["output_element"]),
                   output_kind=given["output_kind"], keep_inputs=given["keep_inputs"],
                   input_key=given["input_key"], label_key=given["label_key"], num_workers=given["num_workers"],
                   resume=given["resume"], overwrite=given["overwrite"], durable=given["durable"],
                   progress=given["progress"])


def _one_of(what: str, value, allowed) -> None:
    if value not in allowed:
        raise CaptureError(f"{what} must be one of {', '.join(map(repr, allowed))}, not {value!r}.")


def _path(element) -> list:
    return list(element) if isinstance(element, (tuple, list)) else [element]


# ============================================================================ data
def _split_batch(batch, input_key: str | None, label_key: str | None):
    """(model input, labels or None) from one batch as a loader yields it."""
    if isinstance(batch, Mapping):
        keys = [label_key] if label_key else [k for k in LABEL_KEYS if k in batch]
        if label_key and label_key not in batch:
            raise CaptureError(f"label_key {label_key!r} is not in the batch; keys: {', '.join(map(str, batch))}.")
        y = batch[keys[0]] if keys else None
        if input_key is not None:
            if input_key not in batch:
                raise CaptureError(f"input_key {input_key!r} is not in the batch; keys: {', '.join(map(str, batch))}.")
            return batch[input_key], y
        rest = {k: v for k, v in batch.items() if not keys or k != keys[0]}
        if not rest:
            raise CaptureError("The batch has no input besides its label.")
        return (next(iter(rest.values())) if len(rest) == 1 else rest), y
    if isinstance(batch, (tuple, list)):
        if not batch:
            raise CaptureError("The data yielded an empty batch.")
        return batch[0], (batch[1] if len(batch) > 1 else None)
    return batch, None


def _batch_len(x) -> int:
    if isinstance(x, torch.Tensor):
        return int(x.shape[0]) if x.dim() else 1
    if isinstance(x, Mapping):
        return _batch_len(next(iter(x.values())))
    if isinstance(x, (tuple, list)):
        return _batch_len(x[0])
    raise CaptureError(f"Model input of type {type(x).__name__} is not a tensor, a tuple or a dict of tensors.")


def _slice_batch(x, a: int, b: int | None):
    if isinstance(x, torch.Tensor):
        return x[a:b]
    if isinstance(x, Mapping):
        return {k: _slice_batch(v, a, b) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(_slice_batch(v, a, b) for v in x)
    return x


def _as_tensor(array) -> torch.Tensor:
    if isinstance(array, torch.Tensor):
        return array
    array = np.asarray(array)
    if array.dtype.kind not in "biuf":
        raise CaptureError(f"Inputs of dtype {array.dtype} are not numbers.")
    if not array.flags.writeable or not array.flags.c_contiguous:
        array = np.array(array)
    return torch.from_numpy(array)


class _Source:
    """Instances in a fixed order, read as batches of any row range."""

    n: int | None = None
    classes: list | None = None

    def batches(self, start: int, stop: int | None, batch_size: int) -> Iterator:
        raise NotImplementedError


class _ArraySource(_Source):
    """Inputs already in memory (or memory-mapped): batches are slices, no collation."""

    def __init__(self, x, y=None):
        self.x = x
        self.y = y
        self.n = len(x)
        if y is not None and len(y) != self.n:
            raise CaptureError(f"{len(y)} labels for {self.n} inputs.")

    def batches(self, start, stop, batch_size):
        stop = self.n if stop is None else stop
        for i in range(start, stop, batch_size):
            j = min(i + batch_size, stop)
            yield _as_tensor(self.x[i:j]), (None if self.y is None else self.y[i:j])


class _DatasetSource(_Source):
    """A map-style Dataset, batched by a DataLoader over the requested rows."""

    def __init__(self, dataset, *, collate_fn=None, num_workers=0, pin_memory=False, batch_size=None):
        self.dataset = dataset
        self.n = len(dataset)
        self.collate_fn = collate_fn
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.batch_size = batch_size  # a DataLoader's own, when one was given
        self.classes = _dataset_classes(dataset)

    def batches(self, start, stop, batch_size):
        stop = self.n if stop is None else stop
        loader = DataLoader(Subset(self.dataset, range(start, stop)), batch_size=batch_size, shuffle=False,
                            collate_fn=self.collate_fn, num_workers=self.num_workers, pin_memory=self.pin_memory)
        yield from loader


class _IterableSource(_Source):
    """Batches from an iterable: rows before ``start`` are skipped, not computed.

    ``batched(batch_size)`` gives the iterable: an IterableDataset is batched with the capture's
    batch size (the same on resume, so that the batches are the same), a DataLoader by its own.
    """

    def __init__(self, batched, n=None, classes=None):
        self.batched = batched
        self.n = n
        self.classes = classes

    def batches(self, start, stop, batch_size):
        row = 0
        for batch in self.batched(batch_size):
            n = _batch_len(batch)
            lo, hi = max(start - row, 0), n if stop is None else min(n, stop - row)
            row += n
            if lo < hi:
                yield batch if (lo, hi) == (0, n) else _slice_batch(batch, lo, hi)
            if stop is not None and row >= stop:
                return


def _dataset_classes(dataset):
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    classes = getattr(dataset, "classes", None)
    return list(classes) if classes is not None and not isinstance(classes, str) else None


def _make_source(data, opts: _Options) -> _Source:
    if isinstance(data, DataLoader):
        if isinstance(data.dataset, IterableDataset):
            return _IterableSource(lambda _: data, _len_or_none(data.dataset), _dataset_classes(data.dataset))
        sampler = data.batch_sampler.sampler if data.batch_sampler is not None else data.sampler
        if not isinstance(sampler, SequentialSampler):
            raise CaptureError("The DataLoader does not read the dataset in order (it shuffles or samples): a store "
                               "needs a stable order of instances. Pass the Dataset, or a DataLoader with "
                               "shuffle=False.")
        if data.batch_size is None:
            raise CaptureError("The DataLoader has a custom batch sampler; pass the Dataset and batch_size instead.")
        return _DatasetSource(data.dataset, collate_fn=data.collate_fn, num_workers=data.num_workers,
                              pin_memory=data.pin_memory, batch_size=data.batch_size)
    if isinstance(data, TensorDataset):
        tensors = data.tensors
        return _ArraySource(tensors[0], tensors[1] if len(tensors) > 1 else None)
    if isinstance(data, IterableDataset):
        return _IterableSource(lambda batch_size: DataLoader(data, batch_size=batch_size, num_workers=opts.num_workers),
                               _len_or_none(data), _dataset_classes(data))
    if isinstance(data, (torch.Tensor, np.ndarray)):
        return _ArraySource(data)
    if isinstance(data, pd.DataFrame):
        return _ArraySource(data.to_numpy(dtype=np.float32))
    if isinstance(data, tuple) and len(data) == 2 and all(_is_array(a) for a in data):
        x, y = data
        return _ArraySource(x.to_numpy(dtype=np.float32) if isinstance(x, pd.DataFrame) else x, _labels_array(y))
    if isinstance(data, Dataset) or (hasattr(data, "__getitem__") and hasattr(data, "__len__")):
        return _DatasetSource(data, num_workers=opts.num_workers)
    if isinstance(data, Iterable):
        if iter(data) is data:
            raise CaptureError("The data is a one-shot iterator: capture reads the first instances twice (to trace "
                               "the model) and again to resume. Pass a DataLoader, a Dataset or a list of batches.")
        return _IterableSource(lambda _: data, _len_or_none(data))
    raise CaptureError(f"Cannot read instances from a {type(data).__name__}: pass a tensor, an array, (inputs, "
                       "labels), a DataFrame, a Dataset or a DataLoader.")


def _is_array(a) -> bool:
    return isinstance(a, (torch.Tensor, np.ndarray, pd.DataFrame, pd.Series, list))


def _len_or_none(obj) -> int | None:
    try:
        return len(obj)
    except TypeError:
        return None


def _labels_array(y):
    if y is None:
        return None
    if isinstance(y, torch.Tensor):
        return y.detach().cpu().numpy()
    return np.asarray(y)


def _label_rows(y, class_index: dict | None) -> np.ndarray:
    """Integer class per row (-1 unknown) from int, float, one-hot or string labels."""
    if y is None:
        return None
    y = _labels_array(y)
    if y.ndim == 2:  # one-hot or soft labels
        return y.argmax(axis=1).astype(np.int64)
    y = y.reshape(-1)
    if y.dtype.kind in "OUS":
        if class_index is None:
            raise CaptureError("String labels need class_names to map them onto the model's outputs.")
        unknown = sorted({str(v) for v in y if str(v) not in class_index})
        if unknown:
            raise CaptureError(f"Labels {unknown[:5]} are not among class_names {list(class_index)}.")
        return np.array([class_index[str(v)] for v in y], dtype=np.int64)
    if y.dtype.kind == "f":
        if not np.all(np.isnan(y) | (y == np.round(y))):
            raise CaptureError("Labels must be class indices; got fractional values.")
        return np.where(np.isnan(y), -1, y).astype(np.int64)
    if y.dtype.kind not in "biu":
        raise CaptureError(f"Labels of dtype {y.dtype} are not class indices.")
    return y.astype(np.int64)


# ============================================================================ layers
@dataclass
class _Point:
    """Where a layer's value comes from: an fx node, or the n-th call of a module (hooks)."""

    name: str
    node: str | None  # graph node (for the store and the graph view)
    fx: bool
    module: str | None = None
    call: int | None = None  # which call of the module per forward; None: the last
    channels_first: bool = False  # a 3-D value (N, C, L) made by a 1-d convolution, norm or pool


def _resolve(graph: ComputationGraph, name: str) -> _Point:
    by_target = [n for n in graph.nodes if n.op == "call_module" and n.target == name]
    if graph.method == "fx":
        if name in graph and graph.node(name).op in ("call_module", "call_function", "call_method"):
            return _Point(name, name, True, channels_first=_channels_first(graph, graph.node(name)))
        if by_target:
            return _Point(name, by_target[-1].name, True, channels_first=_channels_first(graph, by_target[-1]))
        if name in graph.modules and name:
            inner = [n for n in graph.nodes_of_module(name) if n.capturable]
            if inner:
                return _Point(name, inner[-1].name, True, channels_first=_channels_first(graph, inner[-1]))
            if not graph.nodes_of_module(name):  # inside a module fx keeps whole: hook it
                return _Point(name, None, False, module=name, channels_first=_is_1d(graph.modules[name].type))
    else:
        if name in graph and graph.node(name).op == "call_module":
            node = graph.node(name)
            calls = [n for n in graph.nodes if n.op == "call_module" and n.target == node.target]
            return _Point(name, name, False, module=node.target, call=calls.index(node),
                          channels_first=_channels_first(graph, node))
        if name in graph.modules and name:
            return _Point(name, by_target[-1].name if by_target else None, False, module=name,
                          channels_first=_channels_first(graph, by_target[-1]) if by_target
                          else _is_1d(graph.modules[name].type))
    graph.resolve_layer(name)  # raises UnknownLayerError listing valid names and close matches
    raise CaptureError(f"Layer {name!r} has no output that can be captured.")


def _is_1d(module_type: str) -> bool:
    return module_type.endswith("1d")


def _channels_first(graph: ComputationGraph, node) -> bool:
    """Whether a 1-d convolution, norm or pool made this value, looking back through operations
    that keep its shape (a ReLU or a residual add after a Conv1d keeps the Conv1d's layout)."""
    for _ in range(16):
        if node.op == "call_module" and node.target in graph.modules and _is_1d(graph.modules[node.target].type):
            return True
        parent = graph.node(node.inputs[0]) if node.inputs and node.inputs[0] in graph else None
        if parent is None or parent.shape != node.shape:
            return False
        node = parent
    return False


def _describe(value, depth=0) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor{tuple(value.shape)} {str(value.dtype).replace('torch.', '')}"
    if isinstance(value, Mapping) and depth < 2:
        return "dict{" + ", ".join(f"{k!r}: {_describe(v, depth + 1)}" for k, v in value.items()) + "}"
    if isinstance(value, (tuple, list)) and depth < 2:
        return f"{type(value).__name__}(" + ", ".join(f"[{i}] {_describe(v, depth + 1)}"
                                                      for i, v in enumerate(value)) + ")"
    return type(value).__name__


def _select(value, element: list | None, what: str, option: str):
    for key in element or []:
        try:
            if isinstance(value, Mapping):
                value = value[key]
            elif isinstance(value, (tuple, list)):
                value = value[int(key)]
            elif isinstance(key, str):
                value = getattr(value, key)
            else:
                raise TypeError
        except (KeyError, IndexError, AttributeError, TypeError, ValueError):
            raise CaptureError(f"{what} has no element {key!r}: it is {_describe(value)}.") from None
    if not isinstance(value, torch.Tensor):
        raise CaptureError(f"{what} is {_describe(value)}, not one tensor; choose the element to keep with {option}.")
    return value


class _LayerPlan:
    """How one layer's value becomes a row of neurons; its spec is fixed by the first value seen."""

    def __init__(self, point: _Point, opts: _Options):
        self.point = point
        self.name = point.name
        self.element = opts.select.get(point.name)
        self.reduction = opts.reduce.get(point.name)
        self.layout = opts.layout.get(point.name)
        self.channel_reduction = opts.channel_reduction
        self.sequence_reduction = opts.sequence_reduction
        self.dtype = opts.dtype
        self.spec: LayerSpec | None = None

    def tensor(self, value) -> torch.Tensor:
        if not isinstance(value, torch.Tensor) or self.element:
            value = _select(value, self.element, f"Layer {self.name!r}", f"select={{{self.name!r}: ...}}")
        if not value.is_floating_point():
            raise CaptureError(f"Layer {self.name!r} outputs {_describe(value)}: only floating-point values are "
                               "activations.")
        return value

    def derive(self, value: torch.Tensor, n: int) -> LayerSpec:
        if value.dim() == 0 or value.shape[0] != n:
            raise CaptureError(f"Layer {self.name!r} outputs {_describe(value)}: its first dimension is not the "
                               f"batch ({n} instances). Choose another layer (an RNN needs batch_first=True).")
        shape = [int(s) for s in value.shape[1:]]
        if value.dim() <= 2:
            kind, reduction = "unit", "none"
            if self.reduction not in (None, "none"):
                raise CaptureError(f"Layer {self.name!r} outputs one vector per instance; reduce={self.reduction!r} "
                                   "does not apply to it.")
        else:
            layout = self.layout or ("channels" if value.dim() > 3 or self.point.channels_first else "sequence")
            if layout == "channels":
                kind, reduction = "channel", self.reduction or self.channel_reduction
                if reduction not in CHANNEL_REDUCTIONS:
                    raise CaptureError(f"Layer {self.name!r} is a feature map (N, C, ...): reduce it by "
                                       f"{' or '.join(CHANNEL_REDUCTIONS)}, not {reduction!r}.")
            else:
                kind, reduction = "feature", self.reduction or self.sequence_reduction
                if value.dim() != 3:
                    raise CaptureError(f"Layer {self.name!r} of shape {tuple(value.shape)} is not a sequence "
                                       "(N, T, F).")
            if reduction == "none":
                kind = "unit"
        neurons = int(np.prod(shape if reduction == "none" else shape[:1] if kind == "channel" else shape[-1:],
                              dtype=np.int64)) if shape else 1
        self.spec = LayerSpec(neurons=neurons, dtype=self.dtype, neuron_kind=kind, reduction=reduction,
                              shape=shape, node=self.point.node, element=self.element)
        return self.spec

    def rows(self, value: torch.Tensor) -> torch.Tensor:
        """(n, neurons) view or reduction of one batch's value."""
        spec = self.spec
        n = value.shape[0]
        if spec.reduction == "none" or spec.neuron_kind == "unit":
            same = list(value.shape[1:]) == spec.shape
        else:  # positions may vary between batches (image sizes, sequence lengths); neurons may not
            same = value.dim() == len(spec.shape) + 1 and self._neurons_of(value) == spec.neurons
        if not same:
            raise CaptureError(f"Layer {self.name!r} changed shape from {spec.shape} to {list(value.shape[1:])} "
                               "per instance between batches.")
        if spec.reduction == "none" or value.dim() <= 2:
            return value.reshape(n, -1)
        if spec.neuron_kind == "channel":
            # over the flattened positions: torch's sum and amax along one inner axis are 2-3x faster
            # here than mean or amax over several axes
            positions = value.flatten(2)
            if spec.reduction == "max":
                return positions.amax(dim=-1)
            wide = torch.float32 if value.dtype in (torch.float16, torch.bfloat16) else None
            return positions.sum(dim=-1, dtype=wide) / positions.shape[-1]
        if spec.reduction == "mean":
            return value.mean(dim=1)
        if spec.reduction == "max":
            return value.amax(dim=1)
        return value[:, 0] if spec.reduction == "first" else value[:, -1]

    def _neurons_of(self, value) -> int:
        return int(value.shape[1] if self.spec.neuron_kind == "channel" else value.shape[-1])


class _Tap(nn.Module):
    """Called with a layer's value right where the model computes it; copies it into the current slot."""

    def __init__(self, plan: _LayerPlan, current: _Current):
        super().__init__()
        self.plan = plan
        self.current = current

    def forward(self, value):
        plan, slot = self.plan, self.current.slot
        value = plan.tensor(value)
        if plan.spec is None:
            plan.derive(value, slot.n)
        rows = plan.rows(value)
        stored = slot.target(plan.name, plan.spec.neurons, plan.dtype)
        torch.from_numpy(stored).copy_(rows)
        slot.note(plan.name, check_finite(stored, lambda: rows.detach().float().cpu().numpy()))


# ============================================================================ staging
class _Slot:
    """Reused buffers for a block of consecutive batches: filled by the taps, written by the writer thread.

    A block holds several batches when they are small and quick (up to `BLOCK_BYTES`, at most
    `BLOCK_SECONDS` of computing), so that the fixed costs of handing a block over and committing
    it (a thread wake-up, a manifest replace) are paid per megabytes rather than per batch. The
    buffers are allocated once and rewritten: no page faults.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.arrays: dict[str, np.ndarray] = {}
        self.label = np.full(capacity, -1, dtype=np.int64)
        self.found: dict[str, NonFinite] = {}
        self.rows = 0  # rows of the whole batches in the block
        self.start = self.n = 0  # the batch being filled
        self.filled: set[str] = set()

    def begin(self, n: int) -> None:
        """Start filling a batch of ``n`` rows (the block must have room, or be empty)."""
        if n > self.capacity - self.rows:
            assert self.rows == 0, "hand a full block over before starting another batch"
            self.capacity = n  # an iterable's batch larger than a block: this slot grows to it
            self.arrays.clear()
            self.label = np.full(n, -1, dtype=np.int64)
        self.start, self.n = self.rows, n
        self.filled = set()

    def end(self) -> None:
        self.rows += self.n

    def clear(self) -> None:
        self.rows = 0
        self.found = {}

    def target(self, name: str, width: int, dtype) -> np.ndarray:
        """The rows of the batch being filled in buffer ``name``."""
        arr = self.arrays.get(name)
        if arr is None or arr.shape[1] != width or arr.dtype != dtype:
            arr = self.arrays[name] = np.zeros((self.capacity, width), dtype=dtype)
        self.filled.add(name)
        return arr[self.start:self.start + self.n]

    def note(self, name: str, found: NonFinite | None) -> None:
        """Add what `check_finite` found in the batch to the block's counts."""
        if found is None:
            return
        total = self.found.get(name)
        if total is None:
            total = self.found[name] = NonFinite(per_row=np.zeros(self.capacity, dtype=np.int32))
        total.nan, total.inf, total.overflow = total.nan + found.nan, total.inf + found.inf, \
            total.overflow + found.overflow
        total.per_row[self.start:self.start + self.n] += found.per_row

    def checked(self, names) -> dict[str, NonFinite | None]:
        rows = self.rows
        return {name: None if name not in self.found else
                NonFinite(self.found[name].nan, self.found[name].inf, self.found[name].overflow,
                          self.found[name].per_row[:rows]) for name in names}


@dataclass
class _Current:
    """The slot the taps write into: one object that the taps and the session share."""

    slot: _Slot | None = None


class _Pipeline:
    """Hands filled slots to a writer thread that appends and commits them in order."""

    def __init__(self, slots: list[_Slot]):
        self.free: queue.Queue = queue.Queue()
        for slot in slots:
            self.free.put(slot)
        self.todo: queue.Queue = queue.Queue()
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        self.writer: StoreWriter | None = None
        self.rows_written = 0

    def start(self, writer: StoreWriter, batch_of) -> None:
        self.writer = writer
        self.batch_of = batch_of
        self.thread = threading.Thread(target=self._run, name="activis-capture-writer", daemon=True)
        self.thread.start()

    def acquire(self) -> _Slot:
        while True:
            if self.error is not None:
                raise self.error
            try:
                return self.free.get(timeout=0.05)
            except queue.Empty:
                continue

    def submit(self, slot: _Slot) -> None:
        """Queue a filled slot; its Python-side preparation happens here, on the caller's thread."""
        self.todo.put((slot, self.writer.prepare(**self.batch_of(slot))))

    def _run(self) -> None:
        pending = None  # the last batch written, when it is not committed yet
        while True:
            item = self.todo.get()
            try:
                if item is None:
                    if pending is not None and self.error is None:
                        self.writer.write(PreparedBatch([], pending.rows, pending.commit))
                    return
                slot, prepared = item
                if self.error is None:
                    more = not self.todo.empty()  # more batches queued: commit once, after them
                    self.writer.write(prepared, commit=not more)
                    pending = prepared if more else None
                    self.rows_written += slot.rows
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                self.error = exc
            if item is not None:
                self.free.put(item[0])

    def close(self) -> None:
        """Wait until every submitted batch is committed (or failed); raise the writer's error."""
        if self.thread is not None:
            self.todo.put(None)
            self.thread.join()
            self.thread = None
        if self.error is not None:
            raise self.error


# ============================================================================ distribution
class _Group:
    """The ranks of a torch.distributed job (or just this process), agreeing at each phase."""

    def __init__(self, rank: int = 0, world_size: int = 1):
        self.rank = rank
        self.world_size = world_size

    @classmethod
    def of(cls, distributed: bool | None) -> _Group:
        import torch.distributed as dist

        initialised = dist.is_available() and dist.is_initialized()
        if distributed and not initialised:
            raise CaptureError("distributed=True needs torch.distributed.init_process_group() first.")
        if distributed is False:
            return cls()
        if initialised:
            return cls(dist.get_rank(), dist.get_world_size())
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise CaptureError(f"This process is one of {os.environ['WORLD_SIZE']} (torchrun) but torch.distributed "
                               "is not initialised: call torch.distributed.init_process_group('gloo') (or 'nccl') "
                               "before capture, or pass distributed=False to capture everything in every process.")
        return cls()

    def agree(self, ok: bool) -> bool:
        """True when every rank is ok (a collective: every rank must call it at the same point)."""
        if self.world_size == 1:
            return ok
        import torch.distributed as dist

        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
        flag = torch.tensor([1 if ok else 0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag.item())

    def step(self, fn):
        """Run ``fn`` on every rank, then raise on every rank if any failed."""
        error = None
        try:
            result = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised after the ranks agree
            error, result = exc, None
        if not self.agree(error is None):
            if error is not None:
                raise error
            raise CaptureError("Another rank of this distributed capture failed (see its error); every "
                               "committed batch is kept, capture(..., resume=True) continues.")
        return result


# ============================================================================ the session
class _Session:
    """One call of `capture`: prepares the model and the store, runs the batches, reports."""

    def __init__(self, model: nn.Module, data, path: pathlib.Path, opts: _Options, group: _Group):
        self.model = model
        self.data = data
        self.path = path
        self.opts = opts
        self.group = group
        self.hooks: list = []
        self.restore = None
        self.writer: StoreWriter | None = None

    # ------------------------------------------------------------------ run
    def run(self) -> ActivationStore:
        group = self.group
        first, others = group.rank == 0, group.rank != 0
        try:
            existing = group.step(self._check_existing)
            if existing is not None and existing.manifest.get("finished"):
                return existing
            group.step(lambda: self._prepare(existing))
            group.step(lambda: first and self._create_or_join())  # rank 0 lays the store out,
            group.step(lambda: others and self._create_or_join())  # then the others join it
            group.step(self._write_all)
            group.step(self._finish_own)
            if group.world_size > 1:
                group.step(lambda: first and finish_shards(self.path))
        finally:
            if self.writer is not None:
                self.writer.close()
            self._restore_model()
        store = open_store(self.path)
        _warn_nonfinite(store)
        return store

    def _check_existing(self) -> ActivationStore | None:
        if not (self.path / MANIFEST).exists():
            return None
        if self.opts.resume:
            return open_store(self.path)
        if not self.opts.overwrite:
            raise FileExistsError(f"{self.path} already holds a store; pass resume=True to continue it or "
                                  "overwrite=True to replace it.")
        return None

    # -------------------------------------------------------------- prepare
    def _prepare(self, existing: ActivationStore | None) -> None:
        opts = self.opts
        self.existing = existing
        self.source = _make_source(self.data, opts)
        n = self.source.n
        if self.group.world_size > 1 and n is None:
            raise CaptureError("A distributed capture needs data of known length to split it between ranks.")
        if n == 0:
            raise CaptureError("The data holds no instances.")
        self.batch_size = self._batch_size(existing)
        self.lo, self.hi = (0, n) if self.group.world_size == 1 else shard_ranges(n, self.group.world_size)[
            self.group.rank]
        names = opts.class_names or self.source.classes
        self.class_index = {str(c): i for i, c in enumerate(names)} if names is not None else None
        self.labels = _label_rows(opts.labels, self.class_index) if opts.labels is not None else None
        if self.labels is not None and n is not None and len(self.labels) != n:
            raise CaptureError(f"{len(self.labels)} labels for {n} instances.")
        self.metadata = None
        if opts.metadata is not None and self.group.rank == 0 and existing is None:
            self.metadata = pd.DataFrame(opts.metadata) if not isinstance(opts.metadata, pd.DataFrame) \
                else opts.metadata
            if n is not None and len(self.metadata) != n:
                raise CaptureError(f"metadata has {len(self.metadata)} rows for {n} instances.")
        self._prepare_model()
        first = next(iter(self.source.batches(0, min(PROBE_ROWS, n) if n else PROBE_ROWS, PROBE_ROWS)), None)
        if first is None:
            raise CaptureError("The data holds no instances.")
        x, _ = self._unpack(first)
        example = self._to_device(x)
        self.graph = extract_graph(self.model, self._positional(example))
        self._build_taps(existing)
        self._probe(example, x)

    def _batch_size(self, existing: ActivationStore | None) -> int:
        own = getattr(self.source, "batch_size", None)
        stored = (existing.capture_info.get("batch_size") if existing is not None else None)
        wanted = self.opts.batch_size or own or stored or 256
        if stored is not None and wanted != stored:
            raise CaptureError(f"The store was captured in batches of {stored}; resume with the same batch size "
                               f"(not {wanted}) so that the rows come out identical.")
        return wanted

    def _prepare_model(self) -> None:
        model = self.model
        params = list(model.parameters()) + list(model.buffers())
        current = params[0].device if params else torch.device("cpu")
        if self.opts.device is not None and len({p.device for p in params}) > 1:
            raise CaptureError("The model is spread over several devices; capture runs it where it is, so leave "
                               "device= out (inputs go to the device of its first parameter).")
        self.device = torch.device(self.opts.device) if self.opts.device is not None else current
        modes = {m: m.training for m in model.modules()}
        moved = any(p.device != self.device for p in params)
        if moved:
            model.to(self.device)
        self.float_dtype = next((p.dtype for p in params if p.is_floating_point()), torch.float32)

        def restore():
            for module, training in modes.items():
                module.training = training
            if moved:
                model.to(current)

        self.restore = restore
        model.eval()

    def _restore_model(self) -> None:
        for handle in self.hooks:
            handle.remove()
        self.hooks = []
        if self.restore is not None:
            self.restore()
            self.restore = None

    def _unpack(self, batch):
        return _split_batch(batch, self.opts.input_key, self.opts.label_key)

    def _to_device(self, x):
        if isinstance(x, torch.Tensor):
            x = x.to(self.device, non_blocking=True)
            return x.to(self.float_dtype) if x.is_floating_point() and x.dtype != self.float_dtype else x
        if isinstance(x, Mapping):
            return {k: self._to_device(v) for k, v in x.items()}
        if isinstance(x, (tuple, list)):
            return type(x)(self._to_device(v) for v in x)
        return self._to_device(_as_tensor(x))

    def _positional(self, x) -> tuple:
        """The model's positional arguments for one input (a dict is bound by parameter name)."""
        if isinstance(x, Mapping):
            try:
                bound = inspect.signature(self.model.forward).bind(**x)
            except TypeError as exc:
                raise CaptureError(f"The batch's keys {list(x)} do not fit {type(self.model).__name__}.forward: "
                                   f"{exc}. Name the input with input_key=.") from None
            if bound.kwargs:
                raise CaptureError(f"Inputs {list(bound.kwargs)} are keyword-only; pass input_key=.")
            return tuple(bound.args)
        return tuple(x) if isinstance(x, (tuple, list)) else (x,)

    # ----------------------------------------------------------------- taps
    def _build_taps(self, existing: ActivationStore | None) -> None:
        graph = self.graph
        names = self.opts.layers
        if names is None:
            names = existing.layers if existing is not None else graph.default_layers()
            if not names:
                raise CaptureError(f"{graph.model_type} has no layer that can be captured by default; name them "
                                   f"with layers=[...] (valid: {', '.join(graph.layer_names())}).")
        points = [_resolve(graph, name) for name in names]
        for key, option in ((self.opts.select, "select"), (self.opts.reduce, "reduce"), (self.opts.layout, "layout")):
            unknown = [k for k in key if k not in names]
            if unknown:
                raise CaptureError(f"{option} names {unknown}, which are not among the captured layers {names}.")
        self.current = _Current()
        self.plans = {p.name: _LayerPlan(p, self.opts) for p in points}
        taps = {name: _Tap(plan, self.current) for name, plan in self.plans.items()}
        fx_points = [p for p in points if p.fx]
        self.runner = _fx_runner(graph, [(p.node, taps[p.name]) for p in fx_points]) if fx_points else self.model
        for p in points:
            if not p.fx:
                self.hooks.append(_hook(self.model.get_submodule(p.module), taps[p.name], p.call))

    def _forward(self, x, slot: _Slot):
        """Run one batch (``slot.begin`` was called) with the taps writing into ``slot``."""
        self.current.slot = slot
        for handle in self.hooks:
            handle.calls[0] = 0
        out = self.runner(*self._positional(x))
        missing = [name for name in self.plans if name not in slot.filled]
        if missing:
            raise CaptureError(f"Layers {missing} were not computed for this batch (the model's control flow "
                               "skipped them); capture layers that always run.")
        return out

    def _logits(self, out) -> torch.Tensor:
        element = self.opts.output_element
        if element is None and not isinstance(out, torch.Tensor):
            if isinstance(out, Mapping) and "logits" in out:
                element = ["logits"]
            elif hasattr(out, "logits"):
                element = ["logits"]
        logits = _select(out, element, "The model's output", "output_element=...")
        if logits.dim() == 1:
            logits = logits[:, None]
        if logits.dim() != 2:
            raise CaptureError(f"The model's output is {_describe(logits)}; capture needs one row of class scores "
                               "per instance (choose it with output_element=).")
        return logits

    # ---------------------------------------------------------------- probe
    def _probe(self, example, x_cpu) -> None:
        """Run the first instances once: fixes the layer specs and checks the fx copy against the model."""
        n = _batch_len(example)
        slot = _Slot(n)
        slot.begin(n)
        with torch.inference_mode():
            out = self._forward(example, slot)
            logits = self._logits(out)
            if self.runner is not self.model:
                reference = self._logits(self.model(*self._positional(example)))
                if not torch.allclose(logits.float(), reference.float(), rtol=1e-4, atol=1e-5, equal_nan=True):
                    raise CaptureError(f"The torch.fx trace of {type(self.model).__name__} does not reproduce its "
                                       "output (the trace fixed a branch the model takes differently); capture "
                                       "module paths of a model that fx cannot trace, or make the branch traceable.")
        self.n_outputs = int(logits.shape[1])
        kind = self.opts.output_kind
        self.output_kind = _detect_kind(logits.float().cpu().numpy()) if kind == "auto" else kind
        self.specs = {name: plan.spec for name, plan in self.plans.items()}
        classes = 2 if self.n_outputs == 1 else self.n_outputs
        names = self.opts.class_names or self.source.classes
        if names is not None and len(names) != classes:
            raise CaptureError(f"{len(names)} class names for a model with {classes} classes.")
        self.class_names = [str(c) for c in names] if names is not None else [str(i) for i in range(classes)]
        if self.labels is not None and ((self.labels < -1) | (self.labels >= classes)).any():
            bad = self.labels[(self.labels < -1) | (self.labels >= classes)][0]
            raise CaptureError(f"Label {bad} is outside the model's {classes} classes (use -1 for unknown).")
        keep = self.opts.keep_inputs
        single = isinstance(x_cpu, torch.Tensor)
        if keep is True and not single:
            raise CaptureError("keep_inputs=True needs one input tensor per batch; this data has several.")
        per_instance = int(np.prod(x_cpu.shape[1:], dtype=np.int64)) if single else 0
        self.keep_inputs = single and (keep is True or (keep == "auto" and per_instance <= AUTO_KEEP_INPUTS))
        self.input_shape = [int(s) for s in x_cpu.shape[1:]] if self.keep_inputs else None
        self.input_dtype = _input_dtype(x_cpu.dtype) if self.keep_inputs else None
        self.fingerprints = {"model": _model_fingerprint(self.model), "data": _data_fingerprint(x_cpu, self.source.n)}
        if self.existing is not None:
            self._check_resumable(self.existing)

    def _check_resumable(self, store: ActivationStore) -> None:
        info = store.capture_info
        problems = []
        if store.layers != list(self.specs):
            problems.append(f"layers {store.layers} vs {list(self.specs)}")
        else:
            for name, spec in self.specs.items():
                if store.layer_spec(name) != spec:
                    problems.append(f"layer {name!r} was {store.layer_spec(name)}, now {spec}")
        if store.n_expected != self.source.n:
            problems.append(f"{store.n_expected} instances then, {self.source.n} now")
        for what in ("model", "data"):
            if info.get(f"{what}_fingerprint") not in (None, self.fingerprints[what]):
                problems.append(f"the {what} differs from the one the store began with")
        if store.manifest["n_outputs"] != self.n_outputs or store.output_kind != self.output_kind:
            problems.append("the model's outputs differ")
        if (store.input_shape or None) != self.input_shape:
            problems.append(f"inputs kept as {store.input_shape}, now {self.input_shape}")
        if problems:
            raise CaptureError(f"Cannot resume {self.path}: " + "; ".join(problems) +
                               ". Resume with the same model, data and options, or pass overwrite=True.")

    # ---------------------------------------------------------------- write
    def _create_or_join(self) -> None:
        opts = self.opts
        rank = self.group.rank if self.group.world_size > 1 else None
        if self.existing is not None or rank not in (None, 0):
            self.writer = StoreWriter.resume(self.path, rank=rank, durable=opts.durable)
            return
        info = {"batch_size": self.batch_size, "dtype": opts.dtype, "device": str(self.device),
                "model_type": type(self.model).__name__, "graph_method": self.graph.method,
                "model_fingerprint": self.fingerprints["model"], "data_fingerprint": self.fingerprints["data"],
                "world_size": self.group.world_size}
        self.writer = StoreWriter(self.path, layers=self.specs, n_outputs=self.n_outputs,
                                  class_names=self.class_names, n_expected=self.source.n, metadata=self.metadata,
                                  graph=self.graph, input_shape=self.input_shape, input_dtype=self.input_dtype,
                                  output_kind=self.output_kind, world_size=self.group.world_size,
                                  capture_info=info, overwrite=opts.overwrite, durable=opts.durable)

    def _write_all(self) -> None:
        writer = self.writer
        start = self.lo + writer.complete
        total = None if self.hi is None else self.hi - self.lo
        row_bytes = sum(s.neurons * np.dtype(s.dtype).itemsize for s in self.specs.values()) + 4 * self.n_outputs
        capacity = self.batch_size * max(1, BLOCK_BYTES // (self.batch_size * row_bytes))
        if self.hi is not None:  # no bigger than what there is to capture: fresh memory costs page faults
            capacity = min(capacity, -(-(self.hi - start) // self.batch_size) * self.batch_size)
        pipeline = _Pipeline([_Slot(capacity) for _ in range(SLOTS)])
        pipeline.start(writer, self._batch_of)
        self.started = time.perf_counter()
        bar = _progress_bar(self.opts.progress, total, writer.complete, self.group)
        row, slot = start, None
        try:
            with torch.inference_mode():
                for batch in self.source.batches(start, self.hi, self.batch_size):
                    x, y = self._unpack(batch)
                    n = _batch_len(x)
                    if slot is not None and slot.rows + n > slot.capacity:
                        full, slot = slot, None
                        pipeline.submit(full)
                    if slot is None:
                        slot = pipeline.acquire()
                        slot.clear()
                        deadline = time.perf_counter() + BLOCK_SECONDS
                    slot.begin(n)
                    self._fill(slot, x, y, row)
                    slot.end()
                    row += n
                    bar.update(n)
                    if slot.rows == slot.capacity or time.perf_counter() > deadline:
                        full, slot = slot, None
                        pipeline.submit(full)
            if slot is not None and slot.rows:
                pipeline.submit(slot)
            pipeline.close()
        except KeyboardInterrupt:
            bar.close()
            self._drain(pipeline, slot)
            committed = writer.committed
            writer.close()
            where = f"rows {self.lo}-{self.hi} " if self.group.world_size > 1 else ""
            raise CaptureInterrupted(f"Capture interrupted: {committed:,} of {'?' if total is None else f'{total:,}'} "
                                     f"instances {where}are committed in {self.path}; capture(..., resume=True) "
                                     "continues from there.", self.path, committed) from None
        except BaseException as exc:
            bar.close()
            self._drain(pipeline, slot)
            writer.close()
            note = getattr(exc, "add_note", None)
            if note is not None and not isinstance(exc, OSError):
                note(f"activis: {writer.committed:,} instances are committed in {self.path}; "
                     "capture(..., resume=True) continues from there.")
            raise
        bar.close()
        self.elapsed = time.perf_counter() - self.started
        self.rows_written = pipeline.rows_written

    @staticmethod
    def _drain(pipeline: _Pipeline, slot: _Slot | None) -> None:
        """After an error: commit the whole batches computed before it, and wait for the writer."""
        try:
            if slot is not None and slot.rows:
                pipeline.submit(slot)
            pipeline.close()
        except BaseException:  # noqa: BLE001 - the error that stopped the capture is the one raised
            pass

    def _fill(self, slot: _Slot, x, y, row: int) -> None:
        """Run the batch of rows ``row``.. and put its activations, outputs, labels and inputs in ``slot``."""
        n = slot.n
        out = self._forward(self._to_device(x), slot)
        logits = self._logits(out)
        if logits.shape != (n, self.n_outputs):
            raise CaptureError(f"The model's output has shape {tuple(logits.shape)} for a batch of {n}; expected "
                               f"({n}, {self.n_outputs}).")
        torch.from_numpy(slot.target("<outputs>", self.n_outputs, np.float32)).copy_(logits)
        labels = slot.label[slot.start:slot.start + n]
        if self.labels is not None:
            labels[:] = self.labels[row:row + n]
        elif y is not None:
            given = _label_rows(y, self.class_index)
            if len(given) != n:
                raise CaptureError(f"The data yielded {len(given)} labels for {n} instances.")
            labels[:] = given
        else:
            labels[:] = -1
        if self.keep_inputs:
            flat = x.reshape(n, -1) if isinstance(x, torch.Tensor) else _as_tensor(x).reshape(n, -1)
            torch.from_numpy(slot.target("<inputs>", flat.shape[1], self.input_dtype)).copy_(flat)

    def _batch_of(self, slot: _Slot) -> dict:
        rows = slot.rows
        return {"activations": {name: slot.arrays[name][:rows] for name in self.plans},
                "checked": slot.checked(self.plans), "outputs": slot.arrays["<outputs>"][:rows],
                "label": slot.label[:rows], "inputs": slot.arrays["<inputs>"][:rows] if self.keep_inputs else None}

    # --------------------------------------------------------------- finish
    def _finish_own(self) -> None:
        """Sync and mark this process's rows finished (with this session's throughput, unsharded)."""
        writer = self.writer
        if self.group.world_size == 1:
            rate = self.rows_written / self.elapsed if self.elapsed > 0 else None
            row_bytes = sum(s.neurons * np.dtype(s.dtype).itemsize for s in self.specs.values())
            writer.manifest["capture"].update({
                "last_session_s": round(self.elapsed, 3), "last_session_rows": self.rows_written,
                "instances_per_s": None if rate is None else round(rate, 1),
                "activation_mb_per_s": None if rate is None else round(rate * row_bytes / 1e6, 2)})
        writer.finish()


# ============================================================================ helpers
def _fx_runner(graph: ComputationGraph, taps: list[tuple[str, _Tap]]) -> nn.Module:
    """A copy of the traced graph with each (node name, tap) tap called right after its node."""
    import torch.fx as fx

    gm = graph.graph_module
    new = fx.Graph()
    values: dict = {}
    result = new.graph_copy(gm.graph, values)
    new.output(result)
    modules: dict[str, object] = {}
    by_name = {n.name: n for n in new.nodes}
    for i, (node_name, tap) in enumerate(taps):
        node = by_name[node_name]
        target = f"_activis_tap_{i}"
        modules[target] = tap
        with new.inserting_after(node):
            new.call_module(target, (node,))
    for node in new.nodes:
        if node.target in modules:
            continue
        if node.op == "call_module":
            modules[node.target] = gm.get_submodule(node.target)
        elif node.op == "get_attr":
            owner, _, attr = node.target.rpartition(".")
            modules[node.target] = getattr(gm.get_submodule(owner) if owner else gm, attr)
    return fx.GraphModule(modules, new, class_name=f"{graph.model_type}Capture")


def _hook(module: nn.Module, tap: _Tap, call: int | None):
    """A forward hook that taps the ``call``-th call (or every call: the last one wins)."""
    calls = [0]

    def hook(_module, _inputs, output):
        index = calls[0]
        calls[0] += 1
        if call is None or index == call:
            tap(output)

    handle = module.register_forward_hook(hook)
    handle.calls = calls
    return handle


def _detect_kind(outputs: np.ndarray) -> str:
    with np.errstate(all="ignore"):
        if outputs.shape[1] == 1:
            return "probabilities" if ((outputs >= 0) & (outputs <= 1)).all() else "logits"
        if ((outputs >= 0) & (outputs <= 1)).all() and np.abs(outputs.sum(axis=1) - 1).max() < 1e-3:
            return "probabilities"
        if (outputs <= 0).all():
            lse = np.log(np.exp(outputs.astype(np.float64)).sum(axis=1))
            if np.abs(lse).max() < 1e-3:
                return "log_probabilities"
    return "logits"


def _input_dtype(dtype: torch.dtype) -> str:
    if dtype.is_floating_point:
        return "<f4"
    if dtype in (torch.uint8, torch.bool):
        return "|u1"
    return "<i4"


def _model_fingerprint(model: nn.Module) -> str:
    """Names, shapes and leading values of every parameter: tells one checkpoint from another cheaply."""
    h = hashlib.sha1()
    for name, value in model.state_dict().items():
        h.update(f"{name}:{tuple(value.shape)}:{value.dtype}".encode())
        if value.numel():
            h.update(value.detach().reshape(-1)[:256].to("cpu", torch.float64).numpy().tobytes())
    return h.hexdigest()


def _data_fingerprint(x, n) -> str:
    h = hashlib.sha1(f"{n}".encode())
    for t in (x.values() if isinstance(x, Mapping) else x if isinstance(x, (tuple, list)) else [x]):
        h.update(_as_tensor(t).detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def _progress_bar(enabled: bool, total, initial: int, group: _Group):
    from tqdm.auto import tqdm

    desc = "capture" if group.world_size == 1 else f"capture [rank {group.rank}/{group.world_size}]"
    return tqdm(total=total, initial=initial, unit="inst", unit_scale=True, desc=desc, disable=not enabled,
                smoothing=0.1, dynamic_ncols=True)


def _warn_nonfinite(store: ActivationStore) -> None:
    bad = {name: c for name, c in store.nonfinite_counts.items() if any(c.values())}
    if not bad:
        return
    lines = []
    for name, c in bad.items():
        text = f"{name}: {c['nan']:,} NaN, {c['inf']:,} Inf"
        lines.append(text + (f", {c['overflow']:,} beyond float16 (saturated at ±65504)" if c["overflow"] else ""))
    advice = " Capture with dtype='float32' to keep the large values." if any(c["overflow"] for c in bad.values()) \
        else ""
    warnings.warn("Non-finite or overflowing activations in " + store.path.name + ": " + "; ".join(lines) +
                  ". The instances table's 'nonfinite' column says which instances." + advice,
                  NonFiniteWarning, stacklevel=4)
