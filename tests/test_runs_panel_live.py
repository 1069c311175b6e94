"""RunsPanel over runs still training: a live cockpit in this process, a folder another process appends to."""

import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_cockpit_panel import wait_until
from torch import nn

from activis import ViewError
from activis.cockpit import Cockpit, read_log
from activis.widgets.runs_panel import RunsPanel

X = torch.randn(64, 6, generator=torch.Generator().manual_seed(1))
Y = (X[:, 0] > 0).long() + (X[:, 1] > 0.8).long()


def make(lr, **kwargs):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    return model, opt, Cockpit(model, ["Loss", "GradNorm"], optimizer=opt, **kwargs)


def train(model, opt, cockpit, n, start=0):
    for step in range(start, start + n):
        opt.zero_grad()
        cockpit.backward(F.cross_entropy(model(X), Y, reduction="none"), step=step)
        opt.step()


def test_a_live_run_grows_beside_a_finished_one(tmp_path):
    finished = make(0.1, log_dir=tmp_path / "slow", run="slow")
    train(*finished, 10)
    finished[2].close()
    model, opt, live = make(0.5, run="fast")
    panel = RunsPanel([tmp_path / "slow", live], series=["Loss", "GradNorm"], throttle=0)
    assert panel.run_names == ["slow", "fast"] and panel.values.shape == (2, 2, 10)
    assert np.isnan(panel.values[1]).all() and panel.partings == []  # the live run has not started yet
    panel.step_range = [2, 6]
    sent = panel.updates
    train(model, opt, live, 4)
    assert panel.updates == sent + 4  # throttle=0: every step at once
    assert panel.values.shape == (2, 2, 10) and np.isfinite(panel.values[1, :, :4]).all()
    assert np.isnan(panel.values[1, :, 4:]).all()
    # same seed, same first batch: the runs part after the first update, where their losses differ
    assert panel.partings == [{"a": "slow", "b": "fast", "step": 1}]
    steps = panel.config_columns.index("steps")
    assert [row[steps] for row in panel.config_rows] == ["10", "4"]
    assert panel.step_range == [2, 6]  # the brush holds while the run grows, and its means follow
    loss = panel.series_names.index("Loss")
    assert panel.range_means[1, loss] == pytest.approx(live.log.frame().loc[2:3, "Loss"].mean(), rel=1e-6)
    train(model, opt, live, 8, start=4)
    assert panel.steps.tolist() == list(range(12)) and np.isfinite(panel.values[1]).all()
    assert np.isnan(panel.values[0, :, 10:]).all() and np.isfinite(panel.values[0, :, :10]).all()
    with pytest.warns(UserWarning, match=r"series 'accuracy' is left out .*\['slow'\]"):
        live.log_metrics(12, accuracy=0.5)  # a series the finished run lacks: no chart of it (not shared)
    assert panel.series_names == ["Loss", "GradNorm"]
    live.close()  # the run finishes: the panel keeps what it logged (step 12 has nothing of the charts)
    assert panel.values.shape == (2, 2, 12) and np.isfinite(panel.values[1, :, :12]).all()
    panel.close()
    train(model, opt, live, 1, start=13)
    assert panel.steps.tolist() == list(range(12))  # a closed panel no longer follows


def test_throttling_merges_the_steps_of_one_window_into_one_send():
    """No timing: a window that cannot end during the loop (throttle=3600) holds every step, and the one
    send it schedules (what its timer runs when the window ends) carries all of them at once."""
    model, opt, live = make(0.5, run="live")
    held = RunsPanel([live], throttle=3600)
    sent = held.updates
    train(model, opt, live, 15)
    assert held.updates == sent and len(held.steps) == 0  # nothing per step: all wait for the window's end
    timer = held._timer
    assert timer is not None and timer.function == held._push_later  # one pending send for the whole window
    timer.cancel()
    timer.function()  # the window ends
    assert held.updates == sent + 1 and held.steps.tolist() == list(range(15))
    assert set(held.series_names) >= {"Loss", "GradNorm"}
    train(model, opt, live, 1, start=15)  # a new window, a new pending send
    assert held._timer is not None and held.updates == sent + 1
    held.close()  # closing cancels the pending send
    wait_until(lambda: not any(isinstance(t, threading.Timer) and t.function == held._push_later
                               for t in threading.enumerate()))
    assert held.updates == sent + 1


WRITER = textwrap.dedent('''
    import pathlib, sys, time, torch, torch.nn.functional as F
    from torch import nn
    from activis.cockpit import Cockpit
    folder, go = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cockpit = Cockpit(model, ["Loss", "GradNorm"], optimizer=opt, log_dir=folder, run="elsewhere")
    x, y = torch.randn(32, 6), torch.randint(0, 3, (32,))
    for step in range(7):
        while step == 3 and not go.exists():  # the reader looks at three steps first
            time.sleep(0.01)
        opt.zero_grad()
        cockpit.backward(F.cross_entropy(model(x), y, reduction="none"), step=step)
        opt.step()
    cockpit.close()
''')


def test_a_folder_another_process_appends_to_is_polled(tmp_path):
    folder, go = tmp_path / "run", tmp_path / "go"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(folder), str(go)])
    try:
        wait_until(lambda: (folder / "meta.json").exists() and len(read_log(folder).steps) == 3, timeout=120)
        polled = RunsPanel([folder], poll=0.05, throttle=0)
        manual = RunsPanel([folder], poll=0)
        assert polled.steps.tolist() == manual.steps.tolist() == [0, 1, 2]
        go.touch()
        assert writer.wait(timeout=120) == 0
        wait_until(lambda: len(polled.steps) == 7)  # no refresh(): the panel re-read the folder itself
        assert np.isfinite(polled.values).all()
        assert polled.config_rows[0][polled.config_columns.index("steps")] == "7"
        assert manual.steps.tolist() == [0, 1, 2]  # poll=0: only refresh() reads the folder again
        manual.refresh()
        assert manual.steps.tolist() == list(range(7))
        polled.close()
        manual.close()
    finally:
        writer.kill()
        writer.wait()


def test_bad_throttle_or_poll_is_refused_by_name(tmp_path):
    _, _, live = make(0.1)
    with pytest.raises(ViewError, match="throttle is the seconds between live updates, 0 or more, not -1"):
        RunsPanel([live], throttle=-1)
    with pytest.raises(ViewError, match="poll is the seconds between reads .* not 'often'"):
        RunsPanel([live], poll="often")


def test_a_chart_asked_for_waits_for_a_live_run_to_log_it(tmp_path):
    done = make(0.1, run="done")
    train(*done, 4)
    for step in range(4):
        done[2].log_metrics(step, accuracy=0.25 * step)
    model, opt, live = make(0.5, run="live")
    panel = RunsPanel([done[2], live], series=["Loss", "accuracy"], throttle=0)
    train(model, opt, live, 2)  # the live run has a loss, no accuracy yet: its accuracy line is empty
    assert panel.series_names == ["Loss", "accuracy"] and np.isnan(panel.values[1, 1]).all()
    assert np.isfinite(panel.values[1, 0, :2]).all() and np.isnan(panel.summary().loc["live", "accuracy"])
    live.log_metrics(1, accuracy=0.75)
    assert panel.values[1, 1, 1] == 0.75 and panel.summary().loc["live", "accuracy"] == 0.75
    panel.close()
