"""The training log: written as training goes, readable while it runs, loaded as a DataFrame.

Layout of a log folder (nothing is pickled)::

    meta.json        run name, parameters (name, shape, layer), quantities and their settings,
                     the dtype and row shape of every binary array; written once, atomically
    records.jsonl    one JSON object per line: {"step": t, <quantity>: value, ..., "_rows": {...}}
    <array>.bin      raw little-endian rows of fixed shape (the gradient histograms), appended

Lines and rows are only ever appended and flushed at once, so a killed process loses nothing it
wrote; a torn last line (the process died mid-write) is ignored on read. ``fsync`` runs at most
every ``fsync_interval`` seconds (0: after every record) and when the log is closed, so a power
cut loses at most that much. A record names the rows it wrote, and rows are written before the
record, so a reader never follows a record to a missing row. Several lines may carry values of the
same step (a quantity finished one step later, metrics logged separately); readers merge them.

This module imports no torch: a log can be read where torch is not installed.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping

import numpy as np
import pandas as pd

FORMAT = "activis.cockpit-log"
FORMAT_VERSION = 1
META = "meta.json"
RECORDS = "records.jsonl"
ROOT_LAYER = "(model)"  # the layer name of parameters that belong to the model itself


def layer_of(param_name: str) -> str:
    """The module a parameter belongs to: ``"features.0.weight"`` -> ``"features.0"``."""
    return param_name.rsplit(".", 1)[0] if "." in param_name else ROOT_LAYER


def _atomic_write(path: pathlib.Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class CockpitLog:
    """The readings of one training run, by step, in memory and (optionally) in a folder.

    Create one for writing with ``CockpitLog(meta, directory)`` (the `Cockpit` does); open an
    existing folder with `read_log`. ``subscribe`` registers a callback run after every append or
    refresh that brought new data (a live view uses it; it must return quickly).
    """

    def __init__(self, meta: Mapping, directory: str | os.PathLike | None = None, *,
                 fsync_interval: float = 1.0, _existing: bool = False):
        self.meta = {"format": FORMAT, "version": FORMAT_VERSION, **meta}
        self.directory = pathlib.Path(directory) if directory is not None else None
        self.fsync_interval = fsync_interval
        self._lock = threading.RLock()
        self._records: dict[int, dict] = {}
        self._rows: dict[str, list[np.ndarray]] = {name: [] for name in self.meta.get("arrays", {})}
        self._row_steps: dict[str, list[int]] = {name: [] for name in self._rows}
        self._listeners: list[Callable[[CockpitLog], None]] = []
        self.skipped: dict[str, str] = {}  # quantity -> why it could not be computed
        self._files: dict[str, object] = {}
        self._offset = 0  # bytes of records.jsonl already read (reader)
        self._last_sync = time.monotonic()
        self.writable = self.directory is not None and not _existing
        if self.writable:
            self.directory.mkdir(parents=True, exist_ok=True)
            if (self.directory / META).exists():
                raise FileExistsError(f"{self.directory} already holds a cockpit log; log each run "
                                      "into a folder of its own")
            _atomic_write(self.directory / META, json.dumps(self.meta, indent=1))

    # ------------------------------------------------------------------ metadata
    @property
    def run(self) -> str:
        return self.meta.get("run", "")

    @property
    def param_names(self) -> list[str]:
        return [p["name"] for p in self.meta.get("params", [])]

    @property
    def layers(self) -> list[str]:
        """Layers (modules owning parameters) in parameter order."""
        return list(dict.fromkeys(layer_of(n) for n in self.param_names))

    def layer_params(self, layer: str | None) -> list[int]:
        """Indices of the parameters of ``layer`` (all parameters for None)."""
        if layer is None:
            return list(range(len(self.param_names)))
        found = [i for i, n in enumerate(self.param_names) if layer_of(n) == layer]
        if not found:
            raise KeyError(f"Unknown layer {layer!r}; layers: {', '.join(self.layers)}")
        return found

    # ------------------------------------------------------------------ writing
    def append(self, step: int, values: Mapping, arrays: Mapping[str, np.ndarray] | None = None) -> None:
        """Add the readings of one step (merged with earlier readings of the same step)."""
        record = {"step": int(step), **values}
        with self._lock:
            if arrays:
                rows = {}
                for name, value in arrays.items():
                    spec = self.meta["arrays"][name]
                    arr = np.ascontiguousarray(value, dtype=np.dtype(spec["dtype"]))
                    if list(arr.shape) != list(spec["shape"]):
                        raise ValueError(f"{name}: rows have shape {spec['shape']}, got {list(arr.shape)}")
                    rows[name] = len(self._rows[name])
                    if self.writable:
                        self._write(f"{name}.bin", arr.tobytes())
                    self._rows[name].append(arr)
                    self._row_steps[name].append(int(step))
                record["_rows"] = rows
            if self.writable:
                self._write(RECORDS, (json.dumps(record) + "\n").encode())
                if time.monotonic() - self._last_sync >= self.fsync_interval:
                    self.sync()
            self._merge(record)
        self._notify()

    def _write(self, name: str, data: bytes) -> None:
        f = self._files.get(name)
        if f is None:
            f = self._files[name] = open(self.directory / name, "ab")
        f.write(data)
        f.flush()

    def sync(self) -> None:
        """Force everything written so far onto the disk."""
        with self._lock:
            for f in self._files.values():
                os.fsync(f.fileno())
            self._last_sync = time.monotonic()

    def close(self) -> None:
        with self._lock:
            if self._files:
                self.sync()
            for f in self._files.values():
                f.close()
            self._files = {}
            self.writable = False

    # ------------------------------------------------------------------ reading
    def _merge(self, record: dict) -> None:
        step = record["step"]
        merged = self._records.setdefault(step, {})
        merged.update({k: v for k, v in record.items() if not k.startswith("_") and k != "step"})
        self.skipped.update(record.get("_skipped", {}))

    def refresh(self) -> bool:
        """Read what another process appended since the last read; True when there was something."""
        if self.directory is None or self.writable:
            return False
        with self._lock:
            path = self.directory / RECORDS
            if not path.exists():
                return False
            with open(path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
            end = data.rfind(b"\n") + 1  # a torn last line (no newline yet) waits for the next read
            if end == 0:
                return False
            self._offset += end
            for line in data[:end].splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    warnings.warn(f"{path}: skipped a damaged line", stacklevel=2)
                    continue
                for name, row in record.get("_rows", {}).items():
                    self._load_rows(name, row + 1)
                    if row < len(self._rows[name]):
                        self._row_steps[name][row] = record["step"]
                self._merge(record)
        self._notify()
        return True

    def _load_rows(self, name: str, upto: int) -> None:
        have = len(self._rows[name])
        if upto <= have:
            return
        spec = self.meta["arrays"][name]
        dtype = np.dtype(spec["dtype"])
        row_bytes = dtype.itemsize * math.prod(spec["shape"])
        with open(self.directory / f"{name}.bin", "rb") as f:
            f.seek(have * row_bytes)
            data = f.read((upto - have) * row_bytes)
        new = np.frombuffer(data[: len(data) // row_bytes * row_bytes], dtype=dtype)
        for row in new.reshape(-1, *spec["shape"]):
            self._rows[name].append(row)
            self._row_steps[name].append(-1)

    def subscribe(self, callback: Callable[[CockpitLog], None]) -> Callable[[], None]:
        """Call ``callback(log)`` after new data arrives; returns a function that unsubscribes."""
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback) if callback in self._listeners else None

    def _notify(self) -> None:
        for callback in list(self._listeners):
            callback(self)

    @property
    def steps(self) -> list[int]:
        with self._lock:
            return sorted(self._records)

    def record(self, step: int) -> dict:
        with self._lock:
            return dict(self._records[step])

    def frame(self) -> pd.DataFrame:
        """One row per step. Per-parameter readings appear as ``<quantity>/<parameter>`` columns and,
        combined over the network (norm or sum, as the quantity defines), as ``<quantity>``."""
        names = self.param_names
        aggregates = {q: spec.get("aggregate") for q, spec in self.meta.get("quantities", {}).items()}
        rows = []
        with self._lock:
            items = sorted(self._records.items())
        for step, record in items:
            row = {"step": step}
            for key, value in record.items():
                if isinstance(value, list) and len(value) == len(names):
                    row.update({f"{key}/{n}": v for n, v in zip(names, value)})
                    row[key] = _combine(value, aggregates.get(key))
                else:
                    row[key] = value
            rows.append(row)
        frame = pd.DataFrame(rows)
        return frame.set_index("step") if rows else frame

    def layer_frame(self, key: str) -> pd.DataFrame:
        """A per-parameter quantity combined per layer: one column per layer, one row per step."""
        aggregate = self.meta.get("quantities", {}).get(key, {}).get("aggregate")
        groups = {layer: self.layer_params(layer) for layer in self.layers}
        rows = {}
        with self._lock:
            for step, record in sorted(self._records.items()):
                if isinstance(record.get(key), list):
                    values = record[key]
                    rows[step] = {layer: _combine([values[i] for i in idx], aggregate)
                                  for layer, idx in groups.items()}
        return pd.DataFrame.from_dict(rows, orient="index", columns=list(groups))

    def histogram_steps(self, name: str) -> list[int]:
        with self._lock:
            return list(self._row_steps.get(name, []))

    def histogram(self, name: str, start: int | None = None, stop: int | None = None,
                  layer: str | None = None) -> tuple[np.ndarray, int]:
        """Counts of a histogram quantity summed over steps start..stop (inclusive) and over the
        parameters of ``layer`` (all for None). Returns (counts, number of steps summed)."""
        if name not in self._rows:
            raise KeyError(f"{name} is not in this log; arrays: {', '.join(self._rows) or 'none'}")
        idx = self.layer_params(layer)
        shape = self.meta["arrays"][name]["shape"][1:]
        with self._lock:
            picked = [row for row, s in zip(self._rows[name], self._row_steps[name])
                      if (start is None or s >= start) and (stop is None or s <= stop)]
        if not picked:
            return np.zeros(shape, dtype=np.int64), 0
        return np.stack(picked)[:, idx].sum(axis=(0, 1)), len(picked)

    def __repr__(self) -> str:
        where = str(self.directory) if self.directory else "in memory"
        return f"CockpitLog({self.run!r}, {len(self._records)} steps, {where})"


def _combine(values: list, aggregate: str | None):
    if aggregate == "norm":
        return math.sqrt(sum(v * v for v in values))
    return sum(values)


def read_log(path: str | os.PathLike) -> CockpitLog:
    """Open a log folder (it may still be growing: call ``refresh()`` to read new steps)."""
    path = pathlib.Path(path)
    try:
        meta = json.loads((path / META).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is not a cockpit log (no {META})") from None
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path / META} is not a cockpit log (format {meta.get('format')!r})")
    if meta.get("version", 0) > FORMAT_VERSION:
        raise ValueError(f"{path} was written by a newer activis (log version {meta['version']})")
    log = CockpitLog(meta, path, _existing=True)
    log.refresh()
    return log


def load_runs(runs: Iterable | Mapping) -> pd.DataFrame:
    """Several logs side by side: one frame with a ``run`` column.

    ``runs`` is a list of folders or `CockpitLog` objects (named by their run name) or a mapping
    from a name to either.
    """
    items = runs.items() if isinstance(runs, Mapping) else ((None, r) for r in runs)
    frames = []
    for name, run in items:
        log = run if isinstance(run, CockpitLog) else read_log(run)
        frame = log.frame().reset_index()
        frame.insert(0, "run", name if name is not None else (log.run or str(log.directory)))
        frames.append(frame)
    if not frames:
        raise ValueError("load_runs needs at least one run")
    return pd.concat(frames, ignore_index=True)
