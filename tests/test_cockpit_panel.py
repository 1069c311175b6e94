"""CockpitPanel without a browser: what it sends, how it follows the log and the selection."""

import threading
import time
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import traitlets
from torch import nn

from activis.cockpit import Cockpit, read_log
from activis.widgets import _live
from activis.widgets._arrays import array_to_json
from activis.widgets.cockpit_panel import CockpitPanel


def make(log_dir=None):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, opt, Cockpit(model, "economy", optimizer=opt, log_dir=log_dir)


def steps(model, opt, cockpit, n, start=0):
    for step in range(start, start + n):
        opt.zero_grad()
        cockpit.backward(F.cross_entropy(model(torch.randn(8, 6)), torch.randint(0, 3, (8,)), reduction="none"),
                         step=step)
        opt.step()


def test_panel_sends_arrays_and_filters_by_selection():
    model, opt, cockpit = make()
    steps(model, opt, cockpit, 6)
    panel = CockpitPanel(cockpit)
    assert list(panel.steps) == list(range(6)) and panel.layers == ["0", "2"]
    assert {"Loss", "GradNorm", "Alpha", "NormTest", "lr"} <= set(panel.series_names)
    assert "batch_size" not in panel.series_names and not any("/" in n for n in panel.series_names)
    assert panel.series.dtype == np.float32 and panel.series.shape == (len(panel.series_names), 6)
    assert np.isnan(panel.series[panel.series_names.index("Alpha"), -1])  # the last step has no alpha yet
    assert panel.layer_series.shape == (3, 2, 6)  # GradNorm, Distance, UpdateSize x layers x steps
    # numbers cross as binary buffers, not JSON lists
    assert isinstance(array_to_json(panel.series)["buffer"], memoryview)
    per_step = 8 * (6 * 5 + 5 + 5 * 3 + 3)
    assert panel.hist1d_steps == 6 and panel.hist1d.sum() == 6 * per_step and panel.hist1d_range == [-2.0, 2.0]
    assert panel.hist2d is None and panel.hist2d_steps == 0
    panel.step_range = [4, 2]  # given backwards: sorted
    assert panel.step_range == [2, 4] and panel.hist1d_steps == 3 and panel.hist1d.sum() == 3 * per_step
    panel.layer = "2"
    assert panel.hist1d.sum() == 3 * 8 * (5 * 3 + 3)
    with pytest.raises(traitlets.TraitError, match="Unknown layer 'x'. Layers: 0, 2"):
        panel.layer = "x"
    with pytest.raises(traitlets.TraitError, match=r"\[first, last\]"):
        panel.step_range = [1.0]
    assert panel.layer == "2"
    with pytest.raises(TypeError, match="shows a Cockpit, a CockpitLog or a log folder"):
        CockpitPanel(model)


def test_panel_says_how_long_the_first_step_took_and_a_log_alone_says_nothing():
    model, opt, cockpit = make()
    panel = CockpitPanel(cockpit)
    assert panel.first_step_s == -1  # no step yet: the page says the first one compiles the instruments
    steps(model, opt, cockpit, 2)
    panel.refresh()
    first = cockpit.costs()["first_ms"].sum() / 1e3
    assert panel.first_step_s == pytest.approx(first) and first > 0
    assert CockpitPanel(cockpit.log).first_step_s == -1  # a log alone has no timings


def wait_until(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_live_updates_are_throttled_and_the_last_state_arrives():
    """Counted, not timed: a throttle window longer than the loop sends nothing per step; a frozen
    clock (every step inside one window) leaves only the trailing send to deliver the last state."""
    model, opt, cockpit = make()
    held = CockpitPanel(cockpit, throttle=3600)
    sent = held.updates
    steps(model, opt, cockpit, 20)
    assert held.updates == sent and len(held.steps) == 0  # not one send per step: all wait for the window's end
    held.close()  # and closing cancels that pending send
    wait_until(lambda: not any(isinstance(t, threading.Timer) and t.function == held._push_later
                               for t in threading.enumerate()))

    model, opt, cockpit = make()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_live, "time", types.SimpleNamespace(monotonic=lambda: 0.0))
        trailing = CockpitPanel(cockpit, throttle=0.05)
        steps(model, opt, cockpit, 20)
        wait_until(lambda: len(trailing.steps) == 20)  # only the trailing send can have carried step 19
    trailing.close()

    synchronous = CockpitPanel(cockpit, throttle=0)  # every step sent at once: nothing left to wait for
    steps(model, opt, cockpit, 1, start=20)
    assert len(synchronous.steps) == 21
    synchronous.close()
    steps(model, opt, cockpit, 2, start=21)
    assert len(synchronous.steps) == 21  # a closed panel no longer follows the log


def test_panel_over_a_folder_another_process_writes(tmp_path):
    model, opt, cockpit = make(tmp_path / "run")
    steps(model, opt, cockpit, 3)
    panel = CockpitPanel(str(tmp_path / "run"))
    assert len(panel.steps) == 3
    steps(model, opt, cockpit, 2, start=3)
    panel.refresh()
    assert len(panel.steps) == 5 and panel.hist1d_steps == 5
    assert CockpitPanel(read_log(tmp_path / "run")).hist1d_steps == 5
