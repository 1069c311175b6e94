"""`Subsets`: the named subsets of one store, persisted as JSON, evaluated and aggregated with caches."""

from __future__ import annotations

import datetime
import difflib
import hashlib
import json
import os
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import pandas as pd

from .aggregation import DEFAULT_CHUNK_BYTES, STATS, Aggregate, _check_stats, _layer_signature, aggregate_masks
from .definition import Subset, _coerce, _evaluate, _function_source
from .errors import SubsetError
from .expression import _class_index, _Context

FORMAT = "activis.subsets"
FORMAT_VERSION = 1
SUBSETS_FILE = "subsets.json"
DEFAULT_CACHE_BYTES = 256 << 20


def checked_indices(indices, n: int) -> np.ndarray:
    """Instance indices as int64, or a clear error for booleans, non-integers or out-of-range values."""
    idx = np.asarray(indices if not isinstance(indices, (set, frozenset)) else sorted(indices))
    if idx.dtype == bool:
        raise SubsetError("indices= got booleans; pass them as mask= instead.")
    if idx.size and idx.dtype.kind not in "iu":
        raise SubsetError(f"indices= must be integers, got {idx.dtype}.")
    idx = idx.astype(np.int64).ravel()
    bad = idx[(idx < 0) | (idx >= n)]
    if bad.size:
        raise SubsetError(f"Indices out of range for a store of {n} instances: {bad[:10].tolist()}"
                          f"{' ...' if bad.size > 10 else ''}.")
    return idx


class Subsets:
    """The named subsets of one store: define, list, persist, evaluate and aggregate them.

    ``Subsets(store)`` reloads the subsets saved in the store. Every change is written to
    ``<store>/subsets/subsets.json`` at once (atomically), so another notebook opening the store
    sees it. Re-adding a name replaces its definition (re-running a cell just works).
    """

    def __init__(self, store, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES, cache_bytes: int = DEFAULT_CACHE_BYTES):
        self.store = store
        self.chunk_bytes = int(chunk_bytes)
        self.cache_bytes = int(cache_bytes)
        self._definitions: dict[str, Subset] = {}
        self._created: dict[str, str] = {}
        # definition key -> (instances table it was evaluated on, mask, digest of the mask)
        self._masks: OrderedDict[str, tuple[pd.DataFrame, np.ndarray, str]] = OrderedDict()
        self._masks_bytes = 0
        self._rows: OrderedDict[tuple, dict] = OrderedDict()
        self._rows_bytes = 0
        self._callbacks: list[Callable[[Subsets], None]] = []
        self._persist_warned = False
        self.reload()

    # ------------------------------------------------------------- persistence
    @property
    def path(self):
        """The JSON file the definitions live in (None for a store this process cannot write to)."""
        try:
            return self.store.section("subsets") / SUBSETS_FILE
        except OSError:
            return None

    def reload(self) -> Subsets:
        """Re-read the saved definitions (another notebook may have changed them)."""
        path = self.path
        definitions, created = {}, {}
        if path is not None and path.exists():
            try:
                data = json.loads(path.read_text())
                if data.get("format") != FORMAT:
                    raise ValueError("format tag missing")
                if int(data.get("version", 0)) > FORMAT_VERSION:
                    raise ValueError(f"version {data['version']} is newer than this activis reads")
                for entry in data["subsets"]:
                    definitions[entry["name"]] = Subset(entry["definition"], entry["name"])
                    created[entry["name"]] = entry.get("created", "")
            except (ValueError, KeyError, TypeError, AttributeError, RecursionError, MemoryError) as exc:
                reason = "its definitions are nested too deeply" if isinstance(exc, RecursionError) else exc
                raise SubsetError(f"Cannot read the saved subsets in {path}: {reason}. The file was left as it "
                                  "is; move it away to start with no subsets.") from None
        self._definitions, self._created = definitions, created
        self._notify()
        return self

    def _save(self) -> None:
        path = self.path
        if path is None:
            if not self._persist_warned:
                warnings.warn(f"Store {self.store.path} is not writable: subsets are kept in memory only.",
                              stacklevel=3)
                self._persist_warned = True
            return
        data = {"format": FORMAT, "version": FORMAT_VERSION,
                "subsets": [{"name": name, "definition": s.definition, "created": self._created.get(name, "")}
                            for name, s in self._definitions.items()]}
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)

    # ------------------------------------------------------------- observers
    def observe(self, callback: Callable[[Subsets], None]) -> None:
        """Call ``callback(subsets)`` after every change of the definitions (views use this)."""
        self._callbacks.append(callback)

    def unobserve(self, callback: Callable[[Subsets], None]) -> None:
        """Stop calling ``callback`` (nothing happens if it was not observing)."""
        if callback in self._callbacks:
            self._callbacks.remove(callback)

    def _notify(self) -> None:
        for callback in list(self._callbacks):
            callback(self)

    # ------------------------------------------------------------- mapping
    @property
    def names(self) -> list[str]:
        return list(self._definitions)

    def __len__(self) -> int:
        return len(self._definitions)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._definitions))

    def __contains__(self, name) -> bool:
        return name in self._definitions

    def __getitem__(self, name: str) -> Subset:
        try:
            return self._definitions[name]
        except (KeyError, TypeError):
            close = difflib.get_close_matches(str(name), self.names, n=3)
            hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
            names = ", ".join(map(repr, self.names)) or "none"
            raise SubsetError(f"No subset named {name!r}.{hint} Subsets: {names}.") from None

    def __repr__(self) -> str:
        return f"<Subsets of {self.store.path}: {len(self)} subsets>"

    # ------------------------------------------------------------- defining
    def add(self, name: str, definition: str | Subset | None = None, *, indices=None, mask=None,
            where: Callable[[pd.DataFrame], object] | None = None) -> Subset:
        """Define (or redefine) a named subset; it is checked against the store before it is saved.

        Give exactly one of: a query ``definition`` over the instances table (``"age > 20 and
        topic == 'sports'"``, ``"label == 9 and pred == 4"``, ``"score('cat') > 0.8"``) or a
        `Subset` (e.g. ``subsets["a"] & ~subsets["b"]``); ``indices``; a boolean ``mask``; or
        ``where``, a function of the instances table returning a mask or indices. ``mask``,
        ``indices`` and ``where`` are saved as the index set they give now.
        """
        if not isinstance(name, str) or not name.strip():
            raise SubsetError(f"A subset name must be a non-empty string, got {name!r}.")
        given = [x is not None for x in (definition, indices, mask, where)]
        if sum(given) != 1:
            raise SubsetError("Give exactly one of: a query or Subset, indices=, mask= or where=.")
        n = self.store.n_instances
        if definition is not None:
            subset = _coerce(definition)
        elif indices is not None:
            subset = Subset.from_indices(checked_indices(indices, n))
        elif mask is not None:
            subset = Subset.from_indices(np.flatnonzero(self._checked_mask(mask, n, "mask")))
        else:
            subset = self._from_function(where, n)
        subset = self._define(name, subset)
        self._save()
        self._notify()
        return subset

    def _define(self, name: str, subset: Subset) -> Subset:
        subset = Subset(subset.definition, name)
        self.mask(subset)  # evaluate now: a bad column or type is an error before anything is saved
        self._definitions[name] = subset
        self._created[name] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        return subset

    def _define_many(self, definitions: dict[str, str]) -> list[str]:
        wanted = {name: Subset.query(expression) for name, expression in definitions.items()}
        if all(name in self._definitions and self._definitions[name] == s for name, s in wanted.items()):
            return list(wanted)  # already defined as asked: no rewrite, no notification
        for name, subset in wanted.items():
            self._define(name, subset)
        self._save()
        self._notify()
        return list(wanted)

    def _from_function(self, where, n: int) -> Subset:
        if not callable(where):
            raise SubsetError(f"where= must be a function of the instances table, got {type(where).__name__}.")
        result = where(self.store.instances.copy())
        values = np.asarray(result.to_numpy() if isinstance(result, pd.Series) else result)
        if values.dtype == bool:
            index = np.flatnonzero(self._checked_mask(values, n, "where= function"))
        else:
            index = checked_indices(values, n)
        return Subset.from_indices(index, source=_function_source(where))

    @staticmethod
    def _checked_mask(mask, n: int, what: str) -> np.ndarray:
        values = np.asarray(mask)
        if values.dtype != bool or values.shape != (n,):
            raise SubsetError(f"{what} must be {n} True/False values (one per instance), "
                              f"got {values.dtype} of shape {values.shape}.")
        return values

    def remove(self, name: str) -> None:
        self[name]  # noqa: B018 - a clear KeyError for an unknown name
        del self._definitions[name]
        self._created.pop(name, None)
        self._save()
        self._notify()

    def _classes(self, classes) -> list[tuple[int, str]]:
        names = self.store.class_names
        n_classes = int(self.store.outputs.shape[1])
        picked = range(n_classes) if classes is None else [_class_index(c, names, n_classes) for c in classes]
        return [(k, names[k] if k < len(names) else str(k)) for k in picked]

    def by_class(self, classes=None, *, prefix: str = "true ") -> list[str]:
        """One subset per true class (the matrix's default rows), named ``"true <class>"``."""
        return self._define_many({f"{prefix}{name}": f"label == {k}" for k, name in self._classes(classes)})

    def by_prediction(self, classes=None, *, prefix: str = "pred ") -> list[str]:
        """One subset per predicted class, named ``"pred <class>"``."""
        return self._define_many({f"{prefix}{name}": f"pred == {k}" for k, name in self._classes(classes)})

    def confusion(self, true, pred, name: str | None = None) -> Subset:
        """Instances of class ``true`` predicted as ``pred`` (``"true 9, pred 4"``)."""
        (t, t_name), = self._classes([true])
        (p, p_name), = self._classes([pred])
        return self.add(name or f"true {t_name}, pred {p_name}", f"label == {t} and pred == {p}")

    def misclassified(self, name: str = "misclassified") -> Subset:
        return self.add(name, "not correct")

    def correct(self, name: str = "correctly classified") -> Subset:
        return self.add(name, "correct")

    def by_score(self, name: str, low: float | None = None, high: float | None = None, cls=None) -> Subset:
        """Instances whose score is in [low, high): the top confidence, or class ``cls``'s probability."""
        if low is None and high is None:
            raise SubsetError("by_score needs low=, high= or both.")
        if cls is None:
            value = "confidence"
        else:
            (k, _), = self._classes([cls])
            value = f"score({k})"
        parts = ([f"{value} >= {float(low)!r}"] if low is not None else []) + \
                ([f"{value} < {float(high)!r}"] if high is not None else [])
        return self.add(name, " and ".join(parts))

    # ------------------------------------------------------------- evaluating
    def _resolve(self, item) -> Subset:
        if isinstance(item, Subset):
            return item
        if isinstance(item, str):
            return self[item]
        raise SubsetError(f"Expected a subset name or a Subset, got {type(item).__name__}.")

    def mask(self, item: str | Subset) -> np.ndarray:
        """True for the instances in the subset (read-only; cached per definition and store state)."""
        return self._membership(self._resolve(item))[1]

    def _membership(self, subset: Subset) -> tuple[pd.DataFrame, np.ndarray, str]:
        table = self.store.instances
        cached = self._masks.get(subset.key)
        if cached is not None and cached[0] is table:  # the same table object: the same store state
            self._masks.move_to_end(subset.key)
            return cached
        mask = _evaluate(subset.definition, _Context(self.store))
        mask.flags.writeable = False
        digest = hashlib.sha1(np.packbits(mask).tobytes()).hexdigest() + f":{len(mask)}"
        old = self._masks.pop(subset.key, None)
        self._masks_bytes -= old[1].nbytes if old else 0
        self._masks[subset.key] = entry = (table, mask, digest)
        self._masks_bytes += mask.nbytes
        while self._masks_bytes > self.cache_bytes and len(self._masks) > 1:
            _, (_, dropped, _) = self._masks.popitem(last=False)
            self._masks_bytes -= dropped.nbytes
        return entry

    def indices(self, item: str | Subset) -> np.ndarray:
        return np.flatnonzero(self.mask(item))

    def indices_in(self, item: str | Subset, store) -> np.ndarray:
        """The members of a subset evaluated on ``store``, another store of the same instances (a checkpoint:
        ``store.at(step)``), leaving this collection's store and caches as they are."""
        return np.flatnonzero(_evaluate(self._resolve(item).definition, _Context(store)))

    def size(self, item: str | Subset) -> int:
        return int(np.count_nonzero(self.mask(item)))

    def table(self) -> pd.DataFrame:
        """One row per subset: name, kind, definition, size and fraction of the store."""
        n = self.store.n_instances
        rows = []
        for name, subset in self._definitions.items():
            size = self.size(subset)
            rows.append({"name": name, "kind": subset.kind, "definition": subset.describe(), "size": size,
                         "fraction": size / n if n else 0.0})
        return pd.DataFrame(rows, columns=["name", "kind", "definition", "size", "fraction"])

    # ------------------------------------------------------------- aggregating
    def aggregate(self, layer: str, items: Iterable[str | Subset] | None = None, *,
                  stats: Sequence[str] = STATS, threshold: float = 0.0) -> Aggregate:
        """Per-neuron mean, fraction active (> ``threshold``) and std of many subsets at one layer.

        ``items`` are subset names or `Subset` objects (default: every named subset). One chunked
        pass over the layer's memory map serves all rows not already cached. A row is cached under
        the members it covers (a digest of its mask), the layer file's size and mtime and the
        threshold: a redefined subset, or a store that grew or was rewritten, is recomputed.
        """
        stats = _check_stats(stats)
        subsets = [self._resolve(item) for item in (self.names if items is None else items)]
        activations = self.store.activations(layer)
        n, n_neurons = activations.shape
        state = (layer, n, _layer_signature(activations), float(threshold))
        memberships = [self._membership(s) for s in subsets]
        keys = [(state, digest) for _, _, digest in memberships]
        found = {}
        for key in keys:
            entry = self._rows.get(key)
            if entry is not None and set(stats) <= set(entry["stats"]):
                found[key] = entry
                self._rows.move_to_end(key)
        missing = [key for key in dict.fromkeys(keys) if key not in found]
        if missing:
            mask_of = {key: mask for key, (_, mask, _) in zip(keys, memberships)}
            masks = np.stack([mask_of[key] for key in missing])
            computed = aggregate_masks(activations, masks, stats=stats, threshold=threshold,
                                       chunk_bytes=self.chunk_bytes)
            for i, key in enumerate(missing):
                found[key] = self._remember(key, int(masks[i].sum()), {s: computed[s][i].copy() for s in stats})
        entries = [found[key] for key in keys]
        result = {s: np.stack([e["stats"][s] for e in entries]) if entries else np.zeros((0, n_neurons), np.float32)
                  for s in stats}
        names = [s.name or s.describe() for s in subsets]
        sizes = np.array([e["size"] for e in entries], dtype=np.int64)
        return Aggregate(layer=layer, names=names, sizes=sizes, threshold=float(threshold), **result)

    def _remember(self, key: tuple, size: int, stats: dict[str, np.ndarray]) -> dict:
        old = self._rows.pop(key, None)
        if old:
            self._rows_bytes -= old["bytes"]
            stats = {**old["stats"], **stats}
        entry = {"size": size, "stats": stats, "bytes": sum(v.nbytes for v in stats.values())}
        self._rows[key] = entry
        self._rows_bytes += entry["bytes"]
        while self._rows_bytes > self.cache_bytes and len(self._rows) > 1:
            _, dropped = self._rows.popitem(last=False)
            self._rows_bytes -= dropped["bytes"]
        return entry

    def clear_cache(self, masks: bool = True) -> None:
        """Forget aggregated rows (and, unless ``masks=False``, evaluated memberships)."""
        if masks:
            self._masks.clear()
            self._masks_bytes = 0
        self._rows.clear()
        self._rows_bytes = 0
