"""One training run on disk: the step log (with subscribers), its configuration, the doctor's findings,
metrics per checkpoint, the probe store's checkpoints, and the comparison of runs.

The ground floor: numpy, pandas and pyarrow at most, never torch, scikit-learn or scipy, so a run
can be read, compared and shown where none of them is installed. ``log`` (the step log), ``series``
(its scalars as columns), ``scalars`` (reading them), ``chart`` (per-pixel downsampling), ``record``
(`Run`), ``compare`` (`RunComparison`), ``volatility`` (sudden jumps of a metric), ``errors``.
"""

from .compare import RunComparison, compare, load_runs, run_config
from .errors import RunError
from .log import CockpitError, CockpitLog, read_log
from .record import Run, open_run
from .volatility import volatility

compare_runs = compare  # the earlier name of `compare`, kept so that code written for it still runs

__all__ = ["CockpitError", "CockpitLog", "Run", "RunComparison", "RunError", "compare", "compare_runs",
           "load_runs", "open_run", "read_log", "run_config", "volatility"]
