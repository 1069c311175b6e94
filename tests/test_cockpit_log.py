"""The training log: written while training, crash-safe, readable while growing, loaded side by side."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from activis.cockpit import Cockpit, CockpitLog, load_runs, read_log


def tiny_run(folder, steps=5, quantities="economy", run=None, seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cockpit = Cockpit(model, quantities, optimizer=opt, log_dir=folder, run=run)
    g = torch.Generator().manual_seed(seed)
    for step in range(steps):
        x, y = torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
        opt.zero_grad()
        cockpit.backward(F.cross_entropy(model(x), y, reduction="none"))
        opt.step()
        cockpit.log_metrics(step, accuracy=0.25 * step)
    return cockpit


def test_folder_reads_back_what_was_tracked(tmp_path):
    cockpit = tiny_run(tmp_path / "a", quantities="full")
    cockpit.close()
    log = read_log(tmp_path / "a")
    mine, theirs = cockpit.log.frame(), log.frame()
    assert list(theirs.index) == [0, 1, 2, 3, 4]
    assert set(mine.columns) == set(theirs.columns)
    numeric = [c for c in mine.columns if c != "hess_diag_method"]
    np.testing.assert_allclose(theirs[numeric].to_numpy(float), mine[numeric].to_numpy(float), equal_nan=True)
    assert (theirs["hess_diag_method"] == "ggn").all()
    # per-parameter columns, their network-wide norm, and per-layer frames
    per_param = theirs[[f"GradNorm/{n}" for n in log.param_names]]
    assert np.allclose(theirs["GradNorm"], np.sqrt((per_param ** 2).sum(axis=1)))
    assert np.allclose(theirs["HessTrace"], theirs[[f"HessTrace/{n}" for n in log.param_names]].sum(axis=1))
    layers = log.layer_frame("GradNorm")
    assert list(layers.columns) == ["0", "2"]
    assert np.allclose(layers["2"], np.hypot(theirs["GradNorm/2.weight"], theirs["GradNorm/2.bias"]))
    for name in ("GradHist1d", "GradHist2d"):
        counts, steps = log.histogram(name, 1, 3, layer="2")
        assert steps == 3 and counts.sum() == 3 * 8 * (5 * 3 + 3)
        np.testing.assert_array_equal(counts, cockpit.log.histogram(name, 1, 3, layer="2")[0])
    # plain files, nothing pickled
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        "GradHist1d.bin", "GradHist2d.bin", "meta.json", "records.jsonl"]
    assert json.loads((tmp_path / "a" / "meta.json").read_text())["arrays"]["GradHist1d"]["shape"] == [4, 100]


def test_a_torn_last_line_is_ignored_until_it_is_complete(tmp_path):
    tiny_run(tmp_path / "a", steps=3).close()
    records = tmp_path / "a" / "records.jsonl"
    with open(records, "a") as f:
        f.write('{"step": 7, "Loss": 1.')
    log = read_log(tmp_path / "a")
    assert log.steps == [0, 1, 2]
    with open(records, "a") as f:
        f.write('5}\n')
    assert log.refresh() and log.steps == [0, 1, 2, 7] and log.record(7) == {"Loss": 1.5}


def test_a_log_is_readable_while_training_goes_on(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cockpit = Cockpit(model, "economy", optimizer=opt, log_dir=tmp_path / "live")
    reader = None
    for step in range(6):
        opt.zero_grad()
        cockpit.backward(F.cross_entropy(model(torch.randn(8, 6)), torch.randint(0, 3, (8,)), reduction="none"))
        opt.step()
        if step == 2:
            reader = read_log(tmp_path / "live")
            assert reader.steps == [0, 1, 2] and reader.histogram("GradHist1d")[1] == 3
    assert reader.refresh()
    assert reader.steps == list(range(6)) and reader.histogram("GradHist1d")[1] == 6
    assert "UpdateSize" in reader.record(4) and "UpdateSize" not in reader.record(5)


def test_a_killed_training_leaves_a_readable_log(tmp_path):
    script = f"""
import sys, time, torch, torch.nn.functional as F
from torch import nn
from activis.cockpit import Cockpit
model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
cockpit = Cockpit(model, "economy", optimizer=opt, log_dir={str(tmp_path / 'crash')!r}, fsync_interval=3600)
for step in range(100000):
    opt.zero_grad()
    cockpit.backward(F.cross_entropy(model(torch.randn(8, 6)), torch.randint(0, 3, (8,)), reduction="none"))
    opt.step()
    if step == 20:
        print("running", flush=True)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "running"
        time.sleep(0.3)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    log = read_log(tmp_path / "crash")
    steps = log.steps
    assert len(steps) > 20 and steps == list(range(len(steps)))
    frame = log.frame()
    assert frame["Loss"].notna().all()
    # every histogram row a record points to is there, whole
    counts, n = log.histogram("GradHist1d")
    assert n >= len(steps) - 1 and counts.sum() == n * 8 * (6 * 5 + 5 + 5 * 3 + 3)


def test_runs_side_by_side(tmp_path):
    tiny_run(tmp_path / "a", run="first").close()
    b = tiny_run(tmp_path / "b", seed=1)
    frame = load_runs([tmp_path / "a", b.log])
    assert sorted(frame["run"].unique()) == sorted(["first", str(tmp_path / "b")])
    assert len(frame) == 10 and {"step", "Loss", "accuracy", "Alpha"} <= set(frame.columns)
    named = load_runs({"x": tmp_path / "a", "y": tmp_path / "b"})
    assert list(named["run"].unique()) == ["x", "y"]


def test_clear_errors(tmp_path):
    tiny_run(tmp_path / "a", steps=1).close()
    with pytest.raises(FileExistsError, match="already holds a cockpit log"):
        tiny_run(tmp_path / "a", steps=1)
    with pytest.raises(FileNotFoundError, match="not a cockpit log"):
        read_log(tmp_path / "missing")
    log = read_log(tmp_path / "a")
    with pytest.raises(KeyError, match="Unknown layer 'nope'; layers: 0, 2"):
        log.histogram("GradHist1d", layer="nope")
    with pytest.raises(KeyError, match="not in this log"):
        log.histogram("GradHist2d")
    with pytest.raises(ValueError, match="rows have shape"):
        CockpitLog({"arrays": {"h": {"dtype": "<i8", "shape": [2]}}}).append(0, {}, {"h": np.zeros(3)})
    meta = json.loads((tmp_path / "a" / "meta.json").read_text())
    (pathlib.Path(tmp_path / "newer")).mkdir()
    (tmp_path / "newer" / "meta.json").write_text(json.dumps({**meta, "version": 99}))
    with pytest.raises(ValueError, match="newer activis"):
        read_log(tmp_path / "newer")
