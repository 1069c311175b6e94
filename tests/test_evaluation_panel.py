"""EvaluationPanel and RunsPanel in Python: what crosses to the browser, the selection paths, the Explorer wiring."""

import numpy as np
import pytest

from activis import EvaluationError, write_store
from activis.evaluation import evaluate
from activis.widgets.evaluation_panel import EvaluationPanel, thin
from activis.widgets.selection import Selection


@pytest.fixture
def store(tmp_path):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 500)
    logits = rng.normal(size=(500, 3)) + 1.5 * np.eye(3)[y]
    return write_store(tmp_path / "s", {"h": rng.normal(size=(500, 4)).astype(np.float32)}, labels=y,
                       outputs=logits.astype(np.float32), class_names=["a", "b", "c"])


def test_panel_sends_binary_buffers_and_exact_tables(store):
    panel = EvaluationPanel(store, focus="b")
    assert panel.focus == 1 and panel.class_names == ["a", "b", "c"]
    for name in ("index", "label", "score", "other", "roc", "roc_offsets", "pr", "reliability", "summary"):
        assert isinstance(getattr(panel, name), np.ndarray), name
    state = panel.get_state()
    assert isinstance(state["score"]["buffer"], memoryview)  # binary, never a JSON list
    assert state["score"]["dtype"] == "float32" and len(panel.score) == 500
    np.testing.assert_allclose(panel.score, store.scores[:, 1])
    e = evaluate(store)
    assert panel.summary[panel.summary_names.index("auc_macro")] == pytest.approx(e.summary["auc_macro"])
    assert panel.roc_offsets.tolist()[-1] == panel.roc.shape[1] and len(panel.roc_offsets) == 5
    panel.focus = 2
    np.testing.assert_allclose(panel.score, store.scores[:, 2])
    assert (panel.other != 2).all()
    with pytest.raises(Exception, match="focus is a class index"):
        panel.focus = 3


def test_thin_keeps_the_ends_and_few_points():
    x = np.linspace(0, 1, 100_000)
    curve = thin(x, x ** 2, 500)
    assert curve.shape[0] == 2 and curve.shape[1] <= 503
    assert curve[0, 0] == 0 and curve[0, -1] == 1


def test_cell_and_selection_made_elsewhere(store):
    sel = Selection()
    panel = EvaluationPanel(store, selection=sel, threshold=0.5)
    picked = panel.select_cell("b", "a")
    pred = panel.evaluation().predictions
    np.testing.assert_array_equal(picked, np.flatnonzero((store.column("label") == 1) & (pred == 0)))
    assert sel.brush_source == "evaluation" and panel.compared_label == ""
    np.testing.assert_array_equal(panel.selected(), picked)
    sel.set_brush(np.arange(100), "projection")
    assert panel.compared_label == "selection (projection)" and panel.compared_n == 100
    assert panel.selected_cell == [] and panel.selected_range == []  # another view's brush replaced ours
    sub = evaluate(store, subset=np.arange(100), focus=0, threshold=0.5)
    assert panel.compared_summary[panel.summary_names.index("accuracy")] == pytest.approx(sub.summary["accuracy"])
    sel.set_brush(None, "projection")
    sel.subset, sel.subset_indices = "first fifty", np.arange(50, dtype=np.int32)
    assert panel.compared_label == "first fifty" and panel.compared_n == 50


def test_unlabelled_store_has_no_panel(tmp_path):
    from activis.widgets.evaluation_panel import evaluation_panel_for
    rng = np.random.default_rng(0)
    unlabelled = write_store(tmp_path / "u", {"h": rng.normal(size=(20, 2)).astype(np.float32)},
                             labels=np.full(20, -1), outputs=rng.normal(size=(20, 3)).astype(np.float32))
    with pytest.raises(EvaluationError, match="nothing to evaluate"):
        EvaluationPanel(unlabelled)
    assert evaluation_panel_for(unlabelled, Selection()) is None


def test_explorer_wires_the_panel_to_its_selection(store):
    from activis.widgets.explorer import Explorer
    ex = Explorer(store, method="pca")
    assert ex.evaluation.shared_selection is ex.selection and ex.evaluation in ex.side_tabs.children  # a side tab
    picked = ex.evaluation.select_cell(2, 0)
    assert sorted(ex.instances.filter_indices.tolist()) == sorted(picked.tolist())  # the instance panel follows
    assert "selection" in ex.matrix.row_keys  # and the matrix shows the cell as a row


def test_runs_panel_overlays_runs_with_configs_and_partings(tmp_path):
    from test_evaluation_runs import train

    from activis.widgets.runs_panel import RunsPanel
    for name, lr in (("a", 0.05), ("b", 0.2)):
        train(tmp_path, name, lr, steps=5)
    panel = RunsPanel([tmp_path / "a", tmp_path / "b"])
    assert panel.run_names == ["a", "b"] and len(set(panel.colours["runs"][:2])) == 2
    assert {"Loss", "GradNorm", "eval/auc_macro"} <= set(panel.series_names)
    assert panel.values.shape == (2, len(panel.series_names), 5) and panel.steps.tolist() == list(range(5))
    assert panel.partings == [{"a": "a", "b": "b", "step": 0}]
    assert panel.config_differs == ["lr"] and panel.config_columns[:2] == ["run", "lr"]
    assert panel.config_rows[1][:2] == ["b", "0.2"]
    panel.step_range = [3, 1]
    assert panel.step_range == [1, 3]
    loss = panel.series_names.index("Loss")
    frame = panel.comparison.logs["a"].frame()
    assert panel.summary().loc["a", "Loss"] == pytest.approx(frame.loc[1:3, "Loss"].mean(), rel=1e-6)
    with pytest.raises(ValueError, match="not logged by every run"):
        RunsPanel([tmp_path / "a", tmp_path / "b"], series=["Loss", "nope"])
    assert loss >= 0


def test_runs_panel_circles_sudden_jumps():
    from activis.cockpit import CockpitLog
    from activis.widgets.runs_panel import RunsPanel
    logs = []
    for name, glitch in (("steady", None), ("glitchy", 20)):
        log = CockpitLog({"run": name, "params": [{"name": "w", "shape": [3], "layer": "(model)"}]})
        for step in range(30):
            auc = 0.8 + 0.001 * np.sin(step) - (0.1 if step == glitch else 0.0)
            log.append(step, {"Loss": 1.0 / (step + 1), "eval/auc": auc})
        logs.append(log)
    panel = RunsPanel(logs)
    auc = panel.series_names.index("eval/auc")
    assert panel.jumps.shape == panel.values.shape
    assert not panel.jumps[0, auc].any()
    assert panel.jumps[1, auc, 20] == 1 and panel.jumps[1, auc].sum() <= 2  # the glitch (and the recovery)


def test_binary_store_panel_thresholds_the_positive_class(tmp_path):
    rng = np.random.default_rng(2)
    y = rng.integers(0, 2, 300)
    logit = (rng.normal(size=300) + 1.5 * (2 * y - 1)).astype(np.float32)[:, None]  # one output column
    store = write_store(tmp_path / "b", {"h": rng.normal(size=(300, 2)).astype(np.float32)}, labels=y,
                        outputs=logit, class_names=["negative", "positive"])
    panel = EvaluationPanel(store, threshold=0.7)
    assert panel.focus == 1 and panel.score_domain == [0.0, 1.0]
    assert {"auc", "average_precision", "bucket_auc_error"} <= set(panel.summary_names)
    from sklearn.metrics import roc_auc_score
    assert panel.summary[panel.summary_names.index("auc")] == pytest.approx(roc_auc_score(y, logit[:, 0]), abs=1e-12)
    pred = panel.evaluation().predictions
    np.testing.assert_array_equal(pred, (store.scores[:, 1] >= 0.7).astype(int))
