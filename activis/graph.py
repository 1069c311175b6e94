"""The model's computation graph: what layers exist, how data flows, what can be captured.

`extract_graph(model, example_input)` traces the model with ``torch.fx`` and annotates every node
with its output shape and dtype (shape propagation), operation kind, owning module and parameter
count. A model that ``torch.fx`` cannot trace (data-dependent control flow, for example) gets a
graph recorded with forward hooks while the model runs once on the example, with a warning that
says why: the user always gets a graph, never a crash.

The graph serialises to JSON (never pickle) so that a store can keep it and be opened elsewhere.
"""

from __future__ import annotations

import difflib
import inspect
import json
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

FORMAT_VERSION = 1
# modules that return their input unchanged in eval mode: a default capture would store it twice
NO_OP_MODULES = {"Identity", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"}


class GraphTraceWarning(UserWarning):
    """Issued when the exact ``torch.fx`` graph could not be had and a fallback was used."""


class GraphError(ValueError):
    """The graph's one error class: a model or input it cannot trace, or a graph file it cannot read."""


class ModelInputError(GraphError):
    """The example (or captured) input does not fit the model: names the layer and torch's own error."""


def input_error(model, args, where: str, exc: BaseException) -> ModelInputError:
    """A `ModelInputError` for ``exc``, raised by the model at layer ``where`` on ``args``."""
    given = ", ".join(_describe_value(a) for a in args)
    cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ModelInputError(f"{type(model).__name__} cannot run on the input ({given}): at {where}: {cause}. "
                           "Pass inputs of the shape and dtype the model expects (a batch first).")


def _describe_value(value) -> str:
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"shape {tuple(value.shape)} {str(value.dtype).replace('torch.', '')}"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k!r}: {_describe_value(v)}" for k, v in value.items()) + "}"
    return type(value).__name__


class GraphFormatError(GraphError):
    """A graph's JSON or dict is not one this activis can read: the message says what is wrong and what it expects."""


class UnknownLayerError(KeyError):
    """A layer name that is not in the graph or the store; the message lists valid names and close matches.

    The one error for this concept, wherever a layer is named (graph, capture, store, analysis, views).
    """

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


@dataclass
class GraphNode:
    """One operation of the model.

    ``module_path`` is the module whose ``forward`` produced this node ("" for the root model); for
    a ``call_module`` node it is the called module itself. ``shape`` includes the batch dimension
    of the example input. ``capturable`` marks nodes that output one floating tensor with a batch
    dimension, i.e. whose activations can be captured per instance.
    """

    name: str
    op: str
    target: str
    kind: str
    module_path: str
    inputs: list[str] = field(default_factory=list)
    shape: list[int] | None = None
    dtype: str | None = None
    num_params: int = 0
    capturable: bool = False


@dataclass
class ModuleInfo:
    """One submodule of the model, for the hierarchy a view collapses and expands."""

    path: str
    type: str
    num_params: int
    children: list[str] = field(default_factory=list)


@dataclass
class ComputationGraph:
    nodes: list[GraphNode]
    modules: dict[str, ModuleInfo]
    method: str  # "fx" or "hooks"
    note: str | None = None  # why the fallback was used, when it was
    model_type: str = ""
    graph_module: Any = field(default=None, repr=False, compare=False)  # fx GraphModule, not serialised

    # ----------------------------------------------------------------- lookup
    def __post_init__(self) -> None:
        self._by_name = {n.name: n for n in self.nodes}

    @property
    def edges(self) -> list[tuple[str, str]]:
        return [(src, n.name) for n in self.nodes for src in n.inputs]

    def node(self, name: str) -> GraphNode:
        try:
            return self._by_name[name]
        except (KeyError, TypeError):
            close = difflib.get_close_matches(str(name), list(self._by_name), n=5, cutoff=0.5)
            hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
            raise UnknownLayerError(f"No graph node named {name!r}.{hint} Nodes: "
                                    f"{', '.join(self._by_name)}.") from None

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    @property
    def capture_points(self) -> list[GraphNode]:
        return [n for n in self.nodes if n.capturable]

    @property
    def output_node(self) -> GraphNode | None:
        """The node whose value the model returns (its logits, for a classifier)."""
        outs = [n for n in self.nodes if n.op == "output"]
        if outs and outs[0].inputs:
            return self._by_name.get(outs[0].inputs[0])
        capturable = self.capture_points
        return capturable[-1] if capturable else None

    def nodes_of_module(self, path: str) -> list[GraphNode]:
        """Every node inside module ``path`` (recursively)."""
        if path == "":
            return list(self.nodes)
        prefix = path + "."
        return [n for n in self.nodes if n.module_path == path or n.module_path.startswith(prefix)]

    def resolve_layer(self, name: str) -> GraphNode:
        """Find a capturable node by graph node name or module path.

        A module path names the module's last capturable node (its output). An unknown name raises
        `UnknownLayerError` listing the valid names and the closest matches.
        """
        if name in self._by_name and self._by_name[name].capturable:
            return self._by_name[name]
        for n in reversed(self.nodes):  # a module called twice: its last call is its output
            if n.capturable and n.op == "call_module" and n.target == name:
                return n
        if name in self.modules:
            inner = [n for n in self.nodes_of_module(name) if n.capturable]
            if inner:
                return inner[-1]
        valid = self.layer_names()
        close = difflib.get_close_matches(str(name), valid, n=5, cutoff=0.5)
        hint = f" Closest: {', '.join(close)}." if close else ""
        raise UnknownLayerError(f"Unknown layer {name!r}.{hint} Valid layer names: {', '.join(valid)}.")

    def layer_names(self) -> list[str]:
        """Names accepted by `resolve_layer`: capturable node names and module paths."""
        names = [n.name for n in self.capture_points]
        names += [p for p in self.modules if p and p not in names]
        return names

    def default_layers(self) -> list[str]:
        """Outputs of the top-level blocks plus the model output: a sensible first capture.

        Named by module path, as the graph view shows them (``"0"`` of an ``nn.Sequential``, not
        its node ``"_0"``). A block that computes nothing in eval mode (Dropout, Identity) repeats
        the value before it and is left out; so is a block whose output is not one tensor (an LSTM's
        tuple: see `tuple_blocks`). A hooks graph saw one forward pass: behind a data-dependent
        branch, a block it lists may not run on other inputs, so `capture` keeps only the defaults
        that every batch of its data runs.
        """
        chosen: dict[str, str] = {}  # the node whose value is stored -> its name
        for path in self._top_level():
            inner = [n for n in self.nodes_of_module(path) if n.capturable]
            if inner:
                node = self._value_source(inner[-1])
                chosen.setdefault(node.name, path)
        out = self.output_node
        if out is not None and out.capturable:
            chosen.setdefault(self._value_source(out).name, out.target if out.op == "call_module" else out.name)
        return list(chosen.values())

    def tuple_blocks(self) -> list[str]:
        """Top-level blocks left out of the defaults because they return a tuple or a dict (RNNs)."""
        return [path for path in self._top_level() if self.nodes_of_module(path)
                and not any(n.capturable for n in self.nodes_of_module(path))
                and any(n.op == "call_module" and n.target == path and n.shape is None for n in self.nodes)]

    def _top_level(self) -> list[str]:
        return [p for p in self.modules if p and "." not in p]

    def _value_source(self, node: GraphNode) -> GraphNode:
        """The node whose value ``node`` repeats, through no-op modules (Dropout in eval mode, Identity)."""
        for _ in range(len(self.nodes)):
            module = self.modules.get(node.target if node.op == "call_module" else node.module_path)
            if module is None or module.type not in NO_OP_MODULES or len(node.inputs) != 1:
                return node
            parent = self._by_name.get(node.inputs[0])
            if parent is None or not parent.capturable:
                return node
            node = parent
        return node

    # ----------------------------------------------------------- serialisation
    def to_dict(self) -> dict:
        return {
            "format": "activis.graph",
            "version": FORMAT_VERSION,
            "method": self.method,
            "note": self.note,
            "model_type": self.model_type,
            "nodes": [asdict(n) for n in self.nodes],
            "modules": [asdict(m) for m in self.modules.values()],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict) -> ComputationGraph:
        """Read `to_dict`'s output back; anything else is refused with a `GraphFormatError`."""
        if not isinstance(data, Mapping):
            raise GraphFormatError(f"A graph is read from the dict that to_dict writes, not {type(data).__name__}.")
        if data.get("format") != "activis.graph":
            raise GraphFormatError("Not an activis graph (missing format tag): expected the dict that "
                                   "ComputationGraph.to_dict writes, with 'format': 'activis.graph', 'version', "
                                   f"'method', 'nodes' and 'modules'; got keys {sorted(map(str, data))}.")
        version = data.get("version", 0)
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise GraphFormatError(f"Graph format version {version!r} is newer than this activis supports "
                                   f"({FORMAT_VERSION}); upgrade activis.")
        try:
            nodes = [GraphNode(**n) for n in data["nodes"]]
            modules = {m["path"]: ModuleInfo(**m) for m in data["modules"]}
            method = data["method"]
        except (KeyError, TypeError) as exc:
            raise GraphFormatError(f"The graph's 'nodes', 'modules' and 'method' are not what to_dict writes "
                                   f"({type(exc).__name__}: {exc}).") from None
        return cls(nodes=nodes, modules=modules, method=method, note=data.get("note"),
                   model_type=data.get("model_type", ""))

    @classmethod
    def from_json(cls, text: str) -> ComputationGraph:
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise GraphFormatError(f"A graph is read from the JSON text that to_json writes; this is not JSON "
                                   f"({exc}).") from None
        return cls.from_dict(data)

    def summary(self) -> str:
        n_cap = len(self.capture_points)
        return (f"{self.model_type}: {len(self.nodes)} nodes, {len(self.edges)} edges, "
                f"{len(self.modules) - 1} submodules, {n_cap} capturable ({self.method})")


# --------------------------------------------------------------------- extraction
def extract_graph(model, example_input, *, tracer_leaf_modules: Iterable[type] = ()) -> ComputationGraph:
    """Trace ``model`` on ``example_input``: a tensor, a tuple of positional inputs, or a dict of
    inputs by name (a Hugging Face tokenizer's output: ``input_ids``, ``attention_mask``, ...).

    Tries ``torch.fx`` first, then ``torch.export`` (which traces models fx cannot, transformers'
    among them, down to aten operations that keep their module paths: ``graph.method`` is then
    ``"export"``). When neither works it falls back to a forward-hook recording, warning with
    `GraphTraceWarning` what was tried and what is lost, and storing the reasons in ``graph.note``.
    """
    import torch

    if not isinstance(model, torch.nn.Module):
        raise ModelInputError(f"extract_graph needs a torch.nn.Module, not {type(model).__name__}.")
    leaves = tuple(tracer_leaf_modules)
    not_classes = [leaf for leaf in leaves if not (isinstance(leaf, type) and issubclass(leaf, torch.nn.Module))]
    if not_classes:
        raise ModelInputError(f"tracer_leaf_modules takes torch.nn.Module subclasses (module classes such as "
                              f"nn.LSTM), not {', '.join(repr(x) for x in not_classes)}.")
    args, kwargs = call_arguments(model, example_input)
    modules = _module_tree(model)
    was_training = model.training
    model.eval()
    try:
        reasons = []
        try:
            if kwargs:
                raise TypeError(f"it traces positional inputs only, and {list(kwargs)} follow a parameter not given")
            gm = _fx_trace(model, leaves)
        except Exception as exc:  # noqa: BLE001 - any tracing failure means: try the next way
            reasons.append(f"torch.fx: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}")
        else:
            with torch.no_grad():
                _shape_prop(model, gm, args)
            return ComputationGraph(nodes=_fx_nodes(gm, model), modules=modules, method="fx",
                                    model_type=type(model).__name__, graph_module=gm)
        try:
            gm = _export(model, args, kwargs)
        except ModelInputError:
            raise
        except Exception as exc:  # noqa: BLE001 - any export failure means: record with hooks
            reasons.append(f"torch.export: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}")
        else:
            return ComputationGraph(nodes=_fx_nodes(gm, model, exported=True), modules=modules, method="export",
                                    model_type=type(model).__name__, graph_module=gm)
        reason = f"{type(model).__name__} could not be traced (" + "; ".join(reasons) + ")"
        warnings.warn(f"{reason}. Using a graph recorded with forward hooks instead: it shows module calls in "
                      "execution order but no functional operations (additions, activations called as functions), "
                      "and capture can only tap module outputs. Make forward traceable (no control flow on the "
                      "data) to get the full graph.", GraphTraceWarning, stacklevel=2)
        with torch.no_grad():
            nodes = _hook_graph(model, args, kwargs)
        return ComputationGraph(nodes=nodes, modules=modules, method="hooks", note=reason,
                                model_type=type(model).__name__)
    finally:
        model.train(was_training)


def call_arguments(model, example_input) -> tuple[tuple, dict]:
    """(positional, keyword) arguments of ``model`` for one input: a dict is bound by parameter name."""
    if isinstance(example_input, Mapping):
        try:
            bound = inspect.signature(model.forward).bind(**example_input)
        except TypeError as exc:
            raise ModelInputError(f"The inputs {list(example_input)} do not fit {type(model).__name__}.forward: "
                                  f"{exc}.") from None
        return tuple(bound.args), dict(bound.kwargs)
    args = example_input if isinstance(example_input, tuple) else (example_input,)
    if not args or not all(hasattr(a, "shape") and hasattr(a, "dtype") for a in args):
        raise ModelInputError(f"The example input must be a tensor, a tuple of tensors or a dict of tensors by "
                              f"name, not {_describe_value(example_input)}.")
    return args, {}


def _export(model, args: tuple, kwargs: dict):
    """``torch.export`` (non-strict) as an fx GraphModule that takes and returns what the model does."""
    import torch

    def dynamic(value):  # every size may vary (batch, sequence length), unless export proves it fixed
        return {i: torch.export.Dim.AUTO for i in range(value.dim())} if isinstance(value, torch.Tensor) else None

    shapes = {**dict(zip(inspect.signature(model.forward).parameters, [dynamic(a) for a in args])),
              **{k: dynamic(v) for k, v in kwargs.items()}}
    exported = torch.export.export(model, args, kwargs, dynamic_shapes=shapes, strict=False)
    return exported.module()


def _shape_prop(model, gm, args) -> None:
    """torch.fx's shape propagation, with torch's own error and the layer it happened at."""
    from torch.fx.passes.shape_prop import ShapeProp

    failed = []  # (node, torch's error): fx's interpreter rewrites what run_node raises

    class Propagation(ShapeProp):
        def run_node(self, node):
            try:
                return super().run_node(node)
            except Exception as exc:
                failed.append((node, exc.__cause__ if exc.__cause__ is not None else exc))
                raise

    try:
        Propagation(gm).propagate(*args)
    except Exception:
        if not failed:
            raise
        node, cause = failed[0]
        where = str(node.target) if node.op == "call_module" else _owner_path(node) or node.name
        raise input_error(model, args, f"{where!r} ({node.name})", cause) from cause


def _fx_trace(model, extra_leaves: tuple):
    import torch.fx as fx

    class Tracer(fx.Tracer):
        def is_leaf_module(self, m, qualname):
            return isinstance(m, extra_leaves) or super().is_leaf_module(m, qualname)

    tracer = Tracer()
    graph = tracer.trace(model)
    return fx.GraphModule(tracer.root, graph, type(model).__name__)


def _module_tree(model) -> dict[str, ModuleInfo]:
    tree: dict[str, ModuleInfo] = {}
    for path, mod in model.named_modules(remove_duplicate=False):
        if path in tree:
            continue
        n_params = sum(p.numel() for p in mod.parameters())
        tree[path] = ModuleInfo(path=path, type=type(mod).__name__, num_params=int(n_params))
    for path in tree:
        if path:
            parent = path.rsplit(".", 1)[0] if "." in path else ""
            if parent in tree:
                tree[parent].children.append(path)
    return tree


def _describe_tensor(value, batch: int | None = None) -> tuple[list[int] | None, str | None, bool]:
    """(shape, dtype, capturable) of a tensor or a traced value's ``tensor_meta``.

    Capturable means floating point with the batch dimension first: one row per instance.
    """
    import torch

    if value is None or not hasattr(value, "shape") or not isinstance(value.dtype, torch.dtype):
        return None, None, False
    shape = [int(s) for s in value.shape]
    dtype = str(value.dtype).replace("torch.", "")
    capturable = bool(shape) and value.dtype.is_floating_point and (batch is None or shape[0] == batch)
    return shape, dtype, capturable


def _owner_path(node) -> str:
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return ""
    last = list(stack.values())[-1]
    path = last[0] if isinstance(last, tuple) else str(last)
    # fx records paths with "." already; guard against the L['self'] style of dynamo
    return path


def _fx_nodes(gm, model, exported: bool = False) -> list:
    """Graph nodes from a traced module; an exported one leaves out its parameter reads and guards."""
    import torch

    named_modules = dict(model.named_modules())
    named_params = dict(model.named_parameters())
    named_params.update(dict(model.named_buffers()))
    nodes = []
    placeholders = [_meta(n) for n in gm.graph.nodes if n.op == "placeholder"]
    batch = int(placeholders[0].shape[0]) if placeholders and hasattr(placeholders[0], "shape") else None
    skipped = {n.name for n in gm.graph.nodes if exported and (n.op == "get_attr" or str(n.target).startswith("_guards")
                                                                or (n.op == "call_function" and _meta(n) is None))}
    for node in gm.graph.nodes:
        if node.name in skipped:
            continue
        shape, dtype, capturable = _describe_tensor(_meta(node), batch)
        inputs = [a.name for a in node.all_input_nodes if a.name not in skipped]
        num_params = 0
        if node.op == "call_module":
            target = str(node.target)
            mod = named_modules.get(target)
            kind = type(mod).__name__ if mod is not None else target
            module_path = target
            num_params = sum(p.numel() for p in mod.parameters()) if mod is not None else 0
        elif node.op == "call_function":
            target = getattr(node.target, "__qualname__", None) or str(node.target)
            module_name = getattr(node.target, "__module__", None) or ""
            target = f"{module_name}.{target}" if module_name and "." not in target else target
            kind = getattr(node.target, "__name__", str(node.target))
            module_path = _owner_path(node)
        elif node.op == "call_method":
            target = str(node.target)
            kind = target
            module_path = _owner_path(node)
        elif node.op == "get_attr":
            target = str(node.target)
            kind = "parameter"
            value = named_params.get(target)
            num_params = int(value.numel()) if isinstance(value, torch.Tensor) else 0
            module_path = target.rsplit(".", 1)[0] if "." in target else ""
            capturable = False
        elif node.op == "placeholder":
            target, kind, module_path = str(node.target), "input", ""
            capturable = False
        else:  # output
            target, kind, module_path = "output", "output", ""
            capturable = False
        nodes.append(GraphNode(name=node.name, op=node.op, target=target, kind=kind,
                               module_path=module_path, inputs=inputs, shape=shape, dtype=dtype,
                               num_params=int(num_params), capturable=capturable))
    return nodes


def _meta(node):
    """A traced node's example value: ShapeProp's tensor_meta (fx) or the fake tensor (export)."""
    meta = node.meta.get("tensor_meta")
    return meta if meta is not None else node.meta.get("val")


def _hook_graph(model, args, kwargs) -> list:
    """Record leaf-module calls in execution order, linking them by the tensors they pass on.

    An input tensor that no recorded call produced (it came from a functional operation) is linked
    to the call that ran just before, so the chain stays connected.
    """
    import torch

    producers: dict[int, str] = {}
    nodes: list[GraphNode] = []
    first = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
    batch = int(first.shape[0]) if first is not None and first.dim() else None
    calls: dict[str, int] = {}
    keep_alive: list = []  # tensors whose id() we hold must not be freed and reused
    input_names = []
    named = [(f"input_{i}" if len(args) + len(kwargs) > 1 else "x", a) for i, a in enumerate(args)]
    for key, a in [*named, *kwargs.items()]:
        if isinstance(a, torch.Tensor):
            name = key
            producers[id(a)] = name
            keep_alive.append(a)
            shape, dtype, _ = _describe_tensor(a)
            nodes.append(GraphNode(name=name, op="placeholder", target=name, kind="input",
                                   module_path="", shape=shape, dtype=dtype))
            input_names.append(name)

    def first_tensor(value):
        if isinstance(value, torch.Tensor):
            return value
        if isinstance(value, (tuple, list)) and value:
            return first_tensor(value[0])
        if isinstance(value, dict) and value:
            return first_tensor(next(iter(value.values())))
        return None

    def flat_tensors(value):
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (tuple, list)):
            for v in value:
                yield from flat_tensors(v)
        elif isinstance(value, dict):
            for v in value.values():
                yield from flat_tensors(v)

    def make_hook(path, mod):
        def hook(_module, inputs, output):
            count = calls.get(path, 0)
            calls[path] = count + 1
            name = path.replace(".", "_") + (f"_{count}" if count else "")
            srcs = [producers[id(t)] for t in flat_tensors(inputs) if id(t) in producers]
            if not srcs and nodes:
                srcs = [nodes[-1].name]
            out = first_tensor(output)
            shape, dtype, capturable = _describe_tensor(out, batch)
            nodes.append(GraphNode(name=name, op="call_module", target=path, kind=type(mod).__name__,
                                   module_path=path, inputs=list(dict.fromkeys(srcs)), shape=shape,
                                   dtype=dtype, capturable=capturable,
                                   num_params=int(sum(p.numel() for p in mod.parameters()))))
            for t in flat_tensors(output):
                producers[id(t)] = name
                keep_alive.append(t)
        return hook

    running: list[str] = []  # the modules entered and not yet left, innermost last

    def enter(path):
        def pre_hook(_module, _inputs):
            running.append(path)
        return pre_hook

    def leave(_module, _inputs, _output):
        running.pop()

    handles = []
    for path, mod in model.named_modules():
        if path:
            handles.append(mod.register_forward_pre_hook(enter(path)))
            handles.append(mod.register_forward_hook(leave))
        if path and not list(mod.children()):
            handles.append(mod.register_forward_hook(make_hook(path, mod)))
    try:
        result = model(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - re-raised as what the user can act on
        raise input_error(model, args, repr(running[-1]) if running else "its forward", exc) from exc
    finally:
        for h in handles:
            h.remove()
    out = first_tensor(result)
    src = producers.get(id(out)) if out is not None else None
    if src is None and nodes:
        src = nodes[-1].name
    shape, dtype, _ = _describe_tensor(out)
    nodes.append(GraphNode(name="output", op="output", target="output", kind="output", module_path="",
                           inputs=[src] if src else [], shape=shape, dtype=dtype))
    return nodes
