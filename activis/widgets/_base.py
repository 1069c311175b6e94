"""What every activis view shares: its bundled ES module, a pinned size and the one palette."""

from __future__ import annotations

import base64
import contextlib
import html
import operator
import os
import pathlib
import uuid

import anywidget
import numpy as np
import pandas as pd
import traitlets

from .colours import check_colours, palette
from .errors import ViewError, listing

STATIC = pathlib.Path(__file__).resolve().parent.parent / "static"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


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


@contextlib.contextmanager
def view_errors(valid=None):
    """A value a trait refuses (a str for an Int, a list too long) as a `ViewError`, still a TraitError;
    ``valid()``, where given, says what the trait takes (asked only on a refusal)."""
    try:
        yield
    except traitlets.TraitError as exc:
        if isinstance(exc, ViewError):
            raise
        hint = valid() if valid is not None else ""
        raise ViewError(f"{exc} Valid values: {hint}." if hint else str(exc)) from exc


class Choice(traitlets.Enum):
    """An Enum whose refusal names the trait and the value given, then the valid values."""

    def error(self, obj, value, error=None, info=None):
        raise ViewError(f"{self.name}={value!r} is not valid; choose one of {', '.join(map(repr, self.values))}.")


class ChecksTraits:
    """Mixin: every refused trait value, in the constructor or set later, is a `ViewError` naming the trait;
    where a trait's valid values are data (the checkpoints, the layers), ``choices_of`` names the attribute
    that holds them (dotted: ``"store.checkpoints"``) and the refusal lists them."""

    choices_of: dict[str, str] = {}

    def __init__(self, *args, **kwargs):
        with view_errors():
            super().__init__(*args, **kwargs)

    def __setattr__(self, name, value):
        with view_errors(lambda: self.valid_values(name)):
            super().__setattr__(name, value)

    def valid_values(self, name: str) -> str:
        """What trait ``name`` accepts, for a refusal's message ("" when the trait's own message says it)."""
        where = self.choices_of.get(name)
        return listing(operator.attrgetter(where)(self)) if where else ""


class View(ChecksTraits, anywidget.AnyWidget):
    """Base of the activis views: a fixed height so that the notebook layout stays stable, and the
    palette (`activis.widgets.colours`) the browser draws data in; an explorer hands all its views one."""

    height = traitlets.Int(420).tag(sync=True)
    colours = traitlets.Dict(palette()).tag(sync=True)

    @traitlets.validate("height")
    def _check_height(self, proposal):
        if proposal["value"] < 1:
            raise ViewError(f"height is the view's height in pixels, at least 1, not {proposal['value']}.")
        return proposal["value"]

    @traitlets.validate("colours")
    def _check_colours(self, proposal):
        return check_colours(proposal["value"], self.colours)

    def _repr_mimebundle_(self, **kwargs):
        """The widget, plus a static card for where widgets cannot load (GitHub, nbconvert, a notebook reopened
        without its kernel's widget state): what the view showed, and how to keep a copy that opens anywhere."""
        bundle = super()._repr_mimebundle_(**kwargs)
        if not isinstance(bundle, tuple) or not isinstance(bundle[0], dict):
            return bundle
        data, metadata = bundle
        facts = [f"{name}: {getattr(self, name)}" for name in ("layer", "statistic", "color_by", "focus")
                 if isinstance(getattr(self, name, None), (str, int)) and getattr(self, name) not in ("", -1)]
        text = " · ".join([f"activis {type(self).__name__}", *facts])
        card = ("<div style='border:1px solid #bbb;padding:6px 10px;font:13px sans-serif;color:#555'>"
                f"<b>{html.escape(text)}</b><br>This interactive view needs its notebook's kernel. "
                "<code>view.save_html(\"view.html\")</code> keeps a copy that opens in any browser.</div>")
        return {**data, "text/html": card}, metadata

    def save_png(self, path) -> PngRequest:
        """Ask the page for this view as a PNG (at the screen's pixel ratio) and write it to ``path``.

        The view must be on screen: the browser draws the image and sends it back, so the file appears
        a moment after the call (``request.done`` says when; a cell that waits for it in a loop would
        block the very message it waits for). The view's PNG button downloads the same image.
        """
        request = PngRequest(path)
        self._png_requests = {**getattr(self, "_png_requests", {}), request.id: request}
        self.send({"kit": "png", "id": request.id})
        return request

    def _handle_custom_msg(self, content, buffers):
        if isinstance(content, dict) and content.get("kit") == "png":  # the kit's, not the view's own messages
            request = getattr(self, "_png_requests", {}).pop(str(content.get("id")), None)
            if request is not None:
                request.receive(content)
            return
        super()._handle_custom_msg(content, buffers)

    def data(self) -> pd.DataFrame:
        """What the view shows now, as a DataFrame: its rows as drawn, in the order drawn, under the current
        selection and settings, read from its backend objects (nothing recomputed). Where rows are instances
        the column ``instance`` is the store's row index, so frames of several views join on it. Every view
        implements this; the chart views also take a ``kind`` or give `chart()`."""
        raise NotImplementedError(f"{type(self).__name__} does not give its data as a DataFrame.")

    def save_html(self, path, *, title: str = "activis"):
        """This view as one self-contained HTML file (`activis.save_html`); returns its path."""
        from ..export import save_html

        return save_html(path, self, title=title)


class PngRequest:
    """A PNG asked of the page: written to ``path`` when the page answers (``done``), or ``error``."""

    def __init__(self, path):
        if not isinstance(path, (str, os.PathLike)) or not str(path).lower().endswith(".png"):
            raise ViewError(f"save_png needs a file name ending in .png, not {path!r}.")
        self.path = pathlib.Path(path)
        if not self.path.parent.is_dir():
            raise ViewError(f"The folder {self.path.parent} does not exist; create it first.")
        self.id = uuid.uuid4().hex
        self.done = False
        self.error = ""

    def receive(self, content: dict) -> None:
        """Write the page's answer; anything but a PNG is refused (the page is not trusted to send files)."""
        try:
            data = base64.b64decode(str(content.get("data", "")), validate=True)
        except (ValueError, TypeError):
            data = b""
        if not data.startswith(PNG_SIGNATURE):
            self.error = str(content.get("error") or "the page did not send a PNG image")
            return
        partial = self.path.with_name(f".{self.path.name}.partial")
        partial.write_bytes(data)
        os.replace(partial, self.path)
        self.done = True

    def __repr__(self) -> str:
        state = "written" if self.done else f"failed: {self.error}" if self.error else "waiting for the page"
        return f"<PngRequest {self.path} · {state}>"


def is_among(instances, indices) -> np.ndarray:
    """One flag per instance: is it in ``indices`` (None: nowhere)? A view's selected or highlighted column."""
    instances = np.asarray(instances)
    if indices is None:
        return np.zeros(len(instances), bool)
    return np.isin(instances, np.asarray(indices))


def kernel_loop():
    """The IPython kernel's event loop, when running inside one: views that work in a thread send from it."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    kernel = getattr(shell, "kernel", None)
    return getattr(kernel, "io_loop", None)


def after_first_frame(callback) -> None:
    """Run ``callback`` once the cell that builds a view has returned (its first frame sent), in a kernel;
    at once elsewhere (a script or a test has no frame to wait for)."""
    loop = kernel_loop()
    if loop is None:
        callback()
    else:
        loop.add_callback(callback)
