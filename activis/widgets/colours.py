"""The one palette of the views: class, run and severity colours, chosen here and sent to every view.

Class k has the same colour whatever the number of classes (Tableau 10, then its light companions,
then golden-angle hues), so a view that knows 12 classes and one that knows 25 agree on class 3. Every
view carries the palette in its ``colours`` trait; the browser never picks a colour of its own for data.
"""

from __future__ import annotations

import colorsys

import numpy as np

MISSING = "#9e9e9e"  # no value: unlabelled instances, NaN metadata
TABLEAU10 = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
             "#bab0ac"]
_LIGHT_COMPANIONS = ["#a0cbe8", "#ffbe7d", "#ff9d9a", "#86bcb6", "#8cd17d", "#f1ce63", "#d4a6c8", "#fabfd2",
                     "#d37295", "#79706e"]
CORRECTNESS = ["#8da0cb", "#e6550d"]  # correct: quiet blue; misclassified: loud orange
# legible on light and dark backgrounds alike; the doctor's findings and graph markers use them
SEVERITY = {"error": "#d32f2f", "warning": "#ef8f00", "note": "#1e88e5"}
VIRIDIS = ["#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89", "#35b779", "#6ece58", "#b5de2b",
           "#fde725"]
DIVERGING = ["#2166ac", "#4393c3", "#92c5de", "#d1e5f0", "#f7f7f7", "#fddbc7", "#f4a582", "#d6604d", "#b2182b"]
# the activation matrix's ramps: the low end blends into the page background of each theme
MATRIX_RAMPS = {
    "sequential": {"light": ["#deebf7", "#9ecae1", "#4292c6", "#08519c", "#08306b"],
                   "dark": ["#0d3b66", "#1f78b4", "#6baed6", "#c6dbef", "#f7fbff"]},
    "diverging_low": {"light": ["#2166ac", "#67a9cf", "#d1e5f0"], "dark": ["#92c5de", "#4393c3", "#1d4f7a"]},
    "diverging_high": {"light": ["#fddbc7", "#ef8a62", "#b2182b"], "dark": ["#7a2a1d", "#d6604d", "#f4a582"]},
}


def categorical(k: int) -> list[str]:
    """``k`` distinguishable colours; the first ones never change as ``k`` grows."""
    out = (TABLEAU10 + _LIGHT_COMPANIONS)[:k]
    for i in range(len(out), k):
        r, g, b = colorsys.hls_to_rgb((i * 0.618034) % 1.0, 0.45 + 0.15 * (i % 3) / 2, 0.65)
        out.append(f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}")
    return out


def class_colours(n_classes: int, custom: list[str] | None = None) -> list[str]:
    """The colour of each class: the user's list first where given, then `categorical`."""
    out = categorical(n_classes)
    for k, colour in enumerate((custom or [])[:n_classes]):
        out[k] = str(colour)
    return out


def run_colours(n_runs: int) -> list[str]:
    """Colours for training runs (and several lines in one chart): Tableau 10, repeating."""
    return [TABLEAU10[i % len(TABLEAU10)] for i in range(n_runs)]


def ramp(anchors: list[str], levels: int) -> list[str]:
    """``levels`` colours linearly interpolated through ``anchors`` (hex)."""
    rgb = np.array([[int(c[i:i + 2], 16) for i in (1, 3, 5)] for c in anchors], dtype=float)
    t = np.linspace(0, len(anchors) - 1, levels)
    lo = np.minimum(t.astype(int), len(anchors) - 2)
    mixed = rgb[lo] + (rgb[lo + 1] - rgb[lo]) * (t - lo)[:, None]
    return [f"#{int(round(r)):02x}{int(round(g)):02x}{int(round(b)):02x}" for r, g, b in mixed]


def palette(n_classes: int = 0, *, custom_classes: list[str] | None = None, n_runs: int = 10) -> dict:
    """What a view's ``colours`` trait holds: every colour it may draw data in."""
    return {
        "classes": class_colours(max(0, int(n_classes)), custom_classes),
        "runs": run_colours(n_runs),
        "severity": dict(SEVERITY),
        "missing": MISSING,
        "correctness": list(CORRECTNESS),
        "sequential": list(VIRIDIS),  # values (a neuron's activation) from low to high
        "matrix": MATRIX_RAMPS,
    }


def check_colours(colours, current: dict | None = None) -> dict:
    """A view's ``colours``, checked against the palette's shape: each entry a CSS colour string, a
    list of them or a dict of them, as `palette` makes it. Entries left out keep ``current``'s."""
    from .errors import ViewError

    template = palette()
    if not isinstance(colours, dict):
        raise ViewError(f"colours is a dict like activis.widgets.colours.palette() makes, not "
                        f"{type(colours).__name__}.")
    extra = [k for k in colours if k not in template]
    if extra:
        raise ViewError(f"colours has no entry {extra[0]!r}; its entries: {', '.join(template)}.")

    def checked(path: str, value, like):
        if isinstance(like, str):
            if not isinstance(value, str) or not value.strip():
                raise ViewError(f"colours[{path}] must be a CSS colour string such as '#4e79a7', not {value!r}.")
            return value
        if isinstance(like, list):
            if not isinstance(value, list | tuple):
                raise ViewError(f"colours[{path}] must be a list of CSS colour strings, not {type(value).__name__}.")
            return [checked(f"{path}][{i}", v, "#000000") for i, v in enumerate(value)]
        if not isinstance(value, dict) or set(value) != set(like):
            keys = ", ".join(map(repr, like))
            raise ViewError(f"colours[{path}] must be a dict with the entries {keys}, not {value!r}.")
        return {k: checked(f"{path}][{k!r}", value[k], like[k]) for k in like}

    return {**template, **(current or {}), **{k: checked(repr(k), v, template[k]) for k, v in colours.items()}}
