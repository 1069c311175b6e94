"""The store's checkpoint axis: one instance table, and per checkpoint (a training step) what the model
computed at that step: its activations, outputs and per-instance predictions.

A store with checkpoints is format 3::

    manifest.json                      what every checkpoint shares (layers, outputs, class names, inputs,
                                       metadata, graph) and the list of checkpoints [{"step", "dir"}]
    columns/label.bin                  the instances, stored once: labels, inputs (columns/inputs.bin),
    metadata.parquet, graph.json       metadata and the graph
    checkpoints/<step>/checkpoint.json that checkpoint's commits: complete, finished, non-finite counts,
                                       how it was captured, the digest of its data
    checkpoints/<step>/layers/<i>.bin  its activations, and its columns/{pred,confidence,label_score,
                                       nonfinite,outputs}.bin and shards/<rank>.json

A checkpoint commits by replacing its own ``checkpoint.json``, so a commit costs the same with one
checkpoint or a thousand; the manifest is replaced only when a checkpoint is added or dropped, and it
lists a checkpoint only once that checkpoint's folder and state exist. So a kill at any moment leaves
the complete checkpoints readable and the one begun resumable. A store captured without
``checkpoint=`` (format 1 or 2, the layout activis wrote before checkpoints) is a store with one
checkpoint, step 0; adding a checkpoint to it hard-links its files into ``checkpoints/0/`` (no copy,
and the old layout stays valid until the new manifest replaces it).

The reader and the writer see one checkpoint at a time as a flat manifest of the format-2 shape, a
*view*, so that every reader path and view works over any checkpoint unchanged.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil

from .errors import StoreError
from .manifest import (
    CHECKPOINT_FILE,
    FORMAT_VERSION,
    MANIFEST,
    SHARED_COLUMNS,
    _check_manifest,
    _columns,
    _inside,
    _load_json,
    _need,
    _read_manifest,
)
from .nonfinite import COUNTS, _zero_counts

# what a checkpoint's own state holds; the rest of a view comes from the manifest
_STATE_KEYS = ("complete", "finished", "capture", "data_digest", "outputs_nonfinite")
_VIEW_KEYS = ("checkpoint", "column_files", "shards_dir")  # a view's, never written to a manifest


def checkpoint_dir(step: int) -> str:
    return f"checkpoints/{step}"


def is_checkpointed(doc: dict) -> bool:
    return doc.get("version", 0) >= 3


def writes_instances(view: dict) -> bool:
    """Whether this checkpoint writes the shared instance table (the first one does; the others check it)."""
    return (view.get("checkpoint") or {}).get("writes_instances", True)


def check_step(step) -> int:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise StoreError(f"A checkpoint's step is a whole number of 0 or more (the training step), not {step!r}.")
    return int(step)


# ----------------------------------------------------------------------- views
def view_of(doc: dict, step: int, state: dict) -> dict:
    """The flat (format-2 shaped) manifest of one checkpoint: what `ActivationStore` and `StoreWriter` read."""
    folder = checkpoint_dir(step)
    view = {key: value for key, value in doc.items() if key != "checkpoints"}
    layer_counts = state.get("nonfinite") or {}
    view["layers"] = {name: {**entry, "file": f"{folder}/{entry['file']}",
                             "nonfinite": {**_zero_counts(), **(layer_counts.get(name) or {})}}
                      for name, entry in doc["layers"].items()}
    view.update({key: state.get(key) for key in _STATE_KEYS})
    view["capture"] = dict(view["capture"] or {})
    view["outputs_nonfinite"] = {**_zero_counts(), **(view["outputs_nonfinite"] or {})}
    view["column_files"] = {column: f"columns/{column}.bin" if column in SHARED_COLUMNS
                            else f"{folder}/columns/{column}.bin" for column in _columns(doc)}
    view["column_files"]["outputs"] = f"{folder}/columns/outputs.bin"
    view["shards_dir"] = f"{folder}/shards"
    view["checkpoint"] = {"step": step, "writes_instances": bool(state.get("writes_instances"))}
    return view


def state_of(view: dict) -> dict:
    """A view's own part: what its checkpoint's commits write."""
    state = {key: view.get(key) for key in _STATE_KEYS}
    state["step"] = view["checkpoint"]["step"]
    state["writes_instances"] = writes_instances(view)
    state["nonfinite"] = {name: entry.get("nonfinite") or _zero_counts() for name, entry in view["layers"].items()}
    return state


def shared_of(view: dict, step: int) -> dict:
    """The manifest of a new store with one checkpoint, from the flat manifest a writer lays out."""
    doc = {key: value for key, value in view.items() if key not in _STATE_KEYS + _VIEW_KEYS}
    doc["version"] = FORMAT_VERSION
    doc["layers"] = {name: {k: v for k, v in entry.items() if k != "nonfinite"}
                     for name, entry in view["layers"].items()}
    doc["checkpoints"] = [{"step": step, "dir": checkpoint_dir(step)}]
    return doc


def state_path(root: pathlib.Path, step: int) -> pathlib.Path:
    return _inside(root, f"{checkpoint_dir(step)}/{CHECKPOINT_FILE}")


def read_state(root: pathlib.Path, doc: dict, step: int) -> dict:
    """One checkpoint's state, checked as untrusted input."""
    path = state_path(root, step)
    where = f"{checkpoint_dir(step)}/{CHECKPOINT_FILE}"
    state = _load_json(path, f"Store file {where} is missing from {root}.", f"Store file {where} of {root}")
    _need(root, isinstance(state, dict) and state.get("step") == step, f"it is not checkpoint {step}'s", where)
    complete = state.get("complete")
    n = doc.get("n_expected")
    _need(root, isinstance(complete, int) and not isinstance(complete, bool) and 0 <= complete <= n,
          f"'complete' is {complete!r} for {n} instances", where)
    _need(root, isinstance(state.get("finished"), bool), "'finished' is not true or false", where)
    _need(root, isinstance(state.get("capture") or {}, dict), "'capture' is not a mapping", where)
    digest = state.get("data_digest")
    _need(root, digest is None or isinstance(digest, str), "'data_digest' is not a string", where)
    counts = {"<outputs>": state.get("outputs_nonfinite") or {}, **(state.get("nonfinite") or {})}
    _need(root, all(isinstance(c, dict) and all(isinstance(c.get(k, 0), int) for k in COUNTS)
                    for c in counts.values()), "the non-finite counts are not whole numbers", where)
    return state


def read_states(root: pathlib.Path, doc: dict) -> dict[int, dict]:
    return {entry["step"]: read_state(root, doc, entry["step"]) for entry in doc["checkpoints"]}


def is_complete(doc: dict, state: dict) -> bool:
    return bool(state["finished"]) or (not doc.get("shards") and state["complete"] >= doc["n_expected"])


def default_step(doc: dict, states: dict[int, dict]) -> int:
    """The step a store reads by itself: its latest complete checkpoint, else its latest."""
    complete = [step for step, state in states.items() if is_complete(doc, state)]
    return max(complete or states)


def read_view(root: pathlib.Path, step: int | None = None) -> tuple[dict, dict, dict[int, dict] | None]:
    """The manifest, the view of ``step`` (default: the store's own), and every checkpoint's state (format 3)."""
    doc = _read_manifest(root)
    if not is_checkpointed(doc):
        if step not in (None, 0):
            raise StoreError(f"Checkpoint {step} is not in the store {root}; it has one checkpoint: 0 "
                             "(captured without checkpoint=).")
        return doc, doc, None
    states = read_states(root, doc)
    if step is None:
        step = default_step(doc, states)
    if step not in states:
        raise StoreError(f"Checkpoint {step!r} is not in the store {root}; its checkpoints: "
                         f"{', '.join(map(str, states))}.")
    return doc, view_of(doc, step, states[step]), states


# --------------------------------------------------------------------- changes
def _write_json(path: pathlib.Path, data: dict, durable: bool) -> None:
    from .writer import _atomic_write  # the writer's one atomic replace

    _atomic_write(path, json.dumps(data, indent=1), durable=durable)


def add_checkpoint(root: pathlib.Path, step: int, *, capture_info: dict | None = None, durable: bool = False) -> None:
    """Lay out an empty checkpoint ``step`` beside the store's others, and only then list it.

    A store in the format before checkpoints becomes format 3 first, its one checkpoint step 0.
    Refuses, changing no file, a step already there and a store whose own checkpoint is unfinished.
    """
    doc, view, states = read_view(root)
    steps = list(states) if states is not None else [0]
    if step in steps:
        plain = "; a store captured without checkpoint= holds step 0" if states is None else ""
        raise StoreError(f"Checkpoint {step} is already in the store {root} (its checkpoints: "
                         f"{', '.join(map(str, steps))}{plain}): a step is written once. Capture another step, "
                         "or pass overwrite=True to replace the store.")
    if doc["version"] == 1:
        raise StoreError(f"The store {root} is in format 1, which keeps no label scores: capture it again "
                         "to add checkpoints to it.")
    if doc.get("n_expected") is None:
        raise StoreError(f"The store {root} does not know its number of instances; checkpoints need data of "
                         "known length.")
    unfinished = [s for s, state in (states or {0: {"finished": view.get("finished")}}).items()
                  if not state["finished"]]
    if unfinished:
        raise StoreError(f"Checkpoint {unfinished[0]} of the store {root} is unfinished: finish it first with "
                         f"capture(..., checkpoint={unfinished[0]}, resume=True).")
    if states is None:
        doc = _to_checkpoints(root, doc, durable)
    folder = _inside(root, checkpoint_dir(step))
    shutil.rmtree(folder, ignore_errors=True)  # left by a kill before it was listed: never part of the store
    for relative in ("layers", "columns") + (("shards",) if doc.get("shards") else ()):
        (folder / relative).mkdir(parents=True)
    new = view_of(doc, step, {"complete": 0, "finished": False, "writes_instances": False,
                              "capture": capture_info or {}})
    for column in [*_columns(doc), "outputs"]:
        if column not in SHARED_COLUMNS:
            _inside(root, new["column_files"][column]).touch()
    for entry in new["layers"].values():
        _inside(root, entry["file"]).touch()
    _write_json(folder / CHECKPOINT_FILE, state_of(new), durable)
    listed = sorted([*doc["checkpoints"], {"step": step, "dir": checkpoint_dir(step)}], key=lambda e: e["step"])
    _write_json(root / MANIFEST, {**doc, "checkpoints": listed}, durable)


def drop_checkpoint(root: pathlib.Path, step: int) -> None:
    """Unlist a checkpoint that is not the store's instance table (one whose data turned out to differ), then
    delete its files."""
    doc = _read_manifest(root)
    if not is_checkpointed(doc) or read_state(root, doc, step).get("writes_instances"):
        raise StoreError(f"Checkpoint {step} of {root} holds the store's instances; it is not dropped.")
    _write_json(root / MANIFEST, {**doc, "checkpoints": [e for e in doc["checkpoints"] if e["step"] != step]},
                durable=False)
    shutil.rmtree(_inside(root, checkpoint_dir(step)), ignore_errors=True)


def _to_checkpoints(root: pathlib.Path, plain: dict, durable: bool) -> dict:
    """Make a format-2 store format 3 with one checkpoint, step 0: its files hard-linked into checkpoints/0/,
    the new manifest written over the old, and only then the old names removed."""
    state = {**{key: plain.get(key) for key in _STATE_KEYS}, "step": 0, "writes_instances": True,
             "nonfinite": {name: entry.get("nonfinite") or _zero_counts() for name, entry in plain["layers"].items()}}
    doc = shared_of(plain, 0)
    view = view_of(doc, 0, state)
    folder = _inside(root, checkpoint_dir(0))
    shutil.rmtree(folder, ignore_errors=True)
    moves = [(entry["file"], view["layers"][name]["file"]) for name, entry in plain["layers"].items()]
    moves += [(f"columns/{c}.bin", view["column_files"][c]) for c in [*_columns(plain), "outputs"]
              if c not in SHARED_COLUMNS]
    shards = root / "shards"
    if shards.is_dir():
        moves += [(f"shards/{p.name}", f"{checkpoint_dir(0)}/shards/{p.name}") for p in shards.glob("*.json")]
    for old, new in moves:
        target = _inside(root, new)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(_inside(root, old), target)
    _write_json(folder / CHECKPOINT_FILE, state, durable)
    _check_manifest(root, doc)
    _write_json(root / MANIFEST, doc, durable)
    for old, _new in moves:
        _inside(root, old).unlink(missing_ok=True)
    for folder in ("layers", "shards"):
        if (root / folder).is_dir() and not any((root / folder).iterdir()):
            (root / folder).rmdir()
    return doc
