"""A run's network-wide scalar series, read the cheapest way there is: from a log in memory, or from a
folder's columns plus the few JSON lines past them, or (no columns, or damaged ones) from the lines.

Each source answers the same small API the comparison of runs and the RunsPanel use: ``names``,
``read(name)`` -> (steps, values) ascending, ``n_steps``, ``config``, ``subscribe``, ``refresh``,
``directory`` and ``writable`` (so a live view can follow it as it follows a log).
"""

from __future__ import annotations

import pathlib
import threading
import warnings
from collections.abc import Callable

import numpy as np

from .log import RECORDS, CockpitLog, _read_meta, inside, parse_line, read_log
from .series import SeriesIndex, read_index, scalar_values, sorted_unique


def _per_parameter(column: str, param_names: list[str]) -> bool:
    return "/" in column and column.split("/", 1)[1] in param_names


class LogScalars:
    """The scalars of a log already in memory (a cockpit training here, or a folder without columns)."""

    def __init__(self, log: CockpitLog):
        self.log = log
        self._cache: tuple[int, dict] | None = None

    def _columns(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        if self._cache is None or self._cache[0] != self.log.version:
            changes = self.log.version
            frame = self.log.frame()
            names = self.log.param_names
            columns = {}
            for column in frame.columns:
                if frame[column].dtype.kind in "fiu" and not _per_parameter(column, names):
                    values = frame[column].dropna()
                    columns[column] = (values.index.to_numpy(np.int64), values.to_numpy(np.float64))
            self._cache = (changes, columns)
        return self._cache[1]

    @property
    def names(self) -> dict:
        """The series' names (ordered; ``name in names`` is cheap)."""
        return self._columns()

    def read(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        return self._columns()[name]

    @property
    def n_steps(self) -> int:
        return len(self.log.steps)

    def span(self, name: str) -> tuple[int, int] | None:
        steps = self.read(name)[0]
        return (int(steps[0]), int(steps[-1])) if len(steps) else None

    def value_counts(self, name: str) -> None:
        return None  # in memory, the values themselves are at hand

    @property
    def meta(self) -> dict:
        return self.log.meta

    @property
    def config(self) -> dict:
        return {**self.log.meta.get("config", {}), **self.log.config}

    @property
    def run(self) -> str:
        return self.log.run

    @property
    def directory(self):
        return self.log.directory

    @property
    def writable(self) -> bool:
        return self.log.writable

    def subscribe(self, callback: Callable) -> Callable[[], None]:
        return self.log.subscribe(lambda _log: callback(self))

    def refresh(self) -> bool:
        return self.log.refresh()


class FolderScalars:
    """A log folder's scalars from its columns (`activis.run.series`) and the JSON lines past them."""

    writable = False

    def __init__(self, directory: pathlib.Path, meta: dict, index: SeriesIndex):
        self.directory = directory
        self.meta = meta
        self._index = index
        self._lock = threading.RLock()
        self._offset, self._line = index.records_bytes, index.records_lines
        self._tail: dict[str, list[tuple[int, float]]] = {}  # series -> (step, value) past the columns
        self._tail_steps: set[int] = set()
        self._tail_config: dict = {}
        self._listeners: list[Callable] = []
        self._read: dict[str, tuple[int, tuple[np.ndarray, np.ndarray]]] = {}
        self._names: dict[str, None] | None = None
        self.refresh()

    @property
    def run(self) -> str:
        return self.meta.get("run", "")

    @property
    def names(self) -> dict[str, None]:
        """The series' names (a dict used as an ordered set: ``name in names`` is cheap)."""
        with self._lock:
            if self._names is None:
                self._names = dict.fromkeys([*self._index.rows, *self._tail])
            return self._names

    @property
    def config(self) -> dict:
        return {**self.meta.get("config", {}), **self._index.config, **self._tail_config}

    @property
    def n_steps(self) -> int:
        with self._lock:
            if not self._tail_steps:
                return self._index.n_steps
            return self._index.n_steps + int((~np.isin(sorted(self._tail_steps), self._index.steps())).sum())

    def read(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) ascending, each step once; the columns' rows are checked as they are read."""
        with self._lock:
            tail = self._tail.get(name, [])
            cached = self._read.get(name)
            if cached is not None and cached[0] == len(tail):
                return cached[1]
            if name in self._index.rows:
                column = self._index.column(name)
                steps, values = column["step"], column["value"]
            else:
                steps, values = np.zeros(0, np.int64), np.zeros(0)
            if tail:
                more = np.array(tail, dtype=[("step", "<i8"), ("value", "<f8")])
                steps, values = np.concatenate([steps, more["step"]]), np.concatenate([values, more["value"]])
            if tail or not self._index.ordered.get(name, False):
                result = sorted_unique(steps, values)
            else:  # written in ascending steps, as the index says: the charts check what they read
                result = (steps, values)
            self._read[name] = (len(tail), result)
            return result

    def span(self, name: str) -> tuple[int, int] | None:
        """The first and last step of a series (None: no points), without reading its column."""
        with self._lock:
            ends = [self._index.span[name]] if self._index.rows.get(name) else []
            ends += [(min(t for t, _ in self._tail[name]), max(t for t, _ in self._tail[name]))] \
                if self._tail.get(name) else []
            return (min(e[0] for e in ends), max(e[1] for e in ends)) if ends else None

    def value_counts(self, name: str) -> dict[float, int] | None:
        """How often each value was logged, for a series of few distinct values (else None)."""
        with self._lock:
            counts = dict(self._index.counts.get(name) or {}) if self._index.rows.get(name) else {}
            if self._index.rows.get(name) and self._index.counts.get(name) is None:
                return None
            for _, value in self._tail.get(name, []):
                counts[value] = counts.get(value, 0) + 1
            return counts

    def subscribe(self, callback: Callable) -> Callable[[], None]:
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback) if callback in self._listeners else None

    def refresh(self) -> bool:
        """Parse the lines written past what was read (the columns, then earlier refreshes)."""
        path = self.directory / RECORDS
        with self._lock:
            if not path.exists():
                return False
            with open(inside(self.directory, RECORDS), "rb") as f:
                f.seek(self._offset)
                data = f.read()
            end = data.rfind(b"\n") + 1
            if end == 0:
                return False
            self._offset += end
            damaged = []
            aggregates = {q: spec.get("aggregate") for q, spec in self.meta.get("quantities", {}).items()}
            n_params = len(self.meta.get("params", []))
            for line in data[:end].split(b"\n")[:-1]:
                self._line += 1
                record, reason = parse_line(line)
                if record is None:
                    damaged.append(f"line {self._line} ({reason})")
                    continue
                self._tail_steps.add(record["step"])
                self._tail_config.update(record.get("_config", {}))
                scalars = scalar_values(record, n_params, aggregates)
                mixed = [key for key, value in record.items() if key in self.names and key not in scalars
                         and value is not None]
                if mixed:  # text where a series of numbers was: left out, and said
                    damaged.append(f"line {self._line} (left out {', '.join(map(repr, mixed))}: not numbers in a "
                                   "series of numbers)")
                for key, value in scalars.items():
                    self._tail.setdefault(key, []).append((record["step"], value))
            self._names = None
        if damaged:
            warnings.warn(f"{path}: skipped {len(damaged)} damaged line(s): {'; '.join(damaged[:10])}", stacklevel=2)
        for callback in list(self._listeners):
            callback(self)
        return True


def scalars_of(source) -> LogScalars | FolderScalars:
    """The scalars of a log in memory, or of a folder: its columns when they check out, else its lines."""
    if isinstance(source, CockpitLog):
        return LogScalars(source)
    directory = pathlib.Path(source)
    meta = _read_meta(directory)
    index = read_index(directory, directory / RECORDS)
    if index is None:
        return LogScalars(read_log(directory))
    return FolderScalars(directory, meta, index)
