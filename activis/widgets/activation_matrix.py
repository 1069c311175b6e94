"""ActivationMatrix: rows are subsets and single instances, columns are the neurons of one layer."""

from __future__ import annotations

import itertools

import numpy as np
import traitlets
from ipywidgets import widget_serialization

from ..analysis import sorted_unique
from ..subsets import (
    STATS,
    Aggregate,
    RunningAggregate,
    Subset,
    SubsetError,
    Subsets,
    checked_indices,
    cluster_neurons,
    sort_neurons,
)
from ._arrays import array_serialization
from ._base import Choice, View, bundle
from .errors import ViewError, check_index, check_layer, check_same_instances, check_store, unknown
from .matrix_deferred import DeferredRows
from .matrix_local import PageLayer
from .row_keys import INSTANCE_PREFIX, SUBSET_PREFIX, instance_of, instance_row, is_reserved, subset_of, subset_row
from .selection import Selection

ORDER_MODES = ("index", "sort", "cluster")
# instance indices of all rows together that the browser may hold for linking through a shared
# Selection (hovering a row lights up its instances elsewhere without the kernel); beyond this,
# hovered_indices in Python is the link
MEMBERS_LIMIT = 4_000_000
_VERSIONS = itertools.count()


class ActivationMatrix(View):
    """The neuron activation matrix of one layer, drawn on a canvas.

    A subset row is the mean (or fraction active, or std) of its members' activations; an
    instance row is that instance's activations. Rows are identified by keys:
    ``"subset:<name>"``, ``"instance:<index>"`` or the key given to `add_rows_from_indices`
    (`activis.widgets.row_keys` spells them).
    ``row_keys`` is the list of rows shown, in order; the browser and Python both edit it.

    Linkable state: ``selected_neuron`` (-1 for none), ``selected_row`` / ``hovered_row`` (row
    keys, "" for none), ``hovered_neuron``, and the Python-only ``selected_indices`` /
    ``hovered_indices`` (int32 instance indices of the selected / hovered row).

    With an explorer's `Selection` in ``shared_selection``, the browser links views directly: hovering a row
    writes its instances to ``selection.hover`` (source "matrix"), clicking a neuron writes
    ``selection.neuron``, clicking a subset row writes ``selection.subset``/``subset_indices``,
    and the matrix follows ``selection.neuron`` and ``selection.layer``.

    Neuron order: ``order_mode`` "index", "sort" (by the values in ``sort_by_row``, computed in
    the browser; ``neuron_order`` mirrors it in Python) or "cluster" (hierarchical clustering of
    the neurons' profiles across the rows, computed here). ``difference_to`` shows every row minus
    a reference row; `set_baseline` shows every row minus its own instances at another checkpoint.
    """

    _esm = bundle("activation_matrix")

    height = traitlets.Int(520).tag(sync=True)  # 100 rows fit at 4 px; fewer rows take less
    layer = traitlets.Unicode("").tag(sync=True)
    layers = traitlets.List(traitlets.Unicode()).tag(sync=True)
    neuron_kind = traitlets.Unicode("unit").tag(sync=True)
    statistic = Choice(STATS, default_value="mean").tag(sync=True)
    threshold = traitlets.Float(0.0).tag(sync=True)

    row_keys = traitlets.List(traitlets.Unicode()).tag(sync=True)
    rows = traitlets.List(traitlets.Dict()).tag(sync=True)  # key, label, kind, size, description
    values = traitlets.Any(None).tag(sync=True, **array_serialization)  # rows x neurons float32
    # the values at every checkpoint of a run (checkpoints x rows x neurons float32, None: not held), in
    # ``checkpoint_steps``' order: the page redraws from them when the timeline moves (`checkpoint_frames`)
    checkpoint_steps = traitlets.List(traitlets.Int()).tag(sync=True, saved=False)
    checkpoint_values = traitlets.Any(None).tag(sync=True, saved=False, **array_serialization)
    available_subsets = traitlets.List(traitlets.Unicode()).tag(sync=True)

    order_mode = Choice(ORDER_MODES, default_value="index").tag(sync=True)
    sort_by_row = traitlets.Unicode("").tag(sync=True)
    difference_to = traitlets.Unicode("").tag(sync=True)
    neuron_order = traitlets.Any(None).tag(sync=True, **array_serialization)  # int32, the current order

    selected_neuron = traitlets.Int(-1).tag(sync=True)
    selected_row = traitlets.Unicode("").tag(sync=True)
    hovered_neuron = traitlets.Int(-1).tag(sync=True)
    hovered_row = traitlets.Unicode("").tag(sync=True)
    selected_indices = traitlets.Any(np.zeros(0, np.int32))  # Python side only: for linking views
    hovered_indices = traitlets.Any(np.zeros(0, np.int32))

    status = traitlets.Unicode("").tag(sync=True)  # the last error from a bad request, shown in the view
    compared_to = traitlets.Unicode("").tag(sync=True)  # set_baseline's label: values are differences from it
    progress = traitlets.Unicode("").tag(sync=True)  # "computing … %" while rows are computed in the background

    shared_selection = traitlets.Instance(Selection, allow_none=True).tag(sync=True, **widget_serialization)
    # the rows' instances for in-browser linking, only while a selection is attached: row member_keys[r]'s
    # instances are row_members[row_offsets[r]:row_offsets[r + 1]]
    row_members = traitlets.Any(None).tag(sync=True, **array_serialization)
    row_offsets = traitlets.Any(None).tag(sync=True, **array_serialization)
    member_keys = traitlets.List(traitlets.Unicode()).tag(sync=True)  # the rows row_members covers, in order
    # the same for the rows given by add_rows_from_indices (a brush, a hover), sent apart: they change often
    index_members = traitlets.Any(None).tag(sync=True, **array_serialization)
    index_offsets = traitlets.Any(None).tag(sync=True, **array_serialization)
    index_keys = traitlets.List(traitlets.Unicode()).tag(sync=True)
    # the shown layer in the page, for a brushed row drawn before the kernel's (`matrix_local`): its stored
    # dtype ("" until sent) and values (None above the byte budget)
    page_activations = traitlets.Any(None).tag(sync=True, **array_serialization)
    page_dtype = traitlets.Unicode("").tag(sync=True)
    page_step = traitlets.Int(-1).tag(sync=True)  # the checkpoint of page_activations (`matrix_local`)

    def __init__(self, store, layer: str | None = None, *, subsets: Subsets | None = None, rows=None,
                 background: bool = False, **kwargs):
        """``background=True``: over a large layer (`matrix_deferred.DEFER_VALUES`), subset rows not yet
        cached are drawn empty at once and filled in when a thread has computed them (``progress``)."""
        self._store = check_store("ActivationMatrix", store)
        if subsets is not None and not isinstance(subsets, Subsets):
            raise ViewError(f"subsets= is a Subsets of this store (activis.Subsets(store)), not "
                            f"{type(subsets).__name__}.")
        self._subsets = subsets if subsets is not None else Subsets(store)
        # key -> (label, sorted unique indices, a number that changes with them)
        self._custom: dict[str, tuple[str, np.ndarray, int]] = {}
        self._running: dict[str, tuple[tuple, RunningAggregate]] = {}  # their sums, kept between updates
        self._aggregate = None
        self._baseline = None  # set_baseline's store: rows are shown minus their instances there
        self._deferred = DeferredRows(self._subsets, self._set_progress, self._refresh_values) if background else None
        layers = list(store.layers)
        if not layers:
            raise ViewError(f"Store {store.path} holds no layers to show.")
        super().__init__(layers=layers, layer=layer if layer is not None else layers[-1], **kwargs)
        if rows is None:
            rows = [subset_row(name) for name in self._subsets.by_class()]
        keys = list(dict.fromkeys(self._as_key(r) for r in rows))
        for key in keys:
            self._row_subset(key)  # a clear error for a bad row now, not a silently missing row
        self.row_keys = keys
        self.available_subsets = self._subsets.names
        self._subsets.observe(self._on_subsets_changed)
        self.observe(self._on_rows, names=["row_keys"])
        # before the values: the page drops the old layer's activations before it draws the new layer
        self.page_layer = PageLayer(self)
        self.observe(lambda _change: self.page_layer.refresh(), names=["layer", "shared_selection"])
        self.page_layer.refresh()
        self.observe(self._refresh_values, names=["layer", "statistic", "threshold"])
        self.observe(self._refresh_order, names=["order_mode", "sort_by_row", "difference_to"])
        self.observe(self._on_selected_row, names=["selected_row"])
        self.observe(self._on_hovered_row, names=["hovered_row"])
        self.observe(self._refresh_members, names=["shared_selection"])
        self._members_signature = None
        self._members_of: dict[tuple, np.ndarray] = {}  # (row key, instances, definition) -> its members
        self._refresh_values()

    def close(self) -> None:
        """Stop following the subsets (a closed view must not keep recomputing), then close."""
        if getattr(self, "_subsets", None) is not None:  # also called by __del__ of a half-built view
            self._subsets.unobserve(self._on_subsets_changed)
        if getattr(self, "_deferred", None) is not None:
            self._deferred.close()
        super().close()

    # ------------------------------------------------------------------ backend objects
    @property
    def store(self):
        return self._store

    @property
    def subsets(self) -> Subsets:
        return self._subsets

    @property
    def aggregate(self):
        """The `Aggregate` behind the rows shown (all three statistics)."""
        return self._aggregate

    @property
    def deferred(self) -> DeferredRows | None:
        """The background computation of large rows (``background=True``); ``deferred.wait()`` waits for it."""
        return self._deferred

    def _set_progress(self, text: str) -> None:
        self.progress = text

    def set_store(self, store) -> None:
        """Show the same rows over another store of the same instances (a checkpoint: ``store.at(step)``).

        The matrix's subsets must already read that store (an explorer moves them with it)."""
        self._store = check_same_instances("ActivationMatrix", self._store, store)
        self._members_signature = None  # a subset over predictions may hold other instances now
        self.page_layer.refresh()
        self._refresh_values()

    def set_baseline(self, store=None, label: str = "") -> None:
        """Show every row minus the same instances' statistic in another store of them (a checkpoint:
        ``store.at(a)``; ``label`` names it in the legend, e.g. "step 5"); None shows plain rows again.

        A row's instances are its members in the store shown, so a subset over predictions is compared
        as the instances it holds now, not as the instances it held then."""
        self._baseline = None if store is None else check_same_instances("ActivationMatrix", self._store, store)
        with self.hold_sync():
            self.compared_to = "" if store is None else (str(label) or "baseline")
            self._refresh_values()

    # ------------------------------------------------------------------ rows
    def add_subset(self, name: str, definition=None) -> str:
        """Show a subset (defining it first when ``definition`` is given); returns its row key."""
        if definition is not None:
            self._subsets.add(name, definition)
        self._subsets[name]  # noqa: B018 - a clear KeyError naming the subsets
        return self._append(subset_row(name))

    def add_instance(self, index: int) -> str:
        """Pin one instance as a row; returns its row key."""
        return self._append(instance_row(self._checked_instance(index)))

    def add_rows_from_indices(self, key: str, label: str, indices) -> str:
        """Show (or update) a row that is the mean over any instances, e.g. a brushed selection.

        Cheap for small sets (their rows are read directly); calling it again with the same key
        replaces the row's instances in place, which suits a temporary hover row.
        """
        if not isinstance(key, str) or not key or is_reserved(key):
            raise ViewError(f"Row key {key!r} must be a non-empty string not starting with "
                             f"{SUBSET_PREFIX!r} or {INSTANCE_PREFIX!r}.")
        indices = sorted_unique(checked_indices(indices, self._store.n_instances))
        self._custom[key] = (str(label), indices, next(_VERSIONS))
        if key in self.row_keys:
            self._refresh_values()
        else:
            self._append(key)
        return key

    def index_rows(self) -> dict[str, tuple[str, np.ndarray]]:
        """The rows given by `add_rows_from_indices` (a brush, a hover): key -> (label, sorted indices)."""
        return {key: (label, indices) for key, (label, indices, _) in self._custom.items()}

    def remove_row(self, row) -> None:
        """Remove a row by key (or by subset name / instance index)."""
        key = self._as_key(row)
        if key not in self.row_keys:
            raise unknown(f"No row {row!r}", row, self.row_keys, "Rows")
        self.row_keys = [k for k in self.row_keys if k != key]

    def _append(self, key: str) -> str:
        if key not in self.row_keys:
            self.row_keys = [*self.row_keys, key]
        return key

    def _as_key(self, row) -> str:
        if isinstance(row, (int, np.integer)) and not isinstance(row, bool):
            return instance_row(row)
        if isinstance(row, str) and (row in self._custom or is_reserved(row)):
            return row
        if isinstance(row, str) and row in self._subsets:
            return subset_row(row)
        if isinstance(row, str) and row in self.row_keys:
            return row
        raise ViewError(f"{row!r} is neither a row key, a subset name nor an instance index. Rows: "
                        f"{', '.join(self.row_keys) or 'none'}; subsets: {', '.join(self._subsets.names) or 'none'}.")

    def _checked_instance(self, index) -> int:
        return check_index(index, self._store.n_instances)

    def _row_subset(self, key: str) -> Subset:
        """The definition behind a row key; a clear error for anything unknown."""
        if key in self._custom:
            return Subset.from_indices(self._custom[key][1])
        if subset_of(key) is not None:
            return self._subsets[subset_of(key)]
        if key.startswith(INSTANCE_PREFIX):
            if instance_of(key) is None:
                raise ViewError(f"Row {key!r}: {key[len(INSTANCE_PREFIX):]!r} is not an instance index.")
            return Subset.from_indices([self._checked_instance(instance_of(key))])
        raise ViewError(f"Unknown row {key!r}: a row key is 'subset:<name>', 'instance:<index>' or one given "
                        "to add_rows_from_indices.")

    def _row_meta(self, key: str, size: int) -> dict:
        if key in self._custom:
            label, indices, _ = self._custom[key]
            return {"key": key, "label": label, "kind": "indices", "size": size,
                    "description": f"{len(indices):,} chosen instance{'s' if len(indices) != 1 else ''}"}
        name = subset_of(key)
        if name is not None:
            return {"key": key, "label": name, "kind": "subset", "size": size,
                    "description": self._subsets[name].describe()}
        index = instance_of(key)
        return {"key": key, "label": self._instance_label(index), "kind": "instance", "size": 1,
                "description": f"instance {index}"}

    def _instance_label(self, index: int) -> str:
        row = self._store.instances.iloc[index]
        true = row.get("label_name", row["label"])
        pred = row.get("pred_name", row["pred"])
        mark = "✓" if bool(row["correct"]) else "✗"
        return f"#{index} {mark} true {true} → pred {pred}"

    # ------------------------------------------------------------------ observers
    def _on_rows(self, change=None) -> None:
        valid, errors = [], []
        for key in dict.fromkeys(self.row_keys):
            try:
                if key not in self._custom:
                    self._row_subset(key)
                valid.append(key)
            except (KeyError, IndexError, SubsetError) as exc:
                errors.append(str(exc).strip("'\""))
        if errors:
            self.status = " ".join(errors)
        if valid != list(self.row_keys):
            self.row_keys = valid  # re-enters this observer with clean keys
            return
        for name in ("selected_row", "hovered_row", "sort_by_row", "difference_to"):
            if getattr(self, name) and getattr(self, name) not in valid:
                setattr(self, name, "")
        self._refresh_values()

    def _on_subsets_changed(self, subsets: Subsets) -> None:
        self.available_subsets = subsets.names
        self._on_rows()  # drops rows of removed subsets, recomputes redefined ones (cache keys follow definitions)

    def _refresh_values(self, change=None) -> None:
        keys = list(self.row_keys)
        aggregate = self._aggregate_rows(keys)
        self._aggregate = aggregate
        n_neurons = self._store.layer_spec(self.layer).neurons
        with self.hold_sync():
            self.neuron_kind = self._store.layer_spec(self.layer).neuron_kind
            self.rows = [self._row_meta(k, int(s)) for k, s in zip(keys, aggregate.sizes)]
            self.values = aggregate[self.statistic] if keys else np.zeros((0, n_neurons), np.float32)
            if self._baseline is not None and keys:
                self.values = self.values - self._baseline_rows(keys)
            if self.selected_neuron >= n_neurons:
                self.selected_neuron = -1
            self._refresh_order()
            self._refresh_members()
        self._on_selected_row()
        self._on_hovered_row()

    def _aggregate_rows(self, keys: list[str]) -> Aggregate:
        """All three statistics of these rows: subsets and instances through the (cached) Subsets,
        index rows (a brush) through their running sums, which read only the rows that changed."""
        plain = [k for k in keys if k not in self._custom]
        items = [self._row_subset(k) for k in plain]
        if self._deferred is not None:
            aggregate = self._deferred.aggregate(self.layer, items, self.threshold)
        else:
            aggregate = self._subsets.aggregate(self.layer, items, stats=STATS, threshold=self.threshold)
        for key in set(self._running) - set(keys):
            del self._running[key]  # a removed row's sums
        if len(plain) == len(keys):
            return aggregate
        activations = self._store.activations(self.layer)
        state = (self.layer, len(activations), float(self.threshold))
        stats = {s: [] for s in STATS}
        names, sizes = [], []
        for key in keys:
            if key in self._custom:
                label, indices, _ = self._custom[key]
                kept_state, running = self._running.get(key, (None, None))
                if kept_state != state:
                    running = RunningAggregate(activations, self.threshold, chunk_bytes=self._subsets.chunk_bytes)
                    self._running[key] = (state, running)
                row = running.update(indices)
                names.append(label)
                sizes.append(len(indices))
            else:
                k = plain.index(key)
                row = {s: aggregate[s][k] for s in STATS}
                names.append(aggregate.names[k])
                sizes.append(aggregate.sizes[k])
            for s in STATS:
                stats[s].append(row[s])
        values = {s: np.stack(v).astype(np.float32) for s, v in stats.items()}
        return Aggregate(layer=self.layer, names=names, sizes=np.array(sizes, np.int64),
                         threshold=float(self.threshold), **values)

    def _baseline_rows(self, keys: list[str]) -> np.ndarray:
        """The shown statistic of each row's instances in the baseline store."""
        return self._statistic_rows(self._baseline, [self._row_indices(key) for key in keys])

    def _statistic_rows(self, store, members: list[np.ndarray]) -> np.ndarray:
        """The shown statistic of each group of instances in ``store``'s activations of the layer shown."""
        activations = store.activations(self.layer)
        return np.stack([RunningAggregate(activations, self.threshold, chunk_bytes=self._subsets.chunk_bytes)
                         .update(sorted_unique(indices))[self.statistic] for indices in members])

    def values_at(self, store) -> np.ndarray:
        """The values this matrix would show over another store of the same instances (a checkpoint:
        ``store.at(step)``), each row's members as they are there, the baseline (if any) subtracted:
        what the page holds to move between checkpoints without waiting for the kernel."""
        store = check_same_instances("ActivationMatrix", self._store, store)
        keys = list(self.row_keys)
        if not keys:
            return np.zeros((0, store.layer_spec(self.layer).neurons), np.float32)
        members = [self._custom[key][1] if key in self._custom else
                   self._subsets.indices_in(self._row_subset(key), store) for key in keys]
        values = self._statistic_rows(store, members)
        if self._baseline is not None:
            values = values - self._statistic_rows(self._baseline, members)
        return values.astype(np.float32)

    def _row_indices(self, key: str) -> np.ndarray:
        if key in self._custom:
            return self._custom[key][1]
        return self._subsets.indices(self._row_subset(key))

    def _refresh_members(self, change=None) -> None:
        keys = list(self.row_keys) if self.shared_selection is not None else []
        n = self._store.n_instances
        row_ids = [(k, n, self._custom[k][2] if k in self._custom else self._row_subset(k).key) for k in keys]
        signature = (self.shared_selection is not None, *row_ids)
        if signature == self._members_signature:
            return  # unchanged rows: do not resend what the browser holds
        self._members_signature = signature
        # a brush changes one row: the others' members are not looked up again
        known = self._members_of
        self._members_of = {row: known[row] if row in known else self._row_indices(row[0]).astype(np.int32)
                            for row in row_ids}
        if not row_ids or sum(len(self._members_of[row]) for row in row_ids) > MEMBERS_LIMIT:
            with self.hold_sync():
                self.row_members = self.row_offsets = self.index_members = self.index_offsets = None
                self.member_keys, self.index_keys = [], []
            return
        # index rows (a brush) travel apart from the others, so that a brush does not resend every class's members
        with self.hold_sync():
            self._send_members([r for r in row_ids if r[0] not in self._custom], known, "row")
            self._send_members([r for r in row_ids if r[0] in self._custom], known, "index")

    def _send_members(self, part: list[tuple], known: dict, prefix: str) -> None:
        """``<prefix>_members``, ``_offsets`` and ``_keys`` (``member_keys`` for "row") for these rows, unless
        the browser holds them already."""
        keys_name = "member_keys" if prefix == "row" else f"{prefix}_keys"
        keys = [r[0] for r in part]
        held = getattr(self, f"{prefix}_members") is not None and keys == getattr(self, keys_name)
        if held and all(self._members_of[r] is known.get(r) for r in part):
            return
        offsets = np.zeros(len(part) + 1, np.int32)
        offsets[1:] = np.cumsum([len(self._members_of[r]) for r in part])
        setattr(self, f"{prefix}_members", np.concatenate([self._members_of[r] for r in part]) if part else None)
        setattr(self, f"{prefix}_offsets", offsets if part else None)
        setattr(self, keys_name, keys)

    def _refresh_order(self, change=None) -> None:
        self.neuron_order = self.current_order()

    def _on_selected_row(self, change=None) -> None:
        self.selected_indices = self._indices_of(self.selected_row)

    def _on_hovered_row(self, change=None) -> None:
        self.hovered_indices = self._indices_of(self.hovered_row)

    def _indices_of(self, key: str) -> np.ndarray:
        if not key or key not in self.row_keys:
            return np.zeros(0, np.int32)
        return self._row_indices(key).astype(np.int32)

    @traitlets.validate("layer")
    def _valid_layer(self, proposal):
        return check_layer(self._store, proposal["value"])

    @traitlets.validate("sort_by_row", "difference_to", "selected_row")
    def _valid_row(self, proposal):
        if proposal["value"] and proposal["value"] not in self.row_keys:
            raise unknown(f"{proposal['trait'].name}: no row {proposal['value']!r}", proposal["value"],
                          self.row_keys, "Rows")
        return proposal["value"]

    @traitlets.validate("selected_neuron", "hovered_neuron")
    def _valid_neuron(self, proposal):
        value = proposal["value"]
        n_neurons = self._store.layer_spec(self.layer).neurons if self.layer else 0
        if not -1 <= value < n_neurons:
            raise ViewError(f"Neuron {value} is out of range for layer {self.layer!r} "
                            f"({n_neurons} neurons); -1 selects none.")
        return value

    # ------------------------------------------------------------------ ordering
    def sort_by(self, row) -> None:
        """Order neurons by their values in one row (largest first), like clicking its sort button."""
        key = self._as_key(row)
        if key not in self.row_keys:
            raise unknown(f"No row {row!r}", row, self.row_keys, "Rows")
        with self.hold_trait_notifications():
            self.sort_by_row = key
            self.order_mode = "sort"

    def cluster(self) -> None:
        """Put neurons with similar profiles across the rows side by side."""
        self.order_mode = "cluster"

    def displayed_values(self) -> np.ndarray:
        """The matrix as drawn: the chosen statistic, minus the reference row in difference mode."""
        values = np.asarray(self.values, dtype=np.float32)
        if self.difference_to and self.difference_to in self.row_keys:
            values = values - values[self.row_keys.index(self.difference_to)]
        return values

    def current_order(self) -> np.ndarray:
        """Neuron order for the current mode, as the browser draws it."""
        values = self.displayed_values()
        n_neurons = values.shape[1]
        if self.order_mode == "sort" and self.sort_by_row in self.row_keys:
            return sort_neurons(values[self.row_keys.index(self.sort_by_row)])
        if self.order_mode == "cluster" and len(values):
            return cluster_neurons(values)
        return np.arange(n_neurons, dtype=np.int32)

    def data(self):
        """The matrix as drawn: one row per row shown (key, label, kind, size), what its cells are
        (``shown``: the statistic, minus a reference row or a baseline when one is set), then one column
        per neuron of ``layer`` in the order drawn (``unit 3``, ``channel 3``...)."""
        import pandas as pd

        shown = self.statistic
        if self.compared_to:
            shown += f" change since {self.compared_to}"
        if self.difference_to:
            reference = self.rows[self.row_keys.index(self.difference_to)]["label"]
            shown += f" minus row {reference!r}"
        order = self.current_order() if self.neuron_order is None else np.asarray(self.neuron_order)  # as drawn
        rows = pd.DataFrame({"row": [r["key"] for r in self.rows], "label": [r["label"] for r in self.rows],
                             "kind": [r["kind"] for r in self.rows], "size": [r["size"] for r in self.rows],
                             "layer": self.layer, "shown": shown})
        cells = pd.DataFrame(self.displayed_values()[:, order], columns=[f"{self.neuron_kind} {n}" for n in order])
        return pd.concat([rows, cells], axis=1)
