"""view.data() and view.chart(): the chart views' data as DataFrames and Altair charts rendered offline."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import activis
from activis.export import ExportError
from activis.export.charts import NUMBER_EXPR, evaluation_data


@pytest.fixture(scope="module")
def panel():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 300)
    scores = rng.dirichlet([1, 1, 1], 300)
    scores[np.arange(300), labels] += 0.5
    return activis.EvaluationPanel(labels=labels, scores=scores / scores.sum(1, keepdims=True),
                                   class_names=["cat", "dog", "<b>bird</b>"])


def test_evaluation_data_is_what_evaluate_computes(panel):
    e = panel.evaluation()
    roc = panel.data("roc")
    first = roc[roc["class"] == "cat"]
    np.testing.assert_array_equal(first["x"], e.roc(0)["fpr"])
    np.testing.assert_array_equal(first["y"], e.roc(0)["tpr"])
    confusion = panel.data("confusion")
    assert confusion["count"].sum() == 300
    table = e.confusion()
    wide = confusion.set_index(["true", "predicted"])["count"].unstack().loc[table.index, table.columns]
    assert wide.values.tolist() == table.values.tolist()
    dist = panel.data("distributions")
    assert np.isclose(dist.groupby("side")["share"].sum(), 1).all()
    with pytest.raises(ExportError, match="roc, pr, calibration, distributions, confusion"):
        evaluation_data(e, "lift")


def test_every_chart_renders_offline_with_the_views_number_format(panel, tmp_path):
    vl_convert = pytest.importorskip("vl_convert")
    for kind in ("roc", "pr", "calibration", "distributions", "confusion"):
        spec = panel.chart(kind).to_json()
        if kind in ("roc", "pr", "calibration", "distributions"):
            assert NUMBER_EXPR.replace("'", "\\u0027")[:20] in spec or "labelExpr" in spec
        svg = vl_convert.vegalite_to_svg(spec)
        assert svg.startswith("<svg") and "<b>" not in svg  # names are text, escaped in the SVG
    png = tmp_path / "roc.png"
    panel.chart("roc").save(str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cockpit_and_runs_charts(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cockpit = activis.Cockpit(model, "economy", optimizer=opt, log_dir=tmp_path / "a")
    for step in range(5):
        opt.zero_grad()
        cockpit.backward(F.cross_entropy(model(torch.randn(8, 6)), torch.randint(0, 3, (8,)), reduction="none"),
                         step=step)
        opt.step()
    cockpit_panel = activis.CockpitPanel(cockpit)
    frame = cockpit_panel.data()
    assert frame["step"].tolist() == list(range(5)) and "Loss" in frame.columns
    spec = json.loads(cockpit_panel.chart().to_json())
    assert {"Loss", "GradNorm"} <= {row["series"] for row in next(iter(spec["datasets"].values()))}
    runs = activis.RunsPanel({"a": tmp_path / "a"})
    assert set(runs.data()["run"]) == {"a"}
    with pytest.raises(ExportError, match="No series 'nope'"):
        runs.chart(["nope"])
    assert runs.chart(["Loss"]).to_json()


def test_data_map_and_cka_charts_render_offline(tmp_path):
    """The data map's and the CKA heatmap's data() are their frames; chart() renders through vl-convert."""
    vl_convert = pytest.importorskip("vl_convert")
    from timeline_run import make_run

    from activis.widgets.cka_view import CKAView
    from activis.widgets.data_map_view import DataMapView

    store = activis.open_run(make_run(tmp_path / "run", steps=11, n=60)).store
    data_map = activis.data_map_of(store)
    view = DataMapView(data_map)
    frame = view.data()
    assert frame["instance"].tolist() == list(range(60))
    np.testing.assert_array_equal(frame["confidence"], data_map["confidence"])
    for color_by in ("correctness", "forgetting"):
        svg = vl_convert.vegalite_to_svg(view.chart(color_by).to_json())
        assert svg.startswith("<svg") and svg.count("<path") >= 60  # one mark per instance
    with pytest.raises(ExportError, match="correctness or forgetting"):
        view.chart("loss")
    matrix = activis.cka_matrix(store)
    cka = CKAView(matrix)
    cells = cka.data()
    assert len(cells) == matrix.size and set(cells.columns) == {"layer", "step", "cka"}
    assert cells.set_index(["layer", "step"])["cka"].unstack().loc[matrix.index, matrix.columns].equals(matrix)
    svg = vl_convert.vegalite_to_svg(cka.chart().to_json())
    assert svg.startswith("<svg") and "1.00" in svg  # the last checkpoint's CKA with itself
