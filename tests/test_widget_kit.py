"""The views' shared parts in the kernel: one palette, the Selection's cross-filter rule, row keys, graph markers."""

import numpy as np
import pytest
import torch
import traitlets
from torch import nn

from activis import extract_graph
from activis.widgets import GraphView, Selection, row_keys
from activis.widgets.colours import SEVERITY, class_colours, palette


def test_class_colour_does_not_depend_on_the_number_of_classes():
    twelve, twenty_five = class_colours(12), class_colours(25)
    assert twenty_five[:12] == twelve
    assert len(set(twenty_five)) == 25  # all distinct
    assert class_colours(3, ["red"]) [:1] == ["red"] and class_colours(3, ["red"])[1:] == twelve[1:3]
    p = palette(4)
    assert p["classes"] == twelve[:4] and p["severity"] == SEVERITY and p["missing"].startswith("#")


def test_selection_follows_every_clause_but_mine():
    sel = Selection()
    assert sel.clause("brush", "instances") is None
    sel.set_brush([3, 1], "projection")
    assert sel.clause("brush", "projection") is None  # a brush never filters its own view
    assert sel.clause("brush", "instances").tolist() == [3, 1]
    sel.set_hover([5], "matrix")
    assert sel.clause("hover", "matrix") is None and sel.clause("hover", "projection").tolist() == [5]
    with pytest.raises(KeyError, match="Clauses: brush, hover"):
        sel.clause("lasso", "projection")
    # a view's own clause, while it stands (what it keeps drawing): Mosaic's valueFor
    assert sel.own("brush", "projection").tolist() == [3, 1] and sel.own("brush", "instances") is None
    sel.set_brush([2], "data_map")
    assert sel.own("brush", "projection") is None


def test_row_keys():
    assert row_keys.subset_of(row_keys.subset_row("a:b")) == "a:b"
    assert row_keys.instance_of(row_keys.instance_row(np.int64(7))) == 7
    assert row_keys.instance_of("instance:x") is None and row_keys.subset_of("instance:1") is None
    assert row_keys.instances_in(["instance:1", "subset:x", row_keys.BRUSH, "instance:4"]) == {1, 4}
    assert row_keys.is_reserved("subset:") and not row_keys.is_reserved(row_keys.HOVER)


def test_graph_markers_are_checked():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    view = GraphView(extract_graph(model, torch.randn(2, 3)))
    view.markers = {"0": {"severity": "error", "count": 2, "title": "exploding"}, "2": {"severity": "note"}}
    assert view.markers["2"] == {"severity": "note", "count": 1, "title": ""}
    with pytest.raises(traitlets.TraitError, match="no such node or module"):
        view.markers = {"nope": {"severity": "error", "count": 1, "title": ""}}
    with pytest.raises(traitlets.TraitError, match="error, warning, note"):
        view.markers = {"0": {"severity": "fatal", "count": 1, "title": ""}}
    with pytest.raises(traitlets.TraitError, match="whole number"):
        view.markers = {"0": {"severity": "error", "count": -1, "title": ""}}
    assert view.markers["0"]["count"] == 2  # a rejected value loses nothing
