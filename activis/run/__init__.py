"""One training run on disk: the step log (with subscribers), its configuration, the doctor's findings,
metrics per checkpoint, the probe store's checkpoints, and the comparison of runs.

The ground floor: numpy, pandas and pyarrow at most, never torch, scikit-learn or scipy, so a run
can be read, compared and shown where none of them is installed.
"""

from .log import CockpitError, CockpitLog, load_runs, read_log

__all__ = ["CockpitError", "CockpitLog", "load_runs", "read_log"]
