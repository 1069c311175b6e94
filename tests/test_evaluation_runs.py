"""Metrics during training (Cockpit.log_eval, volatility), runs side by side, two stores compared."""

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from sklearn import metrics
from torch import nn

from activis import EvaluationError, RunError, write_store
from activis.cockpit import Cockpit, read_log
from activis.evaluation import compare_runs, compare_stores, run_config, volatility
from activis.evaluation.training import sudden_jumps


def train(tmp_path, name, lr, steps=8, optimizer_at_init=True, seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.8, 0.99))
    cockpit = Cockpit(model, ["Loss", "GradNorm"], optimizer=opt if optimizer_at_init else None,
                      log_dir=tmp_path / name, run=name)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(300, 6, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.8).long()
    for step in range(steps):
        opt.zero_grad()
        cockpit.backward(F.cross_entropy(model(x[:48]), y[:48], reduction="none"), optimizer=opt)
        opt.step()
        with torch.no_grad():
            probs = model(x).softmax(1)
        values = cockpit.log_eval(step, y, probs)
    cockpit.close()
    return cockpit, y.numpy(), probs.numpy(), values


def test_log_eval_writes_the_metrics_into_the_run_log(tmp_path):
    cockpit, y, probs, values = train(tmp_path, "a", 0.05)
    assert values["auc_macro"] == pytest.approx(metrics.roc_auc_score(y, probs, multi_class="ovr"), abs=1e-6)
    log = read_log(tmp_path / "a")  # read back from the folder
    frame = log.frame()
    assert frame["eval/auc_macro"].iloc[-1] == pytest.approx(values["auc_macro"])
    for key in ("eval/accuracy", "eval/f1_macro", "eval/ece", "eval/auc_micro"):
        assert frame[key].notna().all(), key
    config = run_config(log)
    assert config["optimizer"] == "Adam" and config["lr"] == 0.05 and config["betas"] == [0.8, 0.99]
    assert config["parameters"] == 6 * 8 + 8 + 8 * 3 + 3 and config["batch_size"] == 48


def test_binary_log_eval_has_auc_interval(tmp_path):
    model = nn.Linear(3, 1)
    cockpit = Cockpit(model, ["Loss"])
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 500)
    values = cockpit.log_eval(0, torch.tensor(y), torch.tensor(rng.random(500) * 0.8 + 0.2 * y))
    assert values["auc_low"] < values["auc"] < values["auc_high"]
    assert "bucket_auc_error" in values


def test_optimizer_given_late_is_recorded(tmp_path):
    train(tmp_path, "late", 0.01, steps=2, optimizer_at_init=False)
    assert run_config(read_log(tmp_path / "late"))["optimizer"] == "Adam"


def test_volatility_flags_a_sudden_jump():
    steps = np.arange(30)
    auc = 0.8 + 0.001 * np.sin(steps)
    auc[20] = 0.7  # an asynchronous-evaluation glitch
    frame = pd.DataFrame({"eval/auc": auc}, index=pd.Index(steps, name="step"))
    table = volatility(frame, window=5)
    flagged = table.loc[table["jump"], "step"].tolist()
    assert len(flagged) == 1 and flagged[0] in (20, 21)  # one mark for the glitch, its way down and up
    changes = np.diff(auc[5:11])  # the 5 changes before step 11, about their median
    mad = 1.4826 * np.median(np.abs(changes - np.median(changes)))
    assert table["spread"].iloc[11] == pytest.approx(max(mad, 0.5 * np.median(np.abs(changes))), rel=1e-9)
    with pytest.raises(RunError, match="not in the log"):
        volatility(frame, ["eval/nope"])


def test_sudden_jumps_mark_no_smooth_or_noisy_curve_and_find_a_level_shift():
    rng = np.random.default_rng(0)
    t = np.arange(300)
    smooth = 0.1 + 2.2 * np.exp(-t / 40)  # a loss that decays: its changes follow its slope
    assert not sudden_jumps(smooth).any()
    noisy = smooth + rng.normal(0, 0.02, t.size)
    assert sudden_jumps(noisy).sum() <= 1
    shifted = noisy.copy()
    shifted[180:] += 0.4  # a divergence
    marked = np.flatnonzero(sudden_jumps(shifted))
    assert any(abs(m - 180) <= 2 for m in marked) and len(marked) <= 2
    assert not sudden_jumps([1.0, 2.0]).any()  # too short to tell


def test_runs_side_by_side_configs_and_parting_step(tmp_path):
    a = train(tmp_path, "a", 0.05)[0]
    b = train(tmp_path, "b", 0.05)[0]
    c = train(tmp_path, "c", 0.2)[0]
    runs = compare_runs([tmp_path / "a", b, c])
    assert runs.names == ["a", "b", "c"]
    assert set(runs.frame["run"]) == {"a", "b", "c"}
    assert runs.configs.loc["c", "lr"] == 0.2
    assert list(runs.config_differences().columns) == ["lr"]
    assert runs.parting("a", "b") is None  # same seed, same settings: never part
    # same start: step 0's loss and gradient agree, step 1's (after a different first update) do not
    assert runs.parting("a", "c", ["Loss", "GradNorm"]) == 1
    assert runs.partings()[("a", "c")] == 0  # step 0's evaluation ran after the first update
    assert "eval/auc_macro" in runs.series()
    with pytest.raises(RunError, match="unknown run 'z'"):
        runs.parting("a", "z")
    assert a.log.run == "a"


def make_store(path, logits, y):
    rng = np.random.default_rng(0)
    return write_store(path, {"h": rng.normal(size=(len(y), 2)).astype(np.float32)}, labels=y,
                       outputs=logits.astype(np.float32), class_names=["x", "y", "z"])


def test_two_stores_compared_instance_by_instance(tmp_path):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 300)
    base = rng.normal(size=(300, 3))
    a = make_store(tmp_path / "a", base + 1.0 * np.eye(3)[y], y)
    b = make_store(tmp_path / "b", base + 2.0 * np.eye(3)[y], y)
    cmp = compare_stores(a, b)
    pa, pb = a.scores.argmax(1), b.scores.argmax(1)
    np.testing.assert_array_equal(cmp.differ, np.flatnonzero(pa != pb))
    np.testing.assert_array_equal(cmp.fixed, np.flatnonzero((pa != y) & (pb == y)))
    np.testing.assert_array_equal(cmp.broken, np.flatnonzero((pa == y) & (pb != y)))
    assert cmp.subset("differ").definition["indices"] == cmp.differ.tolist()
    diff = cmp.per_class["B - A"]
    assert diff.loc["z", "recall"] == pytest.approx(
        metrics.recall_score(y, pb, average=None)[2] - metrics.recall_score(y, pa, average=None)[2])
    assert cmp.summary.loc["accuracy", "B - A"] > 0
    assert cmp.auc_test("x")["difference"] < 0 or cmp.auc_test("x")["p"] >= 0
    assert list(cmp.instances.index) == cmp.differ.tolist()
    other = make_store(tmp_path / "c", base[:200], y[:200])
    with pytest.raises(EvaluationError, match="same labelled instances"):
        compare_stores(a, other)
