"""The step log's scalar series as columns: what a chart of many long runs reads instead of the JSON lines.

Parsing 100,000 JSON lines per run is too slow to compare 50 runs; reading one quantity's
numbers should cost that quantity's bytes. So the log writes, beside ``records.jsonl``::

    series/<name>.f8     one file per network-wide scalar (a number, or a per-parameter list
                         combined as the log's frame combines it): (step int64, value float64)
                         pairs, appended as the records are
    series/steps.i8      every distinct step, in the order first written
    series/index.json    written atomically at every sync and at close: how many bytes and lines
                         of records.jsonl the files cover, the rows of each file, and the checksum
                         of the covered bytes' last 4 KiB

The JSON lines stay the source of truth. A reader trusts the files only up to the rows the index
names, parses the (short) rest of records.jsonl past the bytes it covers, and falls back to the
JSON lines with a warning when the index is damaged, foreign, or does not match them. Nothing here
imports more than numpy.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import pathlib
import urllib.parse
import warnings
import zlib
from collections.abc import Mapping

import numpy as np

from ..store.errors import StoreError
from ..store.manifest import _inside

SERIES = "series"
INDEX = "index.json"
STEPS = "steps.i8"
FORMAT = "activis.series"
FORMAT_VERSION = 1
ROW = np.dtype([("step", "<i8"), ("value", "<f8")])
MAX_COUNTED = 16  # a series with at most this many distinct values (a batch size, a schedule) has them counted
_CHECKED_BYTES = 4096  # the covered end of records.jsonl the index's checksum guards


def scalar_values(record: Mapping, n_params: int, aggregates: Mapping) -> dict[str, float]:
    """The network-wide numbers of one record: plain numbers, and per-parameter lists combined."""
    found = {}
    for key, value in record.items():
        if key == "step" or key.startswith("_"):
            continue
        if isinstance(value, int | float) and not isinstance(value, bool):
            found[key] = float(value)
        elif (isinstance(value, list) and n_params and len(value) == n_params
              and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)):
            found[key] = combine(value, aggregates.get(key))
    return found


def combine(values: list, aggregate: str | None) -> float:
    """A per-parameter reading over the whole network: its norm or its sum, as the quantity says."""
    if aggregate == "norm":
        return math.sqrt(sum(v * v for v in values))
    return float(sum(values))


def file_name(series: str) -> str:
    """A series name as a file name: any character but letters, digits and ``_.-`` percent-encoded."""
    return urllib.parse.quote(series, safe="") + ".f8"


class AppendedFiles:
    """Files of one folder opened once for appending; with ``flush_each`` every write is flushed at once
    (a killed process loses nothing it wrote), else at `sync`, which forces them onto the disk."""

    def __init__(self, directory: pathlib.Path, *, flush_each: bool = True):
        self.directory = directory
        self.flush_each = flush_each
        self._files: dict[str, object] = {}

    def write(self, name: str, data: bytes) -> None:
        f = self._files.get(name)
        if f is None:
            f = self._files[name] = open(self.directory / name, "ab")
        f.write(data)
        if self.flush_each:
            f.flush()

    def sync(self) -> None:
        for f in self._files.values():
            f.flush()
            os.fsync(f.fileno())

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files = {}


class SeriesWriter:
    """Appends a log's scalars to its columns; `checkpoint` makes what was written visible to readers."""

    def __init__(self, directory: pathlib.Path):
        self.directory = directory / SERIES
        self.directory.mkdir(exist_ok=True)
        # buffered: readers trust only the rows an index names, and the index follows a sync
        self._files = AppendedFiles(self.directory, flush_each=False)
        self._rows: dict[str, int] = {}
        self._first: dict[str, int] = {}
        self._last: dict[str, int] = {}
        self._counts: dict[str, dict | None] = {}  # value -> rows, while a series has few distinct values
        self._ordered: dict[str, bool] = {}  # every step written after the one before it
        self._steps = 0

    def append(self, step: int, values: Mapping[str, float], new_step: bool) -> None:
        for name, value in values.items():
            self._files.write(file_name(name), np.array([(step, value)], ROW).tobytes())
            self._rows[name] = self._rows.get(name, 0) + 1
            self._ordered[name] = self._ordered.get(name, True) and step > self._last.get(name, step - 1)
            self._first[name] = min(step, self._first.get(name, step))
            self._last[name] = max(step, self._last.get(name, step))
            counts = self._counts.setdefault(name, {})
            if counts is not None:
                counts[value] = counts.get(value, 0) + 1
                if len(counts) > MAX_COUNTED:
                    self._counts[name] = None
        if new_step:
            self._files.write(STEPS, np.int64(step).tobytes())
            self._steps += 1

    def checkpoint(self, records: pathlib.Path, records_bytes: int, records_lines: int, config: dict) -> None:
        """Force the columns onto the disk, then say (atomically) how much of the records they cover."""
        self._files.sync()
        index = {"format": FORMAT, "version": FORMAT_VERSION, "records_bytes": records_bytes,
                 "records_lines": records_lines, "records_crc": _tail_crc(records, records_bytes),
                 "steps": self._steps, "config": config,
                 "series": {name: {"file": file_name(name), "rows": rows, "ordered": self._ordered[name],
                                   "first": self._first[name], "last": self._last[name],
                                   "counts": None if self._counts[name] is None else list(self._counts[name].items())}
                            for name, rows in self._rows.items()}}
        tmp = self.directory / (INDEX + ".tmp")
        with open(tmp, "w") as f:
            f.write(json.dumps(index))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.directory / INDEX)

    def close(self) -> None:
        self._files.close()


def _tail_crc(records: pathlib.Path, covered: int) -> int:
    if covered == 0:
        return 0
    with open(records, "rb") as f:
        f.seek(max(0, covered - _CHECKED_BYTES))
        return zlib.crc32(f.read(min(covered, _CHECKED_BYTES)))


class SeriesIndex:
    """The columns of a log folder as far as its index vouches for them (see the module's docstring)."""

    def __init__(self, directory: pathlib.Path, index: dict, files: dict[str, pathlib.Path]):
        self.directory = directory
        self.records_bytes = index["records_bytes"]
        self.records_lines = index["records_lines"]
        self.config = index["config"]
        self.n_steps = index["steps"]
        self.rows = {name: spec["rows"] for name, spec in index["series"].items()}
        self.ordered = {name: spec["ordered"] for name, spec in index["series"].items()}
        self.span = {name: (spec["first"], spec["last"]) for name, spec in index["series"].items()}
        self.counts = {name: None if spec["counts"] is None else dict(spec["counts"])
                       for name, spec in index["series"].items()}
        self._files = files
        self._maps: dict[str, np.ndarray] = {}

    def column(self, name: str) -> np.ndarray:
        """The (step, value) rows of one series, memory-mapped, as many as the index vouches for."""
        if name not in self._maps:
            rows = self.rows[name]
            if rows:
                with open(self._files[name], "rb") as f:
                    mapped = mmap.mmap(f.fileno(), rows * ROW.itemsize, access=mmap.ACCESS_READ)
                self._maps[name] = np.frombuffer(mapped, ROW, count=rows)
            else:
                self._maps[name] = np.zeros(0, ROW)
        return self._maps[name]

    def steps(self) -> np.ndarray:
        path = self.directory / SERIES / STEPS
        return np.fromfile(path, "<i8", count=self.n_steps) if self.n_steps else np.zeros(0, np.int64)


def read_index(directory: pathlib.Path, records: pathlib.Path) -> SeriesIndex | None:
    """The folder's columns, checked against its records; None (with a warning naming the file and the
    problem) when there are none, or they are damaged or do not match records.jsonl."""
    path = directory / SERIES / INDEX
    if not path.exists():
        return None
    try:
        index = _checked_index(directory, path, records)
    except (OSError, StoreError, ValueError) as exc:
        warnings.warn(f"{path}: {exc}; the step log's JSON lines are read instead", stacklevel=3)
        return None
    return index


def _checked_index(directory: pathlib.Path, path: pathlib.Path, records: pathlib.Path) -> SeriesIndex:
    _inside(directory, f"{SERIES}/{INDEX}")  # the folder and its index lead nowhere outside
    try:
        index = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"not valid JSON ({exc.__class__.__name__})") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise ValueError(f"not an activis series index (format {_field(index, 'format')!r})")
    if index.get("version") != FORMAT_VERSION:
        raise ValueError(f"version {index.get('version')!r}, this activis reads {FORMAT_VERSION}")
    for key in ("records_bytes", "records_lines", "records_crc", "steps"):
        if not _count(index.get(key)):
            raise ValueError(f"bad {key!r}: {index.get(key)!r}")
    if not isinstance(index.get("config"), dict) or not isinstance(index.get("series"), dict):
        raise ValueError("bad 'config' or 'series'")
    size = records.stat().st_size if records.exists() else 0
    if size < index["records_bytes"] or _tail_crc(records, index["records_bytes"]) != index["records_crc"]:
        raise ValueError(f"it does not match {records.name} (rewritten or truncated since)")
    files = {}
    for name, spec in index["series"].items():
        if not (isinstance(spec, dict) and _count(spec.get("rows")) and isinstance(spec.get("ordered"), bool)
                and spec.get("file") == file_name(name) and _whole(spec.get("first")) and _whole(spec.get("last"))
                and _counted(spec.get("counts"))):
            raise ValueError(f"bad entry for series {name!r}")
        files[name] = _confined(directory, spec["file"])
        if files[name].stat().st_size < spec["rows"] * ROW.itemsize:
            raise ValueError(f"{spec['file']} holds fewer rows than the {spec['rows']} it names")
    if index["steps"] and _confined(directory, STEPS).stat().st_size < 8 * index["steps"]:
        raise ValueError(f"{STEPS} holds fewer steps than the {index['steps']} it names")
    return SeriesIndex(directory, index, files)


def _confined(directory: pathlib.Path, name: str) -> pathlib.Path:
    """A file of the columns' folder (checked once to lie inside the log folder); a symlink is followed
    only where it stays inside. Names are percent-encoded, so they hold no ``/``."""
    path = directory / SERIES / name
    return _inside(directory, f"{SERIES}/{name}") if path.is_symlink() or "/" in name else path


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _counted(counts) -> bool:
    """None, or [[value, rows], ...] with numbers for values and whole numbers for rows."""
    return counts is None or (isinstance(counts, list) and all(
        isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], int | float)
        and not isinstance(pair[0], bool) and _count(pair[1]) for pair in counts))


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _field(mapping, key):
    return mapping.get(key) if isinstance(mapping, dict) else type(mapping).__name__


def sorted_unique(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Steps ascending, each once (the value written last wins, as the log merges a step's lines)."""
    if len(steps) < 2 or bool(np.all(steps[1:] > steps[:-1])):
        return np.asarray(steps), np.asarray(values)
    order = np.argsort(steps, kind="stable")
    steps, values = np.asarray(steps)[order], np.asarray(values)[order]
    last = np.append(steps[1:] != steps[:-1], True)
    return steps[last], values[last]

