"""Training instruments (the Cockpit paper's quantities) computed with plain PyTorch, and their log.

`Cockpit` tracks a configuration of quantities around a training loop's backward pass and writes
them to a `CockpitLog` (a folder: JSON lines plus binary histogram rows), which `read_log` and
`load_runs` read back as pandas DataFrames, also while training is still running.
"""

from . import quantities, schedules
from .cockpit import Cockpit
from .log import CockpitLog, load_runs, read_log
from .quantities import CONFIGURATIONS, QUANTITIES, configuration
from .taps import Unavailable

__all__ = ["CONFIGURATIONS", "QUANTITIES", "Cockpit", "CockpitLog", "Unavailable", "configuration",
           "load_runs", "quantities", "read_log", "schedules"]
