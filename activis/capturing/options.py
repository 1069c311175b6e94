"""capture's options, checked once, and the errors and warnings it raises."""

from __future__ import annotations

import pathlib

import numpy as np

from ..store import OUTPUT_KINDS

STORAGE_DTYPES = {"float16": np.float16, "float32": np.float32}
CHANNEL_REDUCTIONS = ("mean", "max", "none")
SEQUENCE_REDUCTIONS = ("mean", "max", "first", "last", "none")
LAYOUTS = ("channels", "sequence", "channels_last")


class CaptureError(ValueError):
    """A capture that cannot run as asked: the message says what to change."""


class CaptureTargetExistsError(CaptureError, FileExistsError):
    """The capture's store path already holds a store and neither resume nor overwrite was asked for."""


class CaptureInterrupted(KeyboardInterrupt):
    """Ctrl-C or a kernel interrupt stopped a capture; every batch before it is committed."""

    def __init__(self, message: str, path: pathlib.Path, committed: int):
        super().__init__(message)
        self.path = path
        self.committed = committed

    def __str__(self) -> str:
        return str(self.args[0])


class NonFiniteWarning(UserWarning):
    """Some captured values were NaN, Inf, or too large for float16 (and were saturated)."""



class _Options:
    """capture's keyword arguments, checked and normalised.

    The options are spelled once, in `capture`'s signature: this object takes its arguments as
    they were given (``locals()``) and only normalises the few that have several accepted forms.
    """

    def __init__(self, given: dict):
        self.__dict__.update(given)
        if self.dtype not in STORAGE_DTYPES:
            raise CaptureError(f"dtype must be one of {', '.join(STORAGE_DTYPES)}, not {self.dtype!r}.")
        _one_of("channel_reduction", self.channel_reduction, CHANNEL_REDUCTIONS[:2])
        _one_of("sequence_reduction", self.sequence_reduction, SEQUENCE_REDUCTIONS[:4])
        self.reduce = dict(self.reduce or {})
        for name, how in self.reduce.items():
            _one_of(f"reduce[{name!r}]", how, SEQUENCE_REDUCTIONS)
        self.layout = dict(self.layout or {})
        for name, how in self.layout.items():
            _one_of(f"layout[{name!r}]", how, LAYOUTS)
        _one_of("output_kind", self.output_kind, ("auto",) + OUTPUT_KINDS)
        if self.keep_inputs not in (True, False, "auto"):
            raise CaptureError(f"keep_inputs must be True, False or 'auto', not {self.keep_inputs!r}.")
        if self.resume and self.overwrite:
            raise CaptureError("resume=True continues a store and overwrite=True replaces it: choose one.")
        step = self.checkpoint
        if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
            raise CaptureError(f"checkpoint is the training step the capture is for, a whole number of 0 or more, "
                               f"not {step!r}.")
        batch_size = self.batch_size
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise CaptureError(f"batch_size must be a positive integer, not {batch_size!r}.")
        layers = [self.layers] if isinstance(self.layers, str) else self.layers
        if layers is not None:
            layers = list(dict.fromkeys(layers))
            if not layers or not all(isinstance(n, str) and n for n in layers):
                raise CaptureError(f"layers must be a list of layer names, not {self.layers!r}.")
        self.layers = layers
        if self.class_names is not None:
            self.class_names = [str(c) for c in self.class_names]
        self.select = {k: _path(v) for k, v in (self.select or {}).items()}
        if self.output_element is not None:
            self.output_element = _path(self.output_element)


def _one_of(what: str, value, allowed) -> None:
    if value not in allowed:
        raise CaptureError(f"{what} must be one of {', '.join(map(repr, allowed))}, not {value!r}.")


def _path(element) -> list:
    return list(element) if isinstance(element, (tuple, list)) else [element]

