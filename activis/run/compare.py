"""Runs side by side (DeepInsight's TensorViewer): several runs' series overlaid, each run's
configuration in a table, and the step where two runs part.

Everything here reads each run's scalar series (`activis.run.scalars`): a folder's columns, not
its JSON lines, so that 50 runs of 100,000 steps open and chart in about a second; a chart reads
only the step range it shows, at most two points per pixel (`activis.run.chart`). The full
``frame`` (every column of every run) is there too, built only when asked for.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from ..paths import folder_path
from .chart import Chart, chart, in_range
from .errors import RunError
from .log import CockpitLog, read_log
from .scalars import FolderScalars, LogScalars, scalars_of
from .volatility import THRESHOLD, changes

# per-step series that are settings, not readings: two runs with different learning rates part where
# their losses do, not at step 0
_SETTINGS = ("batch_size", "lr", "eval/n")


def _source(run) -> tuple[str | None, LogScalars | FolderScalars]:
    """A run's default name and its scalars: a folder, a `Run`, a `CockpitLog` or a `Cockpit`."""
    scalars = getattr(run, "scalars", None)
    if scalars is not None:  # a Run
        return run.name, scalars
    log = getattr(run, "log", run)  # a Cockpit's log
    if isinstance(log, CockpitLog):
        return log.run or str(log.directory), LogScalars(log)
    if not isinstance(run, str | bytes) and not hasattr(run, "__fspath__"):
        raise RunError(f"a run is a folder, a Run, a CockpitLog or a Cockpit, not {type(run).__name__}")
    if not folder_path(run, "run", RunError).is_dir():
        raise RunError(f"{run} is not a cockpit log or run record (no such folder)")
    source = scalars_of(run)
    return source.run or str(run), source


def run_config(run) -> dict:
    """What a run was: model, its size, optimizer and hyperparameters, batch size, steps."""
    source = run if isinstance(run, LogScalars | FolderScalars) else _source(run)[1]
    meta, config = source.meta, source.config
    n_params = config.get("n_parameters")
    if not isinstance(n_params, int | float) or isinstance(n_params, bool):
        n_params = sum(math.prod(p.get("shape", [])) for p in meta.get("params", []))
    optimizer = config.get("optimizer")
    optimizer = optimizer if isinstance(optimizer, dict) else {}
    hyper = optimizer.get("hyperparameters")
    row = {"model": meta.get("model", ""), "parameters": int(n_params), "optimizer": optimizer.get("type", "")}
    row.update(hyper if isinstance(hyper, dict) else {})
    if "batch_size" in source.names:
        counts = source.value_counts("batch_size")
        sizes = (np.repeat(list(counts), list(counts.values())) if counts is not None
                 else source.read("batch_size")[1])
        sizes = sizes[np.isfinite(sizes)]
        row["batch_size"] = int(np.median(sizes)) if len(sizes) else None
    row["steps"] = source.n_steps
    row["quantities"] = ", ".join(meta.get("quantities", {}))
    return row


class RunComparison:
    """Several runs: ``series()`` and `chart` (what the RunsPanel draws), ``configs`` (one row per run),
    `parting`, and ``frame`` (every column of every run, one row per run and step: reads every line)."""

    def __init__(self, runs: Iterable | Mapping):
        if isinstance(runs, (str, bytes, os.PathLike, CockpitLog)) or not isinstance(runs, Iterable) \
                or hasattr(runs, "log"):
            raise RunError("compare takes several runs: a list of folders, Runs, CockpitLogs or Cockpits, or a "
                           f"mapping name -> run, not one {type(runs).__name__} (wrap it: [run])")
        items = runs.items() if isinstance(runs, Mapping) else ((None, r) for r in runs)
        self.sources: dict[str, LogScalars | FolderScalars] = {}
        for name, run in items:
            default, source = _source(run)
            key = str(name) if name is not None else default
            while key in self.sources:  # two runs of the same name stay apart
                key = f"{key}'"
            self.sources[key] = source
        if not self.sources:
            raise RunError("compare at least one run (a run folder, a Run, a CockpitLog or a Cockpit)")
        self._logs: dict[str, CockpitLog] = {}
        self._warned: set[tuple[str, str]] = set()
        self._jumps: dict[tuple[str, str], tuple[int, np.ndarray]] = {}

    @property
    def names(self) -> list[str]:
        return list(self.sources)

    @property
    def logs(self) -> dict[str, CockpitLog]:
        """Each run's whole step log (a folder's JSON lines are parsed on first use)."""
        for name, source in self.sources.items():
            if name not in self._logs:
                self._logs[name] = source.log if isinstance(source, LogScalars) else read_log(source.directory)
        return dict(self._logs)

    @property
    def frame(self) -> pd.DataFrame:
        frames = []
        for name, log in self.logs.items():
            f = log.frame().reset_index()
            f.insert(0, "run", name)
            frames.append(f)
        return pd.concat(frames, ignore_index=True)

    @property
    def configs(self) -> pd.DataFrame:
        return pd.DataFrame({name: run_config(source) for name, source in self.sources.items()}).T.rename_axis("run")

    def config_differences(self) -> pd.DataFrame:
        """The configuration columns in which the runs differ."""
        table = self.configs
        differ = [c for c in table.columns if table[c].astype(str).nunique() > 1]
        return table[differ]

    def refresh(self) -> bool:
        """Read what other processes appended to the runs' folders since; True when any run grew.
        Runs training in this process need none: their logs tell `CockpitLog.subscribe` listeners."""
        grew = [source.refresh() for source in self.sources.values()]
        for log in self._logs.values():
            log.refresh()
        return any(grew)

    def series(self) -> list[str]:
        """Numeric per-step series shared by every run (network-wide instruments and metrics); a run
        that has logged nothing yet (still starting) does not narrow them. A series some runs log and
        others do not is left out with a warning naming it and the runs without it (once)."""
        logged = {name: source.names for name, source in self.sources.items() if source.n_steps}
        common = None
        for names in logged.values():
            common = list(names) if common is None else [c for c in common if c in names]
        common = common or []
        for series in dict.fromkeys(n for names in logged.values() for n in names if n not in common):
            lacking = [run for run, names in logged.items() if series not in names]
            if (series, ",".join(lacking)) not in self._warned:
                self._warned.add((series, ",".join(lacking)))
                warnings.warn(f"series {series!r} is left out of the comparison: run(s) {lacking} have no numbers "
                              "for it", stacklevel=2)
        return common

    def _check(self, runs: Iterable[str]) -> None:
        for name in runs:
            if not isinstance(name, str) or name not in self.sources:
                raise RunError(f"unknown run {name!r}; runs: {', '.join(self.sources)}")

    @staticmethod
    def _tolerances(rtol, atol) -> None:
        for name, value in (("rtol", rtol), ("atol", atol)):
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not value >= 0 \
                    or not np.isfinite(value):
                raise RunError(f"{name} is a tolerance, a number 0 or more, not {value!r}")

    def parting(self, a: str, b: str, metrics=None, *, rtol: float = 1e-6, atol: float = 1e-9) -> int | None:
        """The first step both runs reached where any shared reading (settings such as the learning rate
        left out) differs by more than the tolerance (None: they never part over their common steps)."""
        self._tolerances(rtol, atol)
        metrics = [metrics] if isinstance(metrics, str) else metrics
        return self._parting(a, b, metrics, self.series() if metrics is None else None, rtol, atol)

    def _parting(self, a: str, b: str, metrics, shared: list[str] | None, rtol: float, atol: float) -> int | None:
        self._check((a, b))
        sa, sb = self.sources[a], self.sources[b]
        if metrics is None:  # a run that has logged nothing yet parts from no one
            names = [c for c in shared if c not in _SETTINGS and c in sa.names and c in sb.names]
        else:
            names = list(metrics)
            for name in names:
                for source, run in ((sa, a), (sb, b)):
                    if name not in source.names:
                        raise RunError(f"run {run!r} has no series {name!r}; its series: {', '.join(source.names)}")
        parted, first = None, None
        for name in names:
            (ta, va), (tb, vb) = sa.read(name), sb.read(name)
            if len(ta) and len(tb):
                start = max(ta[0], tb[0])
                first = start if first is None else min(first, start)
            step = _first_difference((ta, va), (tb, vb), rtol, atol, parted)
            if step is not None:
                parted = step
                if parted == first:  # the runs' first common step: no series can part earlier
                    break
        return parted

    def partings(self, metrics=None, *, rtol: float = 1e-6, atol: float = 1e-9) -> dict[tuple[str, str], int | None]:
        """`parting` of every pair of runs. Runs that logged the same steps are compared all pairs at
        once, window by window from their first step, so 50 runs cost about what two do."""
        self._tolerances(rtol, atol)
        metrics = [metrics] if isinstance(metrics, str) else metrics
        names, shared = self.names, self.series() if metrics is None else None
        pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
        found = self._partings_together(list(metrics) if metrics is not None else
                                        [c for c in shared if c not in _SETTINGS], rtol, atol)
        return {(a, b): found[(a, b)] if (a, b) in found else self._parting(a, b, metrics, shared, rtol, atol)
                for a, b in pairs}

    def _partings_together(self, series: list[str], rtol: float, atol: float) -> dict:
        """The partings of the pairs whose runs logged every one of ``series`` at the same steps, as far
        as they did (the other pairs are left to `_parting`)."""
        runs = [name for name, source in self.sources.items()
                if source.n_steps and all(s in source.names for s in series)]
        if len(runs) < 2 or not series:
            return {}
        columns = {(r, s): self.sources[r].read(s) for r in runs for s in series}
        ends = [span for r in runs for s in series for span in [self.sources[r].span(s)] if span is not None]
        if not ends:
            return {}
        lo, end = min(e[0] for e in ends), max(e[1] for e in ends) + 1
        n = len(runs)
        parted = np.full((n, n), -1, np.int64)  # -1: not parted (yet)
        span = 64
        while lo < end and (parted[np.triu_indices(n, 1)] < 0).any():
            hi = min(end, lo + span)
            first = np.full((n, n), np.iinfo(np.int64).max)
            for s in series:
                parts = [in_range(*columns[(r, s)], lo, hi - 1) for r in runs]
                steps = parts[0][0]
                if not all(len(p[0]) == len(steps) and np.array_equal(p[0], steps) for p in parts):
                    return {}  # different steps: each pair on its own
                if not len(steps):
                    continue
                values = np.stack([np.asarray(p[1], np.float64) for p in parts])  # runs x steps
                x, y = values[:, None, :], values[None, :, :]
                finite_x, finite_y = np.isfinite(x), np.isfinite(y)
                with np.errstate(invalid="ignore"):
                    apart = (np.abs(x - y) > atol + rtol * np.abs(y)) & finite_x & finite_y
                apart |= finite_x != finite_y
                at = np.where(apart.any(axis=2), steps[np.argmax(apart, axis=2)], np.iinfo(np.int64).max)
                first = np.minimum(first, at)
            newly = (parted < 0) & (first < np.iinfo(np.int64).max)
            parted[newly] = first[newly]
            lo, span = hi, span * 8
        return {(runs[i], runs[j]): (int(parted[i, j]) if parted[i, j] >= 0 else None)
                for i in range(n) for j in range(i + 1, n)}

    def step_span(self, series: Iterable[str]) -> tuple[int, int]:
        """The first and last step any run logged of these series ((0, 0) when none)."""
        spans = [source.span(name) for source in self.sources.values() for name in series if name in source.names]
        spans = [span for span in spans if span is not None]
        return (int(min(s[0] for s in spans)), int(max(s[1] for s in spans))) if spans else (0, 0)

    def chart(self, series: Iterable[str], start: int | None = None, stop: int | None = None,
              width: int = 800) -> Chart:
        """The runs' ``series`` over steps start..stop (all: None) for a chart ``width`` pixels wide:
        the exact points, or each pixel's min and max where there are more points than pixels."""
        series = self._known_series(series)
        if isinstance(width, bool) or not isinstance(width, int | np.integer) or width < 1:
            raise RunError(f"width is the chart's width in pixels, a whole number of 1 or more, not {width!r}")
        first, last = self.step_span(series)
        start = first if start is None else _step(start, "start")
        stop = last if stop is None else _step(stop, "stop")
        if start > stop:
            raise RunError(f"start={start} is after stop={stop}: the chart covers steps start..stop, start <= stop")
        empty = (np.zeros(0, np.int64), np.zeros(0))
        return chart([[source.read(name) if name in source.names else empty for name in series]
                      for source in self.sources.values()], start, stop, int(width))

    def _known_series(self, series) -> list[str]:
        """``series`` as a list, each logged by at least one run (runs that logged nothing yet know none)."""
        if isinstance(series, str):
            raise RunError(f"series is a list of series names, e.g. [{series!r}], not the text {series!r}")
        series = list(series)
        logged = [name for source in self.sources.values() for name in source.names]
        unknown = [name for name in series if name not in logged]
        if unknown and logged:
            raise RunError(f"no run logged the series {', '.join(map(repr, unknown))}; the series: "
                           f"{', '.join(dict.fromkeys(logged))}")
        return series

    def means(self, series: Iterable[str], start: float = -np.inf, stop: float = np.inf) -> np.ndarray:
        """Each run's mean of each series over steps start..stop (runs x series; NaN: no points there)."""
        series = self._known_series(series)
        means = np.full((len(self.sources), len(series)), np.nan)
        for r, source in enumerate(self.sources.values()):
            for k, name in enumerate(series):
                if name in source.names:
                    steps, values = source.read(name)
                    lo, hi = np.searchsorted(steps, start, "left"), np.searchsorted(steps, stop, "right")
                    inside = values[lo:hi]
                    inside = inside[~np.isnan(inside)]
                    means[r, k] = inside.mean() if len(inside) else np.nan
        return means

    def jumps(self, run: str, series: str, *, window: int = 12, threshold: float = THRESHOLD) -> np.ndarray:
        """The steps where ``series`` of ``run`` jumps (`activis.run.volatility`), over all its steps."""
        self._check([run])
        source = self.sources[run]
        steps, values = source.read(series)
        cached = self._jumps.get((run, series))
        if cached is not None and cached[0] == len(steps):
            return cached[1]
        keep = ~np.isnan(values)
        interval = [pd.Series(*source.read(f"{series}_{end}")[::-1]) if f"{series}_{end}" in source.names
                    else None for end in ("low", "high")]
        table = changes(pd.Series(values[keep], index=steps[keep]), window=window, threshold=threshold,
                        low=interval[0], high=interval[1])
        found = table.loc[table["jump"], "step"].to_numpy(np.int64)
        self._jumps[(run, series)] = (len(steps), found)
        return found


def _step(value, what: str) -> int:
    """A chart bound: a whole step number (a float such as 5.0 is one; NaN, text and booleans are not)."""
    whole = isinstance(value, int | np.integer) or (isinstance(value, float | np.floating)
                                                     and float(value).is_integer())
    if isinstance(value, bool) or not whole:
        raise RunError(f"{what} is a step, a whole number, not {value!r}")
    return int(value)


def _first_difference(a, b, rtol: float, atol: float, before: int | None) -> int | None:
    """The first common step (below ``before``) where two ascending series differ; read in growing
    windows, so runs that part early cost only their first points."""
    (ta, va), (tb, vb) = a, b
    if not len(ta) or not len(tb):
        return None
    lo, end = max(ta[0], tb[0]), min(ta[-1], tb[-1]) + 1
    if before is not None:
        end = min(end, before)
    span = 64
    while lo < end:
        hi = min(end, lo + span)
        sa, xa = in_range(ta, va, lo, hi - 1)
        sb, xb = in_range(tb, vb, lo, hi - 1)
        if len(sa) == len(sb) and np.array_equal(sa, sb):  # the common case: both logged the same steps
            common, x, y = sa, np.asarray(xa, np.float64), np.asarray(xb, np.float64)
        else:
            common, ia, ib = np.intersect1d(sa, sb, assume_unique=True, return_indices=True)
            x, y = np.asarray(xa[ia], np.float64), np.asarray(xb[ib], np.float64)
        with np.errstate(invalid="ignore"):  # as np.isclose, without its overhead per call
            apart = np.abs(x - y) > atol + rtol * np.abs(y)
        finite_x, finite_y = np.isfinite(x), np.isfinite(y)
        apart = (apart & finite_x & finite_y) | (finite_x != finite_y)
        if apart.any():
            return int(common[np.argmax(apart)])
        lo, span = hi, span * 8
    return None


def compare(runs: Iterable | Mapping) -> RunComparison:
    """Runs side by side: folders, `Run`s, `CockpitLog`s or `Cockpit`s, as a list or a mapping name -> run."""
    return RunComparison(runs)


def load_runs(runs: Iterable | Mapping) -> pd.DataFrame:
    """Several runs' whole step logs in one frame with a ``run`` column: ``compare(runs).frame``."""
    return compare(runs).frame
