"""Whether a capture may continue the store at its path, or add a checkpoint to it: the checks made before
a resumed capture, or a new checkpoint, writes a row.

A new checkpoint holds the store's instances: it is refused, naming each difference, with other layers,
reductions, outputs or kept inputs, another number of instances or batch size (the data digest that
proves the same instances is taken per batch); its model is expected to differ.

``resume=True`` promises a store equal, bit for bit, to what an uninterrupted capture writes. So a
resume refuses, naming each difference, a store begun with another batch size, other layers,
reductions or padding mask, another number of instances, other model parameters, outputs or kept
inputs, or other values in the rows already written (their digests: see `fingerprint`).
"""

from __future__ import annotations

import pathlib

from ..store import MANIFEST, ActivationStore, LayerSpec, open_store
from .options import CaptureError, CaptureTargetExistsError, _Options


def _existing_store(path: pathlib.Path, opts: _Options) -> tuple[ActivationStore | None, bool]:
    """The store at ``path`` to continue, or None to write a new one (refusing to replace one unasked); and
    whether the capture adds a checkpoint to it (the store returned is then the one it must match)."""
    if not (path / MANIFEST).exists() or opts.overwrite:
        return None, False
    step = opts.checkpoint
    store = open_store(path)
    if step is None:
        if opts.resume:
            unfinished = store.unfinished_checkpoints
            return (store.at(unfinished[-1]) if unfinished else store), False
        raise CaptureTargetExistsError(f"{path} already holds a store; pass resume=True to continue it or "
                                       "overwrite=True to replace it, checkpoint=<step> to add a checkpoint "
                                       "(or capture into a new path).")
    if step in store.checkpoints + store.unfinished_checkpoints:
        at = store.at(step)
        if opts.resume:
            return at, False
        if at.is_complete:
            plain = " (a store captured without checkpoint= holds step 0)" if "checkpoint" not in at.manifest else ""
            raise CaptureTargetExistsError(f"Checkpoint {step} is already in {path}{plain}: a step is written once. "
                                           f"Its checkpoints: {store.checkpoints}.")
        raise CaptureTargetExistsError(f"Checkpoint {step} of {path} was begun and not finished; pass resume=True "
                                       "to continue it.")
    if opts.resume:
        raise CaptureError(f"Checkpoint {step} is not in {path}, so there is nothing to resume: leave resume= out "
                           f"to add it. Its checkpoints: {store.checkpoints}.")
    return store, True


def _batch_size(asked: int | None, own: int | None, existing: ActivationStore | None) -> int:
    """The batch size asked for, else the DataLoader's (``own``), the store's or 256; a resume keeps the store's."""
    stored = (existing.capture_info.get("batch_size") if existing is not None else None)
    wanted = asked or own or stored or 256
    if stored is not None and wanted != stored:
        raise CaptureError(f"The store was captured in batches of {stored}; resume it or add checkpoints with the "
                           f"same batch size (not {wanted}) so that the rows come out identical.")
    return wanted


def _check_resumable(store: ActivationStore, path: pathlib.Path, *, specs: dict[str, LayerSpec],
                     mask_info: dict | None, n: int | None, model_digests: dict[str, str] | None, n_outputs: int,
                     output_kind: str, input_shape: list[int] | None, adding: int | None = None) -> None:
    """Refuse to continue ``store`` with what this capture would write (the arguments), naming every difference;
    ``adding``: the step of a new checkpoint, whose model is not compared (it is the one that changed)."""
    info = store.capture_info
    problems = []
    if store.layers != list(specs):
        problems.append(f"layers {store.layers} vs {list(specs)}")
    else:
        for name, spec in specs.items():
            if store.layer_spec(name) != spec:
                problems.append(f"layer {name!r} was {store.layer_spec(name)}, now {spec}")
    before = (info.get("sequence_mask") or {}).get("layers", [])  # a store from before masks had none
    now = (mask_info or {}).get("layers", [])
    if before != now:
        problems.append(f"layers reduced over the real steps of a padding mask: {before} then, {now} now "
                        "(pass the same sequence_mask; sequence_mask=False reduces over every step)")
    if store.n_expected != n:
        problems.append(f"{store.n_expected} instances then, {n} now")
    before = info.get("model_digests") if model_digests is not None else None
    if before is not None and before != model_digests:
        changed = [name for name in model_digests if before.get(name) != model_digests[name]]
        gone = [name for name in before if name not in model_digests]
        problems.append("the model's parameters differ from those the store began with (" +
                        ", ".join(changed[:5] + gone[:5]) + (", ..." if len(changed) + len(gone) > 10 else "")
                        + ")")
    if store.manifest["n_outputs"] != n_outputs or store.output_kind != output_kind:
        problems.append("the model's outputs differ")
    if (store.input_shape or None) != input_shape:
        problems.append(f"inputs kept as {store.input_shape}, now {input_shape}")
    if problems and adding is not None:
        raise CaptureError(f"Cannot add checkpoint {adding} to {path}: " + "; ".join(problems) +
                           ". Every checkpoint captures the same instances and layers with the same options.")
    if problems:
        raise CaptureError(f"Cannot resume {path}: " + "; ".join(problems) +
                           ". Resume with the same model, data and options, or pass overwrite=True.")


def _check_same_data(path: pathlib.Path, recorded: str | None, digest: int, done: int) -> None:
    """Refuse data whose ``done`` rows already written (``digest`` over them now) differ from the ``recorded``."""
    if recorded is not None and f"{digest:08x}" != recorded:
        raise CaptureError(f"Cannot resume {path}: the inputs or labels of the {done:,} instances already "
                           "written differ from the data given now (same length, different values or order). "
                           "Resume with the same data, or pass overwrite=True.")
