"""The training log: written while training, crash-safe, readable while growing, loaded side by side."""

import json
import os
import pathlib
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from activis.cockpit import Cockpit, CockpitError, CockpitLog, load_runs, read_log


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
        "GradHist1d.bin", "GradHist2d.bin", "meta.json", "records.jsonl", "run.json", "series"]
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
        assert proc.stdout.readline().strip() == "running"  # 21 steps flushed; killed while writing more
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
    with pytest.raises(CockpitError, match="already holds a cockpit log"):
        tiny_run(tmp_path / "a", steps=1)
    with pytest.raises(CockpitError, match="not a cockpit log"):
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


# ------------------------------------------------------------------ logs from elsewhere
def _damaged_copy(tmp_path, lines):
    tiny_run(tmp_path / "a", steps=4).close()
    records = tmp_path / "a" / "records.jsonl"
    good = records.read_bytes().splitlines(keepends=True)
    records.write_bytes(b"".join(good[:2] + lines + good[2:]))
    return tmp_path / "a", len(good)


@pytest.mark.parametrize("line, reason", [
    (b'{"Loss": 1.0}\n', r"no integer 'step'"),
    (b'{"step": "three", "Loss": 1.0}\n', r"no integer 'step'"),
    (b'{"step": true}\n', r"no integer 'step'"),
    (b'[1, 2, 3]\n', r"not a JSON object"),
    (b'42\n', r"not a JSON object"),
    (b'{"step": 9, "Loss": \xff\xfe}\n', r"not valid UTF-8"),
    (b'{"step": 9, "Loss": \n', r"not valid JSON"),
    (b'{"step": 9, "_rows": {"GradHist1d": "x"}}\n', r"bad '_rows'"),
    (b'{"step": 9, "_rows": {"GradHist1d": -1}}\n', r"bad '_rows'"),
    (b'{"step": 9, "_rows": [1]}\n', r"bad '_rows'"),
    (b'{"step": 9, "_skipped": 3}\n', r"bad '_skipped'"),
])
def test_one_bad_line_is_skipped_with_a_warning_naming_file_and_line(tmp_path, line, reason):
    folder, n_good = _damaged_copy(tmp_path, [line])
    with pytest.warns(UserWarning, match=rf"records.jsonl, line 3: skipped \({reason}"):
        log = read_log(folder)
    assert log.steps == [0, 1, 2, 3]  # every good line, before and after the bad one
    assert log.frame()["Loss"].notna().all() and log.histogram("GradHist1d")[1] == 4


def test_several_bad_lines_are_listed_once(tmp_path):
    folder, _ = _damaged_copy(tmp_path, [b"[]\n", b"\xff\n", b'{"x": 1}\n'])
    with pytest.warns(UserWarning, match=r"skipped 3 damaged lines: line 3 .*line 4 .*line 5"):
        log = read_log(folder)
    assert log.steps == [0, 1, 2, 3]


@pytest.mark.parametrize("meta, reason", [
    (b"{not json", r"not valid JSON"),
    (b"\xff\xfe\x00", r"not valid UTF-8"),
    (b"[1, 2]", r"not a JSON object"),
    (b'{"format": "activis.cockpit-log", "version": 1, "params": 3, "arrays": []}', r"'params'.*'arrays'"),
    (b'{"format": "activis.cockpit-log", "version": 1, "params": [{"name": 1}], '
     b'"arrays": {"GradHist1d": {"dtype": "object", "shape": [4]}}}', r"'params'.*'arrays'"),
    (b'{"format": "activis.cockpit-log", "version": 1, '
     b'"arrays": {"GradHist1d": {"dtype": "<i8", "shape": [99999999999, 99999999999]}}}', r"'arrays'"),
    (b'{"format": "activis.cockpit-log", "version": "new"}', r"'version'"),
])
def test_a_damaged_meta_file_still_leaves_the_records_readable(tmp_path, meta, reason):
    tiny_run(tmp_path / "a", steps=3).close()
    (tmp_path / "a" / "meta.json").write_bytes(meta)
    with pytest.warns(UserWarning, match=rf"meta.json.*damaged.*{reason}"):
        log = read_log(tmp_path / "a")
    assert log.steps == [0, 1, 2] and log.frame()["Loss"].notna().all()
    assert (tmp_path / "a" / "meta.json").read_bytes() == meta  # nothing is rewritten


def test_a_missing_histogram_file_loses_only_the_histograms(tmp_path):
    tiny_run(tmp_path / "a", steps=3).close()
    (tmp_path / "a" / "GradHist1d.bin").unlink()
    with pytest.warns(UserWarning, match=r"GradHist1d.bin.*cannot be read"):
        log = read_log(tmp_path / "a")
    assert log.steps == [0, 1, 2] and log.histogram("GradHist1d")[1] == 0


def test_not_a_log_at_all_is_a_clear_error(tmp_path):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "meta.json").write_text(json.dumps({"format": "someone-else"}))
    with pytest.raises(CockpitError, match=r"not a cockpit log \(format 'someone-else'"):
        read_log(tmp_path / "other")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "meta.json").write_text("{not json")
    with pytest.raises(CockpitError, match=r"meta.json is damaged .*and there is no records.jsonl"):
        read_log(tmp_path / "broken")


def test_reading_a_log_imports_no_torch(tmp_path):
    tiny_run(tmp_path / "a", steps=2).close()
    code = (f"import sys; from activis import read_log; log = read_log({str(tmp_path / 'a')!r}); "
            "log.frame(); log.histogram('GradHist1d'); import activis.run.log; "
            "from activis.cockpit import load_runs, CockpitLog; load_runs([log]); "
            "print(sorted(m for m in ('torch', 'numba') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_frame_is_built_once_per_change_and_handed_out_as_copies():
    log = CockpitLog({"run": "r", "params": [{"name": "w", "shape": [2], "layer": "(model)"}]})
    log.append(0, {"Loss": 1.0})
    first = log.frame()
    first.loc[0, "Loss"] = 99.0  # a caller's edit stays in its copy
    assert log.frame().loc[0, "Loss"] == 1.0 and log.frame() is not log.frame()
    log.append(1, {"Loss": 0.5})
    log.append(1, {"accuracy": 0.75})  # merged into step 1: the next frame has it
    assert log.frame()["Loss"].tolist() == [1.0, 0.5] and log.frame().loc[1, "accuracy"] == 0.75
