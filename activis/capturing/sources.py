"""Where a capture's instances come from: tensors, arrays, DataFrames, Datasets, DataLoaders, iterables.

A source gives the instances in a fixed order as batches of any row range, so that a resumed
capture reads exactly the rows it has not written yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, SequentialSampler, Subset, TensorDataset

from .options import CaptureError, _Options

LABEL_KEYS = ("label", "labels", "target", "targets", "y")


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

