"""Run a model over a dataset and write what its layers compute into an activation store.

`capture` is the only place in activis that runs the model over data. The package is split along
its seams: `options` (the checked arguments and the errors), `sources` (instances in a fixed
order), `layers` (which values are tapped and how they become neurons), `masks` (the real steps
of padded sequences), `outputs` (the model's class scores), `pipeline` (staging buffers and the
writer thread), `group` (torchrun ranks), `resume` (whether a store may be continued),
`fingerprint` (the digests a resume compares), `report` (progress and the non-finite warning) and
`session` (one call, start to end).
Its name is not a public name, so that ``activis.capture`` stays the function however it is reached.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable, Mapping

from torch import nn

from ..store import ActivationStore
from .group import _Group
from .options import CaptureError, CaptureInterrupted, CaptureTargetExistsError, NonFiniteWarning, _Options
from .session import _Session

__all__ = ["capture", "CaptureError", "CaptureInterrupted", "CaptureTargetExistsError", "NonFiniteWarning"]


def capture(model: nn.Module, data, path, *, layers: Iterable[str] | None = None, labels=None, metadata=None,
            class_names: list[str] | None = None, batch_size: int | None = None, device=None,
            dtype: str = "float16", channel_reduction: str = "mean", sequence_reduction: str = "mean",
            sequence_mask=None, reduce: Mapping[str, str] | None = None, layout: Mapping[str, str] | None = None,
            select: Mapping[str, object] | None = None, output_element=None, output_kind: str = "auto",
            keep_inputs: bool | str = "auto", input_key: str | None = None, label_key: str | None = None,
            num_workers: int = 0, resume: bool = False, overwrite: bool = False, durable: bool = False,
            progress: bool = True, distributed: bool | None = None, checkpoint: int | None = None) -> ActivationStore:
    """Run ``model`` over ``data`` under ``torch.inference_mode`` and write an activation store at ``path``.

    data
        A tensor or numpy array of inputs (``labels`` given separately), a tuple ``(inputs,
        labels)``, a pandas DataFrame of features, a torch ``Dataset`` (items ``x``, ``(x, y)`` or
        dicts), an ``IterableDataset``, or a ``DataLoader`` (which must not shuffle). Dict items
        take their label from ``label_key`` (default: label, labels, target, targets or y) and their
        input from ``input_key`` (default: the other keys, passed to the model by name).
    layers
        Graph node names or module paths (see ``extract_graph(model, x).layer_names()``); default:
        the outputs of the top-level blocks and the logits (for a model fx cannot trace, those
        that every batch runs: see the README on data-dependent branches). An unknown name raises
        `UnknownLayerError` with the valid names and the closest matches.
    labels, metadata, class_names
        Per-instance labels (ints, or strings named in ``class_names``), a DataFrame or dict of
        columns aligned with the instances, and the class names (default: the dataset's
        ``classes``, else "0", "1", ...).
    dtype
        ``"float16"`` (default) or ``"float32"``. Values too large for float16 are saturated and
        counted, NaN and Inf are kept and counted: see ``store.nonfinite`` and the
        `NonFiniteWarning` at the end.
    channel_reduction, sequence_reduction, reduce, layout
        What a neuron is. A feature map's channel is its ``mean`` over positions (or ``max``); a
        sequence's feature is its ``mean`` over steps (or ``max``, ``first``, ``last``); ``none``
        keeps every element as a unit. ``reduce`` overrides per layer; ``layout`` says whether a
        3-D output is ``"channels"`` (N, C, L) or a ``"sequence"`` (N, T, F) where the producing
        module does not tell (1-d convolutions, norms and pools are channels).
    sequence_mask
        Which steps of a padded sequence are real (1 or True) and which are padding (0): a sequence
        layer, or a 1-d feature map (N, C, T), with as many steps as the mask is reduced over its
        real steps only (``first`` and ``last`` are the first and last real step, for left or right
        padding). Default: the ``attention_mask`` of a dict input or batch; else the name of the key
        that holds it, an (N, T) array aligned with the instances, or ``False`` to reduce over every
        step, padding included. A row with no real step is a `CaptureError` naming it.
    select, output_element
        For a layer (``select={"lstm": 0}``) or the model (``output_element="logits"``) that
        returns a tuple or dict: the index or key (a tuple for nested ones) of the tensor to keep.
    output_kind
        ``"logits"``, ``"probabilities"``, ``"log_probabilities"`` or ``"auto"`` (decided on the
        first instances). A single output column is a binary classifier.
    keep_inputs
        Keep the raw inputs (flattened) for thumbnails: ``"auto"`` keeps inputs of at most
        1,024 values per instance.
    batch_size, device, num_workers, progress
        Instances per forward pass (default 256, or the DataLoader's); where to run (default: where
        the model is; it is moved back afterwards, and its train/eval modes restored); DataLoader
        workers for a Dataset; a tqdm progress bar with instances per second.
    resume, overwrite, durable
        Batches are committed as they are written (small quick ones a few at a time, at most 4 MB or
        0.1 s of computing per commit), so a capture killed at any moment leaves a store that opens
        with every committed instance. ``resume`` continues such a store (the result equals an
        uninterrupted capture bit for bit); ``overwrite`` replaces a store; ``durable`` also syncs
        every commit to disk, so that a power cut, not only a killed process, loses nothing.
    checkpoint
        The training step this capture is for. A new store gets a checkpoint axis; a store at ``path``
        gets this checkpoint added: the model as it is now, over the same instances (labels, metadata
        and inputs are stored once), with the same layers and options (another instance set, layer or
        batch size is a `CaptureError`; so is a step already there, and no file changes). The store
        then reads its latest complete checkpoint, ``store.at(step)`` any other, and ``resume=True``
        continues a checkpoint that a kill or Ctrl-C left unfinished. A store captured without one holds
        step 0.
    distributed
        Under ``torchrun`` with ``torch.distributed`` initialised, each rank captures its own shard
        of the rows into the same store (default: whenever a process group is initialised).

    Returns the opened store. Ctrl-C raises `CaptureInterrupted` once the batches in flight are
    committed.
    """
    if not isinstance(model, nn.Module):
        raise CaptureError(f"capture needs a torch.nn.Module as its model, not {type(model).__name__}.")
    options = _Options({k: v for k, v in locals().items() if k not in ("model", "data", "path", "distributed")})
    group = _Group.of(distributed)
    session = _Session(model, data, pathlib.Path(path), options, group)
    return session.run()
