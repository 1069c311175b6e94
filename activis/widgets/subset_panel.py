"""SubsetPanel: define, list, pick and delete subsets from the UI; a view over `Subsets`."""

from __future__ import annotations

import traitlets

from ..subsets import Subsets
from ._base import View, bundle
from .errors import check_type, unknown


class SubsetPanel(View):
    """Subsets of a store, live: type a query, add one per class or "true X predicted Y".

    Every definition goes through `Subsets.add`, so it is checked, persisted in the store and seen
    by every other view of the same `Subsets`. ``active`` is the subset the user picked (the
    Explorer highlights it everywhere); ``status`` shows the last error in the panel.
    """

    _esm = bundle("subset_panel")

    height = traitlets.Int(300).tag(sync=True)
    items = traitlets.List(traitlets.Dict()).tag(sync=True)  # name, definition, size, fraction
    columns = traitlets.List(traitlets.Unicode()).tag(sync=True)
    class_names = traitlets.List(traitlets.Unicode()).tag(sync=True)
    active = traitlets.Unicode("").tag(sync=True)
    status = traitlets.Unicode("").tag(sync=True)

    def __init__(self, subsets: Subsets, **kwargs):
        check_type("SubsetPanel", subsets, Subsets, "the Subsets of a store (activis.Subsets(store))")
        store = subsets.store
        super().__init__(columns=[str(c) for c in store.instances.columns],
                         class_names=[str(c) for c in store.class_names], **kwargs)
        self._subsets = subsets
        subsets.observe(self._refresh)
        self.on_msg(self._on_request)
        self._refresh(subsets)

    @property
    def subsets(self) -> Subsets:
        return self._subsets

    @traitlets.validate("active")
    def _check_active(self, proposal):
        name = proposal["value"]
        if name and name not in self._subsets:
            raise unknown(f"No subset named {name!r}", name, self._subsets.names, "Subsets")
        return name

    def active_indices(self):
        """Instances of the picked subset (empty when none is picked)."""
        import numpy as np

        return self._subsets.indices(self.active) if self.active else np.zeros(0, np.int64)

    def _refresh(self, subsets: Subsets) -> None:
        table = subsets.table()
        self.items = [{"name": r.name, "definition": r.definition, "size": int(r.size),
                       "fraction": float(r.fraction)} for r in table.itertuples()]
        if self.active and self.active not in subsets:
            self.active = ""

    def _on_request(self, _widget, content, _buffers) -> None:
        """Requests from the panel's buttons; an error is shown in the panel, never lost in a log."""
        action = content.get("action")
        try:
            if action == "add":
                name = content.get("name", "").strip() or content.get("expression", "").strip()
                self._subsets.add(name, content.get("expression", ""))
                self.status = f"added {name!r}"
            elif action == "remove":
                self._subsets.remove(content["name"])
                self.status = f"removed {content['name']!r}"
            elif action == "by_class":
                self._subsets.by_class()
                self.status = "added one subset per class"
            elif action == "misclassified":
                self._subsets.misclassified()
                self._subsets.correct()
                self.status = "added misclassified and correctly classified"
            elif action == "confusion":
                subset = self._subsets.confusion(content["true"], content["pred"])
                self.status = f"added {subset.name!r}"
            else:
                self.status = f"unknown request {action!r}"
        except Exception as exc:  # noqa: BLE001 - any bad definition is reported in the panel
            self.status = f"error: {exc}"

    def data(self):
        """The subsets listed: name, definition, size, fraction of the store, and which one is picked."""
        return self._subsets.table().assign(active=lambda t: t["name"] == self.active)
