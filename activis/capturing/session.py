"""One call of `capture`: prepares the model and the store, runs the batches, reports.

The session holds the state of one capture from start to end and reads as its steps; what those
steps decide lives beside it: whether a store may be resumed in `resume`, the digests it compares
in `fingerprint`, the model's class scores in `outputs`, the progress bar and the non-finite warning in
`report`.
"""

from __future__ import annotations

import pathlib
import time
import warnings
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from ..graph import ModelInputError, call_arguments, extract_graph
from ..store import ActivationStore, StoreError, StoreWriter, finish_shards, open_store, shard_ranges
from ..store.checkpoints import add_checkpoint, drop_checkpoint
from ..store.writer import InstancesDifferError, checked_metadata
from . import pipeline as staging
from .fingerprint import _crc, _model_digests
from .group import _Group
from .layers import _Current, _fx_runner, _hook, _LayerPlan, _resolve, _Tap
from .masks import _MaskSource, _Steps
from .options import CaptureError, CaptureInterrupted, _Options
from .outputs import _class_scores, _detect_kind
from .pipeline import SLOTS, _Pipeline, _Slot
from .report import _progress_bar, _warn_nonfinite
from .resume import _batch_size, _check_resumable, _check_same_data, _existing_store
from .sources import _as_tensor, _batch_len, _label_rows, _make_source, _split_batch

AUTO_KEEP_INPUTS = 1024  # values per instance: a 32x32 image or a tabular row, not a photo
PROBE_ROWS = 8


class _Session:
    """One call of `capture`: prepares the model and the store, runs the batches, reports.

The session holds the state of one capture from start to end and reads as its steps; what those
steps decide lives beside it: whether a store may be resumed in `resume`, the digests it compares
in `fingerprint`, the model's class scores in `outputs`, the progress bar and the non-finite warning in
`report`.
"""

    def __init__(self, model: nn.Module, data, path: pathlib.Path, opts: _Options, group: _Group):
        self.model = model
        self.data = data
        self.path = path
        self.opts = opts
        self.group = group
        self.hooks: list = []
        self.restore = None
        self.writer: StoreWriter | None = None
        self.finished: ActivationStore | None = None  # the store as the writer's finish opened it (unsharded)

    # ------------------------------------------------------------------ run
    def run(self) -> ActivationStore:
        group = self.group
        first, others = group.rank == 0, group.rank != 0
        try:
            existing, self.adding = group.step(lambda: _existing_store(self.path, self.opts))
            if existing is not None and not self.adding and existing.manifest.get("finished"):
                return existing
            group.step(lambda: self._prepare(existing))
            group.step(lambda: first and self._create_or_join())  # rank 0 lays the store out,
            group.step(lambda: others and self._create_or_join())  # then the others join it
            try:
                group.step(self._write_all)
                group.step(self._finish_own)
            except InstancesDifferError as exc:
                self._refuse_checkpoint(str(exc))
            if group.world_size > 1:
                group.step(lambda: first and finish_shards(self.path, self.step))
        finally:
            if self.writer is not None:
                self.writer.close()
            self._restore_model()
        store = self.finished if self.finished is not None else open_store(self.path)
        _warn_nonfinite(store)
        return store

    # -------------------------------------------------------------- prepare
    def _prepare(self, existing: ActivationStore | None) -> None:
        opts = self.opts
        self.existing = existing
        # the checkpoint written: the one asked for, else the one resumed (None: a store without checkpoints)
        self.step = opts.checkpoint if opts.checkpoint is not None or existing is None else \
            (existing.manifest.get("checkpoint") or {}).get("step")
        self.source = _make_source(self.data, opts)
        n = self.source.n
        if self.group.world_size > 1 and n is None:
            raise CaptureError("A distributed capture needs data of known length to split it between ranks.")
        if n == 0:
            raise CaptureError("The data holds no instances.")
        self.batch_size = _batch_size(opts.batch_size, getattr(self.source, "batch_size", None), existing)
        self.lo, self.hi = (0, n) if self.group.world_size == 1 else shard_ranges(n, self.group.world_size)[
            self.group.rank]
        names = opts.class_names or self.source.classes
        self.class_index = {str(c): i for i, c in enumerate(names)} if names is not None else None
        self.labels = _label_rows(opts.labels, self.class_index) if opts.labels is not None else None
        if self.labels is not None and n is not None and len(self.labels) != n:
            raise CaptureError(f"{len(self.labels)} labels for {n} instances.")
        self.metadata = None
        if opts.metadata is not None and self.group.rank == 0 and existing is None:
            try:  # the store's own checks, before any work (the writer warns of renamed columns)
                self.metadata = checked_metadata(opts.metadata, n, warn=False)
            except StoreError as exc:
                raise CaptureError(str(exc)) from None
        self.mask = _MaskSource(opts.sequence_mask, n)
        self._prepare_model()
        first = next(iter(self.source.batches(0, min(PROBE_ROWS, n) if n else PROBE_ROWS, PROBE_ROWS)), None)
        if first is None:
            raise CaptureError("The data holds no instances.")
        x, _ = self._unpack(first)
        self.mask.resolve(x, first)
        example = self._to_device(x)
        args, _ = self._arguments(example)  # a dict is bound by name inside, as here
        self.graph = extract_graph(self.model, example if isinstance(example, Mapping) else args)
        self._build_taps(existing)
        self._probe(example, x, self.mask.steps(x, first, 0, _batch_len(x), self.device))

    def _prepare_model(self) -> None:
        model = self.model
        params = list(model.parameters()) + list(model.buffers())
        current = params[0].device if params else torch.device("cpu")
        if self.opts.device is not None and len({p.device for p in params}) > 1:
            raise CaptureError("The model is spread over several devices; capture runs it where it is, so leave "
                               "device= out (inputs go to the device of its first parameter).")
        self.device = torch.device(self.opts.device) if self.opts.device is not None else current
        modes = {m: m.training for m in model.modules()}
        moved = any(p.device != self.device for p in params)
        if moved:
            model.to(self.device)
        self.float_dtype = next((p.dtype for p in params if p.is_floating_point()), torch.float32)

        def restore():
            for module, training in modes.items():
                module.training = training
            if moved:
                model.to(current)

        self.restore = restore
        model.eval()

    def _restore_model(self) -> None:
        for handle in self.hooks:
            handle.remove()
        self.hooks = []
        if self.restore is not None:
            self.restore()
            self.restore = None

    def _unpack(self, batch):
        return _split_batch(batch, self.opts.input_key, self.opts.label_key)

    def _to_device(self, x):
        if isinstance(x, torch.Tensor):
            x = x.to(self.device, non_blocking=True)
            return x.to(self.float_dtype) if x.is_floating_point() and x.dtype != self.float_dtype else x
        if isinstance(x, Mapping):
            return {k: self._to_device(v) for k, v in x.items()}
        if isinstance(x, (tuple, list)):
            return type(x)(self._to_device(v) for v in x)
        return self._to_device(_as_tensor(x))

    def _arguments(self, x) -> tuple[tuple, dict]:
        """The model's (positional, keyword) arguments for one input (a dict is bound by parameter name)."""
        if isinstance(x, Mapping):
            try:
                return call_arguments(self.model, x)
            except ModelInputError as exc:
                raise CaptureError(f"{exc} Name the input with input_key=.") from None
        return (tuple(x) if isinstance(x, (tuple, list)) else (x,)), {}

    # ----------------------------------------------------------------- taps
    def _build_taps(self, existing: ActivationStore | None) -> None:
        graph = self.graph
        names = self.opts.layers
        if names is None:
            names = existing.layers if existing is not None else self._default_layers()
            if not names:
                raise CaptureError(f"{graph.model_type} has no layer that can be captured by default; name them "
                                   f"with layers=[...] (valid: {', '.join(graph.layer_names())}).")
        points = [_resolve(graph, name) for name in names]
        for key, option in ((self.opts.select, "select"), (self.opts.reduce, "reduce"), (self.opts.layout, "layout")):
            unknown = [k for k in key if k not in names]
            if unknown:
                raise CaptureError(f"{option} names {unknown}, which are not among the captured layers {names}.")
        self.current = _Current()
        self.plans = {p.name: _LayerPlan(p, self.opts) for p in points}
        taps = {name: _Tap(plan, self.current) for name, plan in self.plans.items()}
        fx_points = [p for p in points if p.fx]
        self.runner = _fx_runner(graph, [(p.node, taps[p.name]) for p in fx_points]) if fx_points else self.model
        for p in points:
            if not p.fx:
                self.hooks.append(_hook(self.model.get_submodule(p.module), taps[p.name], p.call))

    def _default_layers(self) -> list[str]:
        """The graph's defaults, plus the layers named in ``select`` (enough to add an LSTM)."""
        graph = self.graph
        names = graph.default_layers()
        if graph.method == "hooks":
            names = self._run_by_every_batch(names)
        names += [name for name in self.opts.select if name not in names]
        left_out = [path for path in graph.tuple_blocks() if path not in names]
        if left_out:
            warnings.warn(f"Layers {left_out} return a tuple or a dict and are not captured by default; add them "
                          f"with select={{{left_out[0]!r}: 0}} (the index or key of the tensor to keep).",
                          UserWarning, stacklevel=8)
        return names

    def _run_by_every_batch(self, names: list[str]) -> list[str]:
        """The defaults of a hooks graph that the model runs on every batch of the data.

        A graph recorded with hooks saw one forward pass: behind data-dependent control flow
        (``if x.sum() > 0:``), a module that ran there may not run on another batch. One pass over
        the data with a hook on each default (no activations kept) leaves out those some batch
        skips, and says which, so that a default capture never stops on the first batch that
        takes the other branch.
        """
        graph = self.graph
        modules = {name: self.model.get_submodule(name) for name in names if name in graph.modules and name}
        ran: set[str] = set()
        handles = [module.register_forward_hook(lambda *_, name=name: ran.add(name))
                   for name, module in modules.items()]
        skipped: dict[str, str] = {}
        bar = _progress_bar(self.opts.progress, self.source.n, 0, self.group, "checking branches")
        row = 0
        try:
            with torch.inference_mode():
                for batch in self.source.batches(0, self.source.n, self.batch_size):
                    x, _ = self._unpack(batch)
                    n = _batch_len(x)
                    ran.clear()
                    args, kwargs = self._arguments(self._to_device(x))
                    self.model(*args, **kwargs)
                    for name in modules:
                        if name not in ran and name not in skipped:
                            skipped[name] = f"rows {row}-{row + n - 1}"
                    row += n
                    bar.update(n)
                    if len(skipped) == len(modules):
                        break
        finally:
            bar.close()
            for handle in handles:
                handle.remove()
        if skipped:
            where = "; ".join(f"{name!r} on {rows}" for name, rows in skipped.items())
            warnings.warn(f"Layers {list(skipped)} are left out of the default layers: the model's control flow "
                          f"skipped them ({where}), and a layer must have a value for every instance. Choose layers "
                          "with layers=[...] that every batch runs.", UserWarning, stacklevel=9)
        return [name for name in names if name not in skipped]

    def _forward(self, x, slot: _Slot, steps: _Steps | None, rows: str):
        """Run one batch (``slot.begin`` was called) with the taps writing into ``slot`` and reducing its
        sequences over the real ``steps``; ``rows`` names it."""
        self.current.slot = slot
        self.current.steps = steps
        for handle in self.hooks:
            handle.calls[0] = 0
        args, kwargs = self._arguments(x)
        out = self.runner(*args, **kwargs)
        missing = [name for name in self.plans if name not in slot.filled]
        if missing:
            raise CaptureError(f"Layers {missing} did not run on {rows}: the model's control flow skipped them, "
                               "and a layer must have a value for every instance. Capture layers that every batch "
                               "runs (the default layers are checked to be such).")
        return out

    # ---------------------------------------------------------------- probe
    def _probe(self, example, x_cpu, steps: _Steps | None) -> None:
        """Run the first instances once: fixes the layer specs and checks the fx copy against the model."""
        n = _batch_len(example)
        slot = _Slot(n)
        slot.begin(n)
        with torch.inference_mode():
            out = self._forward(example, slot, steps, f"the first {n} instances")
            logits = _class_scores(out, self.opts.output_element)
            if self.runner is not self.model:
                args, kwargs = self._arguments(example)
                reference = _class_scores(self.model(*args, **kwargs), self.opts.output_element)
                if not torch.allclose(logits.float(), reference.float(), rtol=1e-4, atol=1e-5, equal_nan=True):
                    raise CaptureError(f"The torch.fx trace of {type(self.model).__name__} does not reproduce its "
                                       "output (the trace fixed a branch the model takes differently); capture "
                                       "module paths of a model that fx cannot trace, or make the branch traceable.")
        self.n_outputs = int(logits.shape[1])
        kind = self.opts.output_kind
        self.output_kind = _detect_kind(logits.float().cpu().numpy()) if kind == "auto" else kind
        self.specs = {name: plan.spec for name, plan in self.plans.items()}
        self._settle_mask()
        classes = 2 if self.n_outputs == 1 else self.n_outputs
        names = self.opts.class_names or self.source.classes
        if names is not None and len(names) != classes:
            raise CaptureError(f"{len(names)} class names for a model with {classes} classes.")
        self.class_names = [str(c) for c in names] if names is not None else [str(i) for i in range(classes)]
        if self.labels is not None and ((self.labels < -1) | (self.labels >= classes)).any():
            bad = self.labels[(self.labels < -1) | (self.labels >= classes)][0]
            raise CaptureError(f"Label {bad} is outside the model's {classes} classes (use -1 for unknown).")
        keep = self.opts.keep_inputs
        single = isinstance(x_cpu, torch.Tensor)
        if keep is True and not single:
            raise CaptureError("keep_inputs=True needs one input tensor per batch; this data has several.")
        per_instance = int(np.prod(x_cpu.shape[1:], dtype=np.int64)) if single else 0
        self.keep_inputs = single and (keep is True or (keep == "auto" and per_instance <= AUTO_KEEP_INPUTS))
        self.input_shape = [int(s) for s in x_cpu.shape[1:]] if self.keep_inputs else None
        self.input_dtype = _input_dtype(x_cpu.dtype) if self.keep_inputs else None
        self.model_digests = _model_digests(self.model)
        if self.existing is not None:
            _check_resumable(self.existing, self.path, specs=self.specs, mask_info=self.mask_info, n=self.source.n,
                             model_digests=None if self.adding else self.model_digests, n_outputs=self.n_outputs,
                             output_kind=self.output_kind, input_shape=self.input_shape,
                             adding=self.opts.checkpoint if self.adding else None)

    def _settle_mask(self) -> None:
        """Record which layers the padding mask applies to; warn once of the sequence layers it cannot."""
        masked = [name for name, plan in self.plans.items() if plan.masked]
        other = [name for name, plan in self.plans.items() if plan.masked is False]
        self.mask_info = None if self.mask.name is None else {"from": self.mask.name, "layers": masked}
        if other:
            steps = self.current.steps.length
            warnings.warn(f"Layers {other} have another number of steps than the padding mask ({steps}): they are "
                          "reduced over all their steps, padding included (a pooled or strided sequence has no "
                          "mask). Capture them with reduce={layer: 'none'} to keep every step.", UserWarning,
                          stacklevel=8)

    # ---------------------------------------------------------------- write
    def _create_or_join(self) -> None:
        opts = self.opts
        rank = self.group.rank if self.group.world_size > 1 else None
        info = {"batch_size": self.batch_size, "dtype": opts.dtype, "device": str(self.device),
                "model_type": type(self.model).__name__, "graph_method": self.graph.method,
                "model_digests": self.model_digests, "sequence_mask": self.mask_info,
                "world_size": self.group.world_size}
        if self.adding and rank in (None, 0):
            add_checkpoint(self.path, opts.checkpoint, capture_info=info, durable=opts.durable)
        if self.existing is not None or rank not in (None, 0):
            self.writer = StoreWriter.resume(self.path, rank=rank, durable=opts.durable, step=self.step)
            self.data_digest = self._digest_of_written()
            return
        self.data_digest = 0
        self.writer = StoreWriter(self.path, layers=self.specs, n_outputs=self.n_outputs,
                                  class_names=self.class_names, n_expected=self.source.n, metadata=self.metadata,
                                  graph=self.graph, input_shape=self.input_shape, input_dtype=self.input_dtype,
                                  output_kind=self.output_kind, world_size=self.group.world_size,
                                  capture_info=info, overwrite=opts.overwrite, durable=opts.durable,
                                  checkpoint=opts.checkpoint)

    def _write_all(self) -> None:
        writer = self.writer
        start = self.lo + writer.complete
        self.digested = (start, self.data_digest)  # (rows up to, digest of them): see `_settle`
        total = None if self.hi is None else self.hi - self.lo
        row_bytes = sum(s.neurons * np.dtype(s.dtype).itemsize for s in self.specs.values()) + 4 * self.n_outputs
        capacity = self.batch_size * max(1, staging.BLOCK_BYTES // (self.batch_size * row_bytes))
        if self.hi is not None:  # no bigger than what there is to capture: fresh memory costs page faults
            capacity = min(capacity, -(-(self.hi - start) // self.batch_size) * self.batch_size)
        pipeline = _Pipeline([_Slot(capacity) for _ in range(SLOTS)])
        pipeline.start(writer, self._batch_of)
        self.started = time.perf_counter()
        bar = _progress_bar(self.opts.progress, total, writer.complete, self.group)
        row, slot = start, None
        try:
            with torch.inference_mode():
                for batch in self.source.batches(start, self.hi, self.batch_size):
                    x, y = self._unpack(batch)
                    n = _batch_len(x)
                    if slot is not None and slot.rows + n > slot.capacity:
                        full, slot = slot, None
                        pipeline.submit(full)
                    if slot is None:
                        slot = pipeline.acquire()
                        slot.clear()
                        deadline = time.perf_counter() + staging.BLOCK_SECONDS
                    slot.begin(n)
                    labels = self._fill(slot, x, y, row, self.mask.steps(x, batch, row, n, self.device))
                    self._digest(row + n, x, labels, self.mask.digest_part(x, batch, row, n))
                    slot.end()
                    row += n
                    bar.update(n)
                    if slot.rows == slot.capacity or time.perf_counter() > deadline:
                        full, slot = slot, None
                        pipeline.submit(full)
            if slot is not None and slot.rows:
                pipeline.submit(slot)
            pipeline.close()
        except KeyboardInterrupt:
            bar.close()
            self._settle(slot)
            self._drain(pipeline, slot)
            committed = writer.committed
            writer.close()
            where = f"rows {self.lo}-{self.hi} " if self.group.world_size > 1 else ""
            raise CaptureInterrupted(f"Capture interrupted: {committed:,} of {'?' if total is None else f'{total:,}'} "
                                     f"instances {where}are committed in {self.path}; capture(..., resume=True) "
                                     "continues from there.", self.path, committed) from None
        except BaseException as exc:
            bar.close()
            self._drain(pipeline, slot)
            writer.close()
            note = getattr(exc, "add_note", None)
            if note is not None and not isinstance(exc, OSError):
                note(f"activis: {writer.committed:,} instances are committed in {self.path}; "
                     "capture(..., resume=True) continues from there.")
            raise
        bar.close()
        self.elapsed = time.perf_counter() - self.started
        self.rows_written = pipeline.rows_written

    @staticmethod
    def _drain(pipeline: _Pipeline, slot: _Slot | None) -> None:
        """After an error: commit the whole batches computed before it, and wait for the writer."""
        try:
            if slot is not None and slot.rows:
                pipeline.submit(slot)
            pipeline.close()
        except BaseException:  # noqa: BLE001 - the error that stopped the capture is the one raised
            pass

    def _fill(self, slot: _Slot, x, y, row: int, steps: _Steps | None) -> None:
        """Run the batch of rows ``row``.. and put its activations, outputs, labels and inputs in ``slot``."""
        n = slot.n
        out = self._forward(self._to_device(x), slot, steps, f"rows {row}-{row + n - 1}")
        logits = _class_scores(out, self.opts.output_element)
        if logits.shape != (n, self.n_outputs):
            raise CaptureError(f"The model's output has shape {tuple(logits.shape)} for a batch of {n}; expected "
                               f"({n}, {self.n_outputs}).")
        torch.from_numpy(slot.target("<outputs>", self.n_outputs, np.float32)).copy_(logits)
        labels = slot.label[slot.start:slot.start + n]
        labels[:] = self._labels_of(y, row, n)
        if self.keep_inputs:
            flat = x.reshape(n, -1) if isinstance(x, torch.Tensor) else _as_tensor(x).reshape(n, -1)
            torch.from_numpy(slot.target("<inputs>", flat.shape[1], self.input_dtype)).copy_(flat)
        return labels

    def _labels_of(self, y, row: int, n: int) -> np.ndarray | int:
        if self.labels is not None:
            return self.labels[row:row + n]
        if y is None:
            return -1
        given = _label_rows(y, self.class_index)
        if len(given) != n:
            raise CaptureError(f"The data yielded {len(given)} labels for {n} instances.")
        return given

    # --------------------------------------------------------------- digest
    def _digest(self, end: int, x, labels, mask) -> None:
        """Fold one filled batch's inputs and labels (rows up to ``end``) into the digest the next commit records.

        A resumed capture recomputes it over the rows already written and refuses data that
        differs anywhere in them.
        """
        self.digested = (end, _crc(self.data_digest, x, labels, mask))  # one store: whole or not at all
        self.data_digest = self.digested[1]
        self.writer.data_digest = f"{self.data_digest:08x}"

    def _settle(self, slot: _Slot | None) -> None:
        """After an interrupt: the batch last filled and digested is kept, with its digest, so that the
        rows committed and the digest they record agree wherever Ctrl-C landed between the two."""
        end, digest = self.digested
        if slot is not None and self.lo + self.writer.complete + slot.rows < end:  # digested, not yet in the block
            slot.end()
        self.data_digest = digest
        self.writer.data_digest = f"{digest:08x}"

    def _digest_of_written(self):
        """The digest of the rows this store (shard) already holds, read again from the data given now."""
        digest = 0
        done = self.writer.complete
        if done == 0:
            return digest
        row = self.lo
        for batch in self.source.batches(self.lo, self.lo + done, self.batch_size):
            x, y = self._unpack(batch)
            n = _batch_len(x)
            labels = np.broadcast_to(self._labels_of(y, row, n), (n,))
            digest = _crc(digest, x, labels, self.mask.digest_part(x, batch, row, n))
            row += n
        _check_same_data(self.path, self.writer.data_digest, digest, done)
        return digest

    def _batch_of(self, slot: _Slot) -> dict:
        rows = slot.rows
        return {"activations": {name: slot.arrays[name][:rows] for name in self.plans},
                "checked": slot.checked(self.plans), "outputs": slot.arrays["<outputs>"][:rows],
                "label": slot.label[:rows], "inputs": slot.arrays["<inputs>"][:rows] if self.keep_inputs else None}

    # --------------------------------------------------------------- finish
    def _finish_own(self) -> None:
        """Sync and mark this process's rows finished (with this session's throughput, unsharded)."""
        writer = self.writer
        if self.adding and self.group.world_size == 1:
            recorded = self.existing.manifest.get("data_digest")
            if recorded is not None and recorded != writer.data_digest:
                raise InstancesDifferError(f"Checkpoint {self.opts.checkpoint} of {self.path} holds other instances "
                                           "than the store: the same labels, other inputs. Every checkpoint captures "
                                           "the same instances, in the same order.")
        if self.group.world_size == 1:
            rate = self.rows_written / self.elapsed if self.elapsed > 0 else None
            row_bytes = sum(s.neurons * np.dtype(s.dtype).itemsize for s in self.specs.values())
            writer.manifest["capture"].update({
                "last_session_s": round(self.elapsed, 3), "last_session_rows": self.rows_written,
                "instances_per_s": None if rate is None else round(rate, 1),
                "activation_mb_per_s": None if rate is None else round(rate * row_bytes / 1e6, 2)})
        self.finished = writer.finish()

    def _refuse_checkpoint(self, why: str) -> None:
        """A checkpoint turned out to hold other instances: a new one is dropped, the store is as it was."""
        if self.writer is not None:
            self.writer.close()
        if not self.adding:
            raise CaptureError(why) from None
        if self.group.rank == 0:
            drop_checkpoint(self.path, self.opts.checkpoint)
        raise CaptureError(why + " The checkpoint was not added.") from None


def _input_dtype(dtype: torch.dtype) -> str:
    if dtype.is_floating_point:
        return "<f4"
    if dtype in (torch.uint8, torch.bool):
        return "|u1"
    return "<i4"
