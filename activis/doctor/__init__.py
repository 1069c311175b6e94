"""The training doctor: checks that find a training bug, place it on the model's graph, and say what to change.

`checkup(model, data, loss_fn, optimizer)` first runs one training step (a set-up that cannot run
raises `SetupError`, naming the module and the data), then the before-training checks on a sample;
`watch(cockpit)` (or ``Cockpit(..., doctor=True)``) follows a run's step log (`TrainingDoctor`).
Both give a `Report`: findings merged into diagnoses by cause; a check that does not apply is listed
as skipped, one that could not run as failed, and neither counts as passed. No widget code here:
`activis.widgets.DoctorReport` shows a report.
"""

from .checks import BEFORE_TRAINING, CHECKS
from .checkup import checkup
from .diagnosis import CAUSES, Diagnosis
from .findings import PLACES, SEVERITIES, DoctorError, Finding, Report
from .live import WATCHERS, TrainingDoctor, watch
from .preflight import SetupError

__all__ = ["BEFORE_TRAINING", "CAUSES", "CHECKS", "PLACES", "SEVERITIES", "WATCHERS", "Diagnosis", "DoctorError",
           "Finding", "Report", "SetupError", "TrainingDoctor", "checkup", "watch"]
