"""TimelineView: a checkpoint slider with play/pause, one mark per checkpoint step.

It holds only the steps and the one shown (``step``); the explorer moves every view when ``step``
changes (in an explorer, the page's matrix and projection move first, from the shared Selection's
``checkpoint``). Play advances through the checkpoints in the browser, one every ``interval`` ms, and stops
at the last. ``compare_to`` is a checkpoint to show differences from (-1: none): the explorer's matrix
shows each row's change since it and the instance panel marks the predictions that changed.
"""

from __future__ import annotations

import traitlets
from ipywidgets import widget_serialization

from ._base import View, bundle
from .errors import ViewError
from .selection import Selection


class TimelineView(View):
    """``TimelineView([0, 7, 14])``: ``step`` is the checkpoint shown (one of ``steps``)."""

    _esm = bundle("timeline_view")
    height = traitlets.Int(64).tag(sync=True)

    steps = traitlets.List(traitlets.Int()).tag(sync=True)
    step = traitlets.Int(0).tag(sync=True)
    choices_of = {"step": "steps"}
    playing = traitlets.Bool(False).tag(sync=True)
    interval = traitlets.Int(800).tag(sync=True)  # ms per checkpoint while playing
    compare_to = traitlets.Int(-1).tag(sync=True)  # a checkpoint to show differences from, -1 for none
    # an explorer's Selection: a step chosen in the page is written to its ``checkpoint`` too, which the views
    # holding every checkpoint's data follow at once, before the kernel's round trip
    shared_selection = traitlets.Instance(Selection, allow_none=True).tag(sync=True, **widget_serialization)

    def __init__(self, steps, *, step: int | None = None, **kwargs):
        steps = sorted({int(s) for s in steps})
        if not steps:
            raise ViewError("A timeline needs at least one checkpoint step.")
        super().__init__(steps=steps, step=steps[-1] if step is None else step, **kwargs)

    @traitlets.validate("step")
    def _valid_step(self, proposal):
        step = proposal["value"]
        if step not in self.steps:
            raise ViewError(f"step={step!r} is not a checkpoint; checkpoints: {', '.join(map(str, self.steps))}.")
        return step

    @traitlets.validate("compare_to")
    def _valid_compare_to(self, proposal):
        step = proposal["value"]
        if step != -1 and step not in self.steps:
            raise ViewError(f"compare_to={step!r} is not a checkpoint; checkpoints: {', '.join(map(str, self.steps))} "
                            "(or -1 for none).")
        return step

    @traitlets.validate("interval")
    def _valid_interval(self, proposal):
        if proposal["value"] < 50:
            raise ViewError(f"interval is the milliseconds per checkpoint while playing, at least 50, not "
                            f"{proposal['value']}.")
        return proposal["value"]

    def data(self):
        """The checkpoints on the slider: their steps, the one shown (``current``) and the one compared to."""
        import pandas as pd

        steps = pd.Series(self.steps, name="step")
        return pd.DataFrame({"step": steps, "current": steps == self.step, "compared_to": steps == self.compare_to})
