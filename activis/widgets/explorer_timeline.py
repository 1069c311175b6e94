"""An explorer over a run: the timeline of checkpoints, the cockpit, the data map and the CKA heatmap, linked.

`ExplorerTimeline` is the wiring, kept apart from the explorer's own: the explorer's ``checkpoint``
moves the matrix, the projection (to the checkpoint's aligned layout) and the instance panel to
``store.at(step)``, and marks the step in the cockpit and the CKA heatmap; a step range brushed in the
cockpit (or a linked RunsPanel), a click on the timeline or a CKA cell moves the checkpoint back; a
range holding several checkpoints shows the last with the difference since the first (``compare_to``).
Every view follows the checkpoint: the misclassification view explains there, the evaluation panel
evaluates there, slice suggestions say which checkpoint they were found at, the per-instance
instruments show its losses, and the graph marks the doctor's findings made by then. The data map's
box brush and a range brushed across a per-instance instrument are the shared Selection's brush
(sources ``"data_map"`` and ``"per_sample"``), so every view follows them as they follow a lasso.

The aligned layouts (`activis.aligned_projection`, all checkpoints of one layer) are computed in a
thread; until they are ready the projection shows its own layout of the latest checkpoint.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

import ipywidgets as widgets
import numpy as np
import pandas as pd

from ..dynamics import (
    DynamicsError,
    aligned_projection,
    cka_matrix,
    data_map_of,
    instance_quantities,
    prediction_changed,
)
from ..run import Run, open_run
from ._base import kernel_loop
from .checkpoint_frames import CheckpointFrames, aligned_label
from .cka_view import CKAView
from .cockpit_panel import CockpitPanel
from .data_map_view import SOURCE as DATA_MAP
from .data_map_view import DataMapView
from .errors import ViewError
from .links import Link
from .sample_quantities_view import SOURCE as PER_SAMPLE
from .sample_quantities_view import SampleQuantitiesView
from .selection import as_indices
from .timeline_view import TimelineView

ALIGNED_PARAMS = ("random_state", "n_neighbors", "min_dist", "n_epochs")


def as_run(run) -> Run:
    """A `Run`, or the run folder at a path."""
    if isinstance(run, str | os.PathLike):
        return open_run(run)
    if not isinstance(run, Run):
        raise ViewError(f"run= is an activis Run (activis.open_run(path)) or its folder, not {type(run).__name__}.")
    return run


class ExplorerTimeline:
    """The checkpoint views of one explorer and their links; ``box`` is the row the explorer shows."""

    def __init__(self, explorer, run=None, *, aligned_params: dict | None = None):
        self.explorer = explorer
        store = explorer.store
        self.steps = list(store.checkpoints)
        self._stores = {self.steps[-1]: store}  # the store itself reads its latest checkpoint
        self._stores_lock = threading.Lock()  # the layouts' thread reads checkpoints too: one store per step
        self._aligned_params = {k: v for k, v in (aligned_params or {}).items() if k in ALIGNED_PARAMS}
        self._layouts: dict[str, list] = {}
        self._ready: dict[str, threading.Event] = {}
        self.errors: dict[str, str] = {}
        self.view = TimelineView(self.steps)
        self.run = None if run is None else as_run(run)
        self.cockpit = None
        if self.run is not None and self.run.log is not None:
            self.cockpit = CockpitPanel(self.run.log, height=560, marked_step=self.steps[-1])
        self.data_map = self.cka = None
        if len(self.steps) > 1:
            try:
                self.data_map = DataMapView(data_map_of(store), subsets=explorer.subsets, height=360)
            except DynamicsError as exc:  # no labels, or outputs that are not class scores
                self.errors["data_map"] = str(exc)
            self.cka = CKAView(cka_matrix(store), marked_step=self.steps[-1], marked_layer=explorer.selection.layer)
        self.per_sample = None
        try:
            self.per_sample = SampleQuantitiesView(instance_quantities(store), step=self.steps[-1], height=170)
        except DynamicsError as exc:  # no labels, or outputs that are not class scores
            self.errors["per_sample"] = str(exc)
        self.runs_panels: list = []  # RunsPanels linked by link_runs_panel
        self._range_move = False  # a step range sets compare_to and the checkpoint: one refresh, not two
        self._followers_pending = False
        self._link()
        explorer.selection.checkpoint = explorer.checkpoint
        self.frames = CheckpointFrames(self)  # each checkpoint's matrix rows and layout, held by the page
        self._request_layouts(explorer.selection.layer)
        row = widgets.Layout(width="100%")
        side = [v for v in (self.data_map, self.cka) if v is not None]
        for view, width in zip(side, ("60%", "40%") if len(side) == 2 else ("100%",)):
            view.layout = widgets.Layout(width=width, min_width="0")
        children = [self.view]
        if side:
            children.append(widgets.HBox(side, layout=row))
        if self.per_sample is not None:
            children.append(self.per_sample)
        if self.cockpit is not None:
            children.append(self.cockpit)
        self.box = widgets.VBox(children, layout=row)
        self.box.add_class("activis-timeline-row")
        self._mark_findings()

    def store_at(self, step: int):
        """The store as it was at checkpoint ``step`` (read once, then kept)."""
        with self._stores_lock:
            if step not in self._stores:
                self._stores[step] = self.explorer.store.at(step)
            return self._stores[step]

    # ------------------------------------------------------------------ links
    # The timeline's links, in the explorer's one table mechanism (`links.Coordinator`); absent views
    # (no cockpit without a step log, no data map without labels) leave their links out.
    LINKS = (
        Link("explorer", "checkpoint", call="_on_checkpoint"),
        Link("timeline", "step", to="explorer.checkpoint"),
        Link("selection", "checkpoint", to="explorer.checkpoint", when=lambda step: step >= 0),
        Link("selection", "layer", call="_on_layer"),
        Link("cockpit", "step_range", call="_on_step_range"),
        Link("data_map", "brushed", clause="brush", owner=DATA_MAP),
        Link("cka", "picked", call="_on_cka_pick"),
        Link("timeline", "compare_to", call="_on_compare_to"),
        Link("per_sample", "brushed", clause="brush", owner=PER_SAMPLE),
    )

    def _link(self) -> None:
        links = self.explorer.links
        links.add_views(timeline=self.view, cockpit=self.cockpit, data_map=self.data_map, cka=self.cka,
                        per_sample=self.per_sample)
        links.add(self.LINKS, host=self)
        self.view.on_msg(self._on_timeline_message)

    def _on_checkpoint(self, change) -> None:
        ex, step = self.explorer, change["new"]
        at = self.store_at(step)
        # first the checkpoint itself: the page's matrix and projection redraw from the frames they hold
        # (`checkpoint_frames`), and then recognise the updates below as those frames
        ex.selection.checkpoint = step
        ex.subsets.store = at  # subsets over predictions hold the instances they hold at this step
        # The page handles the kernel's messages one after another, so the order they go out in is the
        # order it draws in: the projection's colours and layout in one message (a frame of new colours
        # at old positions would be wasted), then the matrix's small one, and the instance panel's
        # sample (its cards' values are the largest message) last.
        with ex.projection.hold_sync():
            ex.projection.set_store(at)
            self._show_layout()
        ex.matrix.set_store(at)
        ex.instances.set_store(at)
        if ex.subset_panel.active:
            ex.selection.subset_indices = as_indices(ex.subsets.indices(ex.subset_panel.active))
        self._show_compare()
        self.view.step = step
        for instrument in (self.cockpit, self.cka, *self.runs_panels):
            if instrument is not None:
                instrument.marked_step = step
        self._follow_later()

    def _follow_later(self) -> None:
        """The views beside the matrix and projection follow the checkpoint after those have been sent
        (in a kernel, once its loop is free; several moves while playing are followed once)."""
        if self._followers_pending:
            return
        loop = kernel_loop()
        if loop is None:
            self._follow_checkpoint()
        else:
            self._followers_pending = True
            loop.add_callback(self._follow_checkpoint)

    def _follow_checkpoint(self) -> None:
        """The misclassification view, evaluation panel, slice suggestions, per-instance instruments and
        graph markers at the checkpoint shown."""
        self._followers_pending = False
        ex, step = self.explorer, self.explorer.checkpoint
        at = self.store_at(step)
        ex.why.set_store(at)
        if ex.evaluation is not None:
            ex.evaluation.set_source(at, caption=f"step {step}")
        ex.slice_suggestions.follow_source(f"step {step}")
        if self.per_sample is not None:
            self.per_sample.set_values(instance_quantities(at), step)
        self._mark_findings()

    def _on_compare_to(self, _change) -> None:
        if not self._range_move:
            self._show_compare()

    def _show_compare(self) -> None:
        """The matrix rows as their change since ``compare_to``, the instance panel marking the instances
        whose prediction changed since then (neither without a checkpoint to compare to)."""
        ex, a = self.explorer, self.view.compare_to
        if a < 0 or a == ex.checkpoint:
            if ex.matrix.compared_to:
                ex.matrix.set_baseline(None)
            ex.instances.mark(None)
            return
        before = self.store_at(a)
        ex.matrix.set_baseline(before, f"step {a}")
        changed = np.flatnonzero(before.column("pred") != self.store_at(ex.checkpoint).column("pred"))
        ex.instances.mark(changed, f"prediction changed since step {a}")

    def link_runs_panel(self, panel) -> None:
        """Mark the explorer's checkpoint in a RunsPanel's charts, and let a step range brushed there move it
        (as the cockpit's does)."""
        if panel in self.runs_panels:
            return
        if not hasattr(panel, "marked_step") or not hasattr(panel, "step_range"):
            raise ViewError(f"link_runs_panel takes a RunsPanel, not {type(panel).__name__}.")
        name = f"runs_panel_{len(self.runs_panels)}"
        self.runs_panels.append(panel)
        panel.marked_step = self.explorer.checkpoint
        self.explorer.links.add_views(**{name: panel})
        self.explorer.links.add([Link(name, "step_range", call="_on_step_range")], host=self)

    def _on_step_range(self, change) -> None:
        """A step range brushed in an instrument shows the last checkpoint in it, with the difference since
        the first when it holds several (none in it: no move)."""
        if len(change["new"]) != 2:
            return
        first, last = change["new"]
        inside = [s for s in self.steps if first <= s <= last]
        if not inside:
            return
        moves = self.explorer.checkpoint != inside[-1]
        self._range_move = True
        try:
            self.view.compare_to = inside[0] if len(inside) > 1 else -1
            self.explorer.checkpoint = inside[-1]
        finally:
            self._range_move = False
        if not moves:
            self._show_compare()

    def _on_cka_pick(self, change) -> None:
        picked = change["new"]
        if picked:
            self.explorer.selection.layer = picked["layer"]
            self.explorer.checkpoint = picked["step"]

    def _on_layer(self, change) -> None:
        if self.cka is not None:
            self.cka.marked_layer = change["new"]
        self._request_layouts(change["new"])

    def add_flipped(self, a: int | None = None, b: int | None = None) -> str:
        """Add the subset of instances whose prediction changed between checkpoints ``a`` (default: the one
        compared to, else the first) and ``b`` (default: the one shown), and pick it (highlighted in every
        view); its name."""
        if a is None:
            a = self.view.compare_to if self.view.compare_to >= 0 else self.steps[0]
        b = self.explorer.checkpoint if b is None else b
        try:
            subset = prediction_changed(self.explorer.store, a, b)
        except DynamicsError as exc:
            raise ViewError(str(exc)) from None
        self.explorer.subsets.add(subset.name, subset)
        self.explorer.subset_panel.active = subset.name
        return subset.name

    def _on_timeline_message(self, _widget, content, _buffers) -> None:
        if isinstance(content, dict) and content.get("flipped"):
            self.add_flipped()

    def show_finding(self, finding) -> int:
        """Move to the checkpoint nearest a doctor finding's step, with its layer selected when it was
        captured (a `Finding`, or a row or dict of ``run.findings``); returns the checkpoint shown."""
        from .explorer import LayerNotCaptured, store_layer_for  # the explorer module imports this one

        get = finding.get if isinstance(finding, Mapping | pd.Series) else lambda key: getattr(finding, key, None)
        step = get("step")
        if isinstance(step, bool) or not isinstance(step, int | float | np.integer | np.floating) or step != step:
            raise ViewError(f"show_finding needs a finding made while training (with a step), not step={step!r}.")
        nearest = min(self.steps, key=lambda s: (abs(s - step), s))
        ex = self.explorer
        names = [name for name in (get("node"), get("where")) if isinstance(name, str) and name]
        for name in names:
            try:
                ex.selection.layer = store_layer_for(ex.store, ex.graph, name)
                break
            except LayerNotCaptured:
                continue
        else:  # not captured: the graph still shows where it is, and its status line says why nothing else moved
            in_graph = [n for n in names if ex.graph_view is not None and (n in ex.graph or n in ex.graph.modules)]
            if in_graph:
                ex.graph_view.selected_layer = in_graph[0]
        ex.checkpoint = nearest
        return nearest

    def _read_findings(self) -> pd.DataFrame | None:
        """The run's findings the graph can mark (on a node or module of its graph), or None."""
        ex = self.explorer
        if self.run is None or ex.graph_view is None:
            return None
        findings = self.run.findings
        if not len(findings) or "severity" not in findings.columns:
            return None
        graph = ex.graph
        place = findings.get("node", pd.Series(None, index=findings.index)).where(
            lambda col: col.notna(), findings.get("where", pd.Series(None, index=findings.index)))
        findings = findings.assign(place=place)
        known = findings["place"].map(lambda n: isinstance(n, str) and (n in graph or n in graph.modules))
        return findings[known & findings["severity"].isin(("error", "warning", "note"))]

    def _mark_findings(self) -> None:
        """The graph's badges: the doctor's findings made by the checkpoint shown (and those before training),
        read again each time, so that findings added since (a doctor still watching) show up."""
        findings = self._read_findings()
        if findings is None:
            return
        step = self.explorer.checkpoint
        steps = pd.to_numeric(findings.get("step"), errors="coerce")
        made = findings[steps.isna() | (steps <= step)]
        order = {"error": 0, "warning": 1, "note": 2}
        markers: dict = {}
        for row in made.itertuples():
            title = str(getattr(row, "title", "") or getattr(row, "check", "") or "")
            when = getattr(row, "step", None)
            title = f"{title} (from step {int(when)})" if when == when and when is not None else title
            m = markers.setdefault(row.place, {"severity": row.severity, "count": 0, "title": title})
            m["count"] += 1
            if order[row.severity] < order[m["severity"]]:
                m["severity"], m["title"] = row.severity, title
        self.explorer.graph_view.markers = markers

    # ------------------------------------------------------------------ aligned layouts
    def _request_layouts(self, layer: str) -> None:
        if layer in self._layouts:
            self._show_layout()
            return
        if layer in self._ready or len(self.steps) < 2:
            return
        self._ready[layer] = threading.Event()
        threading.Thread(target=self._compute_layouts, args=(layer,), daemon=True,
                         name=f"activis-aligned-{layer}").start()

    def _compute_layouts(self, layer: str) -> None:
        try:
            frames = [self.store_at(step).activations(layer) for step in self.steps]
            for step in self.steps:  # each checkpoint's instances table read here, not at its first switch
                self.store_at(step).instances  # noqa: B018
            self._layouts[layer] = aligned_projection(frames, **self._aligned_params)
        except (DynamicsError, MemoryError, ValueError) as exc:  # the projector's own layout stays
            self.errors[f"aligned {layer}"] = str(exc)
        finally:
            self._ready[layer].set()
        loop = kernel_loop()
        if loop is not None:
            loop.add_callback(self._show_layout)  # comm messages go out from the kernel's thread
        else:
            self._show_layout()

    def wait_for_layouts(self, layer: str | None = None, timeout: float | None = None) -> bool:
        """Block until the aligned layouts of ``layer`` (default: the selected one) are computed."""
        event = self._ready.get(layer or self.explorer.selection.layer)
        return event is None or event.wait(timeout)

    def layout(self, step: int, layer: str | None = None):
        """The aligned (instances, 2) layout of ``layer`` at checkpoint ``step``; None while it is computed."""
        layouts = self._layouts.get(layer or self.explorer.selection.layer)
        return None if layouts is None else layouts[self.steps.index(step)]

    def _show_layout(self) -> None:
        ex = self.explorer
        positions = self.layout(ex.checkpoint)
        if positions is not None and ex.projection.layer == ex.selection.layer:
            ex.projection.show_layout(positions, aligned_label(ex.checkpoint))
