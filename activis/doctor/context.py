"""What the before-training checks examine: a sample of the data, the graph, and recorded passes.

The data may be ``(X, y)`` or ``(X, y, sample_weight)`` (tensors or arrays), a torch ``Dataset``
or a ``DataLoader``; a sample of at most ``max_samples`` rows is drawn once. Every forward pass a
check needs is recorded node by node (the torch.fx graph when the model traces, forward hooks on
the leaf modules otherwise) and cached, so two checks never pay for the same pass twice.
"""

from __future__ import annotations

import contextlib
import copy
import time
import warnings
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from ..graph import ComputationGraph, GraphTraceWarning, call_arguments, extract_graph
from . import inputs
from .findings import DoctorError

_ORDER_LIMIT = 20_000  # rows kept in order for the data checks (hashing, order)
_DATA_FORMS = ("(X, y)", "(X, y, sample_weight)", "a torch Dataset or list of (x, y) pairs or of dict items "
               "(input_ids, attention_mask, labels)", "a DataLoader yielding (x, y) or dict batches")


def _tensor(value, name: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach()
    arr = np.asarray(value)
    if arr.dtype == object:
        raise DoctorError(f"{name} must be numeric (a tensor or array), not an array of objects")
    if arr.dtype.kind == "f":
        return torch.as_tensor(arr, dtype=torch.float32)
    if arr.dtype.kind in "iub":
        return torch.as_tensor(arr.astype(np.int64))
    raise DoctorError(f"{name} must be numeric, not {arr.dtype}")


class Data:
    """The data as given (``order_X``, ``order_Y``: in the order training would see it, at most
    ``_ORDER_LIMIT`` rows) and a random sample of it (``X``, ``Y``, ``W``) for the checks that run the model.
    Inputs are a tensor or a dict of tensors (see `inputs`). For a DataLoader, ``batches`` holds the
    (labels, weights) of the batches seen, in loader order."""

    def __init__(self, data, max_samples: int, seed: int):
        self.loader = None
        self.batches: list[tuple[torch.Tensor, torch.Tensor | None]] = []
        if isinstance(data, torch.utils.data.DataLoader):
            self.loader = data
            X, Y, W = self._from_loader(data, max(max_samples, _ORDER_LIMIT // 5))
        elif isinstance(data, Mapping):  # columns: a tokenizer's output with its labels
            X, Y, W = inputs.split(data, _tensor)
        elif isinstance(data, tuple | list) and data and all(isinstance(d, Mapping) for d in data[:3]):  # dict items
            X, Y, W = _items(data[:_ORDER_LIMIT])
        elif isinstance(data, tuple | list) and len(data) in (2, 3):
            X, Y, W = inputs.split(data, _tensor)
        elif isinstance(data, torch.utils.data.Dataset) and hasattr(data, "__len__"):
            n = len(data)
            idx = torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:min(n, max_samples)]
            X, Y, W = _items([data[int(i)] for i in idx.sort().values])
        else:
            raise DoctorError(f"data must be one of {', '.join(_DATA_FORMS)}; got {type(data).__name__}")
        self.order_X = inputs.take(X, slice(0, _ORDER_LIMIT))
        self.order_Y, self.order_W = Y[:_ORDER_LIMIT], W[:_ORDER_LIMIT] if W is not None else None
        if inputs.count(self.order_X) != len(self.order_Y):
            raise DoctorError(f"X has {inputs.count(self.order_X)} rows but y has {len(self.order_Y)}")
        if len(self.order_Y) < 2:
            raise DoctorError("the doctor needs at least 2 samples")
        pick = torch.randperm(len(self.order_Y), generator=torch.Generator().manual_seed(seed))[:max_samples]
        self.X, self.Y = inputs.take(self.order_X, pick), self.order_Y[pick]
        self.W = self.order_W[pick] if self.order_W is not None else None

    def _from_loader(self, loader, max_samples: int):
        collected = []
        seen = 0
        for batch in loader:
            x, y, w = inputs.split(batch, lambda v, _name: torch.as_tensor(v).detach())
            collected.append((x, y, w))
            self.batches.append((y, w))
            seen += len(y)
            if seen >= max_samples or len(self.batches) >= 64:
                break
        if not collected:
            raise DoctorError("the DataLoader yielded no batch")
        weights = [w for _, _, w in collected]
        return (inputs.concat([x for x, _, _ in collected]), torch.cat([y for _, y, _ in collected]),
                torch.cat(weights) if all(w is not None for w in weights) else None)

    @property
    def classification(self) -> bool:
        """Integer targets (class indices)."""
        return not self.Y.dtype.is_floating_point

    def take(self, n: int, start: int = 0):
        return inputs.first(self.X, n, start), self.Y[start:start + n]


def _items(items: list):
    """(X, Y, W) of a list of items: ``(x, y[, w])`` tuples or dicts with a label key, stacked."""
    if not items:
        raise DoctorError("the data holds no sample")
    split = [inputs.split(it, lambda v, _name: torch.as_tensor(v)) for it in items]
    weights = [w for _, _, w in split]
    return (inputs.concat([x for x, _, _ in split], stack=True), torch.stack([y for _, y, _ in split]),
            torch.stack(weights) if all(w is not None for w in weights) else None)


class CheckContext:
    """Everything a check reads, computed lazily and once."""

    def __init__(self, model: nn.Module, data: Data, loss_fn, optimizer, test_data, *, batch_size: int,
                 seed: int, steps: int, train_seconds: float = 20.0, scheduler=None):
        self.model, self.data, self.loss_fn, self.optimizer = model, data, loss_fn, optimizer
        self.scheduler = scheduler
        self.test_data = test_data
        self.batch_size = min(batch_size, len(data.Y))
        self.seed, self.steps = seed, steps
        self.train_seconds = train_seconds  # wall-time bound of one training run of a copy
        self.out_of_time: set = set()  # the training runs stopped by that bound
        self.x, self.y = data.take(self.batch_size)
        self._cache: dict = {}

    # ------------------------------------------------------------------ the graph and its places
    @property
    def graph(self) -> ComputationGraph:
        if "graph" not in self._cache:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", GraphTraceWarning)
                self._cache["graph"] = extract_graph(self.model, inputs.first(self.x, 2))
        return self._cache["graph"]

    def node_of_module(self, path: str) -> str:
        """The graph node of a module's (first) call, or the module path when it was never called."""
        for n in self.graph.nodes:
            if n.op == "call_module" and n.target == path:
                return n.name
        inner = self.graph.nodes_of_module(path) if path in self.graph.modules else []
        return inner[0].name if inner and path else path

    def node_of_param(self, name: str) -> str:
        for n in self.graph.nodes:
            if n.op == "get_attr" and n.target == name:
                return n.name
        return self.node_of_module(name.rsplit(".", 1)[0] if "." in name else "")

    def input_node(self) -> str | None:
        placeholders = [n.name for n in self.graph.nodes if n.op == "placeholder"]
        return placeholders[0] if placeholders else None

    def output_node(self) -> str | None:
        out = self.graph.output_node
        return out.name if out is not None else None

    # ------------------------------------------------------------------ recorded passes
    def record(self, x, *, train: bool = False, seed: int | None = None) -> dict[str, torch.Tensor]:
        """Every node's output tensor for input ``x`` (no gradient), keyed by graph node name."""
        key = ("record", id(x), train, seed)
        if key not in self._cache:
            with _mode(self.model, train), torch.no_grad():
                if seed is not None:
                    torch.manual_seed(seed)
                self._cache[key] = (x, record_nodes(self.model, self.graph, x))
        return self._cache[key][1]

    def output(self, x=None, *, train: bool = False) -> torch.Tensor:
        x = self.x if x is None else x
        with _mode(self.model, train), torch.no_grad():
            return first_tensor(inputs.call(self.model, x))

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.loss_fn(out, y)

    def one_backward(self):
        """(loss, {parameter name: grad or None}) of one backward pass on the batch, the model untouched."""
        if "backward" not in self._cache:
            saved = {n: p.grad for n, p in self.model.named_parameters()}
            try:
                for p in self.model.parameters():
                    p.grad = None
                with _mode(self.model, True):
                    torch.manual_seed(self.seed)
                    loss = self.loss(first_tensor(inputs.call(self.model, self.x)), self.y)
                    if loss.requires_grad:
                        loss.backward()
                grads = {n: (None if p.grad is None else p.grad.detach().clone())
                         for n, p in self.model.named_parameters() if p.requires_grad}
                self._cache["backward"] = (loss.detach(), grads)
            finally:
                for n, p in self.model.named_parameters():
                    p.grad = saved[n]
        return self._cache["backward"]

    def gradient_records(self) -> tuple[dict, dict]:
        """(values, gradients) of every node for one backward pass on the batch, in eval mode."""
        if "gradient_records" not in self._cache:
            values = {}
            with _mode(self.model, False):
                values = record_nodes(self.model, self.graph, self.x, keep_grad=True)
                out = values.get(self.output_node()) if self.output_node() else None
                if out is None:
                    out = first_tensor(inputs.call(self.model, self.x))
                loss = self.loss(out, self.y)
                tensors = [v for v in values.values() if v.requires_grad]
                grads = torch.autograd.grad(loss, tensors, allow_unused=True) if loss.requires_grad else []
            by_id = {id(t): g for t, g in zip(tensors, grads)}
            self._cache["gradient_records"] = (
                {k: v.detach() for k, v in values.items()},
                {k: by_id[id(v)].detach() for k, v in values.items() if by_id.get(id(v)) is not None})
        return self._cache["gradient_records"]

    def trained_copy(self, x, y, steps: int, *, lr: float = 3e-3, stop_below=None, held=None):
        """A copy of the model trained on (x, y) with Adam (dropout off): the copy, its losses and, with
        ``held=(x, y)``, the loss on those held-out samples every 5 steps.

        ``stop_below(first_loss)`` gives a loss at which training may stop early."""
        key = ("train", id(x), id(y), steps)
        if key not in self._cache:
            model = copy.deepcopy(self.model)
            model.train()
            for m in model.modules():
                if isinstance(m, nn.modules.dropout._DropoutNd):
                    m.eval()
            params = [p for p in model.parameters() if p.requires_grad]
            torch.manual_seed(self.seed)
            opt = torch.optim.Adam(params, lr=lr)
            losses, held_losses = [], []
            start = time.perf_counter()
            for step in range(steps):
                spent = time.perf_counter() - start
                # stop at the bound, or as soon as the first steps show the run cannot finish within it (a run
                # cut short is skipped, not judged: better not to spend the time at all)
                if spent > self.train_seconds or (step == 5 and stop_below is None
                                                  and spent / 5 * steps > self.train_seconds):
                    self.out_of_time.add(key)
                    break
                if held is not None and step % 5 == 0:
                    with torch.no_grad():
                        held_losses.append(float(self.loss(first_tensor(inputs.call(model, held[0])), held[1])))
                opt.zero_grad(set_to_none=True)
                loss = self.loss(first_tensor(inputs.call(model, x)), y)
                value = float(loss.detach())
                losses.append(value)
                if not np.isfinite(value) or not loss.requires_grad:
                    break
                if stop_below is not None and value <= stop_below(losses[0]):
                    break
                loss.backward()
                opt.step()
            model.eval()
            self._cache[key] = (model, losses, held_losses, x, y)
        return self._cache[key][:3] if held is not None else self._cache[key][:2]


@contextlib.contextmanager
def _mode(model: nn.Module, train: bool):
    modes = {m: m.training for m in model.modules()}
    model.train(train)
    try:
        yield
    finally:
        for m, mode in modes.items():
            m.training = mode


_OUTPUT_KEYS = ("logits", "logit", "output", "out", "prediction", "predictions", "y_hat", "scores")


def first_tensor(value):
    """The tensor a model's return value is judged on: itself, its ``logits`` (a dict or ModelOutput: the
    loss or hidden states it may also carry are not the prediction), or the first tensor of a tuple."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, dict) or hasattr(value, "logits"):
        get = value.get if isinstance(value, dict) else lambda k: getattr(value, k, None)
        for key in _OUTPUT_KEYS:
            if isinstance(get(key), torch.Tensor):
                return get(key)
        if isinstance(value, dict):
            tensors = [v for v in value.values() if isinstance(v, torch.Tensor)]
            if len(tensors) == 1:
                return tensors[0]
            raise DoctorError(f"the model returned a dict with keys {list(value)[:8]} and no 'logits': the doctor "
                              "cannot tell which is the prediction; return the logits, or name them 'logits'")
    if isinstance(value, tuple | list) and value:
        return first_tensor(value[0])
    raise DoctorError(f"the model returned {type(value).__name__}; the doctor needs a tensor output")


def record_nodes(model: nn.Module, graph: ComputationGraph, x, keep_grad: bool = False) -> dict[str, torch.Tensor]:
    """Run the model once on ``x`` (a tensor, or a dict of inputs by name) and keep every graph node's tensor
    output (leaf modules' for a hook graph)."""
    values: dict[str, torch.Tensor] = {}
    if getattr(graph, "graph_module", None) is not None:  # the fx graph: every node, functional ones too
        class Recorder(torch.fx.Interpreter):
            def run_node(self, n):
                result = super().run_node(n)
                if isinstance(result, torch.Tensor):
                    values[n.name] = result
                return result

        args, kwargs = call_arguments(model, x)
        args = (*args, *kwargs.values())  # the graph's placeholders, in the order it was traced with
        with torch.enable_grad() if keep_grad else contextlib.nullcontext():
            Recorder(graph.graph_module).run(*args)
        for n in graph.nodes:  # placeholders that need a gradient are leaves: keep them as they are
            if n.op == "placeholder" and n.name not in values:
                values[n.name] = args[0]
        return values
    names: dict[str, list[str]] = {}
    for n in graph.nodes:
        if n.op == "call_module":
            names.setdefault(n.target, []).append(n.name)
    calls: dict[str, int] = {}
    handles = []

    def hook_for(path):
        def hook(_m, _inputs, output):
            i = calls.get(path, 0)
            calls[path] = i + 1
            out = output if isinstance(output, torch.Tensor) else None
            if out is None and isinstance(output, tuple | list) and output and isinstance(output[0], torch.Tensor):
                out = output[0]
            if out is not None and i < len(names.get(path, [])):
                values[names[path][i]] = out
        return hook

    for path, mod in model.named_modules():
        if path in names:
            handles.append(mod.register_forward_hook(hook_for(path)))
    try:
        with torch.enable_grad() if keep_grad else contextlib.nullcontext():
            out = first_tensor(inputs.call(model, x))
    finally:
        for h in handles:
            h.remove()
    placeholders = [n.name for n in graph.nodes if n.op == "placeholder"]
    if placeholders:
        values[placeholders[0]] = inputs.main(x)
    outs = [n for n in graph.nodes if n.op == "output"]
    if outs:
        values[outs[0].name] = out
    return values


def same_rows(value: torch.Tensor, batch: int, rtol: float = 1e-5) -> bool | None:
    """Whether every sample's row of ``value`` equals the first's (None: no batch dimension)."""
    if value.dim() == 0 or value.shape[0] != batch or not value.dtype.is_floating_point:
        return None
    flat = value.reshape(batch, -1)
    scale = float(flat.abs().max()) if flat.numel() else 0.0
    return bool((flat - flat[:1]).abs().max() <= rtol * scale + 1e-12)
