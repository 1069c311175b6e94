"""The Explorer over a run (#23): checkpoint, timeline, cockpit, data map and CKA links, in the kernel.

The browser paths are in test_browser_timeline.py.
"""

import numpy as np
import pytest
from timeline_run import make_run

import activis
from activis import Subsets, cka_matrix, data_map_of
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
