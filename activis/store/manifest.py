"""The on-disk format: the versioned manifest that says what a store holds and where, and its checks.

Reader and writer both describe a store through here: the format tag and the versions this activis
reads, the per-instance columns and their dtypes, a layer's entry (`LayerSpec`), the shards' row
ranges and per-rank progress files. A manifest is checked before any file it names is opened:
its paths must stay inside the store and its dtypes must be plain numbers, so a foreign or
corrupt manifest is refused with a message that says where, and nothing is ever unpickled.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
from dataclasses import dataclass

import numpy as np

from .errors import StoreError

FORMAT = "activis.store"
FORMAT_VERSION = 3  # the newest this activis writes: a store with a checkpoint axis (see `checkpoints`)
PLAIN_VERSION = 2  # a store captured without checkpoint=, still readable by activis before checkpoints
READABLE_VERSIONS = (1, 2, 3)
MANIFEST = "manifest.json"
CHECKPOINT_FILE = "checkpoint.json"
# per-instance columns a store with checkpoints keeps once, for all of them (with the inputs and metadata)
SHARED_COLUMNS = ("label",)

# per-instance columns: name -> little-endian dtype
OUTPUT_COLUMNS = {"label": "<i4", "pred": "<i4", "confidence": "<f4", "label_score": "<f4", "nonfinite": "<i4"}
_V1_COLUMNS = ("label", "pred", "confidence")
OUTPUT_KINDS = ("logits", "probabilities", "log_probabilities")
# what a manifest may ask a file to be read as: plain numbers only, never objects
_SAFE_DTYPE_KINDS = "fiub"
_DTYPE_CHOICES = "a store keeps plain numeric numpy dtypes (float16, float32, float64, int8 ... uint64, bool)"
MAX_VALUES = 1 << 40  # values per instance: beyond any real layer, and far from overflowing int64 offsets


@dataclass
class LayerSpec:
    """How a layer's neurons were defined when it was captured.

    ``neuron_kind`` says what one neuron (one column) is: a ``unit`` of a feature vector, a
    ``channel`` of a convolutional feature map, or a ``feature`` of a sequence; ``reduction`` how
    the other axes were folded (``mean``/``max`` over positions, ``first``/``last`` step, or
    ``none`` when the column is one element of the flattened output). ``node`` is the graph node
    the values come from, ``element`` the index path into a tuple or dict output, ``layout``
    ``"channels_last"`` for a feature map whose channels are its last dimension.
    """

    neurons: int
    dtype: str = "float16"
    neuron_kind: str = "unit"  # unit | channel | feature
    reduction: str = "none"  # none | mean | max | first | last
    shape: list[int] | None = None  # the layer's full output shape per instance
    node: str | None = None
    element: list | None = None
    layout: str | None = None  # "channels_last": a channel's values are the last dimension, (N, H, W, C)

    def __post_init__(self):
        neurons = self.neurons
        if isinstance(neurons, bool) or not isinstance(neurons, (int, np.integer)) or neurons < 1:
            raise StoreError(f"LayerSpec neurons is the layer's number of columns, a whole number of 1 or more, "
                             f"not {neurons!r}.")
        self.neurons = int(neurons)
        _safe_dtype(self.dtype, "LayerSpec dtype")


def shard_ranges(n: int, world_size: int) -> list[tuple[int, int]]:
    """Contiguous row ranges, one per rank, as even as possible."""
    return [(n * r // world_size, n * (r + 1) // world_size) for r in range(world_size)]


def _inside(root: pathlib.Path, relative: str) -> pathlib.Path:
    """Resolve a manifest path, refusing any that points outside the store."""
    if not isinstance(relative, str) or not relative:
        raise StoreError(f"Manifest file entry {relative!r} is not a relative path.")
    target = (root / relative).resolve()
    if os.path.isabs(relative) or not target.is_relative_to(root.resolve()):
        raise StoreError(f"Manifest entry {relative!r} points outside the store {root}.")
    return target


def _safe_dtype(dtype, where: str) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise StoreError(f"{where}: {dtype!r} is not a numeric dtype; {_DTYPE_CHOICES}.") from None
    if dt.kind not in _SAFE_DTYPE_KINDS or dt.hasobject or dt.fields:
        raise StoreError(f"{where}: dtype {dtype!r} is not a plain numeric type; {_DTYPE_CHOICES}.")
    return dt.newbyteorder("<") if dt.byteorder not in ("|", "<") else dt


def _progress_path(root: pathlib.Path, rank: int, manifest: dict) -> pathlib.Path:
    return _inside(root, f"{manifest.get('shards_dir', 'shards')}/{rank}.json")


def _column_file(manifest: dict, column: str) -> str:
    """Where a per-instance column (or ``outputs``) lives: ``columns/``, or a checkpoint's own folder."""
    return (manifest.get("column_files") or {}).get(column, f"columns/{column}.bin")


def _read_progress(root: pathlib.Path, rank: int, lo: int, hi: int, manifest: dict) -> dict:
    path = _progress_path(root, rank, manifest)
    if not path.exists():
        return {"rank": rank, "complete": 0, "finished": False, "nonfinite": {}}
    try:
        progress = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StoreError(f"Shard progress {path} is not valid JSON: {exc}") from None
    complete = progress.get("complete") if isinstance(progress, dict) else None
    if not isinstance(complete, int) or not 0 <= complete <= hi - lo:
        raise StoreError(f"Shard progress {path} is invalid (complete={complete!r}, shard of {hi - lo}).")
    return progress


def _load_json(path: pathlib.Path, missing: str, name: str):
    """A store's JSON file, or a `StoreError` saying it is ``missing`` or that ``name`` is not valid JSON."""
    if not path.is_file():
        raise StoreError(missing)
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StoreError(f"{name} is not valid JSON: {exc}") from None


def _read_manifest(path: pathlib.Path) -> dict:
    manifest_path = path / MANIFEST
    if not path.is_dir():
        raise StoreError(f"{path} is not an activis store (no such directory).")
    manifest = _load_json(manifest_path, f"{path} is not an activis store: {MANIFEST} is missing.",
                          str(manifest_path))
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise StoreError(f"{path} is not an activis store (manifest format tag missing).")
    version = manifest.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version not in READABLE_VERSIONS:
        if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
            raise StoreError(f"Store format version {version} is newer than this activis reads "
                             f"({FORMAT_VERSION}); upgrade activis to open {path}.")
        raise StoreError(f"Store format version {version!r} of {path} is unknown; this activis reads "
                         f"versions {', '.join(map(str, READABLE_VERSIONS))}.")
    _check_manifest(path, manifest)
    return manifest


def _need(path: pathlib.Path, cond, what: str, where: str = "Manifest") -> None:
    if not cond:
        raise StoreError(f"{where} of {path} is corrupt: {what}.")


def _check_manifest(path: pathlib.Path, manifest: dict) -> None:
    """Refuse manifests whose fields would make reading go wrong, with a message that says where."""
    def need(cond, what):
        _need(path, cond, what)

    if manifest["version"] >= 3:
        _check_checkpoint_list(path, manifest)
    else:
        complete = manifest.get("complete")
        need(isinstance(complete, int) and complete >= 0, f"'complete' is {complete!r}")
    need(isinstance(manifest.get("n_outputs"), int) and manifest["n_outputs"] >= 0, "'n_outputs' is not a count")
    n_expected = manifest.get("n_expected")
    need(n_expected is None or (isinstance(n_expected, int) and n_expected >= 0), "'n_expected' is not a count")
    layers = manifest.get("layers")
    need(isinstance(layers, dict), "'layers' is not a mapping")
    for name, entry in layers.items():
        need(isinstance(entry, dict) and isinstance(entry.get("neurons"), int) and entry["neurons"] >= 0,
             f"layer {name!r} has no neuron count")
        _safe_dtype(entry.get("dtype"), f"layer {name!r}")
        _inside(path, entry.get("file"))  # in a store with checkpoints: inside each checkpoint's folder
    for name, dtype in _columns(manifest).items():
        _safe_dtype(dtype, f"column {name!r}")
    for name, entry in layers.items():
        shape = entry.get("shape")
        need(shape is None or _is_shape(shape), f"layer {name!r} has shape {shape!r}, not a list of sizes "
             f"below {MAX_VALUES:,} values")
        need(entry["neurons"] <= MAX_VALUES, f"layer {name!r} has {entry['neurons']:,} neurons")
    names = manifest.get("class_names")
    if names is not None:
        classes = 2 if manifest["n_outputs"] == 1 else manifest["n_outputs"]
        need(isinstance(names, list) and all(isinstance(c, str) for c in names),
             "'class_names' is not a list of strings")
        need(len(names) == classes, f"{len(names)} class names for {manifest['n_outputs']} outputs "
             f"({classes} classes)")
    inputs = manifest.get("inputs")
    if inputs:
        need(_is_shape(inputs.get("shape")), f"'inputs.shape' is {inputs.get('shape')!r}, not a list of sizes "
             f"below {MAX_VALUES:,} values")
        _safe_dtype(inputs.get("dtype"), "inputs")
        _inside(path, inputs.get("file"))
    kind = manifest.get("output_kind")
    need(kind is None or kind in OUTPUT_KINDS, f"unknown output kind {kind!r}")
    shards = manifest.get("shards")
    if shards is not None:
        need(isinstance(shards.get("world_size"), int) and shards["world_size"] >= 1 and n_expected is not None,
             "'shards' without a world size or an expected count")


def _check_checkpoint_list(path: pathlib.Path, manifest: dict) -> None:
    """A store with checkpoints lists them as {"step", "dir"}: whole steps of 0 or more, each once, in order,
    each folder inside the store (its own state is checked when it is read: see `checkpoints`)."""
    entries = manifest.get("checkpoints")
    _need(path, isinstance(entries, list) and entries, "'checkpoints' is not a list of one or more checkpoints")
    steps = []
    for entry in entries:
        step = entry.get("step") if isinstance(entry, dict) else None
        _need(path, isinstance(step, int) and not isinstance(step, bool) and step >= 0,
              f"checkpoint {entry!r} has no whole step of 0 or more")
        _need(path, entry.get("dir") == f"checkpoints/{step}", f"checkpoint {step} has folder {entry.get('dir')!r}")
        _inside(path, entry["dir"])
        steps.append(step)
    _need(path, steps == sorted(set(steps)), f"the checkpoints' steps {steps} are not distinct and in order")


def _is_shape(shape) -> bool:
    return (isinstance(shape, list) and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)
            and math.prod(shape) <= MAX_VALUES)


def _columns(manifest: dict) -> dict[str, str]:
    columns = manifest.get("columns")
    if columns is None:  # format 1 stores: the three columns it wrote
        return {name: OUTPUT_COLUMNS[name] for name in _V1_COLUMNS}
    if not isinstance(columns, dict):
        raise StoreError("Manifest 'columns' is not a mapping.")
    return dict(columns)


def _output_kind(manifest: dict) -> str:
    if manifest.get("output_kind"):
        return manifest["output_kind"]
    return "probabilities" if manifest.get("outputs_are_probabilities") else "logits"
