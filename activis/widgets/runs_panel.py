"""RunsPanel: several training runs side by side (DeepInsight's TensorViewer).

A thin view over `activis.evaluation.compare_runs`: every instrument and evaluation metric the runs
share, one chart each with one line per run (one colour per run), the step where each pair of runs
parts marked, each run's configuration in a table (the columns in which they differ first), and a
step range brushed in any chart (``step_range``) that zooms every chart and summarises each run over it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import traitlets

from ..evaluation.runs import RunComparison, compare_runs
from ..evaluation.training import volatility
from ._arrays import array_serialization
from ._base import bundle
from ._live import LiveView
from .colours import palette
from .errors import ViewError


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        return ", ".join(_cell(v) for v in value)
    return "" if value is None else str(value)


class RunsPanel(LiveView):
    """``RunsPanel([log_dir_a, cockpit_b, ...])`` or a mapping name -> run; ``series`` picks the charts.

    Runs still training are followed as `CockpitPanel` follows one: a cockpit training in this kernel
    sends its new steps at most every ``throttle`` seconds, a folder another process writes is re-read
    every ``poll`` seconds (0: only on ``refresh()``).
    """

    _esm = bundle("runs_panel")
    height = traitlets.Int(640).tag(sync=True)

    run_names = traitlets.List(traitlets.Unicode()).tag(sync=True)
    series_names = traitlets.List(traitlets.Unicode()).tag(sync=True)
    steps = traitlets.Any(None).tag(sync=True, **array_serialization)  # int32, the union of the runs' steps
    values = traitlets.Any(None).tag(sync=True, **array_serialization)  # (runs, series, steps) float32, NaN = none
    jumps = traitlets.Any(None).tag(sync=True, **array_serialization)  # (runs, series, steps) uint8: sudden jumps
    partings = traitlets.List(traitlets.Dict()).tag(sync=True)  # {"a", "b", "step"} for each pair that parts
    config_columns = traitlets.List(traitlets.Unicode()).tag(sync=True)
    config_rows = traitlets.List(traitlets.List(traitlets.Unicode())).tag(sync=True)  # text cells, one row per run
    config_differs = traitlets.List(traitlets.Unicode()).tag(sync=True)
    step_range = traitlets.List(traitlets.Float(), maxlen=2).tag(sync=True)  # [first, last] or []
    range_means = traitlets.Any(None).tag(sync=True, **array_serialization)  # (runs, series) over step_range

    def __init__(self, runs, *, series=None, throttle: float = 0.5, poll: float = 1.0, **kwargs):
        self._runs: RunComparison = runs if isinstance(runs, RunComparison) else compare_runs(runs)
        series = [series] if isinstance(series, str) else series
        if series is not None and (not isinstance(series, (list, tuple))
                                   or not all(isinstance(x, str) for x in series)):
            raise ViewError(f"series= is a list of series names the runs log (None: all they share), not {series!r}")
        self._series = list(series) if series is not None else None
        self._frames = {}
        super().__init__(**kwargs)
        self._check_series()
        self._follow(list(self._runs.logs.values()), self._state, throttle=throttle, poll=poll)
        self.observe(lambda _c: self._send_means(), "step_range")

    @property
    def comparison(self) -> RunComparison:
        return self._runs

    def refresh(self) -> None:
        """Read what the runs' folders gained now, rather than at the next poll."""
        self._runs.refresh()
        self._push()

    def _check_series(self) -> None:
        shared = self._runs.series()
        missing = sorted(set(self._series or ()) - set(shared))
        if missing:
            self.close()
            raise ViewError(f"not logged by every run: {missing}; shared series: {', '.join(shared)}")

    def _state(self) -> dict:
        """Every run's arrays as logged so far: charts, jumps, partings and the configuration table."""
        runs = self._runs
        names = self._series if self._series is not None else runs.series()
        frames = {name: log.frame() for name, log in runs.logs.items()}
        steps = sorted(set().union(*(f.index for f in frames.values())))
        values = np.full((len(frames), len(names), len(steps)), np.nan, np.float32)
        jumps = np.zeros(values.shape, np.uint8)
        position = {step: i for i, step in enumerate(steps)}
        for r, frame in enumerate(frames.values()):
            if len(frame) and names:
                # a chart asked for stays while a live run has not logged its series yet (NaN until then)
                values[r] = frame.reindex(index=steps, columns=names).to_numpy(np.float32).T
                flagged = volatility(frame, [n for n in names if n in frame.columns])
                flagged = flagged[flagged["jump"]]
                jumps[r, [names.index(m) for m in flagged["metric"]], [position[t] for t in flagged["step"]]] = 1
        configs = runs.configs
        differs = list(runs.config_differences().columns)
        columns = differs + [c for c in configs.columns if c not in differs]
        partings = [{"a": a, "b": b, "step": step} for (a, b), step in runs.partings().items() if step is not None]
        self._frames = frames
        return {"run_names": runs.names, "colours": palette(0, n_runs=len(runs.names)), "series_names": names,
                "steps": np.asarray(steps, np.int32), "values": values, "jumps": jumps, "partings": partings,
                "config_columns": ["run", *columns],
                "config_rows": [[name, *(_cell(configs.loc[name, c]) for c in columns)] for name in runs.names],
                "config_differs": differs, "range_means": self._means(frames, names)}

    def _send_means(self) -> None:
        self.range_means = self._means(self._frames, self.series_names)

    def _means(self, frames: dict, names: list[str]) -> np.ndarray:
        lo, hi = (self.step_range if len(self.step_range) == 2 else (-np.inf, np.inf))
        means = np.full((len(frames), len(names)), np.nan, np.float32)
        for r, frame in enumerate(frames.values()):
            inside = frame[(frame.index >= lo) & (frame.index <= hi)]
            if len(inside) and names:
                means[r] = inside.reindex(columns=names).mean().to_numpy(np.float32)
        return means

    def summary(self) -> pd.DataFrame:
        """Each run's mean of every series over ``step_range`` (all steps when empty)."""
        return pd.DataFrame(self.range_means, index=pd.Index(self.run_names, name="run"), columns=self.series_names)

    @traitlets.validate("step_range")
    def _whole_steps(self, proposal):
        """Two steps in either order (rounded to whole steps), or none for all steps."""
        steps = sorted(round(v) for v in proposal["value"])
        if len(steps) == 1:
            raise ViewError(f"step_range is [first, last] or [], not {steps}")
        return [float(v) for v in steps]
