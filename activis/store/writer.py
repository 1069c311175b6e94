"""Writing a store: `StoreWriter`, the writer a capture drives, and `finish_shards`.

A new store is laid out in a staging directory and renamed into place, so a half-created store
never exists. Each batch is written at its fixed row offsets and only then committed by atomically
replacing the manifest (or, in a sharded capture, the rank's progress file): a writer killed at any
instant leaves a store that opens with every committed batch, and a full disk raises
`StoreFullError` without losing any.
"""

from __future__ import annotations

import errno
import json
import os
import pathlib
import shutil
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from . import checkpoints as axis
from .errors import StoreError, StoreExistsError, StoreFullError
from .manifest import (
    FORMAT,
    MANIFEST,
    OUTPUT_COLUMNS,
    OUTPUT_KINDS,
    PLAIN_VERSION,
    SHARED_COLUMNS,
    LayerSpec,
    _column_file,
    _columns,
    _inside,
    _output_kind,
    _progress_path,
    _read_progress,
    _safe_dtype,
    shard_ranges,
)
from .nonfinite import NonFinite, _zero_counts, check_finite
from .reader import ActivationStore, open_store
from .scores import scores_from_outputs

_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _fsync_dir(path: pathlib.Path) -> None:
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _atomic_write(path: pathlib.Path, text: str, durable: bool = True) -> None:
    """Replace ``path`` with ``text`` so that readers see the old or the new file, never a mix."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        _raise_if_full(exc, path.parent, "the manifest")
        raise
    if durable:
        _fsync_dir(path.parent)


def _raise_if_full(exc: OSError, store: pathlib.Path, what: str, committed: int | None = None) -> None:
    if exc.errno in _NO_SPACE:
        kept = f"; the store keeps its {committed} committed instances" if committed is not None else ""
        raise StoreFullError(exc.errno, f"No space left while writing {what} of the store {store} "
                                        f"({os.strerror(exc.errno)}){kept}. Free some space and run "
                                        "capture(..., resume=True) to continue.") from exc


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    while len(data):
        written = os.pwrite(fd, data, offset)
        data = data[written:]
        offset += written


@dataclass
class PreparedBatch:
    """A batch `StoreWriter.prepare` checked and laid out: its writes and the commit that follows them."""

    writes: list[tuple[int, memoryview, int]]  # file descriptor, bytes, offset
    rows: int  # rows appended once these are written
    commit: tuple[pathlib.Path, str]  # the file, and the text, that commit them


class StoreWriter:
    """Write batches of rows into a store; each `append` commits atomically.

    ``layers`` maps layer names to `LayerSpec`; ``metadata`` (a DataFrame aligned with the
    instances) is written once up front so that it is there whatever happens later. With
    ``world_size`` > 1 the store is laid out for a sharded capture: every rank joins it with
    `StoreWriter.resume` and fills its own row range. Every commit survives the writing process
    being killed; with ``durable`` it also survives a power cut (fsync per commit and at `finish`).
    With ``checkpoint`` (a training step) the store has a checkpoint axis and this is its first
    checkpoint; `checkpoints.add_checkpoint` then `resume(step=...)` write the next ones.
    """

    def __init__(self, path, *, layers: Mapping[str, LayerSpec], n_outputs: int,
                 class_names: list[str] | None = None, n_expected: int | None = None,
                 metadata: pd.DataFrame | None = None, graph=None, input_shape=None, input_dtype="<f4",
                 outputs_are_probabilities: bool = False, output_kind: str | None = None,
                 world_size: int = 1, capture_info: dict | None = None, overwrite: bool = False,
                 durable: bool = False, checkpoint: int | None = None):
        self.path = pathlib.Path(path)
        if checkpoint is not None:
            checkpoint = axis.check_step(checkpoint)
            if n_expected is None:
                raise StoreError("A store with checkpoints needs n_expected: each checkpoint holds the same instances.")
        kind = output_kind or ("probabilities" if outputs_are_probabilities else "logits")
        if kind not in OUTPUT_KINDS:
            raise StoreError(f"output_kind must be one of {', '.join(OUTPUT_KINDS)}, not {kind!r}.")
        if world_size > 1 and n_expected is None:
            raise StoreError("A sharded store needs n_expected: each rank's rows are laid out up front.")
        n_classes = 2 if n_outputs == 1 else int(n_outputs)
        if class_names is not None and len(class_names) != n_classes:
            raise StoreError(f"class_names has {len(class_names)} name(s) for a model with {n_outputs} output(s): "
                             f"give one name per class ({n_classes}), or none.")
        _check_target(self.path, overwrite)
        manifest = {
            "format": FORMAT,
            "version": PLAIN_VERSION,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "complete": 0,
            "n_expected": None if n_expected is None else int(n_expected),
            "finished": False,
            "n_outputs": int(n_outputs),
            "output_kind": kind,
            "class_names": [str(c) for c in class_names] if class_names is not None else None,
            "columns": dict(OUTPUT_COLUMNS),
            "layers": {},
            "outputs_nonfinite": _zero_counts(),
            "shards": {"world_size": int(world_size)} if world_size > 1 else None,
            "capture": capture_info or {},
        }
        for i, (name, spec) in enumerate(layers.items()):
            spec_dict = asdict(spec)
            spec_dict["dtype"] = str(_safe_dtype(spec.dtype, f"layer {name!r}"))
            manifest["layers"][str(name)] = {"file": f"layers/{i}.bin", **spec_dict, "nonfinite": _zero_counts()}
        if input_shape is not None:
            manifest["inputs"] = {"file": "columns/inputs.bin", "dtype": str(_safe_dtype(input_dtype, "inputs")),
                                  "shape": [int(s) for s in input_shape]}
        document = manifest
        if checkpoint is not None:
            document = axis.shared_of(manifest, checkpoint)
            manifest = axis.view_of(document, checkpoint, {"complete": 0, "finished": False, "capture": capture_info,
                                                           "writes_instances": True})
        staging = self.path.parent / f".{self.path.name}.creating-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            for folder in ["columns", *{str(pathlib.Path(f).parent) for f in _row_file_names(manifest)}] + (
                    [manifest.get("shards_dir", "shards")] if world_size > 1 else []):
                (staging / folder).mkdir(parents=True, exist_ok=True)
            if metadata is not None:
                metadata = pd.DataFrame(metadata).reset_index(drop=True)
                if n_expected is not None and len(metadata) != n_expected:
                    raise StoreError(f"metadata has {len(metadata)} rows for {n_expected} instances.")
                metadata.columns = [str(c) for c in metadata.columns]
                metadata.to_parquet(staging / "metadata.parquet", index=False)
                manifest["metadata_file"] = document["metadata_file"] = "metadata.parquet"
            if graph is not None:
                (staging / "graph.json").write_text(graph.to_json())
                manifest["graph_file"] = document["graph_file"] = "graph.json"
            for relative in _row_file_names(manifest):
                (staging / relative).touch()
            if checkpoint is not None:
                _atomic_write(axis.state_path(staging, checkpoint), json.dumps(axis.state_of(manifest)),
                              durable=durable)
            _atomic_write(staging / MANIFEST, json.dumps(document, indent=1), durable=durable)
            _replace_dir(staging, self.path, overwrite)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            _raise_if_full(exc, self.path, "the new store")
            raise
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        self._attach(manifest, rank=0 if world_size > 1 else None, complete=0, durable=durable)

    @classmethod
    def resume(cls, path, *, rank: int | None = None, durable: bool = False, step: int | None = None) -> StoreWriter:
        """Reopen a store to continue writing after its last commit (``rank``: that rank's shard; ``step``:
        that checkpoint, by default the store's own)."""
        path = pathlib.Path(path)
        _doc, manifest, states = axis.read_view(path, step)
        if manifest.get("finished"):
            what = f"Checkpoint {manifest['checkpoint']['step']} of the store" if states is not None else "The store"
            raise StoreError(f"{what} {path} is finished; nothing to resume.")
        sharded = manifest.get("shards") is not None
        if sharded != (rank is not None):
            world = manifest["shards"]["world_size"] if sharded else 1
            raise StoreError(f"The store {path} was laid out for {world} process(es); resume it with the same "
                             "number of processes.")
        self = cls.__new__(cls)
        self.path = path
        if sharded:
            world = manifest["shards"]["world_size"]
            if not 0 <= rank < world:
                raise StoreError(f"Rank {rank} is outside the store's {world} shards.")
            lo, hi = shard_ranges(manifest["n_expected"], world)[rank]
            progress = _read_progress(path, rank, lo, hi, manifest)
            complete = progress["complete"]
            own = progress.get("nonfinite") or {}  # the progress file carries this rank's counts only
            for name, entry in manifest["layers"].items():
                entry["nonfinite"] = {**_zero_counts(), **own.get(name, {})}
            manifest["outputs_nonfinite"] = {**_zero_counts(), **own.get("<outputs>", {})}
        else:
            complete = manifest["complete"]
            progress = manifest
        ActivationStore(path, manifest, states)  # the files hold what the manifest says
        self._attach(manifest, rank=rank, complete=complete, durable=durable)
        self.data_digest = progress.get("data_digest")
        return self

    def _attach(self, manifest: dict, *, rank: int | None, complete: int, durable: bool) -> None:
        manifest.setdefault("output_kind", _output_kind(manifest))  # a format 1 store being resumed
        manifest.setdefault("outputs_nonfinite", _zero_counts())
        for entry in manifest["layers"].values():
            entry.setdefault("nonfinite", _zero_counts())
        self.manifest = manifest
        self.rank = rank
        self.durable = durable
        self._complete = self._committed = complete
        # what the writer of the rows says they were made from, committed with them (a capture's
        # hash of its inputs and labels so far, checked when it resumes)
        self.data_digest: str | None = None
        if rank is None:
            self.start, self.stop = 0, manifest.get("n_expected")
        else:
            self.start, self.stop = shard_ranges(manifest["n_expected"], manifest["shards"]["world_size"])[rank]
        self._columns = _columns(manifest)
        self._fds: dict[str, int] = {}
        # a checkpoint after the first writes its own rows only, and checks its labels against the store's
        self._owner = axis.writes_instances(manifest)
        self._labels = None if self._owner else np.memmap(_inside(self.path, _column_file(manifest, "label")),
                                                          dtype=self._columns["label"], mode="r")
        for relative in _row_file_names(manifest, own_only=not self._owner):
            self._fds[relative] = os.open(_inside(self.path, relative), os.O_WRONLY | os.O_CREAT, 0o644)

    # -------------------------------------------------------------------- state
    @property
    def complete(self) -> int:
        """Rows appended by this writer (in its shard, when sharded)."""
        return self._complete

    @property
    def committed(self) -> int:
        """Rows appended and committed: what a reader sees (in this writer's shard)."""
        return self._committed

    @property
    def n_outputs(self) -> int:
        return int(self.manifest["n_outputs"])

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}
        self._labels = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------- append
    def append(self, *, commit: bool = True, **batch) -> None:
        """Write one batch to every file, then advance the manifest: the batch's commit.

        Takes the arguments of `prepare`. With ``commit=False`` the rows are written but only
        counted by the next `commit`: a writer with more batches waiting commits them together
        (the manifest replace costs milliseconds on some file systems).
        """
        self.write(self.prepare(**batch), commit=commit)

    def prepare(self, *, activations: Mapping[str, np.ndarray], label, outputs, pred=None, confidence=None,
                inputs=None, checked: Mapping[str, NonFinite | None] | None = None) -> PreparedBatch:
        """Check and convert one batch and lay out its writes, without touching the files yet.

        Activations not yet in their storage dtype are converted and checked here; ``checked``
        carries the `check_finite` results of those the caller converted itself. ``pred`` and
        ``confidence`` default to what the outputs say. Kept apart from `write` so that a capture
        does this Python work on its main thread and leaves its writer thread only system calls,
        which release the GIL: a writer thread running Python would stall the model's thread.
        """
        outputs = np.asarray(outputs, dtype=np.float32)
        n = len(outputs)
        row0 = self.start + self._complete
        if self.stop is not None and row0 + n > self.stop:
            raise StoreError(f"Batch of {n} rows runs past the end of this store's rows ({self.stop}).")
        if outputs.shape != (n, self.n_outputs):
            raise StoreError(f"Outputs of shape {outputs.shape}, expected {(n, self.n_outputs)}.")
        label = np.asarray(label).reshape(-1)
        if len(label) != n:
            raise StoreError(f"{len(label)} labels for a batch of {n} instances.")
        label = label.astype(np.int64)
        if self._labels is not None:
            self._check_labels(label, row0)
        classes = 2 if self.n_outputs == 1 else self.n_outputs
        if ((label < -1) | (label >= classes)).any():
            bad = label[(label < -1) | (label >= classes)][0]
            raise StoreError(f"Label {bad} is outside the model's {classes} classes (use -1 for unknown).")
        checked = dict(checked or {})
        blocks: dict[str, np.ndarray] = {}
        bad_per_row = np.zeros(n, dtype=np.int32)
        for name, entry in self.manifest["layers"].items():
            if name not in activations:
                raise StoreError(f"Batch lacks layer {name!r}.")
            arr = np.asarray(activations[name])
            arr = arr.reshape(n, -1) if arr.ndim == 1 else arr
            if arr.shape != (n, entry["neurons"]):
                raise StoreError(f"Layer {name!r}: batch of shape {arr.shape}, expected {(n, entry['neurons'])}.")
            dtype = np.dtype(entry["dtype"])
            if name not in checked:
                source = arr
                with np.errstate(over="ignore", invalid="ignore"):  # counted by check_finite
                    arr = np.ascontiguousarray(arr, dtype=dtype)
                checked[name] = check_finite(arr, source) if dtype.kind == "f" else None
            blocks[entry["file"]] = np.ascontiguousarray(arr, dtype=dtype)
        out_check = check_finite(outputs)
        scores = scores_from_outputs(outputs, self.manifest["output_kind"])
        with np.errstate(invalid="ignore"):
            if pred is None:
                pred = np.argmax(np.where(np.isnan(scores), -np.inf, scores), axis=1)
            if confidence is None:
                confidence = scores[np.arange(n), np.asarray(pred)]
        known = label >= 0
        label_score = np.full(n, np.nan, dtype=np.float32)
        label_score[known] = scores[np.flatnonzero(known), label[known]]
        for result in list(checked.values()) + [out_check]:
            if result is not None:
                bad_per_row += result.per_row
        values = {"label": label, "pred": pred, "confidence": confidence, "label_score": label_score,
                  "nonfinite": bad_per_row}
        for col, dtype in self._columns.items():
            if self._owner or col not in SHARED_COLUMNS:
                blocks[_column_file(self.manifest, col)] = np.ascontiguousarray(values[col], dtype=dtype).reshape(n)
        blocks[_column_file(self.manifest, "outputs")] = np.ascontiguousarray(outputs, dtype="<f4")
        if self.manifest.get("inputs") and self._owner:
            spec = self.manifest["inputs"]
            if inputs is None:
                raise StoreError("This store keeps inputs; the batch has none.")
            flat = np.asarray(inputs).reshape(n, -1)
            if flat.shape[1] != int(np.prod(spec["shape"], dtype=np.int64)):
                raise StoreError(f"Inputs of {flat.shape[1]} values per instance, expected shape {spec['shape']}.")
            blocks[spec["file"]] = np.ascontiguousarray(flat, dtype=spec["dtype"])
        writes = [(self._fds[relative], memoryview(block).cast("B"), row0 * (block.nbytes // n))
                  for relative, block in blocks.items()] if n else []
        for name, result in checked.items():
            if result is not None:
                result.add_to(self.manifest["layers"][name]["nonfinite"])
        if out_check is not None:
            out_check.add_to(self.manifest["outputs_nonfinite"])
        self._complete += n
        return PreparedBatch(writes, self._complete, self._commit_record())

    def _check_labels(self, label: np.ndarray, row0: int) -> None:
        """A later checkpoint holds the store's instances: its labels are the store's, row for row."""
        stored = self._labels[row0:row0 + len(label)]
        differ = np.flatnonzero(stored != label)
        if len(differ):
            row = row0 + int(differ[0])
            raise InstancesDifferError(
                f"Checkpoint {self.manifest['checkpoint']['step']} of {self.path} holds other instances than the "
                f"store: the label of row {row} is {label[differ[0]]}, the store's is {stored[differ[0]]}. Every "
                "checkpoint captures the same instances, in the same order.")

    def write(self, prepared: PreparedBatch, commit: bool = True) -> None:
        """Write a prepared batch's rows (in the order prepared), then commit them if asked."""
        try:
            for fd, data, offset in prepared.writes:
                _pwrite_all(fd, data, offset)
            if self.durable:
                for fd in self._fds.values():
                    os.fsync(fd)
        except OSError as exc:
            _raise_if_full(exc, self.path, "a batch", committed=self._committed)
            raise
        if commit:
            self._write_commit(prepared.commit, prepared.rows)

    def commit(self, finished: bool = False) -> None:
        """Make every row written so far part of the store, atomically."""
        self._write_commit(self._commit_record(finished), self._complete)

    def _commit_record(self, finished: bool = False) -> tuple[pathlib.Path, str]:
        """Where and what to write to commit the rows appended so far."""
        if self.rank is None:
            self.manifest["complete"] = self._complete
            self.manifest["finished"] = finished
            self.manifest["data_digest"] = self.data_digest
            if "checkpoint" in self.manifest:  # a checkpoint commits its own state only
                return (axis.state_path(self.path, self.manifest["checkpoint"]["step"]),
                        json.dumps(axis.state_of(self.manifest), indent=1 if finished else None))
            # indented for people once finished; compact (C-encoded) for the commits before
            return self.path / MANIFEST, json.dumps(self.manifest, indent=1 if finished else None)
        counts = {name: e["nonfinite"] for name, e in self.manifest["layers"].items()}
        counts["<outputs>"] = self.manifest["outputs_nonfinite"]
        progress = {"rank": self.rank, "complete": self._complete, "finished": finished, "nonfinite": counts,
                    "data_digest": self.data_digest}
        return _progress_path(self.path, self.rank, self.manifest), json.dumps(progress)

    def _write_commit(self, record: tuple[pathlib.Path, str], rows: int) -> None:
        _atomic_write(*record, durable=self.durable)
        self._committed = rows

    def finish(self) -> ActivationStore | None:
        """Mark the store (or this rank's shard) finished; with ``durable``, sync it to disk first.

        Returns the opened store, or None for a shard: `finish_shards` completes a sharded store
        once every rank has finished.
        """
        if self.durable:
            for fd in self._fds.values():
                os.fsync(fd)
        self.commit(finished=True)
        self.close()
        if self.rank is not None:
            return None
        return open_store(self.path)


def finish_shards(path, step: int | None = None) -> ActivationStore:
    """Merge the ranks' progress into the manifest (or checkpoint ``step``'s state) once every shard is complete.

    Raises `StoreError` naming the shards still missing rows.
    """
    path = pathlib.Path(path)
    _doc, manifest, states = axis.read_view(path, step)
    if manifest.get("finished"):
        return open_store(path)
    store = ActivationStore(path, manifest, states)
    missing = [p for p in store.progress if p["complete"] < p["stop"] - p["start"]]
    if missing:
        text = ", ".join(f"rank {p['rank']}: {p['complete']}/{p['stop'] - p['start']}" for p in missing)
        raise StoreError(f"Shards of {path} are incomplete ({text}); resume them with the same world size.")
    counts = store.nonfinite
    for name, entry in manifest["layers"].items():
        entry["nonfinite"] = {k: int(v) for k, v in counts.loc[name].items()}
    manifest["outputs_nonfinite"] = {k: int(v) for k, v in counts.loc["<outputs>"].items()}
    manifest["complete"] = manifest["n_expected"]
    manifest["finished"] = True
    if states is None:
        _atomic_write(path / MANIFEST, json.dumps(manifest, indent=1))
    else:
        _atomic_write(axis.state_path(path, manifest["checkpoint"]["step"]),
                      json.dumps(axis.state_of(manifest), indent=1))
    return open_store(path)


class InstancesDifferError(StoreError):
    """A checkpoint being written holds other instances than the store's others."""


def _row_file_names(manifest: dict, own_only: bool = False) -> list[str]:
    """The files a batch writes rows to (``own_only``: a later checkpoint's own, not the shared instances')."""
    files = [e["file"] for e in manifest["layers"].values()]
    files += [_column_file(manifest, c) for c in _columns(manifest) if not (own_only and c in SHARED_COLUMNS)]
    files.append(_column_file(manifest, "outputs"))
    if manifest.get("inputs") and not own_only:
        files.append(manifest["inputs"]["file"])
    return files


def _check_target(path: pathlib.Path, overwrite: bool) -> None:
    if path.exists() and not path.is_dir():
        raise StoreExistsError(f"{path} is a file, not a store directory; choose a new or empty directory.")
    if (path / MANIFEST).exists():
        if not overwrite:
            raise StoreExistsError(f"{path} already holds a store; pass overwrite=True to replace it "
                                   "or resume=True to continue it.")
    elif path.is_dir() and any(path.iterdir()):
        raise StoreExistsError(f"{path} is a directory with other files in it, not a store; "
                               "choose a new or empty directory.")


def _replace_dir(staging: pathlib.Path, path: pathlib.Path, overwrite: bool) -> None:
    """Move a finished staging directory into place, retiring an old store only when asked."""
    old = None
    if overwrite and (path / MANIFEST).exists():
        old = path.parent / f".{path.name}.replaced-{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(path, old)
    os.replace(staging, path)  # replaces an empty directory, never a full one
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
