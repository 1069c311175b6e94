"""Every notebook in notebooks/ runs top to bottom headless, as a user would run it, and shows what its text says.

Each notebook runs once; its outputs (printed text, tables, and the views' saved widget state with
their binary buffers) are then checked against the same facts computed here independently: from
scikit-learn's bundled data, and from the store the notebook wrote, with plain numpy. The numbers
of the cockpit case studies are test_cockpit_notebook's; here, what its panels show.
"""

import base64
import copy
import functools
import pathlib
import re

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

from activis.store import open_store

NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
VIEW = "application/vnd.jupyter.widget-view+json"


class Ran:
    """An executed notebook: its cells' outputs and its views' saved state."""

    def __init__(self, nb, folder):
        self.nb, self.folder = nb, folder
        self.models = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]

    def cell(self, marker):
        """The first code cell whose source holds ``marker`` (robust to cells added around it)."""
        return next(c for c in self.nb.cells if c.cell_type == "code" and marker in c.source)

    def text(self, marker):
        """What a cell printed and displayed as plain text."""
        parts = [o.get("text", "") if o.output_type == "stream" else o.get("data", {}).get("text/plain", "")
                 for o in self.cell(marker).outputs]
        return "\n".join(parts)

    def view(self, marker):
        """The state of the view a cell displayed, binary buffers decoded into arrays."""
        ref = next(o["data"][VIEW]["model_id"] for o in self.cell(marker).outputs if VIEW in o.get("data", {}))
        return self.model(ref)

    def model(self, ref):
        model = self.models[ref.removeprefix("IPY_MODEL_")]
        state = copy.deepcopy(model["state"])
        for buffer in model.get("buffers", []):
            *parents, last = buffer["path"]
            holder = functools.reduce(lambda obj, key: obj[key], parents, state)
            holder[last] = base64.b64decode(buffer["data"])
        # activis's arrays travel as {"dtype", "shape", "buffer"}
        return {key: np.frombuffer(value["buffer"], dtype=value["dtype"]).reshape(value["shape"])
                if isinstance(value, dict) and {"dtype", "shape", "buffer"} <= set(value) else value
                for key, value in state.items()}

    def descendants(self, state):
        """Every view inside a box, depth first."""
        for ref in state.get("children", []):
            child = self.model(ref)
            yield child
            yield from self.descendants(child)


def table_rows(text):
    """The data rows of a DataFrame's plain-text form, split on runs of spaces."""
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()[1:] if line.strip()]


def check_quickstart(ran):
    from sklearn.datasets import load_digits

    store = open_store(ran.folder / "digits.activis")
    labels, preds = store.instances["label"].to_numpy(), store.instances["pred"].to_numpy()
    n = len(load_digits().target)
    assert f"{n:,} instances" in ran.text("digits_store(") and "complete" in ran.text("digits_store(")
    # the graph summary and the graph view describe the same graph
    nodes = int(re.search(r"(\d+) nodes", ran.text("graph.summary()")).group(1))
    assert len(ran.view("GraphView(graph)")["graph"]["nodes"]) == nodes
    # the most frequent mistake, counted here from the store's labels and predictions
    wrong = labels != preds
    pairs, counts = np.unique(np.stack([labels[wrong], preds[wrong]], 1), axis=0, return_counts=True)
    top = pairs[counts.argmax()]
    first = table_rows(ran.text("confusion_pairs(store)"))[0]
    assert [int(first[1]), int(first[2]), int(first[5])] == [top[0], top[1], counts.max()], first
    # the explained instance is a mistake of that pair, and the message says so with its confidence
    message = ran.text("explorer.explain(")
    found = re.search(r"Instance (\d+) \(true class '(\d)'\) is misclassified as '(\d)' \(confidence ([\d.]+)\)",
                      message)
    assert found, message
    mistake = int(found.group(1))
    assert (labels[mistake], preds[mistake]) == tuple(top) == (int(found.group(2)), int(found.group(3)))
    assert float(found.group(4)) == pytest.approx(store.instances["confidence"][mistake], abs=6e-4)
    ranking = next(o["data"]["text/html"] for o in ran.cell("explorer.explain(").outputs
                   if "text/html" in o.get("data", {}))
    assert re.search("<tbody>(.*)</tbody>", ranking, re.S).group(1).count("<tr") == 10  # ranking.head(10)
    # pinned in every view: the matrix has the instance's row, the instance panel the pin
    views = list(ran.descendants(ran.view("activis.Explorer(store)")))
    matrix = next(v for v in views if "row_keys" in v)
    panel = next(v for v in views if "pinned" in v and "thumbnails" in v)
    assert f"instance:{mistake}" in matrix["row_keys"] and panel["pinned"] == [mistake]


def check_tabular_subsets(ran):
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    radius, target = data.data[:, list(data.feature_names).index("mean radius")], data.target
    store = open_store(ran.folder / "cancer.activis")
    wrong = store.instances["label"].to_numpy() != store.instances["pred"].to_numpy()
    confidence = store.instances["confidence"].to_numpy()
    masks = {"true malignant": target == 0, "true benign": target == 1, "large": radius > 15,
             "small": radius <= 12, "large and benign": (radius > 15) & (target == 1), "unsure": confidence < 0.8,
             "misclassified": wrong}
    sizes = {row[1]: int(row[-2]) for row in table_rows(ran.text("subsets.table()"))}
    assert sizes == {name: int(mask.sum()) for name, mask in masks.items()}
    # the mean activation table: each subset's mean of the first hidden layer, to the 2 decimals shown
    acts = np.asarray(store.activations("1"), dtype=np.float64)
    shown = {row[0]: [float(v) for v in row[1:]] for row in table_rows(ran.text("subsets.aggregate(")) if
             row[0] in masks}
    assert list(shown) == ["true malignant", "true benign", "large", "small", "misclassified"]
    for name, values in shown.items():
        np.testing.assert_allclose(values, acts[masks[name]].mean(0)[:8], atol=0.0051, err_msg=name)
    # the matrix: its five rows' means at layer 3, neurons sorted by the first row, highest first
    matrix = ran.view("activis.ActivationMatrix(")
    rows = ["true malignant", "true benign", "large", "small", "unsure"]
    assert matrix["row_keys"] == [f"subset:{r}" for r in rows] and matrix["layer"] == "3"
    acts3 = np.asarray(store.activations("3"), dtype=np.float64)
    means = np.stack([acts3[masks[r]].mean(0) for r in rows])
    np.testing.assert_allclose(matrix["values"], means, rtol=1e-5, atol=1e-6)
    assert matrix["sort_by_row"] == "subset:true malignant"
    np.testing.assert_array_equal(means[0][matrix["neuron_order"]], np.sort(means[0])[::-1])
    views = list(ran.descendants(ran.view("activis.Explorer(store")))
    assert next(v for v in views if "row_keys" in v)["layer"] == "3"


def check_cockpit_debugging(ran):
    def share(hist, bins):
        return float(hist[bins].sum() / hist.sum())

    edges, middle = [0, -1], [49, 50]
    bad, good = ran.view('CockpitPanel(runs["unnormalised"])'), ran.view('CockpitPanel(runs["normalised"])')
    sigmoid, relu = ran.view('CockpitPanel(runs["sigmoid"]'), ran.view('CockpitPanel(runs["relu"]')
    assert [p["run"] for p in (bad, good, sigmoid, relu)] == ["unnormalised", "normalised", "cnn-sigmoid", "cnn-relu"]
    for panel in (bad, good, sigmoid, relu):
        np.testing.assert_array_equal(panel["steps"], np.arange(150))
        assert panel["hist1d_steps"] == 150 and len(panel["hist1d"]) == 100
    # "visible mass in the two edge bins" for the unnormalised run, none for the normalised one
    assert share(bad["hist1d"], edges) > 1e-3 and share(good["hist1d"], edges) == 0
    assert bad["hist1d_range"] == good["hist1d_range"] == [-2.0, 2.0]
    # the CNN panels open on the first convolution, range +-0.01: frozen with sigmoids, alive with ReLUs
    assert sigmoid["layer"] == relu["layer"] == "1" and sigmoid["hist1d_range"] == [-0.01, 0.01]
    assert share(sigmoid["hist1d"], middle) > 0.9 and share(relu["hist1d"], middle) < 0.3
    runs = ran.text("load_runs(")
    assert "normalised" in runs and "unnormalised" in runs


def check_evaluation(ran):
    from sklearn.metrics import roc_auc_score
    panel = ran.view("EvaluationPanel(store_b")
    focus = panel["focus"]
    assert panel["class_names"][focus] == "3" and len(panel["label"]) == 1797 - 1200
    metrics = panel["class_metric_names"]
    auc = panel["class_metrics"][focus, metrics.index("auc")]
    # the panel's exact AUC of class 3, against sklearn on the very labels and scores it sent
    assert abs(auc - roc_auc_score(panel["label"] == focus, panel["score"])) < 1e-12
    runs = ran.view("RunsPanel(runs")
    assert runs["run_names"] == ["slow", "fast"] and runs["config_differs"] == ["lr"]
    assert runs["values"].shape == (2, 5, 40) and np.isfinite(runs["values"]).all()


def check_training_timeline(ran):
    assert "step 83 of 10 checkpoints · complete" in ran.text("print(store)")
    assert "[0, 9, 18, 27, 36, 46, 55, 64, 73, 83]" in ran.text("print(store)")
    assert "step 9 of 10 checkpoints" in ran.text("first = store.at")
    assert "per epoch: (4, 1319, 10)" in ran.text("read_dynamics(")
    panel = ran.view("CockpitPanel(cockpit)")
    np.testing.assert_array_equal(panel["steps"], np.arange(84))
    assert "easy to learn" in ran.text("dm = run.data_map()")
    assert "(10, (1797, 2)," in ran.text("layouts = activis.aligned_projection(")
    # the linked views: a step range moves the explorer and marks the flipped predictions; a data-map brush
    # filters the instance panel to exactly the brushed instances
    spike = re.search(r"loss jumps at step (\d+): the explorer shows checkpoint (\d+), compared to checkpoint "
                      r"(\d+); (\d+) predictions changed", ran.text("explorer.cockpit.step_range"))
    assert spike and int(spike[3]) < int(spike[2]) and int(spike[4]) > 0
    assert f"prediction changed {spike[3]} → {spike[2]}" in ran.text("explorer.cockpit.step_range")
    hard = re.search(r"(\d+) hard-to-learn instances; the instance panel shows (\d+)", ran.text("data_map.brush(hard)"))
    assert hard and hard[1] == hard[2] and int(hard[1]) > 0
    assert re.search(r"\d+ instances with a loss above", ran.text("per_sample.brush("))


CHECKS = {"quickstart.ipynb": check_quickstart, "tabular_subsets.ipynb": check_tabular_subsets,
          "cockpit_debugging.ipynb": check_cockpit_debugging, "evaluation.ipynb": check_evaluation,
          "training_timeline.ipynb": check_training_timeline}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_and_shows_what_it_says(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", store_widget_state=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    # nothing on stderr either: a warning in a notebook `activis demo` hands out is the first thing a user reads
    stderr = [o["text"] for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "stream" and o.get("name") == "stderr"]
    assert not stderr, stderr
    views = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if VIEW in o.get("data", {})]
    assert views, "a notebook of activis shows at least one view"
    check = CHECKS.get(path.name)
    if check is not None:  # a new notebook runs at least; give it a check of what it shows
        check(Ran(nb, tmp_path))
