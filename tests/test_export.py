"""activis.save_html: one self-contained page that opens from file:// with no network and still cross-filters."""

import json

import numpy as np
import pandas as pd
import pytest
from test_store import small_store

import activis
from activis import ExportError, save_html
from activis.demo import digits_store
from conftest import ARTIFACTS

XSS = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def explorer(tmp_path_factory):
    store = digits_store(tmp_path_factory.mktemp("demo") / "digits.activis")[1]
    return activis.Explorer(store, method="pca")


def open_offline(browser, path, problems):
    """Open a saved page from file:// with every other request routed to fail; record requests and errors."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()

    def route(r):
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            problems.append(f"request {r.request.url}")
            r.abort()

    page.route("**/*", route)
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.goto(path.as_uri())
    page.wait_for_selector("#activis-page[data-ready=true]")
    return context, page


def page_state(page, view: str, *names):
    """Traits of the first model drawn by a view module, read in the page (arrays as lists)."""
    return page.evaluate("""([view, names]) => {
        const model = Array.from(window.activisPage.models.values()).find((m) => m.get("__module") === view);
        const plain = (v) => v && v.buffer instanceof DataView ? {dtype: v.dtype, shape: v.shape,
            data: Array.from(new ({float32: Float32Array, int32: Int32Array, uint8: Uint8Array}[v.dtype])(
                v.buffer.buffer, v.buffer.byteOffset, v.buffer.byteLength / (v.dtype === "uint8" ? 1 : 4)))} : v;
        return Object.fromEntries(names.map((n) => [n, plain(model.get(n))]));
    }""", [view, list(names)])


def test_bad_calls_are_clear_and_write_nothing(tmp_path, explorer):
    with pytest.raises(ExportError, match="at least one view"):
        save_html(tmp_path / "a.html")
    with pytest.raises(ExportError, match="not DataFrame"):
        save_html(tmp_path / "a.html", pd.DataFrame())
    with pytest.raises(ExportError, match="is a folder"):
        save_html(tmp_path, explorer.matrix)
    with pytest.raises(ExportError, match="does not exist"):
        save_html(tmp_path / "missing" / "a.html", explorer.matrix)
    with pytest.raises(ExportError, match="title="):
        save_html(tmp_path / "a.html", explorer.matrix, title=3)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.browser
def test_explorer_page_opens_offline_and_a_lasso_matches_python(tmp_path, browser, explorer):
    store = explorer.store
    path = explorer.save_html(tmp_path / "digits.html")
    size = path.stat().st_size
    assert size < 3_000_000  # the budget for the digits explorer
    problems = []
    context, page = open_offline(browser, path, problems)
    try:
        root = page.locator(".activis-projection")
        canvas = root.locator("canvas.av-proj-points")
        canvas.scroll_into_view_if_needed()
        box = canvas.bounding_box()
        # a lasso: a polygon around the middle of the canvas, drawn with the mouse
        root.locator("button[data-mode='lasso']").click()
        cx, cy, r = box["width"] / 2, box["height"] / 2, min(box["width"], box["height"]) * 0.3
        angles = np.linspace(0, 2 * np.pi, 24)
        page.mouse.move(box["x"] + cx + r, box["y"] + cy)
        page.mouse.down()
        for a in angles[1:]:
            page.mouse.move(box["x"] + cx + r * np.cos(a), box["y"] + cy + r * np.sin(a))
        page.mouse.up()
        page.wait_for_function("""() => Array.from(window.activisPage.models.values())
            .some((m) => m.get('__module') === 'activation_matrix' && m.get('row_keys').includes('selection'))""")
        brushed = np.array(page_state(page, "projection_view", "selected_indices")["selected_indices"]["data"])
        assert 0 < len(brushed) < store.n_instances
        matrix = page_state(page, "activation_matrix", "row_keys", "values", "rows", "layer")
        k = matrix["values"]["shape"][1]
        row = matrix["row_keys"].index("selection")
        in_page = np.array(matrix["values"]["data"], dtype=np.float32).reshape(-1, k)[row]
        in_python = np.asarray(store.activations(matrix["layer"]), dtype=np.float32)[np.unique(brushed)].mean(0)
        np.testing.assert_allclose(in_page, in_python, rtol=1e-5, atol=1e-5)
        assert matrix["rows"][row]["size"] == len(np.unique(brushed))
        # the instance panel narrowed to the lasso, as in the notebook
        sample = page.evaluate("""() => Array.from(window.activisPage.models.values())
            .find((m) => m.get('__module') === 'instance_panel').get('_sample').candidates""")
        assert sample == len(np.unique(brushed))
        # a layer switched in the matrix moves the projection and recomputes the brushed row there
        page.locator(".activis-matrix select").first.select_option("fc1")
        page.wait_for_function("""() => Array.from(window.activisPage.models.values())
            .some((m) => m.get('__module') === 'projection_view' && m.get('layer') === 'fc1')""")
        matrix = page_state(page, "activation_matrix", "row_keys", "values", "layer")
        assert matrix["layer"] == "fc1"
        k = matrix["values"]["shape"][1]
        in_page = np.array(matrix["values"]["data"], dtype=np.float32).reshape(-1, k)[
            matrix["row_keys"].index("selection")]
        np.testing.assert_allclose(in_page, np.asarray(store.activations("fc1"), np.float32)[np.unique(brushed)]
                                   .mean(0), rtol=1e-5, atol=1e-5)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "export_explorer.png"), full_page=True)
    finally:
        context.close()
    assert problems == []


@pytest.mark.browser
def test_names_with_markup_show_as_text(tmp_path, browser):
    meta = pd.DataFrame({"source": [XSS, "plain"] * 10})
    store, _ = small_store(tmp_path / "s", n=20, class_names=["cat", "dog", XSS], metadata=meta)
    view = activis.ProjectionView(store, "hidden", "pca")
    path = activis.save_html(tmp_path / "view.html", view, activis.SubsetPanel(activis.Subsets(store)),
                             title=XSS)
    problems = []
    context, page = open_offline(browser, path, problems)
    try:
        assert page.title() == XSS
        assert page.locator("img").count() == 0
        assert XSS in page.locator("#activis-page").inner_text()
        assert json.loads(page.locator("#activis-state").text_content())["title"] == XSS
    finally:
        context.close()
    assert problems == []


def test_a_large_store_is_exported_as_a_stated_sample(tmp_path):
    rng = np.random.default_rng(0)
    store, acts = small_store(tmp_path / "s", n=400, metadata=pd.DataFrame({"group": rng.integers(0, 3, 400)}))
    subsets = activis.Subsets(store)
    subsets.add("group 1", "group == 1")
    subsets.add("first ten", indices=np.arange(10))
    explorer = activis.Explorer(store, method="pca", subsets=subsets)
    with pytest.raises(ExportError, match="at least 100"):
        save_html(tmp_path / "x.html", explorer, max_instances=5)
    path = save_html(tmp_path / "sample.html", explorer, max_instances=150)
    text = path.read_text()
    payload = json.loads(text[text.index('id="activis-state">') + 19:text.index("</script>")])
    node = payload["layout"]["children"]
    assert node[0]["text"].startswith("A sample: 150 of 400 instances")
    data = node[1]["data"]
    assert data["n"] == 150 and "store_index" in data["hover"]["titles"]
    # subsets come along: a query is asked again of the sample, an index set keeps its sampled members
    column = data["hover"]["values"][data["hover"]["titles"].index("store_index")]
    kept = {int(v) for v in column}
    assert set(data["subsets"]) >= {"group 1", "first ten"}
    assert len(kept) == 150 and kept <= set(range(400))


def test_a_view_leaves_a_static_card_where_widgets_cannot_load(tmp_path):
    store, _ = small_store(tmp_path / "s", class_names=["a", XSS, "c"])
    data, _ = activis.ActivationMatrix(store, "hidden")._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    assert "activis ActivationMatrix · layer: hidden" in data["text/html"] and "save_html" in data["text/html"]


def test_a_control_that_needs_the_kernel_keeps_the_words_it_shows():
    """A dropdown without a description (the explorer's "+ layer…") is named by its option, not its class."""
    import ipywidgets as widgets

    from activis.export.state import PageState

    state = PageState()
    chosen = state.layout(widgets.Dropdown(options=["+ layer…", "fc1"], value="+ layer…"))
    described = state.layout(widgets.Button(description="Play"))
    bare = state.layout(widgets.Button())
    assert (chosen["kind"], chosen["text"]) == ("kernel", "+ layer…")
    assert described["text"] == "Play" and bare["text"] == "Button"
