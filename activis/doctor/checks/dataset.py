"""The data as a model meets it: one feature that gives the label away, blank samples, batches of one
into BatchNorm, and a sample's output that changes with the rest of its batch."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .. import inputs
from .base import Check, Skip, kind_of, same_values


def _stump_accuracy(feature: np.ndarray, labels: np.ndarray, classes: int) -> float:
    """How well the label is predicted from this one feature alone: the majority label per value (a feature of
    few values), else the best of equal-count bins and of a tree of 2 leaves per class whose cuts fall between
    the classes wherever they lie (equal-count bins straddle classes of other sizes)."""
    _, bins = np.unique(feature, return_inverse=True)
    if bins.max() + 1 <= 4 * classes:
        return _majority(bins, labels, classes)
    edges = np.quantile(feature, np.linspace(0, 1, 4 * classes + 1)[1:-1])
    accuracy = _majority(np.searchsorted(edges, feature), labels, classes)
    if accuracy < 0.9:  # far from a leak either way: not worth a tree
        return accuracy
    from sklearn.tree import DecisionTreeClassifier

    rows = np.random.default_rng(0).permutation(len(labels))[:5000]
    tree = DecisionTreeClassifier(max_leaf_nodes=2 * classes, random_state=0)
    tree.fit(feature[rows, None], labels[rows])
    return max(accuracy, float(tree.score(feature[rows, None], labels[rows])))


def _majority(bins: np.ndarray, labels: np.ndarray, classes: int) -> float:
    table = np.zeros((bins.max() + 1, classes))
    np.add.at(table, (bins, labels), 1)
    return float(table.max(1).sum() / len(labels))


class Leakage(Check):
    """A single input feature that predicts the label on its own (the label, or something computed from it,
    left among the features); in token ids, the label's own tokens written into the texts."""

    id, title = "leakage", "A feature leaks the label"
    cause = "leakage"
    accuracy = 0.995

    def run(self, ctx):
        X, Y = inputs.main(ctx.data.order_X), ctx.data.order_Y
        if X.dim() != 2 or len(X) < 100 or Y.dim() != 1:
            raise Skip("needs tabular inputs or token ids (samples x values) and one target per sample")
        if ctx.data.classification and not X.dtype.is_floating_point and X.dtype != torch.bool:
            found = self._label_tokens(ctx, X, Y)
            if found:
                return found
        if X.shape[1] > 2000:
            raise Skip("more than 2000 features")
        x = X.double().numpy()
        if ctx.data.classification:
            labels = Y.numpy()
            _, labels = np.unique(labels, return_inverse=True)
            classes = labels.max() + 1
            base = np.bincount(labels).max() / len(labels)
            if classes < 2 or base > 0.9:
                raise Skip("one class holds over 90 % of the samples")
            scores = [_stump_accuracy(x[:, j], labels, classes) for j in range(x.shape[1])]
            threshold = self.accuracy
        else:
            y = Y.double().numpy()
            spread = x.std(0)
            if y.std() == 0:
                raise Skip("every target is the same")
            scores = [abs(np.corrcoef(x[:, j], y)[0, 1]) if spread[j] > 0 else 0.0 for j in range(x.shape[1])]
            threshold = 0.999
        best = int(np.nanargmax(scores))
        if scores[best] < threshold or x.shape[1] < 2:
            return []
        what = "accuracy" if ctx.data.classification else "|correlation|"
        return [self.finding(
            "error", f"Feature {best} alone predicts the target ({what} {scores[best]:.3f}): the label, or "
            "something computed from it, is among the inputs.",
            f"Remove feature {best} (and anything derived from the label or recorded after it) from the inputs.",
            evidence={"feature": best, "score": scores[best], "features": x.shape[1]},
            place="data", where=f"feature {best}", node=ctx.input_node())]


    def _label_tokens(self, ctx, X: torch.Tensor, Y: torch.Tensor) -> list:
        """Token ids: tokens found in (nearly) one class only, each in at least 2 % of the samples, that
        between them mark nearly every sample, each at the same place counted from the text's start or end:
        the label written into the text (a label token appended). Real keywords sit anywhere in the text and
        also turn up in other classes' texts; a word in every text marks no class."""
        labels = torch.as_tensor(np.unique(Y.numpy(), return_inverse=True)[1])
        classes = int(labels.max()) + 1
        ids = X.long()
        if classes < 2 or bool((ids < 0).any()):
            return []
        vocab = int(ids.max()) + 1
        if vocab * classes > 20_000_000:
            return []
        rows = torch.arange(len(ids)).unsqueeze(1).expand_as(ids)
        pairs = torch.unique(rows.reshape(-1) * vocab + ids.reshape(-1))  # each token once per sample
        token, row = pairs % vocab, pairs // vocab
        counts = torch.bincount(token * classes + labels[row], minlength=vocab * classes).reshape(vocab, classes)
        support = counts.sum(1)
        pure = (support >= max(5, 0.02 * len(ids))) & (counts.max(1).values >= self.accuracy * support)
        marked = torch.zeros(len(ids), dtype=torch.bool)
        marked[row[pure[token]]] = True
        share = float(marked.float().mean())
        if share < self.accuracy or not _at_one_slot(ids, pure[ids], self.accuracy):
            return []
        tokens = torch.nonzero(pure).flatten().tolist()
        shown = ", ".join(map(str, tokens[:8])) + (" ..." if len(tokens) > 8 else "")
        return [self.finding(
            "error", f"Token ids {shown} each occur in one class only and between them mark {share:.1%} of the "
            "samples: the label is written into the inputs (a label token appended or kept by preprocessing).",
            "Remove the label's tokens from the texts (check what the preprocessing appends or prepends).",
            evidence={"tokens": tokens[:20], "marked_share": share, "classes": classes},
            place="data", where=f"token {tokens[0]}", node=ctx.input_node())]


def _at_one_slot(ids: torch.Tensor, marks: torch.Tensor, share: float) -> bool:
    """Whether the first marking token of (nearly) every marked text sits at one offset from the start or from
    the end of its real tokens (padding, the last column's commonest value, left out on either side)."""
    rows = marks.any(1)
    ids, marks = ids[rows], marks[rows]
    real = ids != torch.mode(ids[:, -1]).values
    width = ids.shape[1]
    first = real.int().argmax(1)
    last = width - 1 - real.flip(1).int().argmax(1)
    at = marks.int().argmax(1)
    for offset in (at - first, last - at):
        if float(torch.bincount(offset.clamp(0, width)).max()) >= share * len(at):
            return True
    return False


class BlankInputs(Check):
    """Samples whose every value is the same (all zeros, all padding): images that failed to load, empty texts."""

    id, title = "blank_inputs", "Blank inputs"
    cause = "blank_inputs"
    share = 0.02

    def run(self, ctx):
        X = inputs.main(ctx.data.order_X)
        flat = X.reshape(len(X), -1)
        if flat.shape[1] < 4:
            raise Skip("fewer than 4 values per sample")
        blank = (flat == flat[:, :1]).all(1)
        count = int(blank.sum())
        if count / len(X) <= self.share:
            return []
        value = float(flat[blank][0, 0])
        return [self.finding(
            "warning" if count < len(X) else "error",
            f"{count} of {len(X)} samples ({count / len(X):.0%}) are blank: every value is {value:g}.",
            "Find where these samples lose their content (failed image loads, empty texts, a wrong column) and "
            "drop or repair them.", evidence={"blank_samples": count, "samples": len(X), "value": value},
            place="data", where="inputs", node=ctx.input_node())]


class BatchNormBatchOfOne(Check):
    """BatchNorm in training mode on a batch of one sample: its statistics are that sample (BatchNorm1d raises);
    the loader's last batch counts too."""

    id, title = "batchnorm_batch_of_one", "BatchNorm gets batches of one"
    cause = "batchnorm_batch_of_one"

    def run(self, ctx):
        norms = [n for n, m in ctx.model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        if not norms:
            raise Skip("the model has no BatchNorm")
        loader = ctx.data.loader
        if loader is None or loader.batch_size is None:
            raise Skip("needs the DataLoader to see the batch sizes")
        size = loader.batch_size
        try:
            n = len(loader.dataset)
        except TypeError:
            raise Skip("the dataset has no length") from None
        last = n % size if not loader.drop_last else size
        if size > 1 and last != 1:
            return []
        which = "every batch" if size == 1 else f"the last batch of each epoch ({n} samples, batches of {size})"
        return [self.finding(
            "error", f"{which} holds one sample, and {norms[0]} normalises over the batch: the sample is "
            "normalised to zero (BatchNorm1d raises at that batch).",
            "Use batches of 2 or more, and drop_last=True in the DataLoader (or GroupNorm/LayerNorm).",
            evidence={"batch_size": size, "samples": n, "last_batch": last},
            place="loader", where=norms[0], node=ctx.node_of_module(norms[0]))]


class BatchDependence(Check):
    """In eval mode a sample's output does not depend on the other samples of its batch (Karpathy's check):
    a reshape that mixes samples, a normalisation or softmax over the batch dimension."""

    id, title = "batch_dependence", "A sample's output depends on its batch"
    cause = "batch_dependence"

    def run(self, ctx):
        x = inputs.first(ctx.x, 16)
        batch = inputs.count(x)
        if batch < 4:
            raise Skip("needs a batch of at least 4")
        values = ctx.record(x)
        # the model itself, not the traced graph's record: a trace drops autocast and computes in float32
        lowest, out = _lowest_precision(ctx, x)
        alone = ctx.output(inputs.first(x, 1))
        if not same_values(alone, ctx.output(inputs.first(x, 1))):
            raise Skip("the output is random in eval mode (see randomness)")
        out = out.detach().float()
        if out.shape[0] != batch or alone.shape[1:] != out.shape[1:]:
            raise Skip("the output has no batch dimension")
        gap = float((alone.float() - out[:1]).abs().max())
        scale = float(out.abs().max()) + 1e-6
        if bool(torch.isfinite(out[:1]).all()) and not bool(torch.isfinite(alone).all()):
            gap = float("inf")  # finite in a batch, NaN/Inf alone: a statistic over the batch (std of one sample)
        # Kernels for other batch sizes round differently: 1e-3 of the output covers float32; a model computing
        # in bfloat16/float16 (autocast) rounds at that type's precision, ten of its roundings allowed.
        tolerance = max(1e-3, 10 * lowest)
        if not gap > tolerance * scale:
            return []
        solo = ctx.record(inputs.first(x, 1))
        node, samples = None, _from_samples(ctx.graph, values)
        for n in ctx.graph.nodes:
            a, b = values.get(n.name), solo.get(n.name)
            if n.name not in samples or a is None or b is None or a.dim() == 0 or b.shape[1:] != a.shape[1:] \
                    or a.shape[0] != batch or not a.dtype.is_floating_point:
                continue
            differ = (a[:1] - b).abs()
            limit = tolerance * (float(a.abs().max()) + 1e-6)
            if not bool(torch.isfinite(differ).all()) or float(differ.max()) > limit:
                node = _mixer(ctx.graph, values, n.name, batch) or n.name
                break
        return [self.finding(
            "error", f"Sample 0's output changes by {gap:.3g} when the rest of its batch changes (eval mode)"
            + (f", from {node!r} on" if node else "") + ": samples mix.",
            "Look for a view/reshape that should be a permute/transpose, a batch_first mismatch, or a "
            "normalisation/softmax over dimension 0.", evidence={"difference": gap, "output_scale": scale},
            place="node" if node else "model", where=node or "", node=node or ctx.output_node())]


def _lowest_precision(ctx, x) -> tuple[float, torch.Tensor]:
    """(the largest machine epsilon among the modules' floating outputs, the model's output) for input ``x``."""
    eps, handles = [0.0], []

    def hook(_module, _args, output):
        if isinstance(output, torch.Tensor) and output.dtype.is_floating_point:
            eps[0] = max(eps[0], torch.finfo(output.dtype).eps)
    try:
        for m in ctx.model.modules():
            handles.append(m.register_forward_hook(hook))
        out = ctx.output(x)
    finally:
        for h in handles:
            h.remove()
    return eps[0], out


def _from_samples(graph, values: dict) -> set[str]:
    """The nodes whose tensors are computed from the samples' tensors: not a position table looked up with
    arange(L) (made from the input's size only), whose leading length can equal the batch's."""
    samples = {n.name for n in graph.nodes if n.op == "placeholder"}
    if not samples:  # a graph of leaf modules (no fx trace): every module may carry the samples
        return {n.name for n in graph.nodes}
    for n in graph.nodes:
        size_query = kind_of(n) in ("getattr", "size", "dim", "len") and n.name not in values  # x.shape, x.size(1)
        if not size_query and any(i in samples for i in n.inputs):
            samples.add(n.name)
    return samples


def _mixer(graph, values: dict, first_different: str, batch: int) -> str | None:
    """The upstream node where the batch stops being the leading dimension (a reshape to time-major done with
    view): the mix happens there, though rows can only be compared again further down."""
    ancestors, frontier = set(), [first_different]
    while frontier:
        name = frontier.pop()
        for i in graph.node(name).inputs:
            if i not in ancestors:
                ancestors.add(i)
                frontier.append(i)
    samples = _from_samples(graph, values)
    for n in graph.nodes:
        v = values.get(n.name)
        if n.name not in ancestors or not isinstance(v, torch.Tensor) or v.dim() == 0 or v.shape[0] == batch:
            continue
        fed = [values.get(i) for i in n.inputs if i in samples]
        if any(isinstance(f, torch.Tensor) and f.dim() and f.shape[0] == batch for f in fed):
            return n.name
    return None
