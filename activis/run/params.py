"""The model's parameters at a checkpoint, as ``<run>/params/<step>.safetensors``: never unpickled.

safetensors is a header of names, dtypes and shapes followed by raw little-endian bytes, so reading
it runs no code from the file (a ``torch.save`` checkpoint is a pickle: loading one runs whatever it
holds). The writer is the torch side (`activis.Checkpoints(..., params=True)`); reading needs only
numpy, or returns tensors when asked.
"""

from __future__ import annotations

import pathlib
import re

import numpy as np

from ..paths import folder_path

FOLDER = "params"
_FILE = re.compile(r"(\d{1,18})\.safetensors")


class ParamsError(ValueError):
    """Parameters that cannot be found or read as asked: the message names the run, the step and the steps there are."""


def params_path(run, step: int) -> pathlib.Path:
    """Where the parameters of checkpoint ``step`` of the run at ``run`` (a path, or an object with ``.path``) go."""
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
        raise ParamsError(f"step is a checkpoint's training step, a whole number of 0 or more, not {step!r}.")
    return _run_folder(run) / FOLDER / f"{int(step)}.safetensors"


def param_steps(run) -> list[int]:
    """The steps whose parameters the run holds, sorted."""
    folder = _run_folder(run) / FOLDER
    if not folder.is_dir():
        return []
    return sorted(int(m.group(1)) for p in folder.iterdir() if (m := _FILE.fullmatch(p.name)) and p.is_file())


def load_params(run, step: int, *, tensors: bool = False) -> dict:
    """The parameters (and buffers) of the model at checkpoint ``step``, by name: numpy arrays, or torch
    tensors with ``tensors=True`` (bfloat16 has no numpy type: load such a model as tensors)."""
    path = params_path(run, step)
    if not path.is_file() or path.is_symlink():
        raise ParamsError(f"The run {_run_folder(run)} holds no parameters for step {step}; the steps it holds: "
                          f"{param_steps(run) or 'none'} (Checkpoints(..., params=True) writes them).")
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt" if tensors else "np") as f:
            return {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 - safe_open is not a dict
    except (SafetensorError, OSError, TypeError, ValueError) as exc:
        raise ParamsError(f"{path} is not a readable safetensors file: {exc}") from None


def _run_folder(run) -> pathlib.Path:
    return folder_path(getattr(run, "path", run), "run", ParamsError)
