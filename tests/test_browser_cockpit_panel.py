"""CockpitPanel in a real JupyterLab: every instrument drawn, brushing, layer picker, live updates."""

import math
import re

import numpy as np
import pytest

from conftest import ARTIFACTS
from jupyter_page import open_cells, python_result, read_result, run_cell, train_live

pytestmark = pytest.mark.browser

XSS = "<img src=x onerror=alert(1)>"
B, STEPS = 32, 24

SETUP = f'''
import json, os, time, torch, torch.nn.functional as F
from torch import nn
from activis.cockpit import Cockpit
from activis.widgets.cockpit_panel import CockpitPanel

def make(quantities="full", run={XSS!r}):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    return model, opt, Cockpit(model, quantities, optimizer=opt, run=run)

def train(model, opt, cockpit, steps, pause=0.0, stop=None):
    """Train ``steps`` steps, or fewer once the file ``stop`` exists; returns how many ran."""
    g = torch.Generator().manual_seed(1)
    for step in range(steps):
        if stop is not None and os.path.exists(stop):
            return step
        x, y = torch.randn({B}, 10, generator=g), torch.randint(0, 3, ({B},), generator=g)
        opt.zero_grad()
        out = model(x)
        cockpit.backward(F.cross_entropy(out, y, reduction="none"))
        opt.step()
        cockpit.log_metrics(step, accuracy=float((out.argmax(1) == y).float().mean()))
        time.sleep(pause)
    return steps
'''

CHECK = ('print("RESULT " + json.dumps({"range": panel.step_range, "layer": panel.layer, '
         '"hist1d_steps": panel.hist1d_steps, "total": float(panel.hist1d.sum())}))')
INSTRUMENTS = ["alpha", "gauge", "maxev", "distance", "tests", "trace", "gradnorm", "hist1d", "tic", "loss",
               "hist2d", "lr"]
# the time-series instruments: the log's series each one draws, and whether on a log scale (positive values only)
LINES = {"maxev": (["HessMaxEV"], True), "distance": (["Distance", "UpdateSize"], False),
         "tests": (["NormTest", "InnerTest", "OrthoTest"], False), "trace": (["HessTrace"], False),
         "gradnorm": (["GradNorm"], False), "tic": (["TICDiag", "TICTrace"], False), "lr": (["lr"], False),
         "loss": (["Loss", "accuracy"], False)}
LOGGED = ('frame = cockpit.log.frame()\n'
          'print("RESULT " + json.dumps({"steps": frame.index.tolist(), "series": {c: [float(v) if np.isfinite(v) '
          'else None for v in frame[c]] for c in frame.columns if "/" not in c and frame[c].dtype.kind == "f"}}))')


def card(view, key):
    return view.locator(f".av-card[data-instrument='{key}']")


def shown_number(text):
    return math.nan if text == "–" else float(text)


def check_values_against_the_log(page, view, logged):
    """Each instrument draws the log's values: its point count, and what its tooltip (line charts) or
    legend (the gauge) reads at the first and the last step, to the 3 digits shown."""
    steps, series = logged["steps"], {k: np.array(v, dtype=float) for k, v in logged["series"].items()}
    for key, (names, log_scale) in LINES.items():
        names = [n for n in names if n in series]
        assert names, key
        drawn = sum(int((np.isfinite(series[n]) & ((series[n] > 0) if log_scale else True)).sum()) for n in names)
        assert card(view, key).get_attribute("data-points") == str(drawn), key
        brush = card(view, key).locator("[data-role='brush']")
        box = brush.bounding_box()
        for at, x in ((0, 1), (-1, box["width"] - 1)):
            brush.hover(position={"x": x, "y": box["height"] / 2})  # scrolled into view first
            lines = view.locator(".activis-tooltip").text_content().split("\n")
            assert lines[0] == f"step {steps[at]}", (key, lines)
            read = dict(line.split(": ") for line in lines[1:])
            assert list(read) == names, (key, lines)
            for name in names:
                want = series[name][at]
                got = shown_number(read[name])
                assert (np.isnan(want) and np.isnan(got)) or got == pytest.approx(want, rel=6e-3), (key, name, at)
    page.mouse.move(0, 0)
    # the gauge: the newest step with a gradient test, its three values in the legend
    tests = np.stack([series[n] for n in ("NormTest", "InnerTest", "OrthoTest")])
    with_test = np.flatnonzero(np.isfinite(tests).any(axis=0))
    gauge = card(view, "gauge")
    assert gauge.get_attribute("data-points") == str(len(with_test))
    assert gauge.locator(".av-sub").text_content() == f"step {steps[with_test[-1]]}"
    legend = dict(t.split(" ", 1) for t in gauge.locator("svg text").all_text_contents()
                  if t.split(" ")[0] in ("norm", "inner", "ortho"))
    for name, row in zip(("norm", "inner", "ortho"), tests[:, with_test[-1]]):
        got = shown_number(legend[name])
        assert (np.isnan(row) and np.isnan(got)) or got == pytest.approx(row, rel=6e-3), name


def test_panel_draws_every_instrument_and_links_them(lab, page):
    panel = open_cells(page, lab, "cockpit_panel.ipynb", [
        SETUP + f"model, opt, cockpit = make()\ntrain(model, opt, cockpit, {STEPS})\n"
        "panel = CockpitPanel(cockpit)\npanel",
        CHECK,
        "import numpy as np\n" + LOGGED,
    ])
    cell = run_cell(panel, 0)
    view = cell.locator(f".activis-cockpit[data-ready='1'][data-steps='{STEPS}']")
    view.wait_for()
    for key in INSTRUMENTS:
        assert int(card(view, key).get_attribute("data-points")) > 0, key
    check_values_against_the_log(page, view, read_result(run_cell(panel, 2)))
    assert card(view, "other").is_hidden()  # MeanGSNR, CABS, EarlyStopping were not tracked
    # one alpha per step but the last (it needs the next step); the last 10 % of them
    assert card(view, "alpha").get_attribute("data-points") == str(STEPS - 1)
    assert card(view, "alpha").get_attribute("data-last") == str(STEPS - 1 - int((STEPS - 1) * 0.9))
    # histograms count every per-sample gradient element of every step: B x D per step
    D = 10 * 8 + 8 + 8 * 3 + 3
    assert card(view, "hist1d").get_attribute("data-steps") == str(STEPS)
    assert float(card(view, "hist1d").get_attribute("data-total")) == STEPS * B * D
    assert float(card(view, "hist2d").get_attribute("data-total")) == STEPS * B * D
    # loss and the logged accuracy share the loss card (two series)
    assert int(card(view, "loss").get_attribute("data-points")) == 2 * STEPS
    # the run name is text, never markup
    assert view.locator(".activis-toolbar strong").text_content() == XSS
    assert view.locator("img").count() == 0
    view.screenshot(path=str(ARTIFACTS / "cockpit_panel.png"))

    # brush a step range on the loss chart: histograms and alpha follow, Python sees the range
    brush = card(view, "loss").locator("[data-role='brush']")
    box = brush.bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.25, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.6, y, steps=5)
    page.mouse.up()
    view.locator(".activis-toolbar [data-role='range-label']").filter(has_text=re.compile(r"steps \d+–\d+")).wait_for()
    first, last = (int(v) for v in view.get_attribute("data-range").split("-"))
    assert 0 < first < last < STEPS - 1
    picked = last - first + 1
    card(view, "hist1d").and_(view.locator(f"[data-steps='{picked}']")).wait_for()
    assert float(card(view, "hist1d").get_attribute("data-total")) == picked * B * D
    assert card(view, "alpha").get_attribute("data-points") == str(picked)
    result = python_result(panel, 1, lambda r: r["hist1d_steps"] == picked)
    assert result["range"] == [first, last] and result["total"] == picked * B * D

    # the layer picker: layer-wise instruments and histograms switch to the last Linear layer
    view.locator("[data-role='layer-picker']").select_option("2")
    cell.locator(".activis-cockpit[data-layer='2']").wait_for()
    card(view, "hist1d").and_(view.locator(f"[data-total='{picked * B * (8 * 3 + 3)}']")).wait_for()
    assert "layer 2" in card(view, "gradnorm").locator(".av-sub").text_content()
    result = python_result(panel, 1, lambda r: r["layer"] == "2")
    assert result["total"] == picked * B * (8 * 3 + 3)

    # clear the range: all steps again
    view.locator("[data-role='clear-range']").click()
    card(view, "hist1d").and_(view.locator(f"[data-steps='{STEPS}']")).wait_for()
    assert python_result(panel, 1, lambda r: r["range"] == [])["hist1d_steps"] == STEPS


def test_panel_updates_live_while_the_loop_runs(lab, page):
    # the loop runs until the test tells it to stop: no race between the page and a fixed-length loop
    stop = lab.root_dir / "stop-training"
    stop.unlink(missing_ok=True)
    panel = open_cells(page, lab, "cockpit_live.ipynb", [
        SETUP + "model, opt, cockpit = make('economy', run='live')\npanel = CockpitPanel(cockpit, throttle=0.3)\npanel",
        f"ran = train(model, opt, cockpit, 100_000, pause=0.05, stop={stop.name!r})\n"
        'print("RESULT " + json.dumps({"steps": ran}))',
    ])
    view = run_cell(panel, 0).locator(".activis-cockpit[data-ready='1']")
    view.wait_for()
    assert view.get_attribute("data-steps") == "0"
    # new steps arrive while the cell is still running (its prompt shows [*] until we stop it)
    ran = train_live(page, panel, view, stop, "(el) => Number(el.dataset.steps) >= 5")
    assert ran >= 5
    # and the last state arrives once the loop ends (the throttle's trailing update)
    view.and_(page.locator(f"[data-steps='{ran}']")).wait_for(timeout=60_000)
    assert int(card(view, "gradnorm").get_attribute("data-points")) == ran


SYNTHETIC = '''
import json, math
from activis.run.log import CockpitLog
from activis.widgets.cockpit_panel import CockpitPanel

# a run that tracked only the loss and the TIC: a loss with two spikes, a TIC that barely moves
log = CockpitLog({"run": "synthetic", "quantities": {"Loss": {}, "TICDiag": {}},
                  "params": [{"name": "fc.weight"}]})
for step in range(40):
    loss = 500.0 if step in (10, 30) else 1.0 + 0.01 * step
    log.append(step, {"Loss": loss, "TICDiag": 0.3001 + 0.0002 * math.sin(step / 3), "accuracy": step / 40})
panel = CockpitPanel(log)
panel
'''

GEOMETRY = """(card) => {
  const brush = card.querySelector("[data-role='brush']").getBBox();
  const box = (sel) => [...card.querySelectorAll(sel)].map((t) => t.getBBox());
  return {
    plotTop: brush.y, plotRight: brush.x + brush.width,
    legendBottoms: box("text[data-role='legend']").map((b) => b.y + b.height),
    rightLabelLefts: box("text[data-axis='yr']").map((b) => b.x),
  };
}"""


def test_panel_axes_scales_and_untracked_instruments(lab, page):
    """Axes that read, a log scale for a spiky loss, no space for untracked instruments, a brush that holds."""
    check = 'print("RESULT " + json.dumps({"range": panel.step_range}))'
    panel = open_cells(page, lab, "cockpit_axes.ipynb", [SYNTHETIC, check])
    view = run_cell(panel, 0).locator(".activis-cockpit[data-ready='1']")
    view.and_(page.locator("[data-steps='40']")).wait_for()
    # only what this configuration tracks takes space
    assert view.get_attribute("data-instruments") == "2"
    for key in INSTRUMENTS:
        assert card(view, key).is_visible() == (key in ("loss", "tic")), key

    # a TIC that moves in the fourth decimal: every tick label differs from its neighbours
    ticks = card(view, "tic").get_attribute("data-ticks").split("|")
    assert len(ticks) >= 2 and len(set(ticks)) == len(ticks), ticks
    # axes say what they show: steps along x, the quantity up y, the metric on the right axis
    loss = card(view, "loss")
    assert loss.locator("[data-role='x-label']").text_content() == "step"
    assert "loss" in loss.locator("[data-role='y-label']").text_content()
    assert loss.locator("[data-role='yr-label']").text_content() == "accuracy"
    # no label is drawn over the lines: the legend sits above the plot, the right axis right of it
    geometry = loss.locator("svg").evaluate(GEOMETRY)
    assert geometry["legendBottoms"] and max(geometry["legendBottoms"]) <= geometry["plotTop"] + 0.5, geometry
    assert geometry["rightLabelLefts"] and min(geometry["rightLabelLefts"]) >= geometry["plotRight"], geometry

    # the spiky loss reads on a log scale by itself; the toggle switches to linear and back
    assert loss.get_attribute("data-scale") == "log"
    assert loss.locator("[data-role='log-toggle']").get_attribute("aria-pressed") == "true"
    loss.locator("[data-role='log-toggle']").click()
    loss.and_(page.locator("[data-scale='linear']")).wait_for()
    assert card(view, "tic").get_attribute("data-scale") == "linear"

    # brush from 20 % to 70 % of the steps with a human hand: a step back on the way, and a new step
    # arriving from the kernel in the middle of the drag; the range is what was dragged
    brush = loss.locator("[data-role='brush']")
    box = brush.bounding_box()
    y = box["y"] + box["height"] / 2
    at = lambda f: box["x"] + box["width"] * f  # noqa: E731
    page.mouse.move(at(0.2), y)
    page.mouse.down()
    page.mouse.move(at(0.25), y, steps=3)
    page.mouse.move(at(0.24), y)
    page.evaluate("() => { window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.requestExecute("
                  "{code: 'log.append(40, {\"Loss\": 1.5, \"TICDiag\": 0.3002})'}); }")
    page.wait_for_function("(el) => el.dataset.drawWaiting === '1'", arg=view.element_handle())
    page.mouse.move(at(0.7), y, steps=8)
    page.mouse.up()
    view.locator("[data-role='range-label']").filter(has_text=re.compile(r"steps \d+–\d+")).wait_for()
    first, last = (int(v) for v in view.get_attribute("data-range").split("-"))
    assert 6 <= first <= 9 and 26 <= last <= 29, (first, last)  # 0.2 * 39 and 0.7 * 39
    assert python_result(panel, 1, lambda r: r["range"] == [first, last])["range"] == [first, last]
    view.and_(page.locator("[data-steps='41']")).wait_for()  # the waiting draw came once the drag ended
