"""Every checkpoint's matrix rows and projection layout, held by the page so that a move of the timeline
redraws them there at once, without waiting for the kernel.

The page (``js/common/checkpoint_frames.js``) draws the frame of the checkpoint the shared Selection's
``checkpoint`` names as soon as the timeline writes it; the kernel's own update follows and is recognised
as a frame already drawn (no second redraw). A view holds frames only while the one of the checkpoint shown
equals what it shows, so the page never draws values the kernel would not: frames are recomputed in the
kernel's loop a moment after what they depend on changed (rows, statistic, layer, colours, the aligned
layouts), and a checkpoint move, which leaves them valid, costs nothing here. Python stays the source of
truth: ``explorer.checkpoint`` set from Python moves the Selection's ``checkpoint`` first, then the views.
"""

from __future__ import annotations

import numpy as np

from ._base import kernel_loop

REFRESH_DELAY_S = 0.3  # after the last change: a burst of changes (a drag, a layer switch) is followed once


def same_values(a, b) -> bool:
    """Equal shapes and values, NaN equal to NaN, within float32 rounding of the largest magnitude (the
    frames' sums and the kernel's aggregates add in different orders)."""
    if a is None or b is None:
        return False
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return False
    nan = np.isnan(a)
    if not np.array_equal(nan, np.isnan(b)):
        return False
    scale = float(np.abs(a[~nan]).max()) if (~nan).any() else 0.0
    return bool(np.all(np.abs(a[~nan] - b[~nan]) <= 1e-5 * max(scale, 1.0)))


class CheckpointFrames:
    """Keeps the explorer's matrix and projection holding their data at each of the timeline's checkpoints."""

    def __init__(self, timeline):
        self.timeline = timeline
        self._scheduled = False
        ex = timeline.explorer
        ex.matrix.observe(self._schedule, names=["values"])
        ex.projection.observe(self._schedule, names=["positions", "color_codes"])

    def _schedule(self, _change=None) -> None:
        """Refresh a moment after the views changed, in a kernel (elsewhere `refresh` is called by hand)."""
        loop = kernel_loop()
        if loop is None or self._scheduled:
            return
        self._scheduled = True
        loop.call_later(REFRESH_DELAY_S, self._refresh_scheduled)

    def _refresh_scheduled(self) -> None:
        self._scheduled = False
        self.refresh()

    def refresh(self) -> None:
        """Recompute the frames the views no longer match (none after a mere checkpoint move)."""
        self.refresh_matrix()
        self.refresh_projection()

    def _shown(self) -> int:
        return self.timeline.steps.index(self.timeline.explorer.checkpoint)

    def refresh_matrix(self) -> None:
        matrix, steps, shown = self.timeline.explorer.matrix, self.timeline.steps, self._shown()
        held = matrix.checkpoint_values
        if held is not None and list(matrix.checkpoint_steps) == steps and same_values(held[shown], matrix.values):
            return
        frames = np.stack([matrix.values_at(self.timeline.store_at(step)) for step in steps])
        if not same_values(frames[shown], matrix.values):  # rows still computed in the background
            frames = None
        with matrix.hold_sync():
            matrix.checkpoint_steps = steps
            matrix.checkpoint_values = frames

    def refresh_projection(self) -> None:
        timeline, steps, shown = self.timeline, self.timeline.steps, self._shown()
        projection = timeline.explorer.projection
        if self._projection_held(shown):
            return
        layouts = timeline._layouts.get(projection.layer)
        positions = methods = codes = legends = None
        if layouts is not None and projection.shown_method == aligned_label(steps[shown]):
            positions = np.stack(layouts).astype(np.float32)
            if not np.array_equal(positions[shown], np.asarray(projection.positions, np.float32)):
                positions = None
        if positions is not None:
            methods = [aligned_label(step) for step in steps]
            encodings = [projection.encoding_at(timeline.store_at(step)) for step in steps]
            if all(palette == projection.palette for _, palette, _ in encodings):  # else the kernel recolours
                codes = np.stack([c for c, _, _ in encodings]).astype(np.uint8)
                legends = [legend for _, _, legend in encodings]
        if _same_array(projection.checkpoint_positions, positions) and _same_array(projection.checkpoint_codes, codes) \
                and projection.checkpoint_legends == (legends or []):
            return
        with projection.hold_sync():
            projection.checkpoint_steps = steps if positions is not None else []
            projection.checkpoint_methods = methods or []
            projection.checkpoint_legends = legends or []
            projection.checkpoint_positions = positions
            projection.checkpoint_codes = codes


    def _projection_held(self, shown: int) -> bool:
        """Whether the projection's frames still are what it shows (its layout, colours and legend)."""
        projection = self.timeline.explorer.projection
        held = projection.checkpoint_positions
        if held is None or list(projection.checkpoint_steps) != self.timeline.steps \
                or projection.shown_method != aligned_label(self.timeline.steps[shown]) \
                or not np.array_equal(held[shown], np.asarray(projection.positions, np.float32)):
            return False
        codes = projection.checkpoint_codes
        return codes is not None and np.array_equal(codes[shown], projection.color_codes) \
            and projection.checkpoint_legends[shown] == projection.legend


def aligned_label(step: int) -> str:
    """How the projection names the aligned layout of one checkpoint."""
    return f"aligned · step {step}"


def _same_array(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return np.array_equal(np.asarray(a), np.asarray(b))
