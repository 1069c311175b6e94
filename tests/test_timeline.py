"""The Explorer over a run (#23): checkpoint, timeline, cockpit, data map and CKA links, in the kernel.

The browser paths are in test_browser_timeline.py.
"""

import numpy as np
import pytest
from timeline_run import make_run

import activis
from activis import Subsets, cka_matrix, data_map_of
from activis.subsets import Subset
from activis.widgets import row_keys
from activis.widgets.errors import ViewError
from activis.widgets.projection_view import color_encoding
from activis.widgets.selection import INSTANCES, MATRIX, PROJECTION


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return activis.open_run(make_run(tmp_path_factory.mktemp("timeline") / "run"))


@pytest.fixture
def explorer(run):
    ex = activis.Explorer(run.store, run=run, method="pca", projection_params={"n_epochs": 30})
    assert ex.timeline.wait_for_layouts(timeout=600)
    return ex


def test_the_explorer_over_a_run_shows_the_latest_checkpoint_with_its_timeline_views(run, explorer):
    assert run.store.checkpoints == [0, 5, 10, 15]
    assert explorer.checkpoint == 15 and explorer.timeline.view.steps == [0, 5, 10, 15]
    assert explorer.cockpit.log.steps == run.log.steps and explorer.cockpit.marked_step == 15
    assert explorer.timeline.box in explorer.children
    assert explorer.data_map is not None and explorer.cka is not None
    # the timeline's links are in the explorer's one table, after the explorer's own
    assert explorer.links.links[-len(explorer.timeline.LINKS):] == list(explorer.timeline.LINKS)
    assert explorer.data_map.shared_selection is explorer.selection
    # a path works as the run, and a plain store (one checkpoint) adds no timeline
    assert activis.Explorer(run.store, run=str(run.path), method="pca").cockpit is not None
    with pytest.raises(ViewError, match="not a checkpoint.*0, 5, 10, 15"):
        explorer.checkpoint = 7
    assert explorer.checkpoint == 15


def test_a_checkpoint_moves_the_matrix_projection_and_instances_to_its_activations(run, explorer):
    explorer.projection.color_by = "pred"
    for step in (0, 10):
        explorer.checkpoint = step
        at = run.store.at(step)
        layer = explorer.selection.layer
        expected = Subsets(at).aggregate(layer, [explorer.matrix._row_subset(k) for k in explorer.matrix.row_keys])
        np.testing.assert_allclose(explorer.matrix.values, expected["mean"])
        shown = explorer.instances._sample
        assert np.array_equal(shown["pred"], at.column("pred")[shown["index"]])
        codes, _, _ = color_encoding(at, "pred", classes=explorer.projection.colours.get("classes"))
        assert np.array_equal(explorer.projection.color_codes, codes)
        np.testing.assert_array_equal(explorer.projection.positions, explorer.timeline.layout(step))
        assert explorer.projection.shown_method == f"aligned · step {step}"
        assert explorer.timeline.view.step == explorer.cockpit.marked_step == explorer.cka.marked_step == step
    # the layouts differ across checkpoints (the representation moved), and the latest store is shown again
    assert not np.allclose(explorer.timeline.layout(0), explorer.timeline.layout(15))
    explorer.checkpoint = 15
    assert explorer.matrix.store is explorer.store is explorer.instances.store


def test_the_timeline_slider_and_a_cockpit_step_range_move_the_checkpoint(explorer):
    explorer.timeline.view.step = 5
    assert explorer.checkpoint == 5
    explorer.cockpit.step_range = [3, 12]
    assert explorer.checkpoint == 10  # the last checkpoint at or before 12 within the range
    explorer.cockpit.step_range = [11, 14]  # no checkpoint inside: nothing moves
    assert explorer.checkpoint == 10
    explorer.cockpit.step_range = []
    assert explorer.checkpoint == 10 and explorer.cockpit.marked_step == 10


def test_a_data_map_brush_is_the_selection_brush_and_a_lasso_reaches_the_data_map(run, explorer):
    dm = data_map_of(run.store)
    np.testing.assert_allclose(explorer.data_map.confidence, dm["confidence"].to_numpy(np.float32))
    hard = np.flatnonzero(dm["confidence"].to_numpy() < 0.6)
    explorer.data_map.brush(hard)
    sel = explorer.selection
    assert sel.brush_source == "data_map" and np.array_equal(sel.brush, hard)
    assert np.array_equal(explorer.instances.filter_indices, hard)
    assert row_keys.BRUSH in explorer.matrix.row_keys
    assert np.array_equal(sel.clause("brush", PROJECTION), hard) and np.array_equal(sel.clause("brush", MATRIX), hard)
    assert sel.clause("brush", "data_map") is None  # its own clause: the map does not ring what it brushed
    explorer.projection.select(np.arange(10, 30))  # a lasso-like brush in the projection
    assert sel.brush_source == PROJECTION and np.array_equal(sel.clause("brush", "data_map"), np.arange(10, 30))
    explorer.data_map.brush(None)
    assert sel.brush is None and sel.clause("brush", INSTANCES) is None and explorer.instances.filter_indices is None


def test_data_map_buttons_add_dynamics_subsets(explorer):
    for kind in explorer.data_map.subset_buttons:
        explorer.data_map._on_message(explorer.data_map, {"add_subset": kind}, [])
    assert {"forgotten ≥ 2", "hard to learn", "ambiguous"} <= set(explorer.subsets.names)
    with pytest.raises(ViewError, match="No data-map subset 'easy'"):
        explorer.data_map.add_subset("easy")


def test_a_cka_cell_selects_its_layer_and_checkpoint(run, explorer):
    expected = cka_matrix(run.store)
    np.testing.assert_allclose(explorer.cka.values, expected.to_numpy(np.float32))
    assert explorer.cka.layers == list(expected.index) and explorer.cka.steps == [0, 5, 10, 15]
    first = explorer.cka.layers[0]
    explorer.cka.pick(first, 5)
    assert explorer.selection.layer == explorer.matrix.layer == explorer.projection.layer == first
    assert explorer.checkpoint == 5 and explorer.cka.marked_layer == first
    assert explorer.timeline.wait_for_layouts(first, timeout=600)
    assert explorer.projection.shown_method == "aligned · step 5"
    np.testing.assert_array_equal(explorer.projection.positions, explorer.timeline.layout(5, first))
    with pytest.raises(ViewError, match="No checkpoint 6"):
        explorer.cka.pick(first, 6)


def test_a_store_with_checkpoints_alone_gets_the_timeline_without_a_cockpit_and_bad_input_is_refused(run, tmp_path):
    ex = activis.Explorer(run.store, method="pca", projection_params={"n_epochs": 30})
    assert ex.cockpit is None and ex.data_map is not None and ex.timeline.view.steps == [0, 5, 10, 15]
    ex.timeline.view.step = 0
    assert ex.checkpoint == 0 and ex.timeline.wait_for_layouts(timeout=600)
    with pytest.raises(ViewError, match="run= is an activis Run"):
        activis.Explorer(run.store, run=42, method="pca")
    with pytest.raises(ViewError, match="step=3 is not a checkpoint"):
        ex.timeline.view.step = 3
    with pytest.raises(ViewError, match="lacks confidence"):
        activis.DataMapView(data_map_of(run.store).drop(columns="confidence"))
    with pytest.raises(ViewError, match="cka_matrix"):
        activis.CKAView(data_map_of(run.store))
    with pytest.raises(ViewError, match="same 120 instances"):
        ex.matrix.set_store(activis.open_run(make_run(tmp_path / "small", steps=2, n=40)).store)
    assert ex.matrix.store is ex.timeline.store_at(0)  # refused: nothing changed


def test_a_doctor_finding_with_a_step_moves_to_the_nearest_checkpoint_with_its_layer(run, explorer):
    from activis.doctor.findings import Finding

    layer = explorer.store.layers[0]
    finding = Finding("vanishing", "warning", "Vanishing gradients", "...", place="module", where=layer, step=6)
    assert explorer.timeline.show_finding(finding) == 5
    assert explorer.checkpoint == 5 and explorer.selection.layer == explorer.matrix.layer == layer
    run.add_finding({"step": 14, "check": "loss plateau", "severity": "warning", "where": "not captured"})
    assert explorer.timeline.show_finding(run.findings.iloc[-1]) == 15  # an uncaptured place keeps the layer
    assert explorer.selection.layer == layer
    with pytest.raises(ViewError, match="with a step"):
        explorer.timeline.show_finding({"check": "before training"})


def test_flipped_predictions_become_a_picked_subset(run, explorer):
    explorer.checkpoint = 10
    explorer.timeline._on_timeline_message(explorer.timeline.view, {"flipped": True}, [])
    name = "prediction changed 0 → 10"
    assert explorer.subset_panel.active == explorer.selection.subset == name
    changed = run.store.at(0).column("pred") != run.store.at(10).column("pred")
    assert np.array_equal(explorer.selection.subset_indices, np.flatnonzero(changed))
    with pytest.raises(ViewError, match="No checkpoint at step 3"):
        explorer.timeline.add_flipped(3)


def test_every_view_follows_the_checkpoint(run, explorer):
    from activis import instance_quantities

    explorer.explain(3)
    explorer.checkpoint = 5
    at = explorer.timeline.store_at(5)
    assert explorer.why.store is at and explorer.last_explanation is not None
    assert explorer.evaluation.caption == "step 5"
    np.testing.assert_allclose(explorer.evaluation.outcomes.scores, activis.evaluate(at).outcomes.scores)
    assert explorer.slice_suggestions.source == "step 5"
    per_sample = explorer.timeline.per_sample
    assert per_sample.step == 5
    np.testing.assert_allclose(per_sample.values, instance_quantities(at).to_numpy(np.float32).T)


def test_instance_quantities_are_the_loss_and_the_logit_gradient_norm(run):
    from activis import instance_quantities

    at = run.store.at(10)
    z = at.outputs.astype(np.float64)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = at.instances["label"].to_numpy()
    q = instance_quantities(at)
    np.testing.assert_allclose(q["loss"], -np.log(p[np.arange(len(y)), y]), rtol=1e-6)
    p[np.arange(len(y)), y] -= 1
    np.testing.assert_allclose(q["grad_norm"], np.linalg.norm(p, axis=1), rtol=1e-6)


def test_the_matrix_shows_each_row_since_a_compared_checkpoint_and_flipped_instances_are_marked(run, explorer):
    explorer.checkpoint = 10
    plain = np.array(explorer.matrix.values)
    explorer.timeline.view.compare_to = 0
    now = Subsets(run.store.at(10))  # each row's instances at the checkpoint shown, read at step 0
    members = [Subset.from_indices(now.indices(row_keys.subset_of(k))) for k in explorer.matrix.row_keys]
    then = Subsets(run.store.at(0)).aggregate(explorer.selection.layer, members)
    np.testing.assert_allclose(explorer.matrix.values, plain - then["mean"], atol=1e-5)
    assert explorer.matrix.compared_to == "step 0"
    changed = np.flatnonzero(run.store.at(0).column("pred") != run.store.at(10).column("pred"))
    assert changed.size and np.array_equal(explorer.instances.marked_indices, changed)
    assert explorer.instances.mark_label == "prediction changed since step 0"
    assert explorer.timeline.add_flipped() == "prediction changed 0 → 10"  # the compared checkpoint, one click
    explorer.timeline.view.compare_to = -1
    np.testing.assert_allclose(explorer.matrix.values[:len(plain)], plain)  # + the flipped subset row
    assert explorer.matrix.compared_to == "" and explorer.instances.marked_indices is None
    # a step range holding several checkpoints: the last, and the difference since the first
    explorer.cockpit.step_range = [3, 16]
    assert explorer.checkpoint == 15 and explorer.timeline.view.compare_to == 5
    assert explorer.matrix.compared_to == "step 5"
    explorer.cockpit.step_range = [12, 16]  # one checkpoint inside: no difference
    assert explorer.checkpoint == 15 and explorer.timeline.view.compare_to == -1 and explorer.matrix.compared_to == ""
    with pytest.raises(ViewError, match="compare_to=3 is not a checkpoint"):
        explorer.timeline.view.compare_to = 3


def test_a_per_instance_instrument_brush_is_the_selection_brush(explorer):
    per_sample = explorer.timeline.per_sample
    losses = per_sample.quantities["loss"].to_numpy()
    lo, hi = np.quantile(losses, [0.8, 1.0])
    brushed = per_sample.brush("loss", lo, hi)
    assert np.array_equal(brushed, np.flatnonzero((losses >= lo) & (losses <= hi)))
    sel = explorer.selection
    assert sel.brush_source == "per_sample" and np.array_equal(sel.brush, brushed)
    assert np.array_equal(explorer.instances.filter_indices, brushed) and row_keys.BRUSH in explorer.matrix.row_keys
    assert np.array_equal(sel.clause("brush", PROJECTION), brushed) and sel.clause("brush", "per_sample") is None
    explorer.data_map.brush(np.arange(5))  # another view's brush reaches the instrument's overlay
    assert np.array_equal(sel.clause("brush", "per_sample"), np.arange(5))
    per_sample.brush("loss", lo, hi)
    explorer.checkpoint = 0  # the range stays: it now holds the instances in it at step 0
    at0 = per_sample.quantities["loss"].to_numpy()
    assert np.array_equal(sel.brush, np.flatnonzero((at0 >= lo) & (at0 <= hi)))
    per_sample.brush()
    assert sel.brush is None and explorer.instances.filter_indices is None
    with pytest.raises(ViewError, match="No per-instance quantity 'accuracy'"):
        per_sample.brush("accuracy", 0, 1)
    with pytest.raises(ViewError, match="finite range"):
        per_sample.brush("loss", 0, float("nan"))


def test_a_runs_panel_marks_the_checkpoint_and_its_step_range_moves_it(run, explorer):
    panel = activis.RunsPanel([run.path])
    explorer.timeline.link_runs_panel(panel)
    assert panel.marked_step == 15
    explorer.checkpoint = 5
    assert panel.marked_step == 5
    panel.step_range = [8, 12]
    assert explorer.checkpoint == 10 and panel.marked_step == 10
    with pytest.raises(ViewError, match="takes a RunsPanel"):
        explorer.timeline.link_runs_panel(explorer.cka)


def test_the_graph_marks_the_findings_made_by_the_checkpoint_and_follows_a_finding(tmp_path):
    run = activis.open_run(make_run(tmp_path / "run"))
    run.add_finding({"step": 7, "check": "vanishing", "severity": "warning", "title": "Vanishing gradients",
                     "where": "0", "node": "_0"})
    run.add_finding({"step": None, "check": "init", "severity": "note", "title": "<b>init</b>", "node": "_2"})
    ex = activis.Explorer(run.store, run=run, method="pca", projection_params={"n_epochs": 30})
    assert ex.graph_view.markers["_0"] == {"severity": "warning", "count": 1,
                                           "title": "Vanishing gradients (from step 7)"}
    ex.checkpoint = 5
    assert set(ex.graph_view.markers) == {"_2"}  # made before training: always there
    ex.timeline.show_finding({"step": 3, "where": "input_1"})  # in the graph, not captured
    assert ex.checkpoint == 5 and ex.graph_view.selected_layer == "input_1"
    assert "not captured" in ex.status.value
    assert ex.timeline.show_finding(run.findings.iloc[0]) == 5  # step 7: checkpoint 5 is the nearest
    assert ex.graph_view.selected_layer == "_0" and ex.selection.layer == "0" and ex.status.value == ""
    ex.checkpoint = 10
    assert set(ex.graph_view.markers) == {"_0", "_2"}
    # a finding written after the explorer was made (a doctor still watching) shows at the next move
    run.add_finding({"step": 12, "check": "dead", "severity": "error", "title": "Dead units", "node": "_2"})
    ex.checkpoint = 15
    assert ex.graph_view.markers["_2"] == {"severity": "error", "count": 2, "title": "Dead units (from step 12)"}


def test_the_matrix_and_projection_hold_every_checkpoint_for_the_page_and_python_still_moves_them(run, explorer):
    """The page redraws a checkpoint from these frames before the kernel answers: each must be what the
    kernel then sends, and the Selection's ``checkpoint`` (what the page follows) moves first."""
    explorer.projection.color_by = "pred"
    explorer.matrix.statistic = "std"
    explorer.timeline.frames.refresh()  # in a kernel, its loop does this a moment after a change
    matrix, projection = explorer.matrix, explorer.projection
    assert matrix.checkpoint_steps == projection.checkpoint_steps == [0, 5, 10, 15]
    assert projection.checkpoint_methods == [f"aligned · step {s}" for s in (0, 5, 10, 15)]
    frames = (np.array(matrix.checkpoint_values), np.array(projection.checkpoint_positions),
              np.array(projection.checkpoint_codes), list(projection.checkpoint_legends))
    order = []
    explorer.selection.observe(lambda c: order.append("selection"), "checkpoint")
    matrix.observe(lambda c: order.append("matrix"), "values")
    for i, step in enumerate((0, 5, 10, 15)):
        if step != explorer.checkpoint:
            order.clear()
            explorer.checkpoint = step  # from Python: the page's checkpoint first, then the views' values
            assert order[:2] == ["selection", "matrix"]
        assert explorer.selection.checkpoint == step
        np.testing.assert_allclose(frames[0][i], matrix.values, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(frames[1][i], projection.positions)
        np.testing.assert_array_equal(frames[2][i], projection.color_codes)
        assert frames[3][i] == projection.legend
    # a move leaves the frames as they are (nothing resent); new rows make them follow
    explorer.timeline.frames.refresh()
    assert matrix.checkpoint_values is not None and np.array_equal(matrix.checkpoint_values, frames[0])
    matrix.add_instance(3)
    explorer.timeline.frames.refresh()
    assert matrix.checkpoint_values.shape == (4, len(matrix.row_keys), frames[0].shape[2])
    # a layout that is not the aligned one (another method) is not held
    explorer.projection.show_layout(np.zeros((run.store.n_instances, 2)), "pca")
    explorer.timeline.frames.refresh()
    assert projection.checkpoint_positions is None and projection.checkpoint_steps == []
