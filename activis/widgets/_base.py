"""What every activis view shares: its bundled ES module, a pinned size and the one palette."""

from __future__ import annotations

import pathlib

import anywidget
import traitlets

from .colours import palette

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


def class_count(store) -> int:
    """How many classes a store's views colour: its class names, or the largest label or prediction + 1."""
    n = len(store.class_names)
    for column in ("label", "pred"):
        try:
            values = store.column(column)
        except KeyError:
            continue
        if len(values):
            n = max(n, int(max(values.max(), -1)) + 1)
    return n


class View(anywidget.AnyWidget):
    """Base of the activis views: a fixed height so that the notebook layout stays stable, and the
    palette (`activis.widgets.colours`) the browser draws data in; an explorer hands all its views one."""

    height = traitlets.Int(420).tag(sync=True)
    colours = traitlets.Dict(palette()).tag(sync=True)
