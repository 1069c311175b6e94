"""Layouts cached in the store's projections section as ``.npy`` + ``.json``; never pickled."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import threading
import warnings

import numpy as np

from .errors import ProjectionError
from .params import METHODS

SECTION = "projections"


def _fingerprint(a: np.ndarray) -> str:
    """Shape, dtype and 256 evenly spaced rows: changes when a store is rewritten or grows."""
    h = hashlib.sha1(json.dumps([list(a.shape), a.dtype.str]).encode())
    if len(a):
        rows = np.unique(np.linspace(0, len(a) - 1, min(len(a), 256)).astype(np.int64))
        h.update(np.ascontiguousarray(a[rows]).tobytes())
    return h.hexdigest()


def _digest(instances: np.ndarray | None) -> str:
    if instances is None:
        return "all"
    return hashlib.sha1(instances.astype("<i8").tobytes()).hexdigest()


class _Cache:
    """``.npy`` arrays + ``.json`` descriptions in the store's projections section; never pickled."""

    def __init__(self, store):
        self.folder = pathlib.Path(store.section(SECTION))

    def load(self, name: str, shape: tuple[int, int]) -> np.ndarray | None:
        path = self.folder / f"{name}.npy"
        if not path.exists():
            return None
        try:
            arr = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            warnings.warn(f"Ignoring unreadable cached projection {path.name}: {exc}", stacklevel=3)
            return None
        if arr.shape != shape or (arr.dtype.kind == "f" and not np.isfinite(arr).all()):
            warnings.warn(f"Ignoring cached projection {path.name}: it has shape {arr.shape}, "
                          f"not {shape}, or non-finite values.", stacklevel=3)
            return None
        arr.flags.writeable = False
        return arr

    def meta(self, name: str) -> dict:
        try:
            return json.loads((self.folder / f"{name}.json").read_text())
        except (OSError, ValueError):
            return {}

    def save(self, name: str, arr: np.ndarray, meta: dict | None = None) -> None:
        """Write atomically; the .json (when given) marks a layout that list_projections shows."""
        files = [(".npy", lambda f: np.save(f, arr, allow_pickle=False))]
        if meta is not None:
            files.append((".json", lambda f: f.write(json.dumps(meta, indent=1).encode())))
        for suffix, write in files:
            target = self.folder / f"{name}{suffix}"
            tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            try:
                with open(tmp, "wb") as f:
                    write(f)
                os.replace(tmp, target)
            except OSError as exc:  # a read-only store still projects; it just cannot remember
                tmp.unlink(missing_ok=True)
                warnings.warn(f"Could not cache {target.name} in {self.folder}: {exc}", stacklevel=3)
                return


def list_projections(store) -> list[dict]:
    """What the store has cached: one description per layout (layer, method, params, instances...)."""
    folder = pathlib.Path(store.section(SECTION))
    out = []
    for path in sorted(folder.glob("*.json")):
        try:
            meta = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if meta.get("method") in METHODS and (folder / f"{path.stem}.npy").exists():
            out.append(meta)
    return out


def clear_projections(store, layer: str | None = None) -> int:
    """Delete cached layouts (of one layer, or all); returns how many were removed."""
    if layer is not None and layer not in store.layers:
        raise ProjectionError(f"Layer {layer!r} is not in this store; captured layers: {', '.join(store.layers)}.")
    folder = pathlib.Path(store.section(SECTION))
    removed = 0
    for path in folder.glob("*.json"):
        try:
            meta = json.loads(path.read_text())
        except (OSError, ValueError):
            meta = {}
        if layer is None or meta.get("layer") == layer:
            for stale in (path, folder / f"{path.stem}.npy", folder / f"{path.stem}-dist.npy"):
                stale.unlink(missing_ok=True)
            removed += meta.get("method") in METHODS
    return removed
