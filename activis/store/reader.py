"""Reading a store: `open_store` and `ActivationStore`, its memory-mapped arrays and instances table.

A reader sees the committed rows only, so a store that a capture is still writing (or that a
killed capture left behind) opens and shows what was committed. Opening reads no array into
memory: the activations and per-instance columns are read-only memory maps.
"""

from __future__ import annotations

import difflib
import pathlib

import numpy as np
import pandas as pd

from ..graph import UnknownLayerError
from ..paths import folder_path
from . import checkpoints as axis
from .errors import StoreError, UnknownColumnError
from .manifest import (
    LayerSpec,
    _column_file,
    _columns,
    _inside,
    _output_kind,
    _read_progress,
    _safe_dtype,
    metadata_names,
    shard_ranges,
)
from .nonfinite import COUNTS, NonFinite, _zero_counts
from .scores import scores_from_outputs


class ActivationStore:
    """Read side of a store: memory-mapped activations and the instances table.

    Open with `open_store`. Arrays are read-only numpy memory maps of the committed rows only; a
    capture that is still running (or was killed) shows what it has committed so far. A store with
    checkpoints reads one of them (its latest complete one; `at` reads another) through the same API.
    """

    def __init__(self, path: pathlib.Path, manifest: dict, states: dict[int, dict] | None = None,
                 pinned: bool = False):
        self.path = path
        self.manifest = manifest  # the flat manifest of the checkpoint read (see `checkpoints.view_of`)
        self._states = states
        self._pinned = pinned  # opened at a step (`at`): a reload stays there
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
        return [{**_read_progress(self.path, r, lo, hi, self.manifest), "start": lo, "stop": hi}
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

    # -------------------------------------------------------------- checkpoints
    @property
    def step(self) -> int:
        """The training step of the checkpoint this object reads (0 for a store captured without checkpoint=)."""
        return int((self.manifest.get("checkpoint") or {}).get("step", 0))

    @property
    def checkpoints(self) -> list[int]:
        """The steps of the store's complete checkpoints, sorted. A store captured without ``checkpoint=``
        has one, step 0, once complete; a checkpoint begun and not finished is in `unfinished_checkpoints`."""
        return self._checkpoint_steps(complete=True)

    @property
    def unfinished_checkpoints(self) -> list[int]:
        """Checkpoints begun and not complete: being captured, or killed (``resume=True`` continues them)."""
        return self._checkpoint_steps(complete=False)

    def _checkpoint_steps(self, complete: bool) -> list[int]:
        if self._states is None:
            return [0] if self.is_complete == complete else []
        return sorted(s for s, state in self._states.items() if axis.is_complete(self.manifest, state) == complete)

    def at(self, step: int) -> ActivationStore:
        """The store as it was at checkpoint ``step``: the same API over that checkpoint's activations, outputs,
        scores and predictions (the instances' labels, metadata and inputs are the same at every step)."""
        if self._states is None:
            if step != 0:
                raise StoreError(f"Checkpoint {step!r} is not in the store {self.path}; it has one checkpoint: 0 "
                                 "(captured without checkpoint=).")
            return self
        _doc, view, states = axis.read_view(self.path, axis.check_step(step))
        return ActivationStore(self.path, view, states, pinned=True)

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
        from ..graph import ComputationGraph

        graph_file = self.manifest["graph_file"]
        try:
            return ComputationGraph.from_json(_inside(self.path, graph_file).read_text())
        except (ValueError, TypeError, KeyError, AttributeError, UnicodeDecodeError) as exc:
            raise StoreError(f"Store file {graph_file} of {self.path} is not a valid activis graph: "
                             f"{type(exc).__name__}: {exc}") from None

    def _row_files(self) -> list[tuple[str, str, int | None]]:
        files = [(e["file"], e["dtype"], e["neurons"]) for e in self.manifest["layers"].values()]
        files += [(_column_file(self.manifest, c), dtype, None) for c, dtype in _columns(self.manifest).items()]
        files.append((_column_file(self.manifest, "outputs"), "<f4", int(self.manifest["n_outputs"])))
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
        return self._memmap(_column_file(self.manifest, "outputs"), "<f4", int(self.manifest["n_outputs"]))

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
        return self._memmap(_column_file(self.manifest, name), columns[name], None)

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
                df["label_name"] = _class_names_of(df["label"].to_numpy(), names)
                df["pred_name"] = _class_names_of(df["pred"].to_numpy(), names)
            meta_file = self.manifest.get("metadata_file")
            if meta_file:
                meta = pd.read_parquet(_inside(self.path, meta_file))
                meta = meta.iloc[: self.n_instances].reset_index(drop=True)
                meta.columns = [str(c) for c in meta.columns]
                meta = meta.rename(columns=metadata_names(meta.columns))
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
        if not name.isidentifier() or name in ("layers", "columns", "shards", "checkpoints"):
            raise StoreError(f"A section name is a Python identifier (letters, digits, '_') other than the "
                             f"store's own folders (layers, columns, shards, checkpoints), not {name!r}.")
        path = self.path / name
        path.mkdir(exist_ok=True)
        return path

    def reload(self) -> ActivationStore:
        """Re-read the manifest (a capture may still be appending rows, or checkpoints)."""
        _doc, self.manifest, self._states = axis.read_view(self.path, self.step if self._pinned else None)
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
        if self._states is not None:
            state = state.replace("resume=True", f"checkpoint={self.step}, resume=True")
            steps = self.checkpoints
            state = f"step {self.step} of {len(steps)} checkpoint{'s' * (len(steps) != 1)} · {state}"
        return (f"<ActivationStore {self.path} · {self.n_instances:,} instances · {len(self.layers)} layers · "
                f"{state}>")


def _class_names_of(codes: np.ndarray, names: list[str]):
    """Each class index's name (missing outside the classes), as pandas stores text: taken in arrow, because
    pandas converting a million Python strings took a quarter of a second of an explorer's first frame."""
    import pyarrow as pa

    known = (codes >= 0) & (codes < len(names))
    taken = pa.array(names, pa.string()).take(pa.array(np.where(known, codes, 0), mask=~known))
    return pd.array(taken, dtype=pd.Series([names[0], None]).dtype)


def open_store(path, step: int | None = None) -> ActivationStore:
    """Open a store for reading. Imports no torch, reads no array into memory, never unpickles.

    A store with checkpoints reads its latest complete checkpoint, or ``step``'s (as `ActivationStore.at`).
    """
    path = folder_path(path, "store", StoreError)
    _doc, view, states = axis.read_view(path, None if step is None else axis.check_step(step))
    return ActivationStore(path, view, states, pinned=step is not None)
