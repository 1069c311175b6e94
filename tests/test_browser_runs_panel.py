"""RunsPanel in a real JupyterLab: one line per run, parting step, configuration table, step brushing."""

import pytest

from conftest import ARTIFACTS
from jupyter_page import open_cells, python_result, run_cell, train_live

pytestmark = pytest.mark.browser

XSS = "<img src=x onerror=alert(1)>"
SETUP = f'''
import json, torch, torch.nn.functional as F
from torch import nn
from activis.cockpit import Cockpit
from activis.widgets.runs_panel import RunsPanel

def train(run, lr, steps=12):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    cockpit = Cockpit(model, ["Loss", "GradNorm"], optimizer=opt, run=run)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 6, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.8).long()
    for step in range(steps):
        opt.zero_grad()
        cockpit.backward(F.cross_entropy(model(x[:64]), y[:64], reduction="none"))
        opt.step()
        with torch.no_grad():
            cockpit.log_eval(step, y, model(x).softmax(1))
    return cockpit

runs = RunsPanel([train({XSS!r}, 0.1), train("fast", 0.5)], series=["Loss", "GradNorm", "eval/accuracy"])
runs
'''
CHECK = 'print("RESULT " + json.dumps({"range": runs.step_range}))'


def test_runs_panel(lab, page):
    panel = open_cells(page, lab, "runs_panel.ipynb", [SETUP, CHECK])
    cell = run_cell(panel, 0)
    view = cell.locator(".activis-runs[data-ready='1']")
    view.wait_for()
    cards = view.locator(".av-card")
    assert cards.count() == 3
    loss = view.locator(".av-card[data-series='Loss']")
    assert loss.locator("path[data-run]").count() == 2 and loss.get_attribute("data-points") == "24"
    # the runs share their first step's loss (same seed); the evaluation after the first update differs
    assert loss.locator(".av-parting").first.get_attribute("data-step") == "0"
    # run names and configuration are text, never markup; the differing setting (lr) comes first
    assert view.locator("img").count() == 0
    assert view.locator(".av-chip").first.text_content() == XSS
    configs = view.locator("table[data-role='configs'] tr")
    assert configs.first.locator("th").nth(1).text_content() == "lr"
    assert configs.nth(1).locator("td").first.text_content() == XSS
    assert configs.nth(2).locator("td").nth(1).text_content() == "0.5"
    view.screenshot(path=str(ARTIFACTS / "runs_panel.png"))
    # brush steps 3..8 on the loss chart: Python gets the range, every chart zooms to it
    hit = loss.locator("[data-role='brush']")
    hit.scroll_into_view_if_needed()
    box = hit.bounding_box()
    y = box["y"] + box["height"] / 2
    x_of = lambda step: box["x"] + box["width"] * step / 11  # noqa: E731
    page.mouse.move(x_of(3), y)
    page.mouse.down()
    page.mouse.move(x_of(5), y)
    page.mouse.move(x_of(8), y)
    page.mouse.up()
    state = python_result(panel, 1, lambda r: len(r["range"]) == 2)
    assert state["range"] == [3, 8]
    view.locator("xpath=self::*[@data-range='3,8']").wait_for()
    view.locator("button[data-role='reset']").click()
    assert python_result(panel, 1, lambda r: r["range"] == [])["range"] == []
    # hovering a line shows every run's value at that step; the legend explains the jump rings
    view.locator("xpath=self::*[@data-range='']").wait_for()
    hit = loss.locator("[data-role='brush']")
    box = hit.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 6 / 11, box["y"] + box["height"] / 2)
    tip = view.locator(".activis-tooltip")
    tip.wait_for(state="visible")
    assert tip.inner_text().startswith("step 6 · Loss") and "fast:" in tip.inner_text()
    assert view.locator("[data-role='jump-key']").inner_text() == "sudden jump"
    view.screenshot(path=str(ARTIFACTS / "runs_panel_hover.png"))


LIVE = SETUP.split("runs = RunsPanel")[0] + '''
import os, time

def live_run(stop, pause=0.05):
    """Train the "live" run until the file ``stop`` exists; returns how many steps ran."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(64, 6, generator=g)
    y = (x[:, 0] > 0).long()
    step = 0
    while not os.path.exists(stop):
        opt.zero_grad()
        cockpit.backward(F.cross_entropy(model(x), y, reduction="none"))
        opt.step()
        step += 1
        time.sleep(pause)
    return step

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.3)
cockpit = Cockpit(model, ["Loss", "GradNorm"], optimizer=opt, run="live")
runs = RunsPanel({"done": train("done", 0.1), "live": cockpit}, series=["Loss", "GradNorm"], throttle=0.3)
runs
'''


def test_runs_panel_follows_a_run_training_in_the_kernel(lab, page):
    # the loop runs until the test tells it to stop: no race between the page and a fixed-length loop
    stop = lab.root_dir / "stop-runs"
    stop.unlink(missing_ok=True)
    panel = open_cells(page, lab, "runs_live.ipynb", [
        LIVE, f"ran = live_run({stop.name!r})\n" 'print("RESULT " + json.dumps({"steps": ran}))'])
    view = run_cell(panel, 0).locator(".activis-runs[data-ready='1']")
    view.wait_for()
    loss = view.locator(".av-card[data-series='Loss']")
    assert view.get_attribute("data-steps") == "12" and loss.get_attribute("data-points") == "12"
    # the live run's line gains points while its cell still runs, and the charts widen once it passes the
    # finished run's 12 steps
    ran = train_live(page, panel, view, stop, "(el) => Number(el.dataset.steps) >= 15")
    assert ran >= 5
    # the last state arrives once the loop ends (the throttle's trailing send); the finished run keeps its line
    loss.and_(page.locator(f"[data-points='{12 + ran}']")).wait_for(timeout=60_000)
    assert view.get_attribute("data-steps") == str(max(12, ran))
    assert loss.locator("path[data-run]").count() == 2
    view.screenshot(path=str(ARTIFACTS / "runs_panel_live.png"))
