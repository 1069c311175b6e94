"""The widgets of a view or dashboard as data a page can hold: models, binary buffers and the layout.

A page cannot ask a kernel for anything, so everything a view draws is taken from the widget's own
synced state (what `ipywidgets` would send to the browser) and written into the page: plain values as
JSON, arrays as binary buffers. Boxes and tabs keep their layout so that a dashboard looks as it does
in the notebook. Widgets this page cannot draw (a button that runs Python) become a note saying so.
"""

from __future__ import annotations

import hashlib

import ipywidgets as widgets

from ..widgets._base import STATIC, View
from ..widgets.selection import Selection
from .errors import ExportError

# layout properties a page keeps (ipywidgets' Layout trait names, snake case)
_LAYOUT_KEYS = ("width", "height", "min_width", "max_width", "min_height", "max_height", "flex", "overflow",
                "display", "margin", "padding", "align_items", "justify_content", "flex_flow", "grid_area")


def bundle_name(view) -> str:
    """The name of the bundled JS module a view draws with: each view's module and bundle share a name
    (``activis/widgets/activation_matrix.py`` draws with ``activis/static/activation_matrix.js``)."""
    name = type(view).__module__.rsplit(".", 1)[-1]
    if not type(view).__module__.startswith("activis.widgets.") or not (STATIC / f"{name}.js").exists():
        raise ExportError(f"{type(view).__name__} is not an activis view with a bundled module to put in a page.")
    return name


class PageState:
    """Every model a page needs (views and their shared selections) and the buffers they hold."""

    def __init__(self):
        self.models: dict[str, dict] = {}
        self.buffers: list[bytes] = []
        self._numbers: dict[bytes, int] = {}  # a buffer's digest -> its number: equal bytes are stored once

    def add_model(self, widget) -> str:
        """Add a view (or Selection) and what it references; returns its model id."""
        model_id = widget.model_id
        if model_id in self.models:
            return model_id
        # a trait tagged saved=False is the live page's alone (each checkpoint's frames: a saved page holds its
        # checkpoints itself, `export/checkpoints.py`)
        state = {k: v for k, v in widget.get_state().items()
                 if k not in ("_esm", "_css") and widget.trait_metadata(k, "saved", True)}
        self.models[model_id] = {"module": bundle_name(widget), "state": self._without_buffers(state)}
        for name in widget.keys:  # synced widgets it references (a shared Selection) come along
            value = getattr(widget, name, None)
            if isinstance(value, (View, Selection)):
                self.add_model(value)
        return model_id

    def add_buffer(self, data) -> int:
        """Add raw bytes; returns the buffer's number in the page (the same number for bytes already added:
        a checkpoint's unchanged arrays cost nothing)."""
        raw = bytes(memoryview(data).cast("B"))
        digest = hashlib.blake2b(raw, digest_size=20).digest() + len(raw).to_bytes(8, "little")
        if digest not in self._numbers:
            self.buffers.append(raw)
            self._numbers[digest] = len(self.buffers) - 1
        return self._numbers[digest]

    def _without_buffers(self, value):
        """JSON-able state: each memoryview/bytes becomes ``{"$buffer": k}``, its bytes kept aside."""
        if isinstance(value, (memoryview, bytes, bytearray)):
            return {"$buffer": self.add_buffer(value)}
        if isinstance(value, dict):
            return {str(k): self._without_buffers(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self._without_buffers(v) for v in value]
        return value

    def layout(self, widget) -> dict:
        """The layout tree of a widget: boxes, tabs, text and views (by model id)."""
        style = _layout_style(widget)
        if isinstance(widget, (View, Selection)):
            return {"kind": "view", "model": self.add_model(widget), "style": style}
        if isinstance(widget, (widgets.Tab, widgets.Accordion, widgets.Stack)):
            titles = [widget.get_title(i) if hasattr(widget, "get_title") else "" for i in range(len(widget.children))]
            kind = "tabs" if not isinstance(widget, widgets.Stack) else "stack"
            return {"kind": kind, "titles": [t or f"{i + 1}" for i, t in enumerate(titles)],
                    "selected": widget.selected_index or 0, "style": style,
                    "children": [self.layout(child) for child in widget.children]}
        if isinstance(widget, widgets.Box):
            direction = "column" if isinstance(widget, widgets.VBox) else "row"
            return {"kind": "box", "direction": direction, "style": style,
                    "children": [self.layout(child) for child in widget.children if _shown(child)]}
        if isinstance(widget, (widgets.Label, widgets.HTML, widgets.HTMLMath)):
            # HTML widgets are shown as their text: nothing from the notebook becomes markup in the page
            return {"kind": "text", "text": str(widget.value), "style": style}
        description = getattr(widget, "description", "") or _label_of(widget) or type(widget).__name__
        return {"kind": "kernel", "text": str(description), "style": style}


def _label_of(widget) -> str:
    """What a control without a description shows in the notebook: a dropdown's chosen option."""
    label = getattr(widget, "label", None)
    return label if isinstance(label, str) else ""


def _shown(widget) -> bool:
    layout = getattr(widget, "layout", None)
    return getattr(layout, "display", None) != "none" and getattr(layout, "visibility", None) != "hidden"


def _layout_style(widget) -> dict:
    layout = getattr(widget, "layout", None)
    if layout is None:
        return {}
    style = {}
    for key in _LAYOUT_KEYS:
        value = getattr(layout, key, None)
        if value not in (None, ""):
            style[key.replace("_", "-")] = str(value)
    return style
