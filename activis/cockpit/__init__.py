"""Training instruments (the Cockpit paper's quantities) computed with plain PyTorch, and their log.

`Cockpit` tracks a configuration of quantities around a training loop's backward pass and writes
them to a `CockpitLog` (a folder: JSON lines plus binary histogram rows), which `read_log` and
`load_runs` read back as pandas DataFrames, also while training is still running. Names are
imported on first use, so that reading a log needs no torch.
"""

from __future__ import annotations

import importlib

# public name -> submodule that defines it (None: the submodule itself)
_EXPORTS = {
    "Cockpit": "cockpit", "CockpitLog": "log", "CockpitError": "log", "load_runs": "log", "read_log": "log",
    "CONFIGURATIONS": "quantities", "QUANTITIES": "quantities", "configuration": "quantities",
    "Unavailable": "taps", "quantities": None, "schedules": None,
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'activis.cockpit' has no attribute {name!r}")
    module = importlib.import_module(f".{_EXPORTS[name] or name}", __name__)
    return module if _EXPORTS[name] is None else getattr(module, name)


def __dir__():
    return __all__
