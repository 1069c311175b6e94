"""The training log: written as training goes, readable while it runs, loaded as a DataFrame.

Layout of a log folder (nothing is pickled)::

    meta.json        run name, parameters (name, shape, layer), quantities and their settings,
                     the dtype and row shape of every binary array; written once, atomically
    records.jsonl    one JSON object per line: {"step": t, <quantity>: value, ..., "_rows": {...}}
    <array>.bin      raw little-endian rows of fixed shape (the gradient histograms), appended
    series/          the network-wide scalars again as columns, so that charts of long runs
                     need not parse the lines (`activis.run.series`; the lines stay the truth)

Lines and rows are only ever appended and flushed at once, so a killed process loses nothing it
wrote; a torn last line (the process died mid-write) is ignored on read. ``fsync`` runs at most
every ``fsync_interval`` seconds (0: after every record) and when the log is closed, so a power
cut loses at most that much. A record names the rows it wrote, and rows are written before the
record, so a reader never follows a record to a missing row. Several lines may carry values of the
same step (a quantity finished one step later, metrics logged separately); readers merge them.

A log from elsewhere may be damaged: a line that is not valid UTF-8, not JSON, not an object, or
has no integer ``step`` or a bad ``_rows``/``_skipped``/``_config`` is skipped, and a value whose
kind (number, text, list) differs from that key's first value is left out, with one warning naming
the file and the lines; a damaged ``meta.json`` (or a field of it) is set aside with a warning and
the records are read without it (no per-parameter names, no histograms); array names must stay
inside the folder and no file is followed through a symlink out of it; a missing histogram file
loses only the histograms.

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
from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd

from ..store.errors import StoreError
from ..store.manifest import _inside
from .series import AppendedFiles, SeriesWriter, combine, scalar_values

FORMAT = "activis.cockpit-log"
FORMAT_VERSION = 1
META = "meta.json"
RECORDS = "records.jsonl"
ROOT_LAYER = "(model)"  # the layer name of parameters that belong to the model itself
MAX_ROW_VALUES = 1 << 28  # a histogram row spec claiming more values than this is damaged


class CockpitError(ValueError, KeyError, TypeError):
    """A cockpit that cannot be set up, fed or read as asked: a bad model, quantity, configuration or
    loss, a folder that is not a log (or a newer one), an unknown step, layer or array.

    Also a ValueError, KeyError and TypeError, so code that caught those before still does.
    """

    __str__ = Exception.__str__  # the message as written, not quoted as KeyError would


def layer_of(param_name: str) -> str:
    """The module a parameter belongs to: ``"features.0.weight"`` -> ``"features.0"``."""
    return param_name.rsplit(".", 1)[0] if "." in param_name else ROOT_LAYER


def inside(folder: pathlib.Path, name: str, what: str = "log") -> pathlib.Path:
    """``folder / name``, refused (as the store refuses its paths) when it leads out of the folder:
    ``../``, an absolute path, or a symlink to elsewhere."""
    try:
        return _inside(folder, name)
    except StoreError:
        raise CockpitError(f"{name!r} points outside the {what} folder {folder}; a {what} only reads files "
                           "inside its folder") from None


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
        self._frame: pd.DataFrame | None = None  # frame() of the records as they are, until they change
        self.version = 0  # counts the changes of the records (caches of what is read from them compare it)
        self._rows: dict[str, list[np.ndarray]] = {name: [] for name in self.meta.get("arrays", {})}
        self._row_steps: dict[str, list[int]] = {name: [] for name in self._rows}
        self._listeners: list[Callable[[CockpitLog], None]] = []
        self.skipped: dict[str, str] = {}  # quantity -> why it could not be computed
        self.config: dict = dict(self.meta.get("config", {}))  # optimizer, model size; later records add to it
        self._files: AppendedFiles | None = None  # the folder's files, while this log writes them
        self._offset = 0  # bytes of records.jsonl already read or written
        self._line = 0  # lines of records.jsonl already read or written, for warnings and the columns
        self._kinds: dict[str, str] = {}  # key -> the kind of its first value (number, text, list)
        self._series: SeriesWriter | None = None
        self._unreadable: set[str] = set()  # histogram files that could not be opened (warned once)
        self._last_sync = time.monotonic()
        self.writable = self.directory is not None and not _existing
        self.closed = False  # set by close() on a log that wrote its folder
        if self.writable:
            self.directory.mkdir(parents=True, exist_ok=True)
            if (self.directory / META).exists():
                raise CockpitError(f"{self.directory} already holds a cockpit log; log each run "
                                      "into a folder of its own")
            _atomic_write(self.directory / META, json.dumps(self.meta, indent=1))
            self._files = AppendedFiles(self.directory)
            self._series = SeriesWriter(self.directory)

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
            raise CockpitError(f"Unknown layer {layer!r}; layers: {', '.join(self.layers)}")
        return found

    # ------------------------------------------------------------------ writing
    def append(self, step: int, values: Mapping, arrays: Mapping[str, np.ndarray] | None = None) -> None:
        """Add the readings of one step (merged with earlier readings of the same step). A log that wrote a
        folder and was closed refuses more: its readings would stay in memory and never reach the folder."""
        if isinstance(step, bool) or not isinstance(step, int | np.integer) or step < 0:
            raise CockpitError(f"step is the training step, a whole number of 0 or more, not {step!r}")
        if self.closed:
            raise CockpitError(f"the log of {self.directory} is closed; a run continued after close() needs a new "
                               "Cockpit in a folder of its own")
        record = {"step": int(step), **values}
        with self._lock:
            if arrays:
                rows = {}
                for name, value in arrays.items():
                    spec = self.meta.get("arrays", {}).get(name)
                    if spec is None:
                        raise CockpitError(f"{name!r} is not an array of this log; arrays: "
                                              f"{', '.join(self.meta.get('arrays', {})) or 'none'}")
                    arr = np.ascontiguousarray(value, dtype=np.dtype(spec["dtype"]))
                    if list(arr.shape) != list(spec["shape"]):
                        raise CockpitError(f"{name}: rows have shape {spec['shape']}, got {list(arr.shape)}")
                    rows[name] = len(self._rows[name])
                    if self.writable:
                        self._files.write(f"{name}.bin", arr.tobytes())
                    self._rows[name].append(arr)
                    self._row_steps[name].append(int(step))
                record["_rows"] = rows
            if self.writable:
                line = (json.dumps(record) + "\n").encode()
                self._series.append(record["step"], self._scalars(record), record["step"] not in self._records)
                self._files.write(RECORDS, line)
                self._offset += len(line)
                self._line += 1
                if time.monotonic() - self._last_sync >= self.fsync_interval:
                    self.sync()
            self._merge(record)
        self._notify()

    def _scalars(self, record: Mapping) -> dict[str, float]:
        aggregates = {q: spec.get("aggregate") for q, spec in self.meta.get("quantities", {}).items()}
        return scalar_values(record, len(self.param_names), aggregates)

    def sync(self) -> None:
        """Force everything written so far onto the disk (and tell readers of the columns how far it goes)."""
        with self._lock:
            if self._files is not None:
                self._files.sync()
            if self._series is not None:
                self._series.checkpoint(self.directory / RECORDS, self._offset, self._line, self.config)
            self._last_sync = time.monotonic()

    def close(self) -> None:
        with self._lock:
            if self._files is not None:
                self.sync()
                self._files.close()
                self._series.close()
                self.closed = True
            self._files = self._series = None
            self.writable = False

    # ------------------------------------------------------------------ reading
    def _merge(self, record: dict) -> None:
        step = record["step"]
        self._frame = None  # the records changed: the next frame() builds a new one
        self.version += 1
        merged = self._records.setdefault(step, {})
        merged.update({k: v for k, v in record.items() if not k.startswith("_") and k != "step"})
        self.skipped.update(record.get("_skipped", {}))
        self.config.update(record.get("_config", {}))

    def refresh(self) -> bool:
        """Read what another process appended since the last read; True when there was something."""
        if self.directory is None or self.writable:
            return False
        with self._lock:
            path = self.directory / RECORDS
            if not path.exists():
                return False
            inside(self.directory, RECORDS)
            with open(path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
            end = data.rfind(b"\n") + 1  # a torn last line (no newline yet) waits for the next read
            if end == 0:
                return False
            self._offset += end
            damaged = []
            for line in data[:end].split(b"\n")[:-1]:
                self._line += 1
                reason = self._read_line(line)
                if reason:
                    damaged.append(f"line {self._line} ({reason})")
        if len(damaged) == 1:
            number, reason = damaged[0].split(" (", 1)
            warnings.warn(f"{path}, {number}: skipped ({reason}", stacklevel=2)
        elif damaged:
            more = f"; and {len(damaged) - 10} more" if len(damaged) > 10 else ""
            warnings.warn(f"{path}: skipped {len(damaged)} damaged lines: {'; '.join(damaged[:10])}{more}",
                          stacklevel=2)
        self._notify()
        return True

    def _read_line(self, line: bytes) -> str | None:
        """Merge one line of records.jsonl; the reason it (or a value of it) was skipped, or None."""
        record, reason = parse_line(line)
        if record is None:
            return reason
        mixed = self._drop_mixed_kinds(record)
        if mixed and not any(k != "step" for k in record):
            return f"left out {', '.join(mixed)}; nothing else on the line"  # no empty step from a damaged line
        step, rows = record["step"], record.get("_rows", {})
        for name, row in rows.items():
            if name not in self._rows:
                continue  # a histogram meta.json does not describe (it was damaged): its rows cannot be read
            self._load_rows(name, row + 1)
            if row < len(self._rows[name]):
                self._row_steps[name][row] = step
        self._merge(record)
        return f"left out {', '.join(mixed)}" if mixed else None

    def _drop_mixed_kinds(self, record: dict) -> list[str]:
        """Leave out values whose kind differs from their key's first (text in a numeric series)."""
        mixed = []
        for key, value in list(record.items()):
            if key == "step" or key.startswith("_") or value is None:
                continue
            kind = _kind(value)
            if self._kinds.setdefault(key, kind) != kind:
                mixed.append(f"{key!r}: {kind} in a series of {self._kinds[key]}s")
                del record[key]
        return mixed

    def _load_rows(self, name: str, upto: int) -> None:
        have = len(self._rows[name])
        if upto <= have:
            return
        spec = self.meta["arrays"][name]
        dtype = np.dtype(spec["dtype"])
        row_bytes = dtype.itemsize * math.prod(spec["shape"])
        path = self.directory / f"{name}.bin"
        try:
            inside(self.directory, path.name)
            with open(path, "rb") as f:
                held = max(0, os.fstat(f.fileno()).st_size // max(row_bytes, 1) - have)  # rows the file has
                f.seek(have * row_bytes)
                data = f.read(min(upto - have, held) * row_bytes)
            if upto - have > held and name not in self._unreadable:  # a record names rows past the file's end
                self._unreadable.add(name)
                warnings.warn(f"{path} holds {have + held} {name} rows but the records name row {upto - 1}; "
                              "the rows past its end are left out", stacklevel=4)
        except (OSError, CockpitError) as exc:
            if name not in self._unreadable:
                self._unreadable.add(name)
                why = getattr(exc, "strerror", None) or exc
                warnings.warn(f"{path} cannot be read ({why}); the log is read without its {name} rows", stacklevel=4)
            return
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
            if step not in self._records:
                steps = sorted(self._records)
                shown = f"{steps[0]}..{steps[-1]} ({len(steps)} steps)" if steps else "none yet"
                raise CockpitError(f"Step {step!r} is not in this log; steps: {shown}")
            return dict(self._records[step])

    def frame(self) -> pd.DataFrame:
        """One row per step. Per-parameter readings appear as ``<quantity>/<parameter>`` columns and,
        combined over the network (norm or sum, as the quantity defines), as ``<quantity>``.
        Built once per change of the records (live views read it on every send); each call gets a copy."""
        with self._lock:
            if self._frame is None:
                self._frame = self._build_frame(sorted(self._records.items()))
            return self._frame.copy()

    def _build_frame(self, items) -> pd.DataFrame:
        names = self.param_names
        aggregates = {q: spec.get("aggregate") for q, spec in self.meta.get("quantities", {}).items()}
        rows = []
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
            raise CockpitError(f"{name} is not in this log; arrays: {', '.join(self._rows) or 'none'}")
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
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return combine(values, aggregate)
    return math.nan  # a per-parameter list holding something other than numbers


def _kind(value) -> str:
    if isinstance(value, bool):
        return "flag"
    if isinstance(value, int | float):
        return "number"
    return {str: "text", list: "list", dict: "mapping"}.get(type(value), "value")


def parse_line(line: bytes) -> tuple[dict | None, str | None]:
    """One line of records.jsonl as a record, checked: (record, None), or (None, why it is skipped)."""
    try:
        record = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "not valid UTF-8"
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON: {exc.msg}"
    except RecursionError:
        return None, "nested too deeply"
    if not isinstance(record, dict):
        return None, "not a JSON object"
    step = record.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        return None, "no integer 'step'"
    rows = record.get("_rows", {})
    if not isinstance(rows, dict) or not all(isinstance(row, int) and not isinstance(row, bool) and row >= 0
                                             for row in rows.values()):
        return None, "bad '_rows'"
    for key in ("_skipped", "_config"):
        if not isinstance(record.get(key, {}), dict):
            return None, f"bad {key!r} (not a mapping)"
    return record, None


def read_log(path: str | os.PathLike) -> CockpitLog:
    """Open a log folder (it may still be growing: call ``refresh()`` to read new steps)."""
    path = pathlib.Path(path)
    if path.is_file():
        raise CockpitError(f"{path} is a file; a cockpit log (a run record) is the folder that holds {META} and "
                           f"{RECORDS}")
    meta = _read_meta(path)
    log = CockpitLog(meta, path, _existing=True)
    log.refresh()
    return log


def _read_meta(path: pathlib.Path) -> dict:
    """meta.json, checked; a damaged file or field is set aside with a warning (the records still read)."""
    file = path / META
    try:
        if file.exists():
            inside(path, META)
        raw = file.read_bytes()
    except FileNotFoundError:
        raise CockpitError(f"{path} is not a cockpit log (no {META})") from None
    except IsADirectoryError:
        raise CockpitError(f"{path} is not a cockpit log ({META} is a folder)") from None
    meta, problems = None, []
    try:
        meta = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        problems.append("not valid UTF-8")
    except json.JSONDecodeError as exc:
        problems.append(f"not valid JSON: {exc.msg}")
    except RecursionError:
        problems.append("nested too deeply")
    if meta is not None and not isinstance(meta, dict):
        meta, problems = None, ["not a JSON object"]
    if meta is None:
        if not (path / RECORDS).exists():
            raise CockpitError(f"{file} is damaged ({problems[0]}) and there is no {RECORDS}: nothing to read")
        meta = {"format": FORMAT, "version": FORMAT_VERSION}
    elif meta.get("format") != FORMAT:
        raise CockpitError(f"{path} is not a cockpit log (format {meta.get('format')!r} in {file}, "
                              f"expected {FORMAT!r})")
    else:
        meta = dict(meta)
        problems += _check_meta_fields(meta, path)
    if meta["version"] > FORMAT_VERSION:
        raise CockpitError(f"{path} was written by a newer activis (log version {meta['version']}; this "
                              f"activis reads version {FORMAT_VERSION})")
    if problems:
        warnings.warn(f"{file} is damaged ({'; '.join(problems)}); the records are read without what it lost "
                      "(per-parameter names, histograms)", stacklevel=3)
    return meta


def _check_meta_fields(meta: dict, folder: pathlib.Path) -> list[str]:
    """Drop (and name) the fields of meta.json a reader cannot use."""
    problems = []
    version = meta.get("version", FORMAT_VERSION)
    if not isinstance(version, int) or isinstance(version, bool):
        problems.append(f"bad 'version' {version!r}")
        version = FORMAT_VERSION
    meta["version"] = version
    params = meta.get("params", [])
    if not isinstance(params, list) or not all(isinstance(p, dict) and isinstance(p.get("name"), str)
                                               and _is_shape(p.get("shape", [])) for p in params):
        problems.append("bad 'params'")
        meta["params"] = []
    arrays = meta.get("arrays", {})
    if not isinstance(arrays, dict):
        problems.append("bad 'arrays'")
        arrays = {}
    kept = {name: spec for name, spec in arrays.items() if _valid_array_spec(spec) and _confined(folder, name)}
    if len(kept) != len(arrays):
        problems.append(f"bad 'arrays' {sorted(set(arrays) - set(kept))}")
    if "arrays" in meta:
        meta["arrays"] = kept
    if not isinstance(meta.get("quantities", {}), dict) or not all(
            isinstance(spec, dict) for spec in meta.get("quantities", {}).values()):
        problems.append("bad 'quantities'")
        meta["quantities"] = {}
    for key in ("run", "model"):
        if not isinstance(meta.get(key, ""), str):
            problems.append(f"bad {key!r}")
            meta[key] = ""
    if not isinstance(meta.get("config", {}), dict):
        problems.append("bad 'config' (not a mapping)")
        meta["config"] = {}
    return problems


def _is_shape(shape) -> bool:
    return isinstance(shape, list) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                           for n in shape)


def _confined(folder: pathlib.Path, name: str) -> bool:
    """An array whose file would lie outside the folder (``../x``, ``/etc/x``, a symlink out) is damage."""
    try:
        inside(folder, f"{name}.bin")
    except CockpitError:
        return False
    return "/" not in name and "\\" not in name


def _valid_array_spec(spec) -> bool:
    if not isinstance(spec, dict) or not _is_shape(spec.get("shape")) or not spec["shape"]:
        return False
    shape = spec["shape"]
    if not all(n > 0 for n in shape):
        return False
    try:
        dtype = np.dtype(spec.get("dtype"))
    except (TypeError, ValueError):
        return False
    return dtype.kind in "iufb" and math.prod(shape) <= MAX_ROW_VALUES
