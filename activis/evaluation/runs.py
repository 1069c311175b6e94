"""Runs side by side (DeepInsight's TensorViewer): several cockpit logs overlaid, each run's
configuration in a table, and the step where two runs part."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from ..cockpit.log import CockpitLog, read_log
from .inputs import EvaluationError

# per-step series that are settings, not readings: two runs with different learning rates part where
# their losses do, not at step 0
_SETTINGS = ("batch_size", "lr", "eval/n")


def _logs(runs) -> dict[str, CockpitLog]:
    if isinstance(runs, (str, bytes)) or not isinstance(runs, Iterable) or hasattr(runs, "log") \
            or isinstance(runs, CockpitLog):
        raise EvaluationError("compare_runs takes several runs: a list of folders, CockpitLogs or Cockpits, or a "
                              f"mapping name -> run, not one {type(runs).__name__} (wrap it: [run])")
    items = runs.items() if isinstance(runs, Mapping) else ((None, r) for r in runs)
    logs: dict[str, CockpitLog] = {}
    for name, run in items:
        run = getattr(run, "log", run)
        log = run if isinstance(run, CockpitLog) else read_log(run)
        key = name if name is not None else (log.run or str(log.directory))
        while key in logs:  # two runs of the same name stay apart
            key = f"{key}'"
        logs[key] = log
    if not logs:
        raise EvaluationError("compare at least one run")
    return logs


def run_config(log) -> dict:
    """What a run was: model, its size, optimizer and hyperparameters, batch size, steps."""
    log = getattr(log, "log", log)
    meta = log.meta
    config = {**meta.get("config", {}), **getattr(log, "config", {})}
    frame = log.frame()
    n_params = config.get("n_parameters")
    if n_params is None:
        n_params = sum(math.prod(p["shape"]) for p in meta.get("params", []))
    optimizer = config.get("optimizer") or {}
    row = {"model": meta.get("model", ""), "parameters": int(n_params), "optimizer": optimizer.get("type", "")}
    row.update({k: v for k, v in optimizer.get("hyperparameters", {}).items()})
    if "batch_size" in frame:
        sizes = frame["batch_size"].dropna()
        row["batch_size"] = int(sizes.median()) if len(sizes) else None
    row["steps"] = len(frame)
    row["quantities"] = ", ".join(meta.get("quantities", {}))
    return row


class RunComparison:
    """Several runs: ``frame`` (one row per run and step), ``configs`` (one row per run) and `parting`."""

    def __init__(self, runs: Iterable | Mapping):
        self.logs = _logs(runs)

    @property
    def names(self) -> list[str]:
        return list(self.logs)

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
        return pd.DataFrame({name: run_config(log) for name, log in self.logs.items()}).T.rename_axis("run")

    def config_differences(self) -> pd.DataFrame:
        """The configuration columns in which the runs differ."""
        table = self.configs
        differ = [c for c in table.columns if table[c].astype(str).nunique() > 1]
        return table[differ]

    def refresh(self) -> bool:
        """Read what other processes appended to the runs' folders since; True when any run grew.
        Runs training in this process need none: their logs tell `CockpitLog.subscribe` listeners."""
        grew = [log.refresh() for log in self.logs.values()]
        return any(grew)

    def series(self) -> list[str]:
        """Numeric per-step series shared by every run (network-wide instruments and metrics); a run
        that has logged nothing yet (still starting) does not narrow them."""
        common = None
        for log in self.logs.values():
            f = log.frame()
            if not len(f):
                continue
            names = [c for c in f.columns if f[c].dtype.kind in "fiu" and not _per_parameter(c, log)]
            common = names if common is None else [c for c in common if c in names]
        return common or []

    def parting(self, a: str, b: str, metrics=None, *, rtol: float = 1e-6, atol: float = 1e-9) -> int | None:
        """The first step both runs reached where any shared reading (settings such as the learning rate
        left out) differs by more than the tolerance (None: they never part over their common steps)."""
        for name in (a, b):
            if not isinstance(name, str) or name not in self.logs:
                raise EvaluationError(f"unknown run {name!r}; runs: {', '.join(self.logs)}")
        for name, value in (("rtol", rtol), ("atol", atol)):
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not value >= 0 \
                    or not np.isfinite(value):
                raise EvaluationError(f"{name} is a tolerance, a number 0 or more, not {value!r}")
        fa, fb = self.logs[a].frame(), self.logs[b].frame()
        metrics = [metrics] if isinstance(metrics, str) else metrics
        names = list(metrics) if metrics is not None else [c for c in self.series() if c not in _SETTINGS]
        steps = fa.index.intersection(fb.index)
        if not len(steps) or not names:
            return None
        numeric = [c for c in fa.columns if c in fb.columns and fa[c].dtype.kind in "fiub"
                   and fb[c].dtype.kind in "fiub"]
        unknown = [m for m in names if m not in numeric]
        if unknown:
            raise EvaluationError(f"metrics {', '.join(map(repr, unknown))} are not numeric series both runs "
                                  f"log; shared: {', '.join(map(str, numeric)) or 'none'}")
        x = fa.loc[steps, names].to_numpy(np.float64)
        y = fb.loc[steps, names].to_numpy(np.float64)
        both = np.isfinite(x) & np.isfinite(y)
        apart = (both & ~np.isclose(x, y, rtol=rtol, atol=atol)) | (np.isfinite(x) != np.isfinite(y))
        rows = np.flatnonzero(apart.any(axis=1))
        if rows.size:
            return int(steps[rows[0]])
        return None

    def partings(self, metrics=None) -> dict[tuple[str, str], int | None]:
        names = self.names
        return {(a, b): self.parting(a, b, metrics) for i, a in enumerate(names) for b in names[i + 1:]}


def _per_parameter(column: str, log: CockpitLog) -> bool:
    return "/" in column and column.split("/", 1)[1] in log.param_names


def compare_runs(runs: Iterable | Mapping) -> RunComparison:
    """Runs side by side: folders, `CockpitLog`s or `Cockpit`s, as a list or a mapping name -> run."""
    return RunComparison(runs)
