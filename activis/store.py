"""The activation store: a directory a notebook can open fast without holding it in memory.

Layout (all paths relative to the store directory; nothing is ever pickled)::

    manifest.json            versioned; rewritten atomically after every committed batch
    layers/<i>.bin           one raw little-endian array per layer, instances x neurons
    columns/<name>.bin       per-instance model outputs: label, pred, confidence, outputs (x classes)
    metadata.parquet         the user's per-instance metadata, written once up front
    graph.json               the computation graph (activis.graph JSON)
    <section>/               room for other modules: subsets, projections, logs

Rows are appended per batch and the manifest's ``complete`` count is only advanced after the data
is on disk, so a store killed at any instant opens and shows every committed instance. This module
imports no torch: a store can be explored where torch is not installed.
"""

from __future__ import annotations

import json
import os
import pathlib
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

FORMAT = "activis.store"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"

# per-instance columns the capture writes for every batch: name -> dtype
OUTPUT_COLUMNS = {"label": "<i4", "pred": "<i4", "confidence": "<f4"}


class StoreError(ValueError):
    """A store that cannot be read as asked: corrupt, truncated, foreign, or too new."""


@dataclass
class LayerSpec:
    """How a layer's neurons were defined when it was captured."""

    neurons: int
    dtype: str = "float16"
    neuron_kind: str = "unit"  # unit | channel | feature
    reduction: str = "none"  # none | mean | max | first | last
    shape: list[int] | None = None  # the layer's full output shape per instance


def _atomic_write(path: pathlib.Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _inside(root: pathlib.Path, relative: str) -> pathlib.Path:
    """Resolve a manifest path, refusing any that points outside the store."""
    target = (root / relative).resolve()
    if not target.is_relative_to(root.resolve()):
        raise StoreError(f"Manifest entry {relative!r} points outside the store {root}.")
    return target


class ActivationStore:
    """Read side of a store: memory-mapped activations and the instances table.

    Open with `open_store`. Arrays are numpy memory maps of the committed rows only.
    """

    def __init__(self, path: pathlib.Path, manifest: dict):
        self.path = path
        self.manifest = manifest
        self._instances: pd.DataFrame | None = None

    # ------------------------------------------------------------------ basics
    @property
    def n_instances(self) -> int:
        return int(self.manifest["complete"])

    @property
    def n_expected(self) -> int | None:
        return self.manifest.get("n_expected")

    @property
    def is_complete(self) -> bool:
        n = self.n_expected
        return bool(self.manifest.get("finished")) or (n is not None and self.n_instances >= n)

    @property
    def layers(self) -> list[str]:
        return list(self.manifest["layers"])

    @property
    def class_names(self) -> list[str]:
        return list(self.manifest.get("class_names") or [])

    def layer_spec(self, layer: str) -> LayerSpec:
        entry = self._layer_entry(layer)
        return LayerSpec(**{k: entry[k] for k in LayerSpec.__dataclass_fields__ if k in entry})

    def _layer_entry(self, layer: str) -> dict:
        try:
            return self.manifest["layers"][layer]
        except KeyError:
            raise KeyError(f"Layer {layer!r} is not in this store; captured layers: "
                           f"{', '.join(self.layers)}") from None

    # ------------------------------------------------------------------ arrays
    def _memmap(self, relative: str, dtype: str, width: int | None) -> np.ndarray:
        path = _inside(self.path, relative)
        if not path.exists():
            raise StoreError(f"Store file {relative} is missing from {self.path}.")
        n = self.n_instances
        itemsize = np.dtype(dtype).itemsize * (width or 1)
        needed = n * itemsize
        if path.stat().st_size < needed:
            raise StoreError(f"Store file {relative} is truncated: {path.stat().st_size} bytes, "
                             f"{needed} needed for {n} instances.")
        shape = (n, width) if width is not None else (n,)
        if n == 0:
            return np.zeros(shape, dtype=dtype)
        return np.memmap(path, dtype=dtype, mode="r", shape=shape)

    def activations(self, layer: str) -> np.ndarray:
        """Instances x neurons memory map of one layer (committed rows only)."""
        entry = self._layer_entry(layer)
        return self._memmap(entry["file"], entry["dtype"], entry["neurons"])

    @property
    def outputs(self) -> np.ndarray:
        """The model's raw outputs (logits), instances x classes, float32."""
        width = int(self.manifest["n_outputs"])
        return self._memmap("columns/outputs.bin", "<f4", width)

    @property
    def scores(self) -> np.ndarray:
        """Class probabilities (softmax of the outputs, or the outputs when they already are)."""
        out = np.asarray(self.outputs, dtype=np.float64)
        if self.manifest.get("outputs_are_probabilities"):
            return out.astype(np.float32)
        out = out - out.max(axis=1, keepdims=True)
        e = np.exp(out)
        return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)

    def column(self, name: str) -> np.ndarray:
        return self._memmap(f"columns/{name}.bin", OUTPUT_COLUMNS[name], None)

    @property
    def inputs(self) -> np.ndarray | None:
        """The raw inputs, flattened per instance, when the capture kept them (for thumbnails)."""
        spec = self.manifest.get("inputs")
        if not spec:
            return None
        width = int(np.prod(spec["shape"]))
        return self._memmap(spec["file"], spec["dtype"], width)

    @property
    def input_shape(self) -> list[int] | None:
        spec = self.manifest.get("inputs")
        return list(spec["shape"]) if spec else None

    # ---------------------------------------------------------------- instances
    @property
    def instances(self) -> pd.DataFrame:
        """One row per committed instance: label, pred, correct, confidence, names, metadata."""
        if self._instances is None or len(self._instances) != self.n_instances:
            df = pd.DataFrame({name: np.asarray(self.column(name)) for name in OUTPUT_COLUMNS})
            df["correct"] = (df["label"] == df["pred"]) & (df["label"] >= 0)
            names = self.class_names
            if names:
                lookup = np.asarray(names + ["?"], dtype=object)
                df["label_name"] = lookup[np.where(df["label"] >= 0, df["label"], len(names))]
                df["pred_name"] = lookup[np.where(df["pred"] >= 0, df["pred"], len(names))]
            meta_file = self.manifest.get("metadata_file")
            if meta_file:
                meta = pd.read_parquet(_inside(self.path, meta_file))
                meta = meta.iloc[: self.n_instances].reset_index(drop=True)
                clash = [c for c in meta.columns if c in df.columns]
                meta = meta.rename(columns={c: f"meta_{c}" for c in clash})
                df = pd.concat([df, meta], axis=1)
            df.index.name = "index"
            self._instances = df
        return self._instances

    @property
    def graph(self):
        graph_file = self.manifest.get("graph_file")
        if not graph_file:
            return None
        from .graph import ComputationGraph

        return ComputationGraph.from_json(_inside(self.path, graph_file).read_text())

    # ------------------------------------------------------------ other modules
    def section(self, name: str) -> pathlib.Path:
        """A subdirectory where another module (subsets, projections, logs) keeps its files."""
        if not name.isidentifier():
            raise ValueError(f"Section names are identifiers, not {name!r}.")
        path = self.path / name
        path.mkdir(exist_ok=True)
        return path

    def reload(self) -> ActivationStore:
        """Re-read the manifest (a capture may still be appending)."""
        self.manifest = _read_manifest(self.path)
        self._instances = None
        return self

    def __repr__(self) -> str:
        state = "complete" if self.is_complete else f"{self.n_instances}/{self.n_expected or '?'} committed"
        return f"<ActivationStore {self.path} · {self.n_instances} instances · {len(self.layers)} layers · {state}>"


def _read_manifest(path: pathlib.Path) -> dict:
    manifest_path = path / MANIFEST
    if not path.is_dir():
        raise StoreError(f"{path} is not an activis store (no such directory).")
    if not manifest_path.exists():
        raise StoreError(f"{path} is not an activis store: {MANIFEST} is missing.")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StoreError(f"{manifest_path} is not valid JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise StoreError(f"{path} is not an activis store (manifest format tag missing).")
    version = manifest.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise StoreError(f"Store format version {version!r} is newer than this activis reads "
                         f"({FORMAT_VERSION}); upgrade activis to open {path}.")
    return manifest


def open_store(path) -> ActivationStore:
    """Open a store for reading. Imports no torch, reads no array into memory, never unpickles."""
    path = pathlib.Path(path)
    return ActivationStore(path, _read_manifest(path))


class StoreWriter:
    """Append batches to a new store; each `append` commits atomically.

    ``layers`` maps layer names to `LayerSpec`; ``metadata`` (a DataFrame aligned with the
    instances) is written once up front so that it is there whatever happens later.
    """

    def __init__(self, path, *, layers: dict[str, LayerSpec], n_outputs: int,
                 class_names: list[str] | None = None, n_expected: int | None = None,
                 metadata: pd.DataFrame | None = None, graph=None, input_shape=None,
                 outputs_are_probabilities: bool = False, overwrite: bool = False):
        self.path = pathlib.Path(path)
        if (self.path / MANIFEST).exists() and not overwrite:
            raise FileExistsError(f"{self.path} already holds a store; pass overwrite=True to replace it "
                                  "or resume=True to continue it.")
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "layers").mkdir(exist_ok=True)
        (self.path / "columns").mkdir(exist_ok=True)
        manifest = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "complete": 0,
            "n_expected": n_expected,
            "finished": False,
            "n_outputs": int(n_outputs),
            "outputs_are_probabilities": bool(outputs_are_probabilities),
            "class_names": [str(c) for c in class_names] if class_names is not None else None,
            "layers": {},
        }
        for i, (name, spec) in enumerate(layers.items()):
            manifest["layers"][name] = {"file": f"layers/{i}.bin", **asdict(spec)}
        if metadata is not None:
            metadata = pd.DataFrame(metadata).reset_index(drop=True)
            metadata.columns = [str(c) for c in metadata.columns]
            metadata.to_parquet(self.path / "metadata.parquet", index=False)
            manifest["metadata_file"] = "metadata.parquet"
        if graph is not None:
            _atomic_write(self.path / "graph.json", graph.to_json())
            manifest["graph_file"] = "graph.json"
        if input_shape is not None:
            manifest["inputs"] = {"file": "columns/inputs.bin", "dtype": "<f4",
                                  "shape": [int(s) for s in input_shape]}
        self.manifest = manifest
        for relative in self._files():
            (self.path / relative).write_bytes(b"")
        _atomic_write(self.path / MANIFEST, json.dumps(manifest, indent=1))

    def _files(self) -> list[str]:
        files = [e["file"] for e in self.manifest["layers"].values()]
        files += [f"columns/{c}.bin" for c in OUTPUT_COLUMNS] + ["columns/outputs.bin"]
        if self.manifest.get("inputs"):
            files.append(self.manifest["inputs"]["file"])
        return files

    @property
    def complete(self) -> int:
        return int(self.manifest["complete"])

    def append(self, *, activations: dict[str, np.ndarray], label, pred, confidence, outputs,
               inputs=None) -> None:
        """Write one batch to every file, make it durable, then advance the manifest."""
        n = len(pred)
        blocks: dict[str, np.ndarray] = {}
        for name, entry in self.manifest["layers"].items():
            arr = np.asarray(activations[name])
            if arr.shape != (n, entry["neurons"]):
                raise ValueError(f"Layer {name!r}: batch of shape {arr.shape}, expected {(n, entry['neurons'])}.")
            blocks[entry["file"]] = np.ascontiguousarray(arr, dtype=np.dtype(entry["dtype"]).newbyteorder("<"))
        for col, dtype in OUTPUT_COLUMNS.items():
            value = {"label": label, "pred": pred, "confidence": confidence}[col]
            blocks[f"columns/{col}.bin"] = np.ascontiguousarray(value, dtype=dtype).reshape(n)
        blocks["columns/outputs.bin"] = np.ascontiguousarray(outputs, dtype="<f4").reshape(n, -1)
        if self.manifest.get("inputs"):
            blocks[self.manifest["inputs"]["file"]] = np.ascontiguousarray(inputs, dtype="<f4").reshape(n, -1)
        for relative, block in blocks.items():
            with open(self.path / relative, "ab") as f:
                f.write(block.tobytes())
                f.flush()
                os.fsync(f.fileno())
        self.manifest["complete"] = self.complete + n
        _atomic_write(self.path / MANIFEST, json.dumps(self.manifest, indent=1))

    def finish(self) -> ActivationStore:
        self.manifest["finished"] = True
        _atomic_write(self.path / MANIFEST, json.dumps(self.manifest, indent=1))
        return open_store(self.path)


def write_store(path, activations: dict[str, np.ndarray], *, labels, outputs, class_names=None,
                metadata=None, layer_specs: dict[str, LayerSpec] | None = None, inputs=None,
                overwrite: bool = False, graph=None) -> ActivationStore:
    """Write a complete store from arrays in memory: for tests, demos and imported activations."""
    outputs = np.asarray(outputs, dtype=np.float32)
    labels = np.asarray(labels)
    specs = layer_specs or {name: LayerSpec(neurons=int(np.shape(a)[1])) for name, a in activations.items()}
    inputs_arr = None if inputs is None else np.asarray(inputs, dtype=np.float32)
    writer = StoreWriter(path, layers=specs, n_outputs=outputs.shape[1], class_names=class_names,
                         n_expected=len(labels), metadata=metadata, graph=graph, overwrite=overwrite,
                         input_shape=None if inputs_arr is None else inputs_arr.shape[1:])
    e = np.exp(outputs - outputs.max(axis=1, keepdims=True))
    probs = e / e.sum(axis=1, keepdims=True)
    writer.append(activations=activations, label=labels, pred=outputs.argmax(axis=1),
                  confidence=probs.max(axis=1), outputs=outputs, inputs=inputs_arr)
    return writer.finish()
