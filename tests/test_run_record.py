"""The run record (activis.run): one folder per training run, read without torch, as untrusted input."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import activis
from activis import CockpitError, CockpitLog, Run, RunError, compare, open_run, read_log
from activis.run.chart import chart, min_max
from activis.run.scalars import FolderScalars, LogScalars, scalars_of

REPO = pathlib.Path(__file__).resolve().parent.parent
PARAMS = [{"name": "w", "shape": [2], "layer": "(model)"}, {"name": "b", "shape": [1], "layer": "(model)"}]


def write_log(path, steps=50, run="r", seed=0, sync_every=None):
    """A step log as the cockpit writes it: a loss, a per-parameter gradient norm, a learning rate."""
    rng = np.random.default_rng(seed)
    log = CockpitLog({"run": run, "params": PARAMS, "quantities": {"Loss": {}, "GradNorm": {"aggregate": "norm"}}},
                     path, fsync_interval=3600)
    for t in range(steps):
        log.append(t, {"Loss": float(rng.normal()), "GradNorm": [float(v) for v in rng.random(2)], "lr": 0.1})
        if sync_every and t % sync_every == sync_every - 1:
            log.sync()
    log.close()
    return log


def snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(pathlib.Path(folder).rglob("*")) if p.is_file()}


BLOCKER = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "sklearn", "scipy"):
            raise ImportError(f"{name} is blocked in this test")
sys.meta_path.insert(0, Block())
"""


def test_a_run_opens_and_compares_where_torch_sklearn_and_scipy_cannot_be_imported(tmp_path):
    write_log(tmp_path / "a", seed=0)
    write_log(tmp_path / "b", seed=1)
    run = Run.create(tmp_path / "c", name="c", config={"epochs": 2})
    run.add_finding({"step": 3, "check": "loss plateau"})
    run.log_checkpoint_metrics(10, accuracy=0.5)
    code = BLOCKER + textwrap.dedent(f"""
        import activis
        from activis.run import volatility
        root = {str(tmp_path)!r}
        run = activis.open_run(root + "/c")
        assert run.config["epochs"] == 2 and len(run.findings) == 1 and run.metrics.loc[10, "accuracy"] == 0.5
        a = activis.open_run(root + "/a")
        assert len(a.log.frame()) == 50 and a.store is None and a.checkpoints == []
        runs = activis.compare([root + "/a", root + "/b"])
        assert runs.series() == ["Loss", "GradNorm", "lr"] and runs.partings()[("r", "r'")] == 0
        runs.configs, runs.chart(["Loss"], width=10), activis.load_runs([root + "/a"]), volatility(a, ["Loss"])
        print(sorted(m for m in ("torch", "sklearn", "scipy") if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[]"


def test_an_old_cockpit_log_folder_opens_as_a_run_with_only_a_step_log(tmp_path):
    write_log(tmp_path / "old")
    for file in (tmp_path / "old" / "series").iterdir():  # written before the columns existed
        file.unlink()
    (tmp_path / "old" / "series").rmdir()
    run = open_run(tmp_path / "old")
    assert run.name == "r" and run.log.steps == list(range(50)) and run.info == {}
    assert run.config == {}
    assert run.findings.empty and run.metrics.empty and run.store is None and run.dynamics is None
    assert isinstance(run.scalars, FolderScalars) is False and isinstance(run.scalars, LogScalars)
    assert "1 steps" not in repr(run) and "50 steps" in repr(run)
    with pytest.raises(RunError, match="not a run record"):
        open_run(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunError, match=r"not a run record \(no run.json"):
        open_run(tmp_path / "empty")


def test_the_columns_hold_what_the_lines_hold_and_the_lines_past_them(tmp_path):
    log = write_log(tmp_path / "a", steps=40, sync_every=25)  # the index covers 25 steps, then close covers all
    folder = scalars_of(tmp_path / "a")
    lines = LogScalars(read_log(tmp_path / "a"))
    assert isinstance(folder, FolderScalars) and list(folder.names) == list(lines.names) == ["Loss", "GradNorm", "lr"]
    for name in folder.names:
        np.testing.assert_array_equal(folder.read(name)[0], lines.read(name)[0])
        np.testing.assert_array_equal(folder.read(name)[1], lines.read(name)[1])  # bit for bit
    assert folder.n_steps == 40 and folder.config == log.config
    # a process killed after its last sync: the lines past the index are read from records.jsonl
    with open(tmp_path / "a" / "records.jsonl", "a") as f:
        f.write(json.dumps({"step": 40, "Loss": 7.0}) + "\n" + '{"step": 41, "Loss": ' + "\n")
    with pytest.warns(UserWarning, match=r"records.jsonl: skipped 1 damaged line\(s\): line 42 \(not valid JSON"):
        folder = scalars_of(tmp_path / "a")
    assert folder.read("Loss")[0][-1] == 40 and folder.read("Loss")[1][-1] == 7.0 and folder.n_steps == 41
    seen = []
    folder.subscribe(seen.append)
    with open(tmp_path / "a" / "records.jsonl", "a") as f:
        f.write(json.dumps({"step": 42, "Loss": 8.0}) + "\n" + json.dumps({"step": 43, "Loss": "high"}) + "\n")
    with pytest.warns(UserWarning, match=r"line 44 \(left out 'Loss': not numbers in a series of numbers\)"):
        assert folder.refresh()
    assert seen == [folder] and folder.read("Loss")[1][-1] == 8.0


@pytest.mark.parametrize("damage, why", [
    (lambda d: (d / "series" / "index.json").write_text("{"), "not valid JSON"),
    (lambda d: (d / "series" / "index.json").write_text("[]"), "not an activis series index"),
    (lambda d: _edit_index(d, lambda i: i["series"]["Loss"].update(file="../../records.jsonl")), "bad entry"),
    (lambda d: _edit_index(d, lambda i: i["series"]["Loss"].update(rows=10 ** 9)), "fewer rows"),
    (lambda d: _edit_index(d, lambda i: i.update(records_bytes=[1])), "bad 'records_bytes'"),
    (lambda d: (d / "records.jsonl").write_bytes(b" " + (d / "records.jsonl").read_bytes()), "does not match"),
    (lambda d: _symlink_out(d / "series" / "Loss.f8"), "points outside"),
])
def test_damaged_or_foreign_columns_fall_back_to_the_lines_with_a_warning(tmp_path, damage, why):
    write_log(tmp_path / "a", steps=30)
    damage(tmp_path / "a")
    before = snapshot(tmp_path / "a")
    with pytest.warns(UserWarning, match=rf"series/index.json: .*{why}.*JSON lines are read instead"):
        source = scalars_of(tmp_path / "a")
    assert isinstance(source, LogScalars) and len(source.read("Loss")[0]) == 30
    assert snapshot(tmp_path / "a") == before  # reading changes no file


def _edit_index(folder, change):
    index = json.loads((folder / "series" / "index.json").read_text())
    change(index)
    (folder / "series" / "index.json").write_text(json.dumps(index))


def _symlink_out(path):
    outside = path.parent.parent.parent / "elsewhere.f8"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)


def test_a_step_log_is_untrusted_input(tmp_path):
    folder = tmp_path / "a"
    write_log(folder, steps=3)
    with open(folder / "records.jsonl", "a") as f:
        f.write('{"step": 3, "Loss": "high"}\n{"step": 4, "_config": [1, 2]}\n{"step": 5, "Loss": 1.5}\n')
    with pytest.warns(UserWarning, match=r"records.jsonl: skipped 2 damaged lines: line 4 \(left out 'Loss': text in "
                                         r"a series of numbers; nothing else on the line\); line 5 \(bad '_config' "
                                         r"\(not a mapping\)\)"):
        log = read_log(folder)
    assert log.frame()["Loss"].dtype == np.float64 and log.frame().loc[5, "Loss"] == 1.5
    assert log.steps == [0, 1, 2, 5]  # the damaged lines add no step of their own
    # array names and files that lead out of the folder are refused, as the store refuses them
    meta = json.loads((folder / "meta.json").read_text())
    meta["arrays"] = {"../../evil": {"dtype": "<i8", "shape": [2, 3]}, "/etc/passwd": {"dtype": "<i8", "shape": [1]}}
    (folder / "meta.json").write_text(json.dumps(meta))
    with pytest.warns(UserWarning, match=r"meta.json is damaged \(bad 'arrays' \['\.\./\.\./evil', '/etc/passwd'\]"):
        assert read_log(folder).meta["arrays"] == {}
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_bytes((folder / "records.jsonl").read_bytes())
    (folder / "records.jsonl").unlink()
    (folder / "records.jsonl").symlink_to(elsewhere)
    with pytest.raises(CockpitError, match="'records.jsonl' points outside the log folder"), pytest.warns(UserWarning):
        read_log(folder)


def test_create_config_findings_and_metrics(tmp_path):
    run = Run.create(tmp_path / "run", name="first", config={"epochs": 3, "lr": 0.1})
    assert json.loads((tmp_path / "run" / "run.json").read_text())["format"] == "activis.run"
    assert run.name == "first" and run.config == {"epochs": 3, "lr": 0.1} and run.log is None
    run.add_finding({"step": 4, "check": "exploding gradients", "layers": ["fc1"]})
    run.add_finding({"check": "no step"})
    run.log_checkpoint_metrics(10, accuracy=0.8)
    run.log_checkpoint_metrics(10, loss=0.4)  # another metric of the same checkpoint
    run.log_checkpoint_metrics(20, accuracy=0.9, loss=0.3)
    again = open_run(tmp_path / "run")
    assert again.findings["check"].tolist() == ["exploding gradients", "no step"]
    assert again.findings["step"].iloc[0] == 4 and np.isnan(again.findings["step"].iloc[1])
    assert again.metrics.to_dict() == {"accuracy": {10: 0.8, 20: 0.9}, "loss": {10: 0.4, 20: 0.3}}
    before = snapshot(tmp_path / "run")
    bad = [
        (lambda: run.log_checkpoint_metrics(10, accuracy=0.7), r"step 10 already has \['accuracy'\]"),
        (lambda: run.log_checkpoint_metrics(-1, accuracy=0.7), r"step.*0 or more, not -1"),
        (lambda: run.log_checkpoint_metrics(30, accuracy="high"), r"metrics are numbers"),
        (lambda: run.log_checkpoint_metrics(30), r"at least one metric"),
        (lambda: run.add_finding(["step", 3]), r"a finding is a mapping"),
        (lambda: run.add_finding({"step": "3"}), r"'step'.*not '3'"),
        (lambda: run.add_finding({"step": 3, "model": object()}), r"plain JSON"),
        (lambda: run.set_config(optimizer=[1]), r"optimizer is a mapping"),
        (lambda: Run.create(tmp_path / "run"), r"already holds a run record.*overwrite=True"),
        (lambda: Run.create(tmp_path / "other", config={"f": print}), r"plain JSON"),
        (lambda: Run.create(tmp_path / "other", name=3), r"name is the run's name"),
    ]
    for call, message in bad:
        with pytest.raises(RunError, match=message):
            call()
    assert snapshot(tmp_path / "run") == before and not (tmp_path / "other").exists()
    fresh = Run.create(tmp_path / "run", overwrite=True)
    assert fresh.findings.empty and fresh.name == "run"


def test_damaged_findings_metrics_and_run_json_are_skipped_with_warnings(tmp_path):
    run = Run.create(tmp_path / "run")
    (tmp_path / "run" / "findings.jsonl").write_text('{"step": 1, "check": "a"}\n[1, 2]\n{"step": "x"}\n')
    (tmp_path / "run" / "metrics.jsonl").write_text('{"step": 1, "accuracy": 0.5}\n{"step": 2, "accuracy": "hi"}\n')
    with pytest.warns(UserWarning, match=r"findings.jsonl: skipped 2 damaged line\(s\): line 2 \(not a JSON object\); "
                                         r"line 3 \(bad 'step' 'x'\)"):
        assert len(run.findings) == 1
    with pytest.warns(UserWarning, match=r"metrics.jsonl, step 2: skipped \(not numbers: \['accuracy'\]\)"):
        assert run.metrics["accuracy"].to_dict() == {1: 0.5}
    (tmp_path / "run" / "run.json").write_text('{"format": "activis.run", "version": 1, "config": [1]}')
    with pytest.warns(UserWarning, match=r"run.json is damaged \(bad 'config'\)"):
        assert open_run(tmp_path / "run").config == {}
    (tmp_path / "run" / "run.json").write_text('{"format": "someone-else"}')
    with pytest.raises(RunError, match="not a run record .format 'someone-else'"):
        open_run(tmp_path / "run")
    (tmp_path / "run" / "run.json").write_text('{"format": "activis.run", "version": 9}')
    with pytest.raises(RunError, match="newer activis"):
        open_run(tmp_path / "run")


def test_subscribers_get_every_record_the_log_writes(tmp_path):
    run = Run.create(tmp_path / "run")
    log = run.start_log({"run": "live", "params": PARAMS})
    seen = []
    unsubscribe = run.log.subscribe(lambda log: seen.append(log.steps[-1]))
    for t in range(3):
        log.append(t, {"Loss": 1.0 / (t + 1)})
    unsubscribe()
    log.append(3, {"Loss": 0.1})
    assert seen == [0, 1, 2] and run.log is log and open_run(tmp_path / "run").log.steps == [0, 1, 2, 3]
    with pytest.raises(CockpitError, match="already holds a cockpit log"):
        run.start_log({"run": "again"})


def test_downsampling_is_exact_at_full_zoom_and_keeps_every_bucket_s_min_and_max():
    rng = np.random.default_rng(0)
    steps = np.sort(rng.choice(100_000, 20_000, replace=False))
    values = rng.normal(size=len(steps))
    values[1234] = 50.0  # a spike
    full = chart([[(steps, values)]], 0, 99_999, 300)
    assert not full.exact and full.values.shape == (1, 1, 600) and np.nanmax(full.values) == 50.0
    edges = np.unique(np.linspace(0, 100_000, 301).round().astype(np.int64))
    for b in range(300):
        inside = values[(steps >= edges[b]) & (steps < edges[b + 1])]
        pair = full.values[0, 0, 2 * b: 2 * b + 2]
        assert sorted(pair) == [inside.min(), inside.max()]
        assert pair[0] == (inside.min() if np.argmin(inside) <= np.argmax(inside) else inside.max())
    np.testing.assert_array_equal(full.steps[0::2], edges[:-1])
    zoom = chart([[(steps, values)]], 1000, 5000, 1000)  # fewer points than pixels: the points themselves
    keep = (steps >= 1000) & (steps <= 5000)
    assert zoom.exact
    np.testing.assert_array_equal(zoom.steps, steps[keep])
    np.testing.assert_array_equal(zoom.values[0, 0], values[keep])
    assert np.isnan(min_max(np.array([5]), np.array([1.0]), np.array([0, 2, 4, 6]))[:4]).all()


def test_compare_charts_runs_of_different_steps_on_one_axis(tmp_path):
    write_log(tmp_path / "a", steps=10, run="a")
    write_log(tmp_path / "b", steps=20, run="b", seed=1)
    runs = compare([tmp_path / "a", open_run(tmp_path / "b")])
    shown = runs.chart(["Loss", "lr"], width=100)
    assert shown.exact and shown.steps.tolist() == list(range(20)) and shown.values.shape == (2, 2, 20)
    assert np.isnan(shown.values[0, :, 10:]).all() and (shown.values[:, 1, :10] == 0.1).all()
    np.testing.assert_allclose(runs.means(["lr"]), [[0.1], [0.1]])
    with pytest.raises(RunError, match="width is the chart's width in pixels"):
        runs.chart(["Loss"], width=0)
    with pytest.raises(RunError, match="a run is a folder, a Run, a CockpitLog or a Cockpit, not int"):
        compare([3])
    with pytest.raises(RunError, match="compare at least one run"):
        compare([])
    assert activis.compare_runs is activis.compare and activis.load_runs([tmp_path / "a"])["run"].iloc[0] == "a"


def test_the_runs_panel_asks_for_a_pixel_width_and_a_step_range(tmp_path):
    from activis.widgets.runs_panel import RunsPanel

    write_log(tmp_path / "a", steps=3000, run="a")
    write_log(tmp_path / "b", steps=2000, run="b", seed=1)
    panel = RunsPanel([tmp_path / "a", tmp_path / "b"], series=["Loss"], poll=0)
    panel.chart_width = 100  # the page says how wide a chart is
    assert panel.values.shape == (2, 1, 200) and panel.steps[-1] == 2999
    whole = read_log(tmp_path / "a").frame()["Loss"]
    assert np.nanmax(panel.values[0]) == np.float32(whole.max())
    panel.step_range = [500, 560]  # zoomed in: the exact points of that range
    assert panel.steps.tolist() == list(range(500, 561))
    np.testing.assert_array_equal(panel.values[0, 0], whole.loc[500:560].to_numpy(np.float32))
    assert panel.range_means[0, 0] == pytest.approx(whole.loc[500:560].mean(), rel=1e-6)
    panel.step_range = []
    assert panel.values.shape == (2, 1, 200)
    panel.close()


DDP_WORKER = """
import sys, torch, torch.distributed as dist
from torch import nn
import torch.nn.functional as F
from activis import Cockpit
dist.init_process_group("gloo")
torch.manual_seed(0)
model = nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
cockpit = Cockpit(model, ["Loss", "GradNorm"], optimizer=opt, log_dir=sys.argv[1], run="ddp")
for step in range(3):
    opt.zero_grad()
    cockpit.backward(F.cross_entropy(model(torch.randn(8, 4)), torch.zeros(8, dtype=torch.long), reduction="none"))
    opt.step()
cockpit.close()
print(f"RANK {dist.get_rank()} STEPS {len(cockpit.log.steps)} RUN {cockpit.run is not None}", flush=True)
dist.destroy_process_group()
"""


def test_under_torchrun_only_rank_0_writes_the_run_record(tmp_path):
    from test_capture import free_port

    worker = tmp_path / "worker.py"
    worker.write_text(DDP_WORKER)
    torchrun = pathlib.Path(sys.executable).with_name("torchrun")
    proc = subprocess.run([str(torchrun), "--nproc_per_node=2", f"--master_port={free_port()}", str(worker),
                           str(tmp_path / "run")], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RANK 0 STEPS 3 RUN True" in proc.stdout and "RANK 1 STEPS 3 RUN False" in proc.stdout
    run = open_run(tmp_path / "run")
    assert run.log.steps == [0, 1, 2] and run.config["optimizer"]["class"] == "SGD"
    assert run.config["model"]["parameters"] == 10
    assert len((tmp_path / "run" / "records.jsonl").read_text().splitlines()) == 3  # one writer, not two


def test_run_create_on_another_rank_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    run = Run.create(tmp_path / "run", config={"epochs": 1})
    run.add_finding({"step": 1})
    run.log_checkpoint_metrics(1, accuracy=1.0)
    log = run.start_log({"run": "r"})
    log.append(0, {"Loss": 1.0})
    assert not (tmp_path / "run").exists() and run.config == {"epochs": 1} and log.directory is None


def test_the_cockpit_writes_the_optimizer_and_a_model_summary_into_run_json(tmp_path):
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    run = Run.create(tmp_path / "run", config={"batch_size": 8})
    cockpit = activis.Cockpit(model, ["Loss"], optimizer=opt, log_dir=run)
    cockpit.close()
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["config"] == {"batch_size": 8}
    assert {k: info["optimizer"][k] for k in ("class", "lr", "momentum", "weight_decay")} == {
        "class": "SGD", "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4}
    assert info["model"]["class"] == "Sequential" and info["model"]["parameters"] == 3 * 4 + 4 + 4 * 2 + 2
    assert [m["type"] for m in info["model"]["modules"]] == ["Sequential", "Linear", "ReLU", "Linear"]
    assert open_run(tmp_path / "run").config["optimizer"]["lr"] == 0.05
    late = activis.Cockpit(model, ["Loss"], log_dir=tmp_path / "late")  # an optimizer seen first in training
    loss = nn.functional.mse_loss(model(torch.randn(5, 3)), torch.zeros(5, 2), reduction="none").mean(1)
    with late(0, loss=loss.mean(), individual_losses=loss, optimizer=opt):
        loss.mean().backward()
    late.close()
    assert open_run(tmp_path / "late").config["optimizer"]["class"] == "SGD"


def test_the_runs_panel_marks_a_jump_in_the_pixel_that_holds_it(tmp_path):
    from activis.widgets.runs_panel import RunsPanel

    log = CockpitLog({"run": "spiky"}, tmp_path / "a")
    for t in range(3000):
        log.append(t, {"Loss": 1.0 + 0.001 * np.sin(t) + (5.0 if t == 1500 else 0.0)})
    log.close()
    panel = RunsPanel([open_run(tmp_path / "a")], poll=0)
    panel.chart_width = 100
    marked = panel.steps[np.flatnonzero(panel.jumps[0, 0])]
    assert len(marked) and all(1470 <= s <= 1530 for s in marked)  # the bucket of step 1500 (30 steps a pixel)
    assert np.nanmax(panel.values[0, 0]) == np.float32(6.0 + 0.001 * np.sin(1500))
    panel.step_range = [1490, 1510]  # zoomed in: the jump at its own step
    assert 1500 in panel.steps[np.flatnonzero(panel.jumps[0, 0])].tolist()
    panel.close()
