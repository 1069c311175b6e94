"""Share what you found: views, explorers and dashboards as one self-contained HTML file.

``activis.save_html(path, *views)`` (and ``view.save_html(path)``, ``explorer.save_html(path)``)
writes one file with the bundled JS inlined and the data embedded as binary; it opens from
``file://`` with no network and no kernel. In the page every view draws and links as in the
notebook; an Explorer also cross-filters there (a lasso's matrix row is computed in the page from
the embedded activations). An Explorer over a run keeps its checkpoints: the slider, the cockpit's step
brush and a CKA cell move the views there (`checkpoints`). What needs Python (slice discovery, adding
subsets, explaining an instance) is disabled, and the page says so.
"""

from __future__ import annotations

import ipywidgets as widgets

from .errors import ExportError
from .page import check_path, render_page, write_page
from .sample import sampled_explorer
from .state import PageState

__all__ = ["ExportError", "save_html"]


def save_html(path, *items, title: str = "activis", max_instances: int = 20_000):
    """Write ``items`` (views, explorers, boxes of them) into one page at ``path``; returns its path.

    An Explorer over more than ``max_instances`` instances is exported over a stratified sample of
    them, and the page says so.
    """
    from ..widgets.explorer import Explorer

    if not items:
        raise ExportError("save_html needs at least one view or explorer to put in the page.")
    if not isinstance(title, str):
        raise ExportError(f"title= is the page's title, a string, not {type(title).__name__}.")
    if isinstance(max_instances, bool) or not isinstance(max_instances, int) or max_instances < 100:
        raise ExportError(f"max_instances= is how many instances an exported explorer keeps, an integer of at "
                          f"least 100, not {max_instances!r}.")
    for item in items:
        if not isinstance(item, widgets.Widget):
            raise ExportError(f"save_html takes activis views, explorers or ipywidgets boxes of them, not "
                              f"{type(item).__name__}.")
    check_path(path)  # before any work: a page that cannot be written is said at once
    state = PageState()
    children = []
    for item in items:
        if isinstance(item, Explorer) and item.store.n_instances > max_instances:
            with sampled_explorer(item, max_instances) as (sample, note):
                if item.timeline is not None:  # a sample is one checkpoint: the run's instruments still come
                    note += " The run's checkpoints are left out of a sampled page; its cockpit is below."
                children += [{"kind": "text", "text": note, "style": {"font-weight": "600"}},
                             *_explorer_nodes(sample, state)]
                if item.cockpit is not None:
                    children.append(state.layout(item.cockpit))
        elif isinstance(item, Explorer):
            children += _explorer_nodes(item, state)
        else:
            children.append(state.layout(item))
    layout = {"kind": "box", "direction": "column", "style": {"width": "100%"}, "children": children}
    note = "A saved copy: views draw and link here; what needs Python is marked as such."
    return write_page(path, render_page(state, layout, title=title, note=note))


def _explorer_nodes(explorer, state: PageState) -> list[dict]:
    """An explorer's layout node (and, over a run whose checkpoints did not all fit, a note saying so)."""
    from .checkpoints import checkpoint_data
    from .explorer import explorer_data

    data = explorer_data(explorer, state)
    data["checkpoints"], note = checkpoint_data(explorer, state, data)
    node = {"kind": "explorer", "child": state.layout(explorer), "data": data,
            "selection": state.add_model(explorer.selection),
            "views": {role: state.add_model(view) for role, view in _explorer_views(explorer).items()}}
    return ([{"kind": "text", "text": note, "style": {"font-weight": "600"}}] if note else []) + [node]


def _explorer_views(explorer) -> dict:
    views = {"matrix": explorer.matrix, "projection": explorer.projection, "instances": explorer.instances,
             "subsets": explorer.subset_panel, "slices": explorer.slice_suggestions, "why": explorer.why}
    if explorer.graph_view is not None:
        views["graph"] = explorer.graph_view
    if explorer.evaluation is not None:
        views["evaluation"] = explorer.evaluation
    if explorer.timeline is not None:
        timeline = explorer.timeline
        views["timeline"] = timeline.view
        views.update({role: view for role, view in (("cockpit", timeline.cockpit), ("data_map", timeline.data_map),
                                                     ("cka", timeline.cka), ("per_sample", timeline.per_sample))
                      if view is not None})
    return views
