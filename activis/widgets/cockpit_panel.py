"""CockpitPanel: the training instruments of a cockpit log, live and linked.

A thin view over a `CockpitLog` (or the log of a running `Cockpit`): it turns the log into arrays
for the browser and holds only the selection (a step range and a layer). It subscribes to the
log, so while a training loop runs in the same kernel every new step reaches the browser, at most
every ``throttle`` seconds and never holding up the loop for more than the send itself. Scalar
series cross as one float32 matrix, histograms as arrays summed over the selected steps and layer;
brushing a step range in any time series (``step_range``) filters the histograms and the alpha
distribution, and the layer picker (``layer``) switches the layer-wise instruments.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import traitlets

from ..run.log import CockpitLog, read_log
from ._arrays import array_serialization
from ._base import bundle
from ._live import LiveView
from .errors import ViewError, check_step_range, unknown

# the per-parameter quantities drawn per layer, and the network-wide series every instrument reads
LAYER_QUANTITIES = ["GradNorm", "Distance", "UpdateSize", "HessTrace"]


class CockpitPanel(LiveView):
    """The cockpit's instruments for one run: ``CockpitPanel(cockpit)``, ``CockpitPanel(log)`` or a path.

    ``step_range`` is ``[first, last]`` (inclusive) or empty for all steps; ``layer`` is a layer
    (module) name or ``""`` for the whole network. A panel over a folder that another process
    is still writing re-reads it every ``poll`` seconds (0: only on ``refresh()``).
    """

    _esm = bundle("cockpit_panel")
    height = traitlets.Int(760).tag(sync=True)

    run = traitlets.Unicode("").tag(sync=True)
    steps = traitlets.Any(None).tag(sync=True, **array_serialization)
    series_names = traitlets.List(traitlets.Unicode()).tag(sync=True)
    series = traitlets.Any(None).tag(sync=True, **array_serialization)  # (series, steps) float32, NaN = none
    layers = traitlets.List(traitlets.Unicode()).tag(sync=True)
    layer_series_names = traitlets.List(traitlets.Unicode()).tag(sync=True)
    layer_series = traitlets.Any(None).tag(sync=True, **array_serialization)  # (quantity, layer, steps)
    layer = traitlets.Unicode("").tag(sync=True)
    choices_of = {"layer": "layers"}
    step_range = traitlets.List(traitlets.Float(), maxlen=2).tag(sync=True)
    hist1d = traitlets.Any(None).tag(sync=True, **array_serialization)
    hist1d_range = traitlets.List(traitlets.Float()).tag(sync=True)
    hist1d_steps = traitlets.Int(0).tag(sync=True)
    hist2d = traitlets.Any(None).tag(sync=True, **array_serialization)
    hist2d_range = traitlets.List(traitlets.List(traitlets.Float())).tag(sync=True)
    hist2d_steps = traitlets.Int(0).tag(sync=True)
    marked_step = traitlets.Int(-1).tag(sync=True)  # a step to mark in every chart (an explorer's checkpoint)
    notes = traitlets.Dict().tag(sync=True)  # estimator labels and skipped quantities, for the footer
    # the quantities of the run's configuration: instruments of the others take no space
    tracked = traitlets.List(traitlets.Unicode()).tag(sync=True)
    # seconds the instruments took on the first tracked step (numba compiles them then), -1 while unknown
    first_step_s = traitlets.Float(-1.0).tag(sync=True)

    def __init__(self, source, *, throttle: float = 0.5, poll: float = 1.0, **kwargs):
        log = getattr(source, "log", source)
        if isinstance(source, str | os.PathLike):
            log = read_log(source)
        if not isinstance(log, CockpitLog):
            raise ViewError(f"CockpitPanel shows a Cockpit, a CockpitLog or a log folder (a path), not "
                            f"{type(source).__name__}.")
        self._log = log  # before the traits: validating a layer given here needs the log
        self._costs = getattr(source, "costs", None)  # a live Cockpit times its instruments
        super().__init__(**kwargs)
        self._follow([log], lambda: {**self._series_data(), **self._hist_data(), **self._first_step()},
                     throttle=throttle, poll=poll)
        self.observe(self._on_selection, names=["step_range", "layer"])

    def _first_step(self) -> dict:
        """How long the first step's instruments took (a live cockpit only): the page says it instead of
        "0 steps tracked" while numba compiles."""
        if self.first_step_s >= 0 or self._costs is None:
            return {}
        costs = self._costs()
        if not len(costs):
            return {}
        return {"first_step_s": float(costs["first_ms"].sum() / 1e3)}

    @property
    def log(self) -> CockpitLog:
        return self._log

    def data(self) -> pd.DataFrame:
        """The run's per-step readings (one row per step) as the instruments plot them."""
        return self._log.frame().reset_index()

    def chart(self, series=None):
        """Instruments as an Altair chart (default: the loss and the gradient norm, where tracked)."""
        from ..export.charts import series_chart

        frame = self.data()
        default = [name for name in ("loss", "grad_norm", "Loss", "GradNorm") if name in frame.columns]
        return series_chart(frame, list(series) if series is not None else default, title=self._log.run)

    def refresh(self) -> None:
        """Read steps another process appended to the log folder now (a no-op for a live cockpit)."""
        self._log.refresh()
        self._push()

    @traitlets.validate("layer")
    def _valid_layer(self, proposal):
        layer = proposal["value"]
        if layer and layer not in self._log.layers:
            raise unknown(f"Unknown layer {layer!r}", layer, self._log.layers, "Layers")
        return layer

    @traitlets.validate("step_range")
    def _valid_range(self, proposal):
        return check_step_range(proposal["value"])

    def _on_selection(self, _change) -> None:
        with self.hold_sync():
            for key, value in self._hist_data().items():
                setattr(self, key, value)

    # ---------------------------------------------------------------- arrays for the browser
    def _series_data(self) -> dict:
        log = self._log
        frame = log.frame()
        steps = np.asarray(frame.index, dtype=np.int32) if len(frame) else np.zeros(0, np.int32)
        names = [c for c in frame.columns if "/" not in c and frame[c].dtype.kind in "fiu"
                 and c != "batch_size"]
        values = (frame[names].to_numpy(dtype=np.float32).T if names
                  else np.zeros((0, len(steps)), np.float32))
        layer_names = [q for q in LAYER_QUANTITIES if q in frame.columns]
        per_layer = np.full((len(layer_names), len(log.layers), len(steps)), np.nan, dtype=np.float32)
        for qi, q in enumerate(layer_names):
            lf = log.layer_frame(q).reindex(frame.index)
            per_layer[qi] = lf.to_numpy(dtype=np.float32).T
        notes = {"hess_diag": log.meta.get("hess_diag_note", ""), "skipped": dict(log.skipped)}
        tracked = sorted(log.meta.get("quantities", {}))
        return {"run": log.run, "steps": steps, "series_names": names, "series": values, "tracked": tracked,
                "layers": log.layers, "layer_series_names": layer_names, "layer_series": per_layer,
                "notes": notes}

    def _hist_data(self) -> dict:
        log = self._log
        start, stop = (self.step_range[0], self.step_range[1]) if len(self.step_range) == 2 else (None, None)
        layer = self.layer or None
        out = {}
        quantities = log.meta.get("quantities", {})
        for name, key in (("GradHist1d", "hist1d"), ("GradHist2d", "hist2d")):
            if name not in log.meta.get("arrays", {}):
                out.update({key: None, f"{key}_steps": 0})
                continue
            counts, n = log.histogram(name, start, stop, layer)
            out.update({key: counts.astype(np.float64), f"{key}_steps": n,
                        f"{key}_range": quantities[name]["range"]})
        return out
