"""Per-instance training dynamics: the loss and logits of each instance each time training presents it.

A run's ``dynamics/`` folder holds ``meta.json`` (the number of classes) and one file of raw
little-endian rows per process, ``rank-<k>.bin``: (step int64, instance int64, label int32, loss
float32, logits float32 x classes). A row is appended and flushed as training goes, so a run killed
at any moment leaves whole rows and at most one torn row at the end, which the reader ignores. Each
rank of a ``torchrun`` job writes its own file (no locks, no collective) and the reader merges them by
step. The rows come from the training loop's own forward pass: recording them costs a copy of the
logits, not another forward (the torch side is `activis.DynamicsRecorder`).

Imports no torch: a run's dynamics read where torch is not installed.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import warnings

import numpy as np
import pandas as pd

from ..paths import folder_path

FORMAT = "activis.dynamics"
VERSION = 1
META = "meta.json"
MAX_CLASSES = 1 << 20
MAX_ARRAY_BYTES = 16 << 30  # what `presentations` may allocate: beyond it, a damaged index, not a real run
_RANK_FILE = re.compile(r"rank-(\d{1,6})\.bin")


class DynamicsError(ValueError):
    """Training dynamics that cannot be recorded, read or computed as asked: logits or labels of the wrong
    shape or range, non-finite values, arrays whose rows do not match, too few checkpoints, an unknown
    option, a damaged dynamics folder. The message says what to change. (activis.dynamics raises it too.)"""


def row_dtype(classes: int) -> np.dtype:
    return np.dtype([("step", "<i8"), ("instance", "<i8"), ("label", "<i4"), ("loss", "<f4"),
                     ("logits", "<f4", (classes,))])


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per-row cross-entropy of logits against class labels, in float64 (NaN where a label is unknown, -1)."""
    z = logits.astype(np.float64)
    top = z.max(axis=1, keepdims=True)
    log_norm = np.log(np.exp(z - top).sum(axis=1)) + top[:, 0]
    known = (labels >= 0) & (labels < z.shape[1])
    loss = np.full(len(z), np.nan)
    loss[known] = log_norm[known] - z[np.flatnonzero(known), labels[known]]
    return loss


class DynamicsWriter:
    """Appends rows to ``<folder>/rank-<rank>.bin`` (numpy in; the torch side converts first)."""

    def __init__(self, folder, rank: int = 0):
        self.folder = pathlib.Path(folder)
        self.rank = int(rank)
        self.classes: int | None = None
        self._file = None
        self.closed = False

    def _open(self, classes: int) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        meta_path = self.folder / META
        if meta_path.exists():
            known = _read_meta(self.folder)
            if known != classes:
                raise DynamicsError(f"The dynamics in {self.folder} have {known} classes; these logits have {classes}.")
        else:
            tmp = meta_path.with_name(f".{META}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"format": FORMAT, "version": VERSION, "classes": classes}))
            os.replace(tmp, meta_path)
        path = self.folder / f"rank-{self.rank}.bin"
        size = path.stat().st_size if path.exists() else 0
        row = row_dtype(classes).itemsize
        with open(path, "ab") as f:  # a torn row left by a kill is cut off, so new rows stay aligned
            f.truncate(size - size % row)
        self._file = open(path, "ab")  # noqa: SIM115 - held open while training, closed by close()
        self.classes = classes

    def append(self, step: int, instances, labels, logits, losses=None) -> None:
        """Append one presentation of each instance: its index, label, logits and (default: cross-entropy) loss."""
        if self.closed:
            raise DynamicsError(f"this recorder of {self.folder} is closed; record inside its `with` block, or "
                                "open a new one (it appends to the same files)")
        if isinstance(step, bool) or not isinstance(step, int | np.integer) or step < 0:
            raise DynamicsError(f"step is the training step, a whole number of 0 or more, not {step!r}.")
        logits = np.asarray(logits, dtype=np.float32)
        if logits.ndim != 2 or logits.shape[1] < 1 or logits.shape[1] > MAX_CLASSES:
            raise DynamicsError(f"logits is instances x classes (2-D), not shape {logits.shape}.")
        n, classes = logits.shape
        instances = _column(instances, n, "indices", np.int64)
        labels = _column(labels, n, "labels", np.int64)
        if (instances < 0).any():
            raise DynamicsError(f"index {int(instances[instances < 0][0])} is not an instance's position in the "
                                "dataset: indices are 0 or more.")
        bad = (labels < -1) | (labels >= classes)
        if bad.any():
            raise DynamicsError(f"label {int(labels[bad][0])} is outside the {classes} classes (-1: unknown).")
        losses = cross_entropy(logits, labels) if losses is None else _column(losses, n, "losses", np.float64)
        if self._file is None:
            self._open(classes)
        elif classes != self.classes:
            raise DynamicsError(f"These logits have {classes} classes; the run's dynamics have {self.classes}.")
        rows = np.empty(n, dtype=row_dtype(classes))
        rows["step"], rows["instance"], rows["label"] = int(step), instances, labels
        rows["loss"], rows["logits"] = losses, logits
        self._file.write(rows.tobytes())
        self._file.flush()

    def close(self) -> None:
        """Close the file; a row appended afterwards is refused (it would reopen the file behind the loop's back)."""
        self.closed = True
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _column(values, n: int, name: str, dtype) -> np.ndarray:
    arr = np.asarray(values).reshape(-1)
    if len(arr) != n:
        raise DynamicsError(f"{len(arr)} {name} for {n} rows of logits: one per instance presented.")
    return arr.astype(dtype, copy=False)


def _read_meta(folder: pathlib.Path) -> int:
    try:
        meta = json.loads((folder / META).read_text())
    except (OSError, ValueError) as exc:
        raise DynamicsError(f"{folder / META} is not readable JSON: {exc}") from None
    classes = meta.get("classes") if isinstance(meta, dict) else None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise DynamicsError(f"{folder / META} is not activis dynamics (format tag missing).")
    if not isinstance(meta.get("version"), int) or meta["version"] > VERSION:
        raise DynamicsError(f"{folder / META} has version {meta.get('version')!r}; this activis reads {VERSION}.")
    if isinstance(classes, bool) or not isinstance(classes, int) or not 1 <= classes <= MAX_CLASSES:
        raise DynamicsError(f"{folder / META} is corrupt: 'classes' is {classes!r}.")
    return classes


class Dynamics:
    """The recorded rows of every rank, merged by step (within a step, by rank, then as written)."""

    def __init__(self, folder: pathlib.Path, rows: np.ndarray, classes: int):
        self.folder = folder
        self.rows = rows
        self.classes = classes

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        instances = len(np.unique(self.rows["instance"]))
        return (f"<Dynamics {self.folder} · {len(self.rows):,} presentations of {instances:,} instances · "
                f"{self.classes} classes>")

    @property
    def logits(self) -> np.ndarray:
        """Rows x classes, float32, in the order of `frame`."""
        return self.rows["logits"]

    def frame(self) -> pd.DataFrame:
        """One row per presentation: step, instance, label, loss, correct (argmax of the logits is the label)."""
        rows = self.rows
        return pd.DataFrame({"step": rows["step"], "instance": rows["instance"], "label": rows["label"],
                             "loss": rows["loss"], "correct": (rows["logits"].argmax(axis=1) == rows["label"])
                             & (rows["label"] >= 0)})

    def presentations(self, n_instances: int | None = None) -> np.ndarray:
        """The logits as (presentations, instances, classes): ``[k, i]`` is instance i's k-th presentation
        (an epoch, when every instance is presented once per epoch), NaN where it was presented fewer times.
        ``n_instances`` defaults to the largest index recorded + 1."""
        rows = self.rows
        n = self._n_instances(n_instances)
        order = np.argsort(rows["instance"], kind="stable")  # by instance, each in step order
        instance = rows["instance"][order]
        starts = np.searchsorted(instance, instance, side="left")
        k = np.arange(len(order)) - starts
        shape = (int(k.max()) + 1 if len(k) else 0, n, self.classes)
        if np.prod(shape, dtype=np.float64) * 4 > MAX_ARRAY_BYTES:
            raise DynamicsError(f"The presentations would be an array of shape {shape}, over "
                                f"{MAX_ARRAY_BYTES >> 30} GiB: pass n_instances, or read frame() and logits instead.")
        out = np.full(shape, np.nan, dtype=np.float32)
        out[k, instance] = rows["logits"][order]
        return out

    def labels(self, n_instances: int | None = None) -> np.ndarray:
        """Each instance's label as last recorded (-1 for an instance never presented)."""
        rows = self.rows
        n = self._n_instances(n_instances)
        out = np.full(n, -1, dtype=np.int64)
        out[rows["instance"]] = rows["label"]
        return out


    def _n_instances(self, n_instances: int | None) -> int:
        largest = int(self.rows["instance"].max()) if len(self.rows) else -1
        if n_instances is None:
            return largest + 1
        if isinstance(n_instances, bool) or not isinstance(n_instances, (int, np.integer)) or n_instances <= largest:
            raise DynamicsError(f"n_instances is the number of instances, more than the largest index recorded "
                                f"({largest}), not {n_instances!r}.")
        return int(n_instances)


def read_dynamics(folder) -> Dynamics:
    """Read a run's ``dynamics/`` folder (every rank's rows, merged by step). A torn last row is ignored."""
    folder = folder_path(folder, "folder", DynamicsError)
    if not folder.is_dir():
        raise DynamicsError(f"{folder} holds no per-instance dynamics (no such folder).")
    if (folder / META).is_symlink():
        raise DynamicsError(f"{folder / META} is a symbolic link; a run's files are read inside its folder only.")
    if not (folder / META).exists():
        return Dynamics(folder, np.empty(0, dtype=row_dtype(1)), 1)
    classes = _read_meta(folder)
    dtype = row_dtype(classes)
    parts = []
    for path in sorted(folder.iterdir(), key=lambda p: p.name):
        match = _RANK_FILE.fullmatch(path.name)
        if not match or path.is_symlink() or not path.is_file():
            continue
        size = path.stat().st_size
        if size % dtype.itemsize:
            warnings.warn(f"{path}: a torn last row ({size % dtype.itemsize} bytes) is ignored; the run was "
                          "stopped while writing it.", RuntimeWarning, stacklevel=2)
        rows = np.fromfile(path, dtype=dtype, count=size // dtype.itemsize)
        damaged = (rows["instance"] < 0) | (rows["label"] < -1) | (rows["label"] >= classes)
        if damaged.any():
            warnings.warn(f"{path}: {int(damaged.sum())} damaged rows (a negative instance, or a label outside the "
                          f"{classes} classes) are skipped.", RuntimeWarning, stacklevel=2)
            rows = rows[~damaged]
        parts.append((int(match.group(1)), rows))
    parts.sort(key=lambda part: part[0])
    rows = np.concatenate([rows for _rank, rows in parts]) if parts else np.empty(0, dtype=dtype)
    rank = np.concatenate([np.full(len(r), k) for k, r in parts]) if parts else np.empty(0, dtype=np.int64)
    order = np.lexsort((np.arange(len(rows)), rank, rows["step"]))
    return Dynamics(folder, rows[order], classes)
