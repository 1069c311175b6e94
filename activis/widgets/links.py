"""The links between an explorer's views, declared once as a table and resolved by one coordinator.

A link says: when ``view.trait`` changes, do one thing. The thing is one of

- ``to="other.trait"``: copy the new value there (``when=`` filters values, e.g. ``bool`` skips "");
- ``clause="brush", owner="data_map"``: write the value as that clause of the shared `Selection`,
  owned by ``owner`` (an empty value clears it), so every other view follows it and the owner never
  does (Mosaic's rule, applied by the Selection, in Python and in ``js/common/selection.js``);
- ``call="_on_layer"``: a named method of the table's host, for a link that computes something (a
  matrix row for a brush); it gets the traitlets change.

Views are named, not passed: a table is plain data (``Explorer.LINKS``, ``ExplorerTimeline.LINKS``),
and a link whose view is absent (no graph, no cockpit) is skipped. A name or trait that does not exist
is refused when the table is added, not when the link first fires. To add a link to an explorer::

    explorer.links.add_views(slider=my_slider)
    explorer.links.add([Link("slider", "value", to="selection.neuron")])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .errors import ViewError


class LinkError(ViewError):
    """A link table naming a view, trait or handler that does not exist, or saying two things at once."""


@dataclass(frozen=True)
class Link:
    """When ``view.trait`` (or any of several traits) changes: copy, write a clause, or call a handler."""

    view: str
    trait: str | tuple[str, ...]
    to: str | None = None
    call: str | None = None
    clause: str | None = None
    owner: str | None = None
    when: Callable[[Any], bool] | None = None

    def __post_init__(self):
        targets = [name for name in ("to", "call", "clause") if getattr(self, name) is not None]
        if len(targets) != 1:
            raise LinkError(f"A link from {self.view}.{self.trait} has one target: to=, call= or clause= "
                            f"(it has {', '.join(targets) or 'none'}).")
        if (self.clause is None) != (self.owner is None):
            raise LinkError(f"A link from {self.view}.{self.trait} writing a clause names its owner "
                            "(clause='brush', owner='data_map'), and only then.")

    @property
    def traits(self) -> tuple[str, ...]:
        return (self.trait,) if isinstance(self.trait, str) else tuple(self.trait)


class Coordinator:
    """Resolves link tables over named views; every view with a ``shared_selection`` trait joins the Selection."""

    def __init__(self, selection, **views):
        self.selection = selection
        self.views: dict[str, Any] = {"selection": selection}
        self.links: list[Link] = []
        self.add_views(**views)

    def add_views(self, **views) -> None:
        """Name views for the tables (None: absent, its links are skipped); the views that can share
        a Selection get this one (hovers and the active subset then travel in the browser)."""
        for name, view in views.items():
            if name in self.views and self.views[name] is not view:
                raise LinkError(f"A view named {name!r} is already linked; choose another name.")
            self.views[name] = view
            if view is not None and _has_trait(view, "shared_selection") and view is not self.selection:
                view.shared_selection = self.selection

    def add(self, table: Iterable[Link], host: Any = None) -> None:
        """Resolve every link of ``table`` (``call=`` names a method of ``host``), checked before any is wired."""
        wired = [(link, self._resolve(link, host)) for link in table]
        for link, (view, handler) in wired:
            if view is None:
                continue
            view.observe(handler, names=list(link.traits))
            self.links.append(link)

    def _resolve(self, link: Link, host) -> tuple[Any, Callable | None]:
        view = self._view(link.view)
        if view is not None:
            missing = [t for t in link.traits if not _has_trait(view, t)]
            if missing:
                raise LinkError(f"{link.view} ({type(view).__name__}) has no trait {missing[0]!r}.")
        if link.call is not None:
            handler = getattr(host, link.call, None)
            if not callable(handler):
                raise LinkError(f"The link from {link.view}.{link.trait} calls {link.call!r}, which "
                                f"{type(host).__name__} does not define.")
            return view, handler
        if link.clause is not None:
            return view, self._clause_writer(link)
        target_name, _, trait = link.to.rpartition(".")
        target = self._view(target_name)
        if target is None:
            return None, None  # an absent target: nothing to follow
        if not _has_trait(target, trait):
            raise LinkError(f"The link from {link.view}.{link.trait} goes to {link.to!r}; "
                            f"{target_name} ({type(target).__name__}) has no trait {trait!r}.")
        return view, _copier(target, trait, link.when)

    def _view(self, name: str):
        if name not in self.views:
            raise LinkError(f"No view named {name!r} to link; views: {', '.join(self.views)}.")
        return self.views[name]

    def _clause_writer(self, link: Link) -> Callable:
        setter = getattr(self.selection, f"set_{link.clause}", None)
        if setter is None:
            raise LinkError(f"The Selection has no clause {link.clause!r} to write.")

        def write(change):
            value = change["new"]
            setter(value if value is not None and len(value) else None, link.owner)

        return write


def _copier(target, trait: str, when) -> Callable:
    def copy(change):
        if when is None or when(change["new"]):
            setattr(target, trait, change["new"])

    return copy


def _has_trait(view, name: str) -> bool:
    return hasattr(view, "has_trait") and view.has_trait(name)
