"""InstancePanel in a real JupyterLab: sampling, layout, hover card, pins both ways, highlight, filter, sort,
XSS, thumbnails, and the draw time of 1,000 squares."""

import json

import pytest

from conftest import ARTIFACTS, TIMINGS
from jupyter_page import change_theme, open_cells, python_result, read_result, run_cell

pytestmark = pytest.mark.browser

XSS = "<img src=x onerror=alert(1)>"

# 3 classes x 1,000; 30 / 20 / 10 misclassified; confidence varies per instance; metadata of three kinds
TABULAR = f'''
import json, tempfile
import numpy as np, pandas as pd
from activis.store import write_store
from activis.widgets.instance_panel import InstancePanel

rng = np.random.default_rng(0)
n = 3000
labels = np.repeat([0, 1, 2], 1000)
pred = labels.copy()
wrong = np.r_[rng.choice(1000, 30, replace=False), 1000 + rng.choice(1000, 20, replace=False),
              2000 + rng.choice(1000, 10, replace=False)]
pred[wrong] = (labels[wrong] + 1) % 3
logits = np.zeros((n, 3), np.float32)
logits[np.arange(n), pred] = rng.uniform(0.5, 4.0, n)
meta = pd.DataFrame({{"age": np.arange(n) % 90, "city": np.where(np.arange(n) % 2, "Oslo", "<b>Lima</b>"),
                     "ratio": np.arange(n) / 7}})
store = write_store(tempfile.mkdtemp() + "/s", {{"fc": rng.standard_normal((n, 4))}}, labels=labels, outputs=logits,
                    class_names=["alpha", {XSS!r}, "gamma"], metadata=meta)
panel = InstancePanel(store, max_instances=600, seed=1)
hovered = []
panel.observe(lambda c: hovered.append(c["new"]), names="hovered_index")
panel
'''

EXPECT = '''
def expected(key=None):
    """What the panel should draw, computed independently of its JS: per class, counts and first squares."""
    shown = panel.shown
    key = store.column("confidence")[:] if key is None else key
    groups = {}
    for k in range(3):
        members = shown[labels[shown] == k]
        right, bad = members[pred[members] == k], members[pred[members] != k]
        first = lambda ids: int(ids[np.lexsort((ids, -key[ids]))[0]]) if len(ids) else None
        groups[k] = {"correct": len(right), "wrong": len(bad), "first": first(right), "firstWrong": first(bad)}
    return groups

def report(**extra):
    print("RESULT " + json.dumps({"shown": len(panel.shown), "pinned": panel.pinned, "hovered": panel.hovered_index,
                                  "hover_history": hovered[-5:],
                                  "groups": expected(extra.pop("key", None)), **extra}))
'''


def drawn_layout(view):
    return {g["label"]: g for g in json.loads(view.get_attribute("data-layout"))}


def redrawn_after(page, view, action):
    """Do ``action`` and wait until the panel has drawn again."""
    before = int(view.get_attribute("data-rendered"))
    action()
    page.wait_for_function("([el, n]) => Number(el.dataset.rendered) > n", arg=[view.element_handle(), before])


def assert_matches(view, groups):
    layout = drawn_layout(view)
    assert sorted(layout) == [0, 1, 2]
    for k, want in groups.items():
        got = layout[int(k)]
        assert (got["correct"], got["wrong"], got["first"], got["firstWrong"]) == (
            want["correct"], want["wrong"], want["first"], want["firstWrong"]), (k, got, want)
        if got["wrong"] and got["correct"]:
            assert got["wrongMinX"] > got["correctMaxX"]  # misclassified on the right of their group


# sum of R+G+B of the canvas pixel on the left edge of an instance's pin outline
PIN_OUTLINE = """([el, i]) => {
  const at = el.activisLocate(i), c = el.querySelector('canvas.av-ip-canvas'), box = c.getBoundingClientRect();
  const d = window.devicePixelRatio || 1;
  const px = c.getContext('2d').getImageData(Math.floor((at.x - box.left - 6.5) * d), Math.floor((at.y - box.top) * d),
                                             1, 1).data;
  return px[0] + px[1] + px[2];
}"""


def locate(page, view, index):
    return page.evaluate("([el, i]) => el.activisLocate(i)", [view.element_handle(), index])


def test_instance_panel_round_trip(lab, page):
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    panel = open_cells(page, lab, "instance_panel.ipynb", [
        TABULAR,
        EXPECT + "report(wrong=[int(i) for i in sorted(wrong)])",
        "report()",
        "outside = int(np.setdiff1d(np.arange(n), panel.shown)[0]); panel.pin(outside); report(outside=outside)",
        "lit = np.arange(2000, 3000, 3); panel.highlight(lit); report(lit=int(np.isin(panel.shown, lit).sum()))",
        "panel.filter(np.arange(0, n, 10)); report()",
        "order = -np.arange(n, dtype=np.float32); panel.sort_by(order, 'minus index'); report(key=order)",
        "panel.highlight(None); panel.filter(None); panel.sort_by(None); report()",
    ])
    run_cell(panel, 0)
    view = panel.locator(".activis-ip[data-rendered]")
    view.wait_for()
    first = read_result(run_cell(panel, 1))
    # 600 = all 60 misclassified + 540 correct, stratified over the three classes
    assert first["shown"] == 600 and view.get_attribute("data-drawn") == "600"
    assert view.get_attribute("data-groups") == "3"
    assert {k: g["wrong"] for k, g in first["groups"].items()} == {"0": 30, "1": 20, "2": 10}
    assert_matches(view, first["groups"])

    # class names from data are text: the legend and the group header show the markup verbatim
    assert view.locator(".av-ip-legend-item[data-class='1']").inner_text() == XSS
    assert view.locator(".av-ip-group[data-label='1'] b").inner_text() == XSS
    assert view.locator("img").count() == 0

    # hover a misclassified instance: its card, and Python sees hovered_index
    target = first["groups"]["0"]["firstWrong"]
    spot = locate(page, view, target)
    page.mouse.move(spot["x"], spot["y"])
    card = view.locator(".av-ip-card")
    card.wait_for(state="visible")
    assert card.get_attribute("data-index") == str(target)
    text = card.inner_text()
    assert f"instance {target} · misclassified" in text
    assert card.locator(".av-ip-row[data-key='true'] .av-ip-val").inner_text() == "alpha"
    assert card.locator(".av-ip-row[data-key='predicted'] .av-ip-val").inner_text() == XSS
    assert card.locator(".av-ip-row[data-key='age'] .av-ip-val").inner_text() == str(target % 90)
    city = "Oslo" if target % 2 else "<b>Lima</b>"
    assert card.locator(".av-ip-row[data-key='city'] .av-ip-val").inner_text() == city
    assert card.locator("b").count() == 0
    # (running the check cell moves the mouse off the panel, so look at what Python observed)
    assert target in python_result(panel, 2, lambda r: target in r["hover_history"])["hover_history"]

    # click pins it: drawn as pinned, and Python sees the pin
    spot = locate(page, view, target)  # running a cell may have scrolled the notebook
    redrawn_after(page, view, lambda: page.mouse.click(spot["x"], spot["y"]))
    assert view.get_attribute("data-pinned-drawn") == "1"
    assert python_result(panel, 2, lambda r: r["pinned"] == [target])["pinned"] == [target]
    page.mouse.move(5, 5)
    assert python_result(panel, 2, lambda r: r["hovered"] == -1)["hovered"] == -1

    # a pin from Python outside the sample joins the panel
    redrawn_after(page, view, lambda: run_cell(panel, 3))
    result = read_result(panel.locator(".jp-Notebook .jp-Cell").nth(3))
    assert result["pinned"] == [target, result["outside"]] and result["shown"] == 601
    panel.locator(".activis-ip[data-pinned-drawn='2'][data-drawn='601']").wait_for()
    assert locate(page, view, result["outside"]) is not None

    # pins are outlined in the theme's text colour: dark on light, and light once the Lab turns dark
    args = [view.element_handle(), target]
    light = page.evaluate(PIN_OUTLINE, args)
    change_theme(page, dark=True)
    page.wait_for_function(f"(args) => ({PIN_OUTLINE})(args) > 500", arg=args, timeout=10_000)
    view.screenshot(path=str(ARTIFACTS / "instance_panel_dark.png"))
    change_theme(page, dark=False)
    assert light < 150

    # highlight from Python: the lit ones are counted as drawn emphasised
    run_cell(panel, 4)
    lit = read_result(panel.locator(".jp-Notebook .jp-Cell").nth(4))["lit"]
    panel.locator(f".activis-ip[data-highlighted-drawn='{lit}']").wait_for()
    assert lit > 50

    # filter: the panel narrows to every tenth instance (plus the pins) and draws those
    run_cell(panel, 5)
    filtered = read_result(panel.locator(".jp-Notebook .jp-Cell").nth(5))
    assert filtered["shown"] == 300 + sum(p % 10 != 0 for p in filtered["pinned"])
    panel.locator(f".activis-ip[data-drawn='{filtered['shown']}']").wait_for()
    assert_matches(view, filtered["groups"])

    # sort by values (a neuron's activations, say): the first square per group follows them
    run_cell(panel, 6)
    by_values = read_result(panel.locator(".jp-Notebook .jp-Cell").nth(6))
    panel.locator(".activis-ip[data-sorted='values']").wait_for()
    assert_matches(view, by_values["groups"])
    assert "sorted by minus index" in view.locator(".av-ip-sort").inner_text()

    # and back
    run_cell(panel, 7)
    panel.locator(".activis-ip[data-sorted='confidence'][data-drawn='601'][data-highlighted-drawn='0']").wait_for()
    assert_matches(view, read_result(panel.locator(".jp-Notebook .jp-Cell").nth(7))["groups"])
    view.screenshot(path=str(ARTIFACTS / "instance_panel.png"))
    assert dialogs == []


DIGITS = '''
import json, tempfile
import numpy as np
from sklearn.datasets import load_digits
from activis.store import write_store
from activis.widgets.instance_panel import InstancePanel

digits = load_digits()
rng = np.random.default_rng(0)
noise = rng.standard_normal((len(digits.target), 10)).astype(np.float32)
logits = np.eye(10, dtype=np.float32)[digits.target] * 2 + noise
store = write_store(tempfile.mkdtemp() + "/d", {"fc": digits.data[:, :8]}, labels=digits.target, outputs=logits,
                    class_names=[f"digit {d}" for d in range(10)], inputs=digits.images)
panel = InstancePanel(store, max_instances=1000, height=700)
panel
'''

PIXELS = '''
thumbs = panel._sample["thumbs"]
pos = {int(i): j for j, i in enumerate(panel.shown)}
probe = [int(i) for i in panel.shown[:40:4]]
print("RESULT " + json.dumps({"shown": len(panel.shown), "probe": probe,
                              "pixels": [[int(thumbs[pos[i], 3, c, 0]) for c in range(8)] for i in probe]}))
'''

# the canvas pixels across row 3 of an instance's 8x8 thumbnail (image area: 5 px inset in a 32 px square)
READ_ROW = """([el, i]) => {
  const c = el.querySelector('canvas.av-ip-canvas');
  const at = el.activisLocate(i);  // may scroll: measure the canvas after it
  const box = c.getBoundingClientRect();
  const dpr = window.devicePixelRatio || 1;
  const x0 = at.x - box.left - 16 + 5, y = at.y - box.top - 16 + 5 + 3.5 * 22 / 8;
  const ctx = c.getContext('2d');
  const out = [];
  for (let col = 0; col < 8; col++) {
    const px = ctx.getImageData(Math.floor((x0 + (col + 0.5) * 22 / 8) * dpr), Math.floor(y * dpr), 1, 1).data;
    out.push(px[0]);
  }
  return out;
}"""


def test_instance_panel_digit_thumbnails(lab, page):
    panel = open_cells(page, lab, "instance_panel_digits.ipynb", [DIGITS, PIXELS])
    run_cell(panel, 0)
    view = panel.locator(".activis-ip[data-rendered]")
    view.wait_for()
    result = read_result(run_cell(panel, 1))
    assert result["shown"] == 1000
    panel.locator(".activis-ip[data-drawn='1000'][data-thumbnails-drawn='1000']").wait_for()
    assert view.locator(".av-ip-group").count() == 10
    # the pixels on the canvas are the digits' pixels (grey: red channel = value), not just class colours
    for index, want in zip(result["probe"], result["pixels"]):
        got = page.evaluate(READ_ROW, [view.element_handle(), index])
        assert max(abs(a - b) for a, b in zip(got, want)) <= 2, (index, got, want)

    # the hover card shows the thumbnail too
    spot = locate(page, view, result["probe"][0])
    page.mouse.move(spot["x"], spot["y"])
    view.locator(".av-ip-card canvas.av-ip-thumb").wait_for()
    page.mouse.move(5, 5)
    # draw time of 1,000 squares, measured in the page: toggle the thumbnails off and on a few times
    toggle = view.locator("button", has_text="Thumbnails")
    times, plain = [float(view.get_attribute("data-draw-ms"))], []
    for _ in range(3):
        redrawn_after(page, view, toggle.click)
        panel.locator(".activis-ip[data-thumbnails-drawn='0'][data-drawn='1000']").wait_for()
        plain.append(float(view.get_attribute("data-draw-ms")))
        redrawn_after(page, view, toggle.click)
        panel.locator(".activis-ip[data-thumbnails-drawn='1000']").wait_for()
        times.append(float(view.get_attribute("data-draw-ms")))
    plain_ms = min(plain)
    figures = {"squares": 1000, "draw_ms_with_thumbnails": sorted(times), "draw_ms_plain": sorted(plain)}
    TIMINGS["instance_panel_1000_thumbnails_draw_ms"] = min(times)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "instance_panel_draw.json").write_text(json.dumps(figures, indent=1))
    print(f"instance panel: 1,000 squares with thumbnails drawn in {min(times):.1f} ms (median "
          f"{sorted(times)[len(times) // 2]:.1f}); plain {plain_ms:.1f} ms")
    view.screenshot(path=str(ARTIFACTS / "instance_panel_digits.png"))
    assert min(times) < 500


# RGB of the canvas pixel at the centre of an instance's square
FILL = """([el, i]) => {
  const at = el.activisLocate(i), c = el.querySelector('canvas.av-ip-canvas'), box = c.getBoundingClientRect();
  const d = window.devicePixelRatio || 1;
  return Array.from(c.getContext('2d').getImageData(Math.floor((at.x - box.left) * d),
                                                    Math.floor((at.y - box.top) * d), 1, 1).data.slice(0, 3));
}"""


def test_instance_panel_scrolls_to_highlights_and_colours_by_its_sort(lab, page):
    panel = open_cells(page, lab, "instance_panel_scroll.ipynb", [
        TABULAR.replace("max_instances=600", "max_instances=3000, height=260"),
        "panel.highlight(np.flatnonzero(labels == 2)[:40])",
        "acts = store.activations('fc')[:, 0]\npanel.highlight(None)\npanel.sort_by(acts, 'fc · neuron 0')\n"
        "print('RESULT ' + json.dumps({'top': int(np.argmax(acts)), 'bottom': int(np.argmin(acts))}))",
    ])
    view = run_cell(panel, 0).locator(".activis-ip[data-rendered]")
    view.and_(page.locator("[data-drawn='3000']")).wait_for()
    scroller = view.locator(".av-ip-scroll")
    assert scroller.evaluate("(s) => s.scrollHeight > 2 * s.clientHeight")  # three tall groups, a short panel
    assert scroller.evaluate("(s) => s.scrollTop") == 0

    # highlighting the last class's instances brings them into view
    run_cell(panel, 1)
    page.wait_for_function("(el) => Number(el.dataset.highlightedVisible) > 0", arg=view.element_handle())
    assert scroller.evaluate("(s) => s.scrollTop") > 0
    assert int(view.get_attribute("data-scrolled-to")) in set(range(2000, 3000))

    # sorted by a neuron, the squares are filled by its activation (the palette's ramp, low to high)
    extremes = read_result(run_cell(panel, 2))
    view.and_(page.locator("[data-colour-by='values']")).wait_for()
    assert "fc · neuron 0" in view.locator("[data-role='value-legend']").inner_text()
    top = page.evaluate(FILL, [view.element_handle(), extremes["top"]])
    bottom = page.evaluate(FILL, [view.element_handle(), extremes["bottom"]])
    assert all(abs(a - b) <= 3 for a, b in zip(top, (0xfd, 0xe7, 0x25))), top  # viridis' end
    assert all(abs(a - b) <= 3 for a, b in zip(bottom, (0x44, 0x01, 0x54))), bottom  # viridis' start
