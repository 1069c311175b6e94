"""The link table and its coordinator: each kind of link, absent views, and tables that name what is not there."""

import ipywidgets as widgets
import numpy as np
import pytest
import traitlets

from activis.widgets.links import Coordinator, Link, LinkError
from activis.widgets.selection import Selection


class Brusher(widgets.Widget):
    """A stand-in view: a brush of its own, a number and a Selection it can share."""

    brushed = traitlets.Any(None)
    value = traitlets.Int(0)
    shared_selection = traitlets.Instance(Selection, allow_none=True)


class Host:
    def __init__(self):
        self.seen = []

    def record(self, change):
        self.seen.append((change["name"], change["new"]))


def test_copy_clause_and_call_links():
    sel, view, host = Selection(), Brusher(), Host()
    links = Coordinator(sel, view=view)
    assert view.shared_selection is sel  # a view that can share the Selection joins it when named
    links.add([Link("view", "value", to="selection.neuron", when=lambda v: v != 7),
               Link("view", "brushed", clause="brush", owner="mine"),
               Link("selection", ("brush", "brush_source"), call="record")], host=host)
    view.value = 3
    assert sel.neuron == 3
    view.value = 7  # filtered out by when=
    assert sel.neuron == 3
    view.brushed = np.array([4, 5])
    assert sel.brush_source == "mine" and sel.brush.tolist() == [4, 5]
    assert sel.clause("brush", "mine") is None and sel.clause("brush", "other").tolist() == [4, 5]
    assert ("brush_source", "mine") in [(name, new) for name, new in host.seen]
    view.brushed = np.zeros(0, np.int32)  # an empty brush clears the clause
    assert sel.brush is None
    assert len(links.links) == 3


def test_links_of_an_absent_view_are_skipped():
    sel = Selection()
    links = Coordinator(sel, graph=None)
    links.add([Link("graph", "selected_layer", to="selection.layer"),
               Link("selection", "layer", to="graph.selected_layer")])
    sel.layer = "fc1"
    assert links.links == []


@pytest.mark.parametrize("link, match", [
    (Link("nowhere", "value", to="selection.neuron"), "No view named 'nowhere'"),
    (Link("view", "valeu", to="selection.neuron"), "has no trait 'valeu'"),
    (Link("view", "value", to="selection.neurone"), "has no trait 'neurone'"),
    (Link("view", "value", call="_missing"), "does not define"),
    (Link("view", "brushed", clause="lasso", owner="view"), "no clause 'lasso'"),
])
def test_a_table_naming_what_is_not_there_is_refused_before_any_link_is_wired(link, match):
    sel, view = Selection(), Brusher()
    links = Coordinator(sel, view=view)
    with pytest.raises(LinkError, match=match):
        links.add([Link("view", "value", to="selection.neuron"), link], host=Host())
    view.value = 5
    assert sel.neuron == -1 and links.links == []  # the table's good links were not wired either


def test_a_link_says_one_thing():
    with pytest.raises(LinkError, match="one target"):
        Link("view", "value", to="selection.neuron", call="record")
    with pytest.raises(LinkError, match="names its owner"):
        Link("view", "brushed", clause="brush")
    with pytest.raises(LinkError, match="already linked"):
        Coordinator(Selection(), view=Brusher()).add_views(view=Brusher())
