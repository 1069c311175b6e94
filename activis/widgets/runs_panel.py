"""RunsPanel: several training runs side by side (DeepInsight's TensorViewer).

A thin view over `activis.compare`: every instrument and evaluation metric the runs share, one chart
each with one line per run (one colour per run), the step where each pair of runs parts marked, each
run's configuration in a table (the columns in which they differ first), and a step range brushed in
any chart (``step_range``) that zooms every chart and summarises each run over it. The charts get at
most two points per pixel of ``chart_width`` (each pixel's min and max, `RunComparison.chart`): runs
longer than that are sent downsampled, and a brushed range is sent again at its own resolution, down
to the exact points.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import traitlets

from ..run.compare import RunComparison, compare
from ._arrays import array_serialization
from ._base import bundle
from ._live import LiveView
from .colours import palette
from .errors import ViewError, check_step_range


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
    steps = traitlets.Any(None).tag(sync=True, **array_serialization)  # int32: the runs' steps, or buckets' edges
    values = traitlets.Any(None).tag(sync=True, **array_serialization)  # (runs, series, steps) float32, NaN = none
    chart_width = traitlets.Int(800).tag(sync=True)  # pixels of a chart (the page sets it): 2 points a pixel at most
    jumps = traitlets.Any(None).tag(sync=True, **array_serialization)  # (runs, series, steps) uint8: sudden jumps
    partings = traitlets.List(traitlets.Dict()).tag(sync=True)  # {"a", "b", "step"} for each pair that parts
    config_columns = traitlets.List(traitlets.Unicode()).tag(sync=True)
    config_rows = traitlets.List(traitlets.List(traitlets.Unicode())).tag(sync=True)  # text cells, one row per run
    config_differs = traitlets.List(traitlets.Unicode()).tag(sync=True)
    step_range = traitlets.List(traitlets.Float(), maxlen=2).tag(sync=True)  # [first, last] or []
    marked_step = traitlets.Int(-1).tag(sync=True)  # a step to mark in every chart (an explorer's checkpoint)
    range_means = traitlets.Any(None).tag(sync=True, **array_serialization)  # (runs, series) over step_range

    def __init__(self, runs, *, series=None, throttle: float = 0.5, poll: float = 1.0, **kwargs):
        self._runs: RunComparison = runs if isinstance(runs, RunComparison) else compare(runs)
        series = [series] if isinstance(series, str) else series
        if series is not None and (not isinstance(series, (list, tuple))
                                   or not all(isinstance(x, str) for x in series)):
            raise ViewError(f"series= is a list of series names the runs log (None: all they share), not {series!r}")
        self._series = list(series) if series is not None else None
        self._zoomed = False  # whether the charts hold only step_range (the whole run did not fit the pixels)
        super().__init__(**kwargs)
        self._check_series()
        self._follow(list(self._runs.sources.values()), self._state, throttle=throttle, poll=poll)
        self.observe(lambda _c: self._on_range(), "step_range")
        self.observe(lambda _c: self._send_chart(), "chart_width")

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
        """Every run's charts as logged so far, jumps, partings and the configuration table."""
        runs = self._runs
        configs = runs.configs
        differs = list(runs.config_differences().columns)
        columns = differs + [c for c in configs.columns if c not in differs]
        partings = [{"a": a, "b": b, "step": step} for (a, b), step in runs.partings().items() if step is not None]
        return {"run_names": runs.names, "colours": palette(0, n_runs=len(runs.names)), **self._chart(),
                "partings": partings, "config_columns": ["run", *columns],
                "config_rows": [[name, *(_cell(configs.loc[name, c]) for c in columns)] for name in runs.names],
                "config_differs": differs, "range_means": self._means()}

    def _names(self) -> list[str]:
        return self._series if self._series is not None else self._runs.series()

    def _chart(self) -> dict:
        """The charts' arrays: every step when they fit ``chart_width``, else the brushed range (or all
        steps) at two points per pixel; sudden jumps marked where they fall."""
        names = self._names()
        chart = self._runs.chart(names, width=self.chart_width)
        self._zoomed = not chart.exact and len(self.step_range) == 2
        if self._zoomed:
            chart = self._runs.chart(names, *map(int, self.step_range), width=self.chart_width)
        jumps = np.zeros(chart.values.shape, np.uint8)
        for r, run in enumerate(self._runs.names):
            for k, name in enumerate(names):
                if name in self._runs.sources[run].names:
                    _mark_jumps(jumps[r, k], chart.steps, chart.values[r, k], self._runs.jumps(run, name), chart.exact)
        return {"series_names": names, "steps": chart.steps.astype(np.int32),
                "values": chart.values.astype(np.float32), "jumps": jumps}

    def _send_chart(self) -> None:
        with self.hold_sync():
            for key, value in self._chart().items():
                setattr(self, key, value)

    def _on_range(self) -> None:
        chart = self._runs.chart(self._names(), width=self.chart_width)
        if not chart.exact or self._zoomed:  # the whole run does not fit: send the range at its resolution
            self._send_chart()
        self._send_means()

    def _send_means(self) -> None:
        self.range_means = self._means()

    def _means(self) -> np.ndarray:
        lo, hi = (self.step_range if len(self.step_range) == 2 else (-np.inf, np.inf))
        return self._runs.means(self._names(), lo, hi).astype(np.float32)

    def summary(self) -> pd.DataFrame:
        """Each run's mean of every series over ``step_range`` (all steps when empty)."""
        return pd.DataFrame(self.range_means, index=pd.Index(self.run_names, name="run"), columns=self.series_names)

    def data(self) -> pd.DataFrame:
        """Every run's per-step series as one long table (run, step, one column per series)."""
        return self.comparison.frame

    def chart(self, series=None):
        """The panel's series as an Altair chart, one panel per series and one colour per run."""
        from ..export.charts import series_chart

        return series_chart(self.data(), list(series) if series is not None else list(self.series_names[:6]),
                            title="runs")

    @traitlets.validate("step_range")
    def _whole_steps(self, proposal):
        """Two steps in either order (rounded to whole steps), or none for all steps."""
        return check_step_range(proposal["value"], whole=True)


def _mark_jumps(marks: np.ndarray, axis: np.ndarray, values: np.ndarray, jumps: np.ndarray, exact: bool) -> None:
    """Flag the chart positions of the jump steps: the step itself, or the bucket's point (its min or
    max) nearer the jump's side."""
    if not len(jumps) or not len(axis):
        return
    if exact:
        at = np.searchsorted(axis, jumps)
        hit = at < len(axis)
        hit[hit] = axis[at[hit]] == jumps[hit]
        marks[at[hit]] = 1
        return
    bucket = np.searchsorted(axis[0::2], jumps, side="right") - 1
    inside = (bucket >= 0) & (jumps <= axis[1::2][np.clip(bucket, 0, None)])
    marks[2 * bucket[inside]] = 1
