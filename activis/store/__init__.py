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
    checkpoints/<step>/      a store with checkpoints (format 3): each one's rows and state (see `checkpoints`)
    <section>/               room for other modules: subsets, projections, logs

Every row lives at a fixed offset (row x row size) in its file, so a batch is written where it
belongs whatever wrote it: one process appending, a resumed capture rewriting rows a killed one had
started, or the ranks of a distributed job filling their own row ranges of the same files. The
per-instance columns are raw arrays rather than Parquet because they grow per batch and must be
readable up to the last commit; only the metadata, known up front, is Parquet.

A batch is committed by writing its rows and only then replacing the manifest (or the rank's
progress file), so a store killed at any instant opens and shows every committed instance. The
store is created in a staging directory and renamed into place, so a half-created store never
exists. This package imports no torch: a store can be explored where torch is not installed.

One file per concern: ``manifest`` (the format, its versions and checks), ``reader``
(`ActivationStore`), ``writer`` (`StoreWriter`, the commits, shards), ``from_arrays``
(`write_store`), ``checkpoints`` (the checkpoint axis), ``nonfinite`` and ``scores`` (what the
stored numbers mean), ``errors``.
"""

from __future__ import annotations

from .errors import StoreError, StoreExistsError, StoreFullError, UnknownColumnError
from .from_arrays import write_store
from .manifest import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    MAX_VALUES,
    OUTPUT_COLUMNS,
    OUTPUT_KINDS,
    READABLE_VERSIONS,
    LayerSpec,
    shard_ranges,
)
from .nonfinite import COUNTS, NonFinite, check_finite
from .reader import ActivationStore, open_store
from .scores import scores_from_outputs
from .writer import PreparedBatch, StoreWriter, finish_shards

__all__ = ["COUNTS", "FORMAT", "FORMAT_VERSION", "MANIFEST", "MAX_VALUES", "OUTPUT_COLUMNS", "OUTPUT_KINDS",
           "READABLE_VERSIONS", "ActivationStore", "LayerSpec", "NonFinite", "PreparedBatch", "StoreError",
           "StoreExistsError", "StoreFullError", "StoreWriter", "UnknownColumnError", "check_finite",
           "finish_shards", "open_store", "scores_from_outputs", "shard_ranges", "write_store"]
