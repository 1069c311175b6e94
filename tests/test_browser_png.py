"""view.save_png in a real JupyterLab: the page draws the view and the kernel writes the same pixels."""

import base64
import io

import numpy as np
import pytest
from test_store import small_store

from jupyter_page import open_cells, python_result, run_cell

pytestmark = pytest.mark.browser

SETUP = """
import json
import activis
store = activis.open_store("png_store")
matrix = activis.ActivationMatrix(store, "hidden")
matrix"""
SAVE = 'request = matrix.save_png("matrix.png")'
CHECK = 'print("RESULT " + json.dumps({"done": request.done, "error": request.error}))'


def test_save_png_writes_the_views_pixels(lab, page):
    small_store(lab.root_dir / "png_store", n=60, overwrite=True)
    panel = open_cells(page, lab, "png.ipynb", [SETUP, SAVE, CHECK])
    cell = run_cell(panel, 0, timeout=240_000)
    view = cell.locator(".activis-matrix[data-rendered]")
    view.wait_for(timeout=120_000)
    run_cell(panel, 1)
    assert python_result(panel, 2, lambda r: r["done"] or r["error"]) == {"done": True, "error": ""}
    from PIL import Image

    png = Image.open(io.BytesIO((lab.root_dir / "matrix.png").read_bytes())).convert("RGB")
    box = view.bounding_box()
    dpr = page.evaluate("() => window.devicePixelRatio")
    assert abs(png.width - round(box["width"] * dpr)) <= 1 and abs(png.height - round(box["height"] * dpr)) <= 1
    # every canvas's own pixels are in the image where it sits, over the view's background
    background = view.evaluate("(el) => getComputedStyle(el).backgroundColor")
    rgb = np.array([int(v) for v in background[background.index("(") + 1:-1].split(",")[:3]], dtype=np.float64)
    canvases = view.locator("canvas")
    compared = 0
    for k in range(canvases.count()):
        canvas = canvases.nth(k)
        cbox = canvas.bounding_box()
        if not cbox or cbox["width"] < 20:
            continue
        own = Image.open(io.BytesIO(base64.b64decode(
            canvas.evaluate("(c) => c.toDataURL('image/png')").split(",", 1)[1]))).convert("RGBA")
        rgba = np.asarray(own, dtype=np.float64)
        over = rgba[..., :3] * rgba[..., 3:] / 255 + rgb * (1 - rgba[..., 3:] / 255)
        x, y = round((cbox["x"] - box["x"]) * dpr), round((cbox["y"] - box["y"]) * dpr)
        # a canvas at a fractional CSS position may land a pixel or two off once rasterised whole
        error = min(np.abs(np.asarray(png.crop((x + dx, y + dy, x + dx + own.width, y + dy + own.height)),
                                      dtype=np.float64) - over).mean() for dx in range(-2, 3) for dy in range(-2, 3))
        assert error < 3.0, f"canvas {k}: mean difference {error:.1f}"
        compared += 1
    assert compared
