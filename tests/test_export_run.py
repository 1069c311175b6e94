"""An explorer over a run, saved as a page: the cockpit, the step brush and the checkpoint slider work there.

The page holds every checkpoint's data (activis/export/checkpoints.py): moving the slider moves the
matrix, the projection (to the aligned layout) and the instance panel to that checkpoint, with the
values Python reads from ``store.at(step)``.
"""

import numpy as np
import pytest
from test_export import open_offline, page_state
from timeline_run import make_run

import activis
from activis.export import checkpoints
from activis.export.checkpoints import _kept_steps, checkpoint_data
from activis.export.state import PageState
from conftest import ARTIFACTS


def drag(page, box, start, end):
    """Drag with the mouse from one point of a box to another (each as fractions of its width and height)."""
    (x0, y0), (x1, y1) = start, end
    page.mouse.move(box["x"] + box["width"] * x0, box["y"] + box["height"] * y0)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * x1, box["y"] + box["height"] * y1, steps=5)
    page.mouse.up()


@pytest.fixture(scope="module")
def explorer(tmp_path_factory):
    run = activis.open_run(make_run(tmp_path_factory.mktemp("export_run") / "run"))
    ex = activis.Explorer(run.store, run=run, method="pca", projection_params={"n_epochs": 30})
    assert ex.timeline.wait_for_layouts(timeout=600)
    ex.timeline.frames.refresh()  # as in a kernel: the live page's checkpoint frames, which a saved page leaves out
    return ex


def test_kept_checkpoints_always_hold_the_first_the_shown_and_the_latest():
    steps = list(range(0, 100, 10))
    assert _kept_steps(steps, 40, 20) == steps
    kept = _kept_steps(steps, 40, 3)
    assert {0, 40, 90} <= set(kept) and len(kept) <= 5 and kept == sorted(kept)
    assert _kept_steps(steps, 90, 0) == [0, 90]


def test_over_budget_checkpoints_are_halved_then_thinned_and_the_page_says_so(explorer, monkeypatch):
    from activis.export.explorer import explorer_data

    state = PageState()
    base = explorer_data(explorer, state)
    data, note = checkpoint_data(explorer, state, base)
    assert data["steps"] == [0, 5, 10, 15] and note == ""
    first = explorer.timeline.store_at(0)
    for name, layer in data["at"][0]["layers"].items():  # as stored: float16 stays float16, the rest is float32
        assert layer["dtype"] == ("float16" if first.activations(name).dtype == np.float16 else "float32")
    monkeypatch.setattr(checkpoints, "MAX_CHECKPOINT_BYTES", 1)
    data, note = checkpoint_data(explorer, PageState(), base)
    halved = any(explorer.store.activations(name).dtype != np.float16 for name in explorer.store.layers)
    assert data["steps"] == [0, 15] and ("float16" in note) == halved and "2 of 4 checkpoints" in note
    assert all(layer["dtype"] == "float16" for layer in data["at"][0]["layers"].values())
    assert explorer.checkpoint == 15 and explorer.subsets.store is explorer.store  # the explorer did not move


@pytest.mark.browser
def test_run_page_moves_every_view_to_a_checkpoint_offline(tmp_path, browser, explorer):
    timeline, store = explorer.timeline, explorer.store
    layer = explorer.selection.layer
    path = explorer.save_html(tmp_path / "run.html")
    assert path.stat().st_size < 3_000_000
    problems = []
    context, page = open_offline(browser, path, problems)
    try:
        cockpit = page.locator(".activis-cockpit[data-ready='1']")
        assert int(cockpit.get_attribute("data-instruments")) >= 2  # the cockpit's instruments drew
        assert cockpit.get_attribute("data-marked-step") == "15"
        # the checkpoint slider: a tick moves the matrix, projection and instance panel to step 5
        page.locator(".activis-timeline .av-tick[data-step='5']").click()
        page.wait_for_selector(".activis-cockpit[data-marked-step='5']")
        at = timeline.store_at(5)
        matrix = page_state(page, "activation_matrix", "row_keys", "values", "layer")
        k = matrix["values"]["shape"][1]
        values = np.array(matrix["values"]["data"], dtype=np.float32).reshape(-1, k)
        for r, key in enumerate(matrix["row_keys"]):
            if key.startswith("subset:"):
                members = explorer.subsets.indices_in(key[len("subset:"):], at)
                expected = np.asarray(at.activations(matrix["layer"]), np.float32)[members].mean(0)
                np.testing.assert_allclose(values[r], expected, rtol=1e-5, atol=1e-5)
        assert any(key.startswith("subset:") for key in matrix["row_keys"])
        projection = page_state(page, "projection_view", "positions", "shown_method", "layer")
        assert projection["layer"] == layer and projection["shown_method"] == "aligned · step 5"
        np.testing.assert_allclose(np.array(projection["positions"]["data"]).reshape(-1, 2),
                                   timeline.layout(5, layer), rtol=1e-6, atol=1e-6)
        sample = page.evaluate("""() => { const s = Array.from(window.activisPage.models.values())
            .find((m) => m.get('__module') === 'instance_panel').get('_sample');
            const v = (a, T) => Array.from(new T(a.buffer.buffer, a.buffer.byteOffset, a.buffer.byteLength / 4));
            return {index: v(s.index, Int32Array), confidence: v(s.confidence, Float32Array)}; }""")
        np.testing.assert_allclose(sample["confidence"], np.asarray(at.column("confidence"))[sample["index"]],
                                   rtol=1e-6)
        assert not np.allclose(np.asarray(at.column("confidence")), np.asarray(store.column("confidence")))
        # the per-instance instruments draw in the page and hold step 5's values
        assert page.locator("text=(a view this page cannot draw)").count() == 0
        page.wait_for_selector(".activis-per_sample[data-step='5']")
        shown = page_state(page, "sample_quantities_view", "values", "quantity_names")
        expected = activis.instance_quantities(at)[shown["quantity_names"]].to_numpy(np.float32).T
        np.testing.assert_allclose(np.array(shown["values"]["data"]).reshape(expected.shape), expected, rtol=1e-6)
        # the step brush: a range brushed in the cockpit's loss chart shows the last checkpoint in it
        brush = cockpit.locator(".av-card[data-instrument='loss'] [data-role='brush']")
        brush.scroll_into_view_if_needed()
        drag(page, brush.bounding_box(), (0.5, 0.5), (0.75, 0.5))
        page.wait_for_selector(".activis-timeline[data-step='10']")
        assert page.locator(".activis-cockpit").get_attribute("data-marked-step") == "10"
        assert page_state(page, "projection_view", "shown_method")["shown_method"] == "aligned · step 10"
        # another layer has no aligned layouts (the notebook computed the selected layer's): its own layout shows
        select = page.locator(".activis-matrix select").first
        select.select_option("0")
        assert page_state(page, "projection_view", "shown_method")["shown_method"] == "pca"
        select.select_option(layer)
        assert page_state(page, "projection_view", "shown_method")["shown_method"] == "aligned · step 10"
        # the data map's box brush is the shared brush: the matrix's selection row is its mean at step 10
        data_map = page.locator(".activis-data_map")
        canvas = data_map.locator("canvas").first
        canvas.scroll_into_view_if_needed()
        drag(page, canvas.bounding_box(), (0.01, 0.01), (0.99, 0.99))
        page.wait_for_function("""() => Array.from(window.activisPage.models.values())
            .some((m) => m.get('__module') === 'activation_matrix' && m.get('row_keys').includes('selection'))""")
        brushed = np.unique(page_state(page, "data_map_view", "brushed")["brushed"]["data"])
        assert 0 < len(brushed) <= store.n_instances
        matrix = page_state(page, "activation_matrix", "row_keys", "values", "layer")
        k = matrix["values"]["shape"][1]
        row = np.array(matrix["values"]["data"], np.float32).reshape(-1, k)[matrix["row_keys"].index("selection")]
        expected = np.asarray(timeline.store_at(10).activations(matrix["layer"]), np.float32)[brushed].mean(0)
        np.testing.assert_allclose(row, expected, rtol=1e-5, atol=1e-5)
        # what needs Python is disabled, and says so
        flipped = page.locator(".activis-timeline [data-role='flipped']")
        assert flipped.is_disabled() and "needs Python" in flipped.get_attribute("title")
        assert data_map.locator("button[data-subset]").first.is_disabled()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "export_run.png"), full_page=True)
    finally:
        context.close()
    assert problems == []


def test_a_sampled_run_page_keeps_the_cockpit_and_says_the_checkpoints_are_left_out(tmp_path, explorer):
    import json

    path = activis.save_html(tmp_path / "sample.html", explorer, max_instances=100)
    text = path.read_text()
    payload = json.loads(text[text.index('id="activis-state">') + 19:text.index("</script>")])
    children = payload["layout"]["children"]
    assert children[0]["text"].startswith("A sample: 100 of 120") and "checkpoints are left out" in children[0]["text"]
    assert children[1]["data"]["checkpoints"] is None
    cockpit = payload["models"][children[-1]["model"]]
    assert cockpit["module"] == "cockpit_panel"


def test_a_saved_page_leaves_out_the_live_pages_checkpoint_frames(tmp_path, explorer):
    import json

    assert explorer.matrix.checkpoint_values is not None and explorer.projection.checkpoint_positions is not None
    text = activis.save_html(tmp_path / "run.html", explorer).read_text()
    payload = json.loads(text[text.index('id="activis-state">') + 19:text.index("</script>")])
    kept = {key for model in payload["models"].values() for key in model["state"] if key.startswith("checkpoint_")}
    assert kept == set()
