"""Run it before judging it: one forward, loss and backward on a batch, as training would do them.

When that raises, or gives something training cannot use (an output that is not a tensor, a loss
that is not a scalar or carries no gradient), no check can mean anything: `checkup` raises a
`SetupError` naming the module that failed and the fact about the data behind it ("ids reach 100
but the embedding has 100 rows"), instead of a report that could read as clean.
"""

from __future__ import annotations

import copy
import re

import torch
from torch import nn

from . import inputs
from .findings import DoctorError, Finding


class SetupError(DoctorError):
    """The model, the loss or the data cannot run one training step; ``finding`` says where and why."""

    def __init__(self, finding: Finding):
        super().__init__(f"{finding.title}: {finding.message} {finding.change}")
        self.finding = finding


def _fail(title: str, message: str, change: str, *, place: str, where: str = "", cause: str = "setup",
          evidence=None) -> SetupError:
    return SetupError(Finding(check="runs", severity="error", title=title, message=message, change=change,
                              place=place, where=where, node=where or None, cause=cause,
                              evidence=dict(evidence or {})))


def _shapes(args) -> str:
    return ", ".join(f"{list(a.shape)} {str(a.dtype).replace('torch.', '')}" for a in args
                     if isinstance(a, torch.Tensor)) or "no tensor"


def module_fact(module: nn.Module, path: str, args) -> tuple[str, str, dict]:
    """What about the data this module could not take: (fact, change, evidence)."""
    x = next((a for a in args if isinstance(a, torch.Tensor)), None)
    name = path or type(module).__name__
    if x is None:
        return f"{name} received {_shapes(args)}", "Check what the model passes to it.", {}
    if isinstance(module, nn.Embedding):
        if x.dtype.is_floating_point:
            return (f"{name} gets {x.dtype} values; an embedding takes integer ids",
                    "Pass token ids as a LongTensor.", {})
        top, low = int(x.max()), int(x.min())
        if top >= module.num_embeddings or low < 0:
            return (f"ids reach {top if top >= module.num_embeddings else low} but {name} has "
                    f"{module.num_embeddings} rows (ids 0..{module.num_embeddings - 1})",
                    "Size the embedding to the vocabulary (num_embeddings = largest id + 1), or fix the "
                    "tokenizer/vocabulary the ids come from.",
                    {"largest_id": top, "smallest_id": low, "rows": module.num_embeddings})
    if isinstance(module, nn.modules.conv._ConvNd | nn.modules.batchnorm._BatchNorm):
        got = x.shape[1] if x.dim() > 1 else None
        want = getattr(module, "in_channels", None) or getattr(module, "num_features", None)
        what = "channels"
    else:
        got = x.shape[-1] if x.dim() else None
        want = getattr(module, "in_features", None) or getattr(module, "input_size", None)
        if isinstance(module, nn.LayerNorm):
            want = module.normalized_shape[-1]
        what = "features"
    if not x.dtype.is_floating_point and isinstance(module, nn.Linear | nn.modules.conv._ConvNd | nn.RNNBase):
        return (f"{name} gets {str(x.dtype).replace('torch.', '')} input; it computes in floating point",
                "Convert the inputs to float (x.float()), or embed integer ids with nn.Embedding first.", {})
    if want is not None and got is not None and got != want:
        return (f"{name} expects {want} {what} but gets {got} (input {list(x.shape)})",
                f"Make {name}'s input size match the layer before it (or the data's {what}): "
                f"{type(module).__name__}({got}, ...), or reshape/flatten the input.",
                {f"expected_{what}": want, f"received_{what}": got})
    return f"{name} ({type(module).__name__}) received {_shapes(args)}", "Check the shapes and dtypes it receives.", {}


def _indexed_table(module: nn.Module, path: str, error: str):
    """(path, embedding, fact, change, evidence) when ``module`` failed on an index as large as the rows of the one
    embedding table inside it: the module computed the indices for that table (positions counted from the ids'
    length, as RoBERTa does) and looked them up in a buffer of the table's size first. None otherwise."""
    found = re.search(r"index (-?\d+) is out of (?:bounds|range).*?size (\d+)", error)
    if not found:
        return None
    index, size = int(found.group(1)), int(found.group(2))
    tables = [(name, m) for name, m in module.named_modules()
              if isinstance(m, nn.Embedding) and m.num_embeddings == size]
    if len(tables) != 1:
        return None
    name, table = tables[0]
    where = ".".join(p for p in (path, name) if p)
    return (where, table, f"indices reach {index} but {where} has {size} rows (0..{size - 1})",
            f"Give {where} more rows than the largest index (num_embeddings / max_position_embeddings above the "
            "longest sequence plus any offset), or cut the inputs shorter.",
            {"largest_index": index, "rows": size})


def loss_fact(out: torch.Tensor, y: torch.Tensor, loss_fn, error: str = "") -> tuple[str, str, dict, str]:
    """What about prediction and target the loss could not take: (fact, change, evidence, cause). ``error``: the
    loss's own message; torch's cross-entropy and NLL say "Target 5 is out of bounds" only once they accepted the
    shapes, so the layout is right (a loss that transposes a sequence's scores itself) and a label is not."""
    kind = type(loss_fn).__name__
    label_out_of_bounds = re.search(r"Target -?\d+ is out of bounds", error) is not None
    sequence = (not y.dtype.is_floating_point and out.dim() == 3 and tuple(y.shape) == tuple(out.shape[:2])
                and tuple(y.shape) != (out.shape[0], out.shape[2]))
    if sequence and not label_out_of_bounds:
        return (f"the output {list(out.shape)} holds a sequence's class scores on its last axis, but the loss "
                f"reads axis 1 as the classes (it wants the target {[out.shape[0], out.shape[2]]})",
                "Give the loss output.transpose(1, 2) (or output.reshape(-1, C) with target.reshape(-1)).",
                {"positions": out.shape[1], "classes": out.shape[2]}, "loss_function")
    ignored = getattr(loss_fn, "ignore_index", -100)  # padding's label, which the loss skips
    labels = y[y != ignored] if not y.dtype.is_floating_point else y
    if not y.dtype.is_floating_point and out.dim() >= 2 and labels.numel():
        classes = out.shape[2] if sequence else out.shape[1]
        top, low = int(labels.max()), int(labels.min())
        if top >= classes or low < 0:
            return (f"labels reach {top if top >= classes else low} but the output has {classes} classes "
                    f"(labels 0..{classes - 1} allowed)",
                    "Give the final layer one output per class (largest label + 1), or re-map the labels to "
                    "0..C-1.", {"largest_label": top, "smallest_label": low, "classes": classes}, "labels_for_loss")
    if y.dtype.is_floating_point and out.dim() == y.dim() + 1 and "CrossEntropy" in kind + str(loss_fn):
        return ("the target is float but has one value per row: cross-entropy wants integer class indices",
                "Pass labels as a LongTensor (y.long()), or class probabilities of the output's shape.", {},
                "labels_for_loss")
    return (f"the loss got prediction {list(out.shape)} {str(out.dtype).replace('torch.', '')} and target "
            f"{list(y.shape)} {str(y.dtype).replace('torch.', '')}",
            "Make the output and target the shapes and dtypes the loss expects.", {}, "labels_for_loss")


class _Stack:
    """Forward pre/post hooks on every module: the innermost module still running when an error escapes, and the
    last module with parameters of its own to finish (the output layer, which a fine-tune trains)."""

    def __init__(self, model: nn.Module):
        self.running: list[tuple[str, nn.Module, tuple]] = []
        self.failed: tuple[str, nn.Module, tuple] | None = None
        self.last_layer = ""
        self.handles = []
        for path, module in model.named_modules():
            self.handles.append(module.register_forward_pre_hook(self._enter(path)))
            self.handles.append(module.register_forward_hook(self._leave(path)))

    def _enter(self, path):
        def hook(module, args):
            self.running.append((path, module, args))
        return hook

    def _leave(self, path):
        def hook(module, _args, _out):
            if self.running:
                self.running.pop()
            if path and any(True for _ in module.parameters(recurse=False)):
                self.last_layer = path
        return hook

    def remove(self):
        for h in self.handles:
            h.remove()


def preflight(model: nn.Module, x, y: torch.Tensor, loss_fn, pick_output) -> None:
    """One training-mode forward, loss and backward on ``(x, y)``; raises `SetupError` where it cannot run.
    The caller restores the model (parameters, buffers, gradients, modes)."""
    stack = _Stack(model)
    try:
        try:
            raw = inputs.call(model, x)
        except Exception as e:  # noqa: BLE001 - why the model cannot run is the finding
            path, module, args = stack.running[-1] if stack.running else ("", model, (inputs.main(x),))
            path, module, fact, change, evidence = _indexed_table(module, path, str(e)) or (
                path, module, *module_fact(module, path, args))
            raise _fail("The model cannot run on the data", f"{fact} ({type(e).__name__}: "
                        f"{str(e).splitlines()[0][:200]}).", change, place="module" if path else "model",
                        where=path, cause="data_model_mismatch", evidence=evidence) from e
    finally:
        stack.remove()
    try:
        out = pick_output(raw)
    except DoctorError as e:
        raise _fail("The model's output is not a tensor", str(e),
                    "Return the logits tensor (or a dict/ModelOutput with 'logits').", place="model",
                    cause="model_output") from e
    try:
        loss = loss_fn(out, y)
    except Exception as e:  # noqa: BLE001 - why the loss cannot run is the finding
        fact, change, evidence, cause = loss_fact(out, y, loss_fn, str(e))
        raise _fail("The loss cannot be computed", f"{fact} ({type(e).__name__}: {str(e).splitlines()[0][:200]}).",
                    change, place="loss", cause=cause, evidence=evidence) from e
    if not isinstance(loss, torch.Tensor):
        raise _fail("The loss is not a tensor", f"loss_fn returned {type(loss).__name__}.",
                    "Return the loss as a torch tensor (no .item(), no float()).", place="loss", cause="loss_function")
    if loss.numel() != 1:
        raise _fail("The loss is not a scalar", f"loss_fn returned shape {list(loss.shape)}, one value per "
                    "element: backward() needs a single number.",
                    "Reduce it: reduction='mean' (the default), or .mean() over the per-sample losses.",
                    place="loss", cause="loss_function", evidence={"loss_elements": loss.numel()})
    if not loss.requires_grad and not any(p.requires_grad for p in model.parameters()):
        raise _fail("Every parameter is frozen", "no parameter of the model has requires_grad=True: nothing can "
                    "learn (a 'freeze the backbone' loop run after the new head was attached?).",
                    "Freeze before attaching the new layers, or set requires_grad=True on the parameters to train"
                    + (f" (those of {stack.last_layer})." if stack.last_layer else "."),
                    place="module" if stack.last_layer else "model",
                    where=stack.last_layer, cause="gradient_cut")
    if not loss.requires_grad:
        raise _fail("The loss carries no gradient", "the loss does not depend on any trainable parameter "
                    "(computed under torch.no_grad(), detached, or every parameter frozen).",
                    "Compute the loss from the model's output without no_grad()/detach()/.item().",
                    place="loss", cause="gradient_cut")
    try:
        loss.backward()
    except Exception as e:  # noqa: BLE001 - why backward fails is the finding
        raise _fail("The backward pass fails", f"{type(e).__name__}: {str(e).splitlines()[0][:200]}.",
                    "Look for in-place changes of tensors autograd needs (x += ..., relu_(), x[...] = ...) in "
                    "forward or the loss.", place="model", cause="backward") from e


def loss_on_prediction(model: nn.Module, x, y: torch.Tensor, loss_fn, pick_output):
    """The user's loss as the checks call it, ``loss(prediction, target)``. A loss written for the model's
    whole return value (``out["logits"]``, ``out[0]``) gets each prediction put back in its place in a copy
    of that value, so the checks can judge the logits without breaking the user's own loss."""
    try:
        with torch.no_grad():
            raw = inputs.call(model, x)
    except Exception:  # noqa: BLE001 - a model that cannot run: preflight names the module and the data
        return loss_fn
    if isinstance(raw, torch.Tensor):
        return loss_fn
    try:
        prediction = pick_output(raw)
        loss_fn(prediction, y)
        return loss_fn
    except Exception:  # noqa: BLE001 - then the loss may take the whole return value
        pass
    try:
        loss_fn(raw, y)
    except Exception:  # noqa: BLE001 - it takes neither: preflight says why
        return loss_fn

    def put_back(value, new):
        """A copy of the return value with the prediction replaced, of the same type (a Hugging Face
        ModelOutput keeps its attributes, so a loss reading ``out.logits`` still runs)."""
        if isinstance(value, tuple | list):
            hit = any(v is prediction for v in value)
            items = [new if v is prediction else v for v in value] if hit else [put_back(value[0], new), *value[1:]]
            return type(value)(items) if type(value) in (tuple, list) else type(value)(*items)  # a namedtuple
        copied = copy.copy(value)  # a dict, or a ModelOutput (a dict whose items are also attributes)
        for key, v in value.items():
            if v is prediction:
                copied[key] = new
        return copied

    return lambda out, target: loss_fn(put_back(raw, out), target)
