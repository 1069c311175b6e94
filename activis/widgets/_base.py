"""What every activis view shares: its bundled ES module and a pinned size."""

from __future__ import annotations

import pathlib

import anywidget
import traitlets

STATIC = pathlib.Path(__file__).resolve().parent.parent / "static"


def bundle(name: str) -> pathlib.Path:
    """Path of a view's bundled JS; a clear error when the JS was never built."""
    path = STATIC / f"{name}.js"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: the JavaScript bundle was not built. Reinstall activis "
            "(pip install -e .) or run `npm install && npm run build` in the source tree."
        )
    return path


class View(anywidget.AnyWidget):
    """Base of the activis views: a fixed height so that the notebook layout stays stable."""

    height = traitlets.Int(420).tag(sync=True)
