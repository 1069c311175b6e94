"""The activation store: a directory a notebook can open fast without holding it in memory.

Layout (all paths relative to the store directory; nothing is ever pickled)::

    manifest.json            versioned; replaced atomically after every committed batch
    layers/<i>.bin           one raw little-endian array per layer, instances x neurons
    columns/<name>.bin       per-instance columns: label, pred, confidence, label_score, nonfinite
    columns/outputs.bin      the model's outputs, instances x outputs (float32)
    columns/inputs.bin       optional raw inputs, flattened per instance (thumbnails)
    metadata.parquet         the user's per-instance metadata, written once up front
    graph.json               the computation graph (activis.graph JSON)
    shards/<rank>.json       per-rank progress of a sharded (torch.distributed) capture
    <section>/               room for other modules: subsets, projections, logs

Every row lives at a fixed offset (row x row size) in its file, so a batch is written where it
belongs whatever wrote it: one process appending, a resumed capture rewriting rows a killed one had
started, or the ranks of a distributed job filling their own row ranges of the same files. The
per-instance columns are raw arrays rather than Parquet because they grow per batch and must be
readable up to the last commit; only the metadata, known up front, is Parquet.

A batch is committed by writing its rows and only then replacing the manifest (or the rank's
progress file), so a store killed at any instant opens and shows every committed instance. The
store is created in a staging directory and renamed into place, so a half-created store never
exists. This module imports no torch: a store can be explored where torch is not installed.
"""

from __future__ import annotations

import difflib
import errno
import json
import math
import os
import pathlib
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from .graph import UnknownLayerError

FORMAT = "activis.store"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
MANIFEST = "manifest.json"

# per-instance columns: name -> little-endian dtype
OUTPUT_COLUMNS = {"label": "<i4", "pred": "<i4", "confidence": "<f4", "label_score": "<f4", "nonfinite": "<i4"}
_V1_COLUMNS = ("label", "pred", "confidence")
OUTPUT_KINDS = ("logits", "probabilities", "log_probabilities")
# what a manifest may ask a file to be read as: plain numbers only, never objects
_SAFE_DTYPE_KINDS = "fiub"
_DTYPE_CHOICES = "a store keeps plain numeric numpy dtypes (float16, float32, float64, int8 ... uint64, bool)"
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class StoreError(ValueError):
    """A store that cannot be read or written as asked: corrupt, truncated, foreign, too new, or bad input.

    Where a builtin class was the natural one it is also that class: `StoreExistsError` is a
    `FileExistsError`, `UnknownColumnError` a `KeyError`.
    """


class StoreExistsError(StoreError, FileExistsError):
    """The target of a new store is taken (a store, a file, or a directory with other files in it)."""


class UnknownColumnError(StoreError, KeyError):
    """A per-instance column that is not in the store; the message lists the columns there are."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class StoreFullError(OSError):
    """The disk (or a file-size limit) ran out while writing; committed batches are intact."""


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


@dataclass
class NonFinite:
    """What `check_finite` found in one block of stored values."""

    nan: int = 0
    inf: int = 0
    overflow: int = 0  # finite in the source but beyond the storage dtype: saturated
    per_row: np.ndarray | None = field(default=None, repr=False)
    underflow: int = 0  # nonzero in the source but below the storage dtype's smallest normal: 0 or subnormal

    def add_to(self, counts: dict) -> None:
        for key in COUNTS:
            counts[key] = int(counts.get(key, 0)) + getattr(self, key)


COUNTS = ("nan", "inf", "overflow", "underflow")


def _zero_counts() -> dict:
    return dict.fromkeys(COUNTS, 0)


def check_finite(stored: np.ndarray, source: Callable[[], np.ndarray] | np.ndarray | None = None) -> NonFinite | None:
    """Count NaN, Inf and overflow in ``stored`` (a 2-D block in its storage dtype).

    Returns None when everything is finite: one pass, the common case. Otherwise counts against
    ``source`` (the values before conversion; a callable is only called then), saturates values
    that overflowed the storage dtype to its largest finite magnitude in place, and returns counts
    with the number of bad values per row. NaN and Inf the model itself produced are kept: they are
    what it computed, and are reported rather than hidden.
    """
    if _all_finite(stored):
        return None
    src = source() if callable(source) else (stored if source is None else source)
    src = np.asarray(src).reshape(stored.shape)
    nan = np.isnan(src)
    inf = np.isinf(src)
    overflow = ~np.isfinite(stored) & np.isfinite(src)
    if overflow.any():
        big = np.finfo(stored.dtype).max
        stored[overflow] = np.where(src[overflow] > 0, big, -big)
    bad = nan | inf | overflow
    return NonFinite(nan=int(nan.sum()), inf=int(inf.sum()), overflow=int(overflow.sum()),
                     per_row=bad.reshape(len(stored), -1).sum(axis=1).astype(np.int32))


_FINITE_CHUNK = 1 << 15  # values per step: the masked copy stays in the CPU cache and off mmap'd memory


def _all_finite(values: np.ndarray) -> bool:
    """True when no value is NaN or Inf, judged by the exponent bits read as integers (numpy's
    float16 isfinite is scalar code, ten times slower than a masked integer max)."""
    if values.dtype.kind != "f" or values.size == 0:
        return True
    if values.dtype.itemsize not in (2, 4, 8) or not values.flags.c_contiguous or not values.dtype.isnative:
        return bool(np.isfinite(values).all())
    bits = values.reshape(-1).view(f"u{values.dtype.itemsize}")
    magnitude = np.array((1 << (8 * values.dtype.itemsize - 1)) - 1, dtype=bits.dtype)
    exponent = {2: 0x7C00, 4: 0x7F800000, 8: 0x7FF0000000000000}[values.dtype.itemsize]
    return all((bits[i:i + _FINITE_CHUNK] & magnitude).max() < exponent for i in range(0, bits.size, _FINITE_CHUNK))


def scores_from_outputs(outputs: np.ndarray, kind: str) -> np.ndarray:
    """Class probabilities from raw outputs of the given kind (float32, rows x classes).

    A single output column is a binary classifier: its score for class 1 (sigmoid of a logit, or
    the probability itself), returned as two columns.
    """
    out = np.asarray(outputs, dtype=np.float32)
    if out.ndim != 2:
        raise StoreError(f"Outputs must be instances x classes, not shape {out.shape}.")
    if out.shape[1] == 1:
        x = out[:, 0].astype(np.float64)
        if kind == "logits":
            p1 = np.exp(-np.logaddexp(0.0, -x))  # sigmoid without overflow
        elif kind == "log_probabilities":
            p1 = np.exp(x)
        else:
            p1 = x
        return np.stack([1.0 - p1, p1], axis=1).astype(np.float32)
    if kind == "probabilities":
        return out.copy()
    if kind == "log_probabilities":
        return np.exp(out)
    if kind != "logits":
        raise StoreError(f"Unknown output kind {kind!r}; one of {', '.join(OUTPUT_KINDS)}.")
    with np.errstate(invalid="ignore", over="ignore"):
        shifted = out - out.max(axis=1, keepdims=True)
        e = np.exp(shifted)
        return e / e.sum(axis=1, keepdims=True)


def shard_ranges(n: int, world_size: int) -> list[tuple[int, int]]:
    """Contiguous row ranges, one per rank, as even as possible."""
    return [(n * r // world_size, n * (r + 1) // world_size) for r in range(world_size)]


# ------------------------------------------------------------------------- files
def _fsync_dir(path: pathlib.Path) -> None:
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _atomic_write(path: pathlib.Path, text: str, durable: bool = True) -> None:
    """Replace ``path`` with ``text`` so that readers see the old or the new file, never a mix."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        _raise_if_full(exc, path.parent, "the manifest")
        raise
    if durable:
        _fsync_dir(path.parent)


def _raise_if_full(exc: OSError, store: pathlib.Path, what: str, committed: int | None = None) -> None:
    if exc.errno in _NO_SPACE:
        kept = f"; the store keeps its {committed} committed instances" if committed is not None else ""
        raise StoreFullError(exc.errno, f"No space left while writing {what} of the store {store} "
                                        f"({os.strerror(exc.errno)}){kept}. Free some space and run "
                                        "capture(..., resume=True) to continue.") from exc


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    while len(data):
        written = os.pwrite(fd, data, offset)
        data = data[written:]
        offset += written


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


def _progress_path(root: pathlib.Path, rank: int) -> pathlib.Path:
    return root / "shards" / f"{rank}.json"


def _read_progress(root: pathlib.Path, rank: int, lo: int, hi: int) -> dict:
    path = _progress_path(root, rank)
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


# ------------------------------------------------------------------ the manifest
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
    if not isinstance(version, int) or isinstance(version, bool) or version not in READABLE_VERSIONS:
        if isinstance(version, int) and version > FORMAT_VERSION:
            raise StoreError(f"Store format version {version} is newer than this activis reads "
                             f"({FORMAT_VERSION}); upgrade activis to open {path}.")
        raise StoreError(f"Store format version {version!r} of {path} is unknown; this activis reads "
                         f"versions {', '.join(map(str, READABLE_VERSIONS))}.")
    _check_manifest(path, manifest)
    return manifest


def _check_manifest(path: pathlib.Path, manifest: dict) -> None:
    """Refuse manifests whose fields would make reading go wrong, with a message that says where."""
    def need(cond, what):
        if not cond:
            raise StoreError(f"Manifest of {path} is corrupt: {what}.")

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
        _inside(path, entry.get("file"))
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


MAX_VALUES = 1 << 40  # values per instance: beyond any real layer, and far from overflowing int64 offsets


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


# ---------------------------------------------------------------------- reading
class ActivationStore:
    """Read side of a store: memory-mapped activations and the instances table.

    Open with `open_store`. Arrays are read-only numpy memory maps of the committed rows only; a
    capture that is still running (or was killed) shows what it has committed so far.
    """

    def __init__(self, path: pathlib.Path, manifest: dict):
        self.path = path
        self.manifest = manifest
        self._instances: pd.DataFrame | None = None
        self._maps: dict[tuple, np.ndarray] = {}
        self._progress = self._shard_progress()
        self._check_files()

    # ------------------------------------------------------------------ basics
    def _shard_progress(self) -> list[dict] | None:
        shards = self.manifest.get("shards")
        if not shards or self.manifest.get("finished"):
            return None
        ranges = shard_ranges(self.manifest["n_expected"], shards["world_size"])
        return [{**_read_progress(self.path, r, lo, hi), "start": lo, "stop": hi}
                for r, (lo, hi) in enumerate(ranges)]

    @property
    def n_instances(self) -> int:
        """Committed instances readable as one block from row 0 (all of them once complete)."""
        if self._progress is None:
            return int(self.manifest["complete"])
        n = 0
        for shard in self._progress:
            n = shard["start"] + shard["complete"]
            if shard["complete"] < shard["stop"] - shard["start"]:
                break
        return n

    @property
    def committed(self) -> int:
        """Committed instances in all shards, including those past a gap in another shard."""
        if self._progress is None:
            return self.n_instances
        return sum(s["complete"] for s in self._progress)

    @property
    def progress(self) -> list[dict]:
        """Per shard: its row range and committed count (one entry for a single-process store)."""
        if self._progress is not None:
            return [{"rank": s["rank"], "start": s["start"], "stop": s["stop"], "complete": s["complete"]}
                    for s in self._progress]
        stop = self.n_expected if self.n_expected is not None else self.n_instances
        return [{"rank": 0, "start": 0, "stop": stop, "complete": self.n_instances}]

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

    @property
    def output_kind(self) -> str:
        """What the stored outputs are: logits, probabilities or log_probabilities."""
        return _output_kind(self.manifest)

    @property
    def capture_info(self) -> dict:
        """How the store was captured: options, timings, throughput (empty for `write_store`)."""
        return dict(self.manifest.get("capture") or {})

    def layer_spec(self, layer: str) -> LayerSpec:
        entry = self._layer_entry(layer)
        return LayerSpec(**{k: entry[k] for k in LayerSpec.__dataclass_fields__ if k in entry})

    def _layer_entry(self, layer: str) -> dict:
        """A layer by its name, or by the graph node it was captured at (the name the graph shows)."""
        layers = self.manifest["layers"]
        try:
            return layers[layer]
        except (KeyError, TypeError):
            by_node = [entry for entry in layers.values() if entry.get("node") == layer]
            if len(by_node) == 1:
                return by_node[0]
            close = difflib.get_close_matches(str(layer), self.layers, n=3)
            hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
            raise UnknownLayerError(f"Layer {layer!r} is not in this store.{hint} The captured layers: "
                                    f"{', '.join(self.layers) or 'none'}.") from None

    @property
    def nonfinite(self) -> pd.DataFrame:
        """Per layer (and the outputs): NaN, Inf and float16-overflow counts met while capturing."""
        df = pd.DataFrame.from_dict(self.nonfinite_counts, orient="index", columns=list(COUNTS))
        df.index.name = "layer"
        return df

    @property
    def nonfinite_counts(self) -> dict[str, dict[str, int]]:
        """`nonfinite` as a plain dict: layer (or "<outputs>") -> {"nan", "inf", "overflow", "underflow"}."""
        rows = {}
        for name, entry in self.manifest["layers"].items():
            rows[name] = {**_zero_counts(), **(entry.get("nonfinite") or {})}
        rows["<outputs>"] = {**_zero_counts(), **(self.manifest.get("outputs_nonfinite") or {})}
        for shard in self._progress or []:
            for name, counts in (shard.get("nonfinite") or {}).items():
                if name in rows:
                    NonFinite(**{k: int(counts.get(k, 0)) for k in COUNTS}).add_to(rows[name])
        return rows

    # ------------------------------------------------------------------ arrays
    def _check_files(self) -> None:
        """Every file the manifest names exists, lies inside, and holds the committed rows."""
        n = self.n_instances
        for relative, dtype, width in self._row_files():
            self._sized_path(relative, dtype, width, n)
        for key in ("metadata_file", "graph_file"):
            if self.manifest.get(key):
                path = _inside(self.path, self.manifest[key])
                if not path.is_file():
                    raise StoreError(f"Store file {self.manifest[key]} is missing from {self.path}.")
        if self.manifest.get("metadata_file"):
            self._check_metadata(_inside(self.path, self.manifest["metadata_file"]))
        if self.manifest.get("graph_file"):
            self._read_graph()

    def _check_metadata(self, path: pathlib.Path) -> None:
        """The metadata parquet is readable and has a row per instance (its footer only: no data read)."""
        import pyarrow.parquet as pq

        try:
            rows = pq.read_metadata(path).num_rows
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several kinds for a damaged file
            raise StoreError(f"Store file {path.name} of {self.path} is not a readable parquet file: {exc}") from None
        expected = self.n_expected
        if (expected is not None and rows != expected) or rows < self.n_instances:
            raise StoreError(f"Store file {path.name} of {self.path} has {rows:,} metadata rows for "
                             f"{expected if expected is not None else self.n_instances:,} instances.")

    def _read_graph(self):
        from .graph import ComputationGraph

        graph_file = self.manifest["graph_file"]
        try:
            return ComputationGraph.from_json(_inside(self.path, graph_file).read_text())
        except (ValueError, TypeError, KeyError, AttributeError, UnicodeDecodeError) as exc:
            raise StoreError(f"Store file {graph_file} of {self.path} is not a valid activis graph: "
                             f"{type(exc).__name__}: {exc}") from None

    def _row_files(self) -> list[tuple[str, str, int | None]]:
        files = [(e["file"], e["dtype"], e["neurons"]) for e in self.manifest["layers"].values()]
        files += [(f"columns/{c}.bin", dtype, None) for c, dtype in _columns(self.manifest).items()]
        files.append(("columns/outputs.bin", "<f4", int(self.manifest["n_outputs"])))
        spec = self.manifest.get("inputs")
        if spec:
            files.append((spec["file"], spec["dtype"], int(np.prod(spec["shape"], dtype=np.int64))))
        return files

    def _sized_path(self, relative: str, dtype: str, width: int | None, n: int) -> pathlib.Path:
        path = _inside(self.path, relative)
        if not path.is_file():
            raise StoreError(f"Store file {relative} is missing from {self.path}.")
        needed = n * _safe_dtype(dtype, relative).itemsize * (width if width is not None else 1)
        size = path.stat().st_size
        if size < needed:
            raise StoreError(f"Store file {relative} is truncated: {size} bytes, {needed} needed for "
                             f"{n} instances.")
        return path

    def _memmap(self, relative: str, dtype: str, width: int | None) -> np.ndarray:
        n = self.n_instances
        key = (relative, n)
        if key not in self._maps:
            path = self._sized_path(relative, dtype, width, n)
            shape = (n, width) if width is not None else (n,)
            dt = _safe_dtype(dtype, relative)
            if n == 0 or (width == 0):
                self._maps[key] = np.zeros(shape, dtype=dt)
            else:
                self._maps[key] = np.memmap(path, dtype=dt, mode="r", shape=shape)
        return self._maps[key]

    def activations(self, layer: str) -> np.ndarray:
        """Instances x neurons memory map of one layer (committed rows only)."""
        entry = self._layer_entry(layer)
        return self._memmap(entry["file"], entry["dtype"], entry["neurons"])

    @property
    def outputs(self) -> np.ndarray:
        """The model's raw outputs (logits, unless `output_kind` says otherwise), float32."""
        return self._memmap("columns/outputs.bin", "<f4", int(self.manifest["n_outputs"]))

    @property
    def scores(self) -> np.ndarray:
        """Class probabilities, instances x classes, float32 (computed from the outputs in chunks)."""
        out = self.outputs
        width = 2 if out.shape[1] == 1 else out.shape[1]
        result = np.empty((len(out), width), dtype=np.float32)
        step = 1 << 16
        for start in range(0, len(out), step):
            result[start:start + step] = scores_from_outputs(out[start:start + step], self.output_kind)
        return result

    def column(self, name: str) -> np.ndarray:
        columns = _columns(self.manifest)
        if name not in columns:
            raise UnknownColumnError(f"Column {name!r} is not in this store; columns: {', '.join(columns)}.")
        return self._memmap(f"columns/{name}.bin", columns[name], None)

    @property
    def inputs(self) -> np.ndarray | None:
        """The raw inputs, flattened per instance, when the capture kept them (for thumbnails)."""
        spec = self.manifest.get("inputs")
        if not spec:
            return None
        return self._memmap(spec["file"], spec["dtype"], int(np.prod(spec["shape"], dtype=np.int64)))

    @property
    def input_shape(self) -> list[int] | None:
        spec = self.manifest.get("inputs")
        return list(spec["shape"]) if spec else None

    # ---------------------------------------------------------------- instances
    @property
    def instances(self) -> pd.DataFrame:
        """One row per committed instance: label, pred, correct, scores, names, metadata."""
        if self._instances is None or len(self._instances) != self.n_instances:
            columns = _columns(self.manifest)
            df = pd.DataFrame({name: np.asarray(self.column(name)) for name in columns})
            df.insert(2, "correct", (df["label"] == df["pred"]) & (df["label"] >= 0))
            names = self.class_names
            if names:
                lookup = np.asarray(names + [None], dtype=object)
                df["label_name"] = lookup[np.where((df["label"] >= 0) & (df["label"] < len(names)),
                                                   df["label"], len(names))]
                df["pred_name"] = lookup[np.where((df["pred"] >= 0) & (df["pred"] < len(names)),
                                                  df["pred"], len(names))]
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
        return self._read_graph() if self.manifest.get("graph_file") else None

    # ------------------------------------------------------------ other modules
    def section(self, name: str) -> pathlib.Path:
        """A subdirectory where another module (subsets, projections, logs) keeps its files."""
        if not name.isidentifier() or name in ("layers", "columns", "shards"):
            raise StoreError(f"A section name is a Python identifier (letters, digits, '_') other than the "
                             f"store's own folders (layers, columns, shards), not {name!r}.")
        path = self.path / name
        path.mkdir(exist_ok=True)
        return path

    def reload(self) -> ActivationStore:
        """Re-read the manifest (a capture may still be appending)."""
        self.manifest = _read_manifest(self.path)
        self._instances = None
        self._maps.clear()
        self._progress = self._shard_progress()
        self._check_files()
        return self

    def summary(self) -> str:
        """A few lines on what the store holds and what went wrong while capturing."""
        lines = [repr(self)]
        for name in self.layers:
            spec = self.layer_spec(name)
            how = spec.neuron_kind + ("" if spec.reduction == "none" else f", {spec.reduction}")
            lines.append(f"  {name}: {spec.neurons} neurons ({how}), {spec.dtype}")
        bad = self.nonfinite
        bad = bad[bad.sum(axis=1) > 0]
        for name, row in bad.iterrows():
            lines.append(f"  ! {name}: {row['nan']} NaN, {row['inf']} Inf, {row['overflow']} overflowed "
                         f"(saturated), {row['underflow']} underflowed (stored as 0 or subnormal)")
        return "\n".join(lines)

    def __repr__(self) -> str:
        if self.is_complete:
            state = "complete"
        else:
            state = f"{self.n_instances:,}/{self.n_expected if self.n_expected is not None else '?'} committed"
            if self.committed != self.n_instances:
                state += f" ({self.committed:,} in all shards)"
            state += ", resume with capture(..., resume=True)"
        return (f"<ActivationStore {self.path} · {self.n_instances:,} instances · {len(self.layers)} layers · "
                f"{state}>")


def open_store(path) -> ActivationStore:
    """Open a store for reading. Imports no torch, reads no array into memory, never unpickles."""
    path = pathlib.Path(path)
    return ActivationStore(path, _read_manifest(path))


# ---------------------------------------------------------------------- writing
@dataclass
class PreparedBatch:
    """A batch `StoreWriter.prepare` checked and laid out: its writes and the commit that follows them."""

    writes: list[tuple[int, memoryview, int]]  # file descriptor, bytes, offset
    rows: int  # rows appended once these are written
    commit: tuple[pathlib.Path, str]  # the file, and the text, that commit them


class StoreWriter:
    """Write batches of rows into a store; each `append` commits atomically.

    ``layers`` maps layer names to `LayerSpec`; ``metadata`` (a DataFrame aligned with the
    instances) is written once up front so that it is there whatever happens later. With
    ``world_size`` > 1 the store is laid out for a sharded capture: every rank joins it with
    `StoreWriter.resume` and fills its own row range. Every commit survives the writing process
    being killed; with ``durable`` it also survives a power cut (fsync per commit and at `finish`).
    """

    def __init__(self, path, *, layers: Mapping[str, LayerSpec], n_outputs: int,
                 class_names: list[str] | None = None, n_expected: int | None = None,
                 metadata: pd.DataFrame | None = None, graph=None, input_shape=None, input_dtype="<f4",
                 outputs_are_probabilities: bool = False, output_kind: str | None = None,
                 world_size: int = 1, capture_info: dict | None = None, overwrite: bool = False,
                 durable: bool = False):
        self.path = pathlib.Path(path)
        kind = output_kind or ("probabilities" if outputs_are_probabilities else "logits")
        if kind not in OUTPUT_KINDS:
            raise StoreError(f"output_kind must be one of {', '.join(OUTPUT_KINDS)}, not {kind!r}.")
        if world_size > 1 and n_expected is None:
            raise StoreError("A sharded store needs n_expected: each rank's rows are laid out up front.")
        n_classes = 2 if n_outputs == 1 else int(n_outputs)
        if class_names is not None and len(class_names) != n_classes:
            raise StoreError(f"class_names has {len(class_names)} name(s) for a model with {n_outputs} output(s): "
                             f"give one name per class ({n_classes}), or none.")
        _check_target(self.path, overwrite)
        manifest = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "complete": 0,
            "n_expected": None if n_expected is None else int(n_expected),
            "finished": False,
            "n_outputs": int(n_outputs),
            "output_kind": kind,
            "class_names": [str(c) for c in class_names] if class_names is not None else None,
            "columns": dict(OUTPUT_COLUMNS),
            "layers": {},
            "outputs_nonfinite": _zero_counts(),
            "shards": {"world_size": int(world_size)} if world_size > 1 else None,
            "capture": capture_info or {},
        }
        for i, (name, spec) in enumerate(layers.items()):
            spec_dict = asdict(spec)
            spec_dict["dtype"] = str(_safe_dtype(spec.dtype, f"layer {name!r}"))
            manifest["layers"][str(name)] = {"file": f"layers/{i}.bin", **spec_dict, "nonfinite": _zero_counts()}
        if input_shape is not None:
            manifest["inputs"] = {"file": "columns/inputs.bin", "dtype": str(_safe_dtype(input_dtype, "inputs")),
                                  "shape": [int(s) for s in input_shape]}
        staging = self.path.parent / f".{self.path.name}.creating-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            for folder in ("layers", "columns") + (("shards",) if world_size > 1 else ()):
                (staging / folder).mkdir(parents=True)
            if metadata is not None:
                metadata = pd.DataFrame(metadata).reset_index(drop=True)
                if n_expected is not None and len(metadata) != n_expected:
                    raise StoreError(f"metadata has {len(metadata)} rows for {n_expected} instances.")
                metadata.columns = [str(c) for c in metadata.columns]
                metadata.to_parquet(staging / "metadata.parquet", index=False)
                manifest["metadata_file"] = "metadata.parquet"
            if graph is not None:
                (staging / "graph.json").write_text(graph.to_json())
                manifest["graph_file"] = "graph.json"
            for relative in _row_file_names(manifest):
                (staging / relative).touch()
            _atomic_write(staging / MANIFEST, json.dumps(manifest, indent=1), durable=durable)
            _replace_dir(staging, self.path, overwrite)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            _raise_if_full(exc, self.path, "the new store")
            raise
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        self._attach(manifest, rank=0 if world_size > 1 else None, complete=0, durable=durable)

    @classmethod
    def resume(cls, path, *, rank: int | None = None, durable: bool = False) -> StoreWriter:
        """Reopen a store to continue writing after its last commit (``rank``: that rank's shard)."""
        path = pathlib.Path(path)
        manifest = _read_manifest(path)
        if manifest.get("finished"):
            raise StoreError(f"The store {path} is finished; nothing to resume.")
        sharded = manifest.get("shards") is not None
        if sharded != (rank is not None):
            world = manifest["shards"]["world_size"] if sharded else 1
            raise StoreError(f"The store {path} was laid out for {world} process(es); resume it with the same "
                             "number of processes.")
        self = cls.__new__(cls)
        self.path = path
        if sharded:
            world = manifest["shards"]["world_size"]
            if not 0 <= rank < world:
                raise StoreError(f"Rank {rank} is outside the store's {world} shards.")
            lo, hi = shard_ranges(manifest["n_expected"], world)[rank]
            progress = _read_progress(path, rank, lo, hi)
            complete = progress["complete"]
            own = progress.get("nonfinite") or {}  # the progress file carries this rank's counts only
            for name, entry in manifest["layers"].items():
                entry["nonfinite"] = {**_zero_counts(), **own.get(name, {})}
            manifest["outputs_nonfinite"] = {**_zero_counts(), **own.get("<outputs>", {})}
        else:
            complete = manifest["complete"]
            progress = manifest
        ActivationStore(path, manifest)  # the files hold what the manifest says
        self._attach(manifest, rank=rank, complete=complete, durable=durable)
        self.data_digest = progress.get("data_digest")
        return self

    def _attach(self, manifest: dict, *, rank: int | None, complete: int, durable: bool) -> None:
        manifest.setdefault("output_kind", _output_kind(manifest))  # a format 1 store being resumed
        manifest.setdefault("outputs_nonfinite", _zero_counts())
        for entry in manifest["layers"].values():
            entry.setdefault("nonfinite", _zero_counts())
        self.manifest = manifest
        self.rank = rank
        self.durable = durable
        self._complete = self._committed = complete
        # what the writer of the rows says they were made from, committed with them (a capture's
        # hash of its inputs and labels so far, checked when it resumes)
        self.data_digest: str | None = None
        if rank is None:
            self.start, self.stop = 0, manifest.get("n_expected")
        else:
            self.start, self.stop = shard_ranges(manifest["n_expected"], manifest["shards"]["world_size"])[rank]
        self._columns = _columns(manifest)
        self._fds: dict[str, int] = {}
        for relative in _row_file_names(manifest):
            self._fds[relative] = os.open(_inside(self.path, relative), os.O_WRONLY | os.O_CREAT, 0o644)

    # -------------------------------------------------------------------- state
    @property
    def complete(self) -> int:
        """Rows appended by this writer (in its shard, when sharded)."""
        return self._complete

    @property
    def committed(self) -> int:
        """Rows appended and committed: what a reader sees (in this writer's shard)."""
        return self._committed

    @property
    def n_outputs(self) -> int:
        return int(self.manifest["n_outputs"])

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------- append
    def append(self, *, commit: bool = True, **batch) -> None:
        """Write one batch to every file, then advance the manifest: the batch's commit.

        Takes the arguments of `prepare`. With ``commit=False`` the rows are written but only
        counted by the next `commit`: a writer with more batches waiting commits them together
        (the manifest replace costs milliseconds on some file systems).
        """
        self.write(self.prepare(**batch), commit=commit)

    def prepare(self, *, activations: Mapping[str, np.ndarray], label, outputs, pred=None, confidence=None,
                inputs=None, checked: Mapping[str, NonFinite | None] | None = None) -> PreparedBatch:
        """Check and convert one batch and lay out its writes, without touching the files yet.

        Activations not yet in their storage dtype are converted and checked here; ``checked``
        carries the `check_finite` results of those the caller converted itself. ``pred`` and
        ``confidence`` default to what the outputs say. Kept apart from `write` so that a capture
        does this Python work on its main thread and leaves its writer thread only system calls,
        which release the GIL: a writer thread running Python would stall the model's thread.
        """
        outputs = np.asarray(outputs, dtype=np.float32)
        n = len(outputs)
        row0 = self.start + self._complete
        if self.stop is not None and row0 + n > self.stop:
            raise StoreError(f"Batch of {n} rows runs past the end of this store's rows ({self.stop}).")
        if outputs.shape != (n, self.n_outputs):
            raise StoreError(f"Outputs of shape {outputs.shape}, expected {(n, self.n_outputs)}.")
        label = np.asarray(label).reshape(-1)
        if len(label) != n:
            raise StoreError(f"{len(label)} labels for a batch of {n} instances.")
        label = label.astype(np.int64)
        classes = 2 if self.n_outputs == 1 else self.n_outputs
        if ((label < -1) | (label >= classes)).any():
            bad = label[(label < -1) | (label >= classes)][0]
            raise StoreError(f"Label {bad} is outside the model's {classes} classes (use -1 for unknown).")
        checked = dict(checked or {})
        blocks: dict[str, np.ndarray] = {}
        bad_per_row = np.zeros(n, dtype=np.int32)
        for name, entry in self.manifest["layers"].items():
            if name not in activations:
                raise StoreError(f"Batch lacks layer {name!r}.")
            arr = np.asarray(activations[name])
            arr = arr.reshape(n, -1) if arr.ndim == 1 else arr
            if arr.shape != (n, entry["neurons"]):
                raise StoreError(f"Layer {name!r}: batch of shape {arr.shape}, expected {(n, entry['neurons'])}.")
            dtype = np.dtype(entry["dtype"])
            if name not in checked:
                source = arr
                with np.errstate(over="ignore", invalid="ignore"):  # counted by check_finite
                    arr = np.ascontiguousarray(arr, dtype=dtype)
                checked[name] = check_finite(arr, source) if dtype.kind == "f" else None
            blocks[entry["file"]] = np.ascontiguousarray(arr, dtype=dtype)
        out_check = check_finite(outputs)
        scores = scores_from_outputs(outputs, self.manifest["output_kind"])
        with np.errstate(invalid="ignore"):
            if pred is None:
                pred = np.argmax(np.where(np.isnan(scores), -np.inf, scores), axis=1)
            if confidence is None:
                confidence = scores[np.arange(n), np.asarray(pred)]
        known = label >= 0
        label_score = np.full(n, np.nan, dtype=np.float32)
        label_score[known] = scores[np.flatnonzero(known), label[known]]
        for result in list(checked.values()) + [out_check]:
            if result is not None:
                bad_per_row += result.per_row
        values = {"label": label, "pred": pred, "confidence": confidence, "label_score": label_score,
                  "nonfinite": bad_per_row}
        for col, dtype in self._columns.items():
            blocks[f"columns/{col}.bin"] = np.ascontiguousarray(values[col], dtype=dtype).reshape(n)
        blocks["columns/outputs.bin"] = np.ascontiguousarray(outputs, dtype="<f4")
        if self.manifest.get("inputs"):
            spec = self.manifest["inputs"]
            if inputs is None:
                raise StoreError("This store keeps inputs; the batch has none.")
            flat = np.asarray(inputs).reshape(n, -1)
            if flat.shape[1] != int(np.prod(spec["shape"], dtype=np.int64)):
                raise StoreError(f"Inputs of {flat.shape[1]} values per instance, expected shape {spec['shape']}.")
            blocks[spec["file"]] = np.ascontiguousarray(flat, dtype=spec["dtype"])
        writes = [(self._fds[relative], memoryview(block).cast("B"), row0 * (block.nbytes // n))
                  for relative, block in blocks.items()] if n else []
        for name, result in checked.items():
            if result is not None:
                result.add_to(self.manifest["layers"][name]["nonfinite"])
        if out_check is not None:
            out_check.add_to(self.manifest["outputs_nonfinite"])
        self._complete += n
        return PreparedBatch(writes, self._complete, self._commit_record())

    def write(self, prepared: PreparedBatch, commit: bool = True) -> None:
        """Write a prepared batch's rows (in the order prepared), then commit them if asked."""
        try:
            for fd, data, offset in prepared.writes:
                _pwrite_all(fd, data, offset)
            if self.durable:
                for fd in self._fds.values():
                    os.fsync(fd)
        except OSError as exc:
            _raise_if_full(exc, self.path, "a batch", committed=self._committed)
            raise
        if commit:
            self._write_commit(prepared.commit, prepared.rows)

    def commit(self, finished: bool = False) -> None:
        """Make every row written so far part of the store, atomically."""
        self._write_commit(self._commit_record(finished), self._complete)

    def _commit_record(self, finished: bool = False) -> tuple[pathlib.Path, str]:
        """Where and what to write to commit the rows appended so far."""
        if self.rank is None:
            self.manifest["complete"] = self._complete
            self.manifest["finished"] = finished
            self.manifest["data_digest"] = self.data_digest
            # indented for people once finished; compact (C-encoded) for the commits before
            return self.path / MANIFEST, json.dumps(self.manifest, indent=1 if finished else None)
        counts = {name: e["nonfinite"] for name, e in self.manifest["layers"].items()}
        counts["<outputs>"] = self.manifest["outputs_nonfinite"]
        progress = {"rank": self.rank, "complete": self._complete, "finished": finished, "nonfinite": counts,
                    "data_digest": self.data_digest}
        return _progress_path(self.path, self.rank), json.dumps(progress)

    def _write_commit(self, record: tuple[pathlib.Path, str], rows: int) -> None:
        _atomic_write(*record, durable=self.durable)
        self._committed = rows

    def finish(self) -> ActivationStore | None:
        """Mark the store (or this rank's shard) finished; with ``durable``, sync it to disk first.

        Returns the opened store, or None for a shard: `finish_shards` completes a sharded store
        once every rank has finished.
        """
        if self.durable:
            for fd in self._fds.values():
                os.fsync(fd)
        self.commit(finished=True)
        self.close()
        if self.rank is not None:
            return None
        return open_store(self.path)


def finish_shards(path) -> ActivationStore:
    """Merge the ranks' progress into the manifest once every shard is complete.

    Raises `StoreError` naming the shards still missing rows.
    """
    path = pathlib.Path(path)
    manifest = _read_manifest(path)
    if manifest.get("finished"):
        return open_store(path)
    store = ActivationStore(path, manifest)
    missing = [p for p in store.progress if p["complete"] < p["stop"] - p["start"]]
    if missing:
        text = ", ".join(f"rank {p['rank']}: {p['complete']}/{p['stop'] - p['start']}" for p in missing)
        raise StoreError(f"Shards of {path} are incomplete ({text}); resume them with the same world size.")
    counts = store.nonfinite
    for name, entry in manifest["layers"].items():
        entry["nonfinite"] = {k: int(v) for k, v in counts.loc[name].items()}
    manifest["outputs_nonfinite"] = {k: int(v) for k, v in counts.loc["<outputs>"].items()}
    manifest["complete"] = manifest["n_expected"]
    manifest["finished"] = True
    _atomic_write(path / MANIFEST, json.dumps(manifest, indent=1))
    return open_store(path)


def _row_file_names(manifest: dict) -> list[str]:
    files = [e["file"] for e in manifest["layers"].values()]
    files += [f"columns/{c}.bin" for c in _columns(manifest)] + ["columns/outputs.bin"]
    if manifest.get("inputs"):
        files.append(manifest["inputs"]["file"])
    return files


def _check_target(path: pathlib.Path, overwrite: bool) -> None:
    if path.exists() and not path.is_dir():
        raise StoreExistsError(f"{path} is a file, not a store directory; choose a new or empty directory.")
    if (path / MANIFEST).exists():
        if not overwrite:
            raise StoreExistsError(f"{path} already holds a store; pass overwrite=True to replace it "
                                   "or resume=True to continue it.")
    elif path.is_dir() and any(path.iterdir()):
        raise StoreExistsError(f"{path} is a directory with other files in it, not a store; "
                               "choose a new or empty directory.")


def _replace_dir(staging: pathlib.Path, path: pathlib.Path, overwrite: bool) -> None:
    """Move a finished staging directory into place, retiring an old store only when asked."""
    old = None
    if overwrite and (path / MANIFEST).exists():
        old = path.parent / f".{path.name}.replaced-{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(path, old)
    os.replace(staging, path)  # replaces an empty directory, never a full one
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _check_rows(activations: Mapping[str, np.ndarray], labels: np.ndarray, outputs: np.ndarray) -> None:
    """Refuse arrays that do not line up before anything is written: one row per instance everywhere."""
    if labels.ndim != 1:
        raise StoreError(f"labels is one class index per instance (1-D), not shape {labels.shape}.")
    n = len(labels)
    if outputs.ndim != 2:
        raise StoreError(f"outputs is instances x classes (2-D), not shape {outputs.shape}.")
    if len(outputs) != n:
        raise StoreError(f"outputs has {len(outputs)} rows for {n} labels: outputs, labels and every layer "
                         "have one row per instance.")
    for name, values in activations.items():
        shape = np.shape(values)
        if len(shape) not in (1, 2):
            raise StoreError(f"Layer {name!r} has shape {shape}; write_store takes 2-D arrays, instances x "
                             "neurons: flatten or reduce the other dimensions first.")
        if shape[0] != n:
            raise StoreError(f"Layer {name!r} has {shape[0]} rows for {n} labels: outputs, labels and every layer "
                             "have one row per instance.")


def write_store(path, activations: Mapping[str, np.ndarray], *, labels, outputs, class_names=None,
                metadata=None, layer_specs: Mapping[str, LayerSpec] | None = None, inputs=None,
                overwrite: bool = False, graph=None, output_kind: str = "logits") -> ActivationStore:
    """Write a complete store from arrays in memory: for tests, demos and imported activations.

    Values that do not fit the layers' storage dtype (float16 by default) are saturated and
    counted, like in a capture (see `ActivationStore.nonfinite`).
    """
    outputs = np.asarray(outputs, dtype=np.float32)
    if outputs.ndim == 1:
        outputs = outputs[:, None]
    labels = np.asarray(labels)
    _check_rows(activations, labels, outputs)
    specs = layer_specs or {name: LayerSpec(neurons=int(np.shape(a)[1]) if np.ndim(a) > 1 else 1)
                            for name, a in activations.items()}
    inputs_arr = None if inputs is None else np.asarray(inputs)
    if inputs_arr is not None and inputs_arr.dtype.kind == "f":
        inputs_arr = inputs_arr.astype(np.float32, copy=False)
    writer = StoreWriter(path, layers=specs, n_outputs=outputs.shape[1], class_names=class_names,
                         n_expected=len(labels), metadata=metadata, graph=graph, overwrite=overwrite,
                         output_kind=output_kind,
                         input_shape=None if inputs_arr is None else inputs_arr.shape[1:],
                         input_dtype=None if inputs_arr is None else inputs_arr.dtype)
    with writer:
        writer.append(activations=activations, label=labels, outputs=outputs, inputs=inputs_arr)
        return writer.finish()
