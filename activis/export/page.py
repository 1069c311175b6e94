"""One self-contained HTML file: the bundled JS inlined, the data embedded as binary, no network.

The page's Content-Security-Policy allows no request at all (no script, style, font or data from
anywhere but the file itself), so the file opens from ``file://``, from a chat attachment or a CI
artifact the same way, and cannot leak what it shows. Text from the data travels inside JSON and is
set as text by the views, never parsed as HTML.
"""

from __future__ import annotations

import base64
import html
import json
import os
import pathlib

from ..widgets._base import bundle
from .errors import ExportError
from .state import PageState

CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
       "img-src data: blob:; connect-src 'none'; base-uri 'none'; form-action 'none'")
ALIGN = 8  # each buffer starts at a multiple of 8 bytes, so any typed array can view it in place

PAGE_CSS = """
html, body { margin: 0; padding: 0; }
body { font-family: system-ui, sans-serif; font-size: 13px; background: #fff; color: #111; }
body[data-jp-theme-light="false"] { background: #111; color: #eee; }
#activis-page { padding: 8px 12px; }
.activis-page-header { display: flex; gap: 12px; align-items: baseline; margin-bottom: 6px; }
.activis-page-header h1 { font-size: 16px; margin: 0; }
.activis-page-note { color: #666; font-size: 12px; }
.activis-page-box { display: flex; gap: 4px; min-width: 0; }
.activis-page-tabs > .activis-page-tabbar { display: flex; gap: 2px; border-bottom: 1px solid #bbb; }
.activis-page-tabbar button { font: inherit; border: 1px solid #bbb; border-bottom: none; background: #eee;
  padding: 3px 10px; cursor: pointer; }
.activis-page-tabbar button[aria-selected="true"] { background: #fff; font-weight: 600; }
.activis-page-kernel { color: #666; font-style: italic; padding: 4px; }
.activis-page-toast { position: fixed; bottom: 12px; right: 12px; background: #333; color: #fff; padding: 6px 10px;
  border-radius: 4px; font-size: 12px; display: none; z-index: 100; }
"""


def _script_text(text: str) -> str:
    """Text safe inside a <script> element: it cannot close the element early."""
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def render_page(state: PageState, layout: dict, *, title: str, note: str = "") -> str:
    """The HTML of a page drawing ``layout`` over the models and buffers in ``state``."""
    blob, offsets = bytearray(), []
    for data in state.buffers:
        blob.extend(b"\0" * (-len(blob) % ALIGN))
        offsets.append([len(blob), len(data)])
        blob.extend(data)
    payload = {"models": state.models, "layout": layout, "buffers": offsets, "title": title, "note": note}
    data_json = json.dumps(payload, allow_nan=False, separators=(",", ":")).replace("<", "\\u003c")
    runtime = bundle("export_page").read_text(encoding="utf-8")
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{html.escape(title)}</title><style>{PAGE_CSS}</style></head>\n"
        "<body data-jp-theme-light=\"true\"><div id=\"activis-page\"></div>\n"
        f"<script type=\"application/json\" id=\"activis-state\">{data_json}</script>\n"
        "<script type=\"application/octet-stream\" id=\"activis-buffers\">"
        f"{base64.b64encode(bytes(blob)).decode('ascii')}</script>\n"
        f"<script type=\"module\">{_script_text(runtime)}</script>\n</body></html>\n"
    )


def check_path(path) -> pathlib.Path:
    """Where a page can be written, or an ExportError saying why not."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise ExportError(f"path= is where the page goes (a file name ending in .html), not {path!r}.")
    target = pathlib.Path(path)
    if target.is_dir():
        raise ExportError(f"{target} is a folder; give a file name such as {target / 'activis.html'}.")
    if not target.parent.exists():
        raise ExportError(f"The folder {target.parent} does not exist; create it first.")
    return target


def write_page(path, text: str) -> pathlib.Path:
    """Write the page atomically (a reader never sees half a file); returns its path."""
    target = check_path(path)
    partial = target.with_name(f".{target.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, target)
    return target

