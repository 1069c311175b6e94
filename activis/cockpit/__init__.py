"""Training instruments (the Cockpit paper's quantities) computed with plain PyTorch, and their log.

`Cockpit` tracks a configuration of quantities around a training loop's backward pass and writes
them to a run record's step log (`activis.run.CockpitLog`: JSON lines plus binary histogram rows),
which `read_log` and `load_runs` read back as pandas DataFrames, also while training is still
running. Names are imported on first use, so that reading a log needs no torch.
"""

from __future__ import annotations

import importlib

# public name -> module that defines it, relative to this package (None: the submodule of that name);
# the log lives in the run record (activis.run), which the cockpit writes
_EXPORTS = {
    "Cockpit": ".cockpit", "CockpitLog": "..run.log", "CockpitError": "..run.log", "load_runs": "..run.compare",
    "read_log": "..run.log", "CONFIGURATIONS": ".quantities", "QUANTITIES": ".quantities",
    "configuration": ".quantities", "Unavailable": ".taps", "quantities": None, "schedules": None,
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'activis.cockpit' has no attribute {name!r}")
    module = importlib.import_module(_EXPORTS[name] or f".{name}", __name__)
    return module if _EXPORTS[name] is None else getattr(module, name)


def __dir__():
    return __all__
