"""The training doctor: checks that find a training bug, place it on the model's graph, and say what to change.

`checkup(model, data, loss_fn, optimizer)` runs the before-training checks on a sample;
`Cockpit(..., doctor=True)` watches a run through the quantities the cockpit computes
(`TrainingDoctor`). Both give a `Report` of `Finding` objects; a check that cannot run is listed
as skipped with its reason, never as passed. No widget code here: `activis.widgets.DoctorReport`
shows a report.
"""

from .checks import BEFORE_TRAINING, CHECKS
from .checkup import checkup
from .findings import PLACES, SEVERITIES, DoctorError, Finding, Report

__all__ = ["BEFORE_TRAINING", "CHECKS", "PLACES", "SEVERITIES", "DoctorError", "Finding", "Report", "checkup"]
