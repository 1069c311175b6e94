"""The data: input scale, batches of one label or zero weight, sorted order, duplicates with
conflicting labels, and samples shared by the training and test sets."""

from __future__ import annotations

import numpy as np
import torch

from .. import inputs
from .base import Check, Skip, kind_of


def row_keys(X: torch.Tensor) -> np.ndarray:
    """One hashable key per row (its bytes), so equal inputs get equal keys."""
    arr = np.ascontiguousarray(X.reshape(len(X), -1).cpu().numpy())
    return arr.view(np.dtype((np.void, arr.dtype.itemsize * arr.shape[1]))).ravel() if arr.shape[1] else \
        np.zeros(len(arr), dtype="V1")


def conflicting_rows(X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """A mask of the rows whose input also appears with a different label."""
    keys = row_keys(X)
    labels = row_keys(Y.reshape(len(Y), -1))
    _, group = np.unique(keys, return_inverse=True)
    first_label: dict[int, bytes] = {}
    conflict = np.zeros(len(keys), dtype=bool)
    conflicted_groups = set()
    for g, lab in zip(group, labels):
        lab = bytes(lab)
        if first_label.setdefault(int(g), lab) != lab:
            conflicted_groups.add(int(g))
    if conflicted_groups:
        conflict = np.isin(group, list(conflicted_groups))
    return torch.from_numpy(conflict)


def _off_scale(X: torch.Tensor, feature_dim: int) -> dict | None:
    """The scale evidence of features that are far from unit scale (None: near it). ``feature_dim``: the
    features' (channels') dimension; the statistics run over every other one."""
    dims = [d for d in range(X.dim()) if d != feature_dim]
    mean, std = X.float().mean(dims), X.float().std(dims)
    spread = std[std > 0]
    evidence = {"largest_mean": float(mean.abs().max()), "largest_std": float(std.max()),
                "smallest_std": float(spread.min()) if spread.numel() else 0.0,
                "largest_value": float(X.abs().max())}
    orders = float(torch.log10(spread.max() / spread.min())) if spread.numel() > 1 else 0.0
    far = evidence["largest_mean"] > 3 and bool((mean.abs() > 3 * std).any())
    if not (far or evidence["largest_std"] > 10 or orders > 3):
        return None
    evidence["std_orders_of_magnitude"] = orders
    return evidence


def _first_layer_input(ctx):
    """What the model's first Linear/Conv receives, when the model computes it from the input first (a
    BatchNorm or a standardisation at the input): (value, its feature dimension), or None."""
    layers = ("linear", "conv1d", "conv2d", "conv3d")
    for n in ctx.graph.nodes:
        if kind_of(n) in layers and n.inputs:
            if ctx.graph.node(n.inputs[0]).op == "placeholder":
                return None
            value = ctx.record(ctx.x, train=True, seed=ctx.seed).get(n.inputs[0])  # a BatchNorm's batch statistics
            if value is None or not value.dtype.is_floating_point or value.dim() < 2:
                return None
            return value, value.dim() - 1 if kind_of(n) == "linear" else 1
    return None


class InputScale(Check):
    """Float input features near unit scale, not spread over orders of magnitude (raw 0-255 pixels, ...), as
    the first Linear/Conv receives them: a model that normalises its input first (a BatchNorm on the raw
    features) takes any scale."""

    id, title = "input_scale", "Unscaled inputs"
    cause = "input_scale"

    def run(self, ctx):
        X = inputs.main(ctx.data.X)
        if not X.dtype.is_floating_point:
            raise Skip("the inputs are integers (token ids or categories), not a scale question")
        if X.dim() < 2:
            raise Skip("the inputs have no feature dimension")
        evidence = _off_scale(X, X.dim() - 1 if X.dim() == 3 else 1)
        if evidence is None:
            return []
        received = _first_layer_input(ctx)
        if received is not None and _off_scale(*received) is None:
            return []  # normalised inside the model before any weight meets it
        big = evidence["largest_value"] > 100
        return [self.finding(
            "error" if big else "warning",
            f"Input features are far from unit scale (values up to {evidence['largest_value']:.4g}, feature "
            f"std from {evidence['smallest_std']:.3g} to {evidence['largest_std']:.3g}).",
            "Standardise each feature (subtract the training mean, divide by the std; pixels: divide by 255), "
            "with the statistics of the training set.",
            evidence=evidence, place="data", where="inputs", node=ctx.input_node())]


def _labels(ctx):
    if not ctx.data.classification or ctx.data.Y.dim() != 1:
        raise Skip("needs class labels (integer targets, one per sample)")
    return ctx.data.Y


class BatchLabels(Check):
    """Batches of one label only (sorted data, or a rare class split off)."""

    id, title = "batch_labels", "Single-label batches"
    cause = "data_order"

    def run(self, ctx):
        if not ctx.data.batches:
            raise Skip("needs a DataLoader to see the batches")
        labels = _labels(ctx)
        classes, counts = torch.unique(labels, return_counts=True)
        if len(classes) < 2:
            raise Skip("the sample has one class only")
        batches = [b for b, _ in ctx.data.batches if len(b) >= 2]
        if not batches:
            raise Skip("every batch holds one sample")
        size = int(np.median([len(b) for b in batches]))
        p = counts.double() / counts.sum()
        expected = float((p ** size).sum())
        single = sum(len(torch.unique(b)) == 1 for b in batches)
        share = single / len(batches)
        if share <= max(0.1, 3 * expected):
            return []
        return [self.finding(
            "warning", f"{single} of {len(batches)} batches hold one label only ({share:.0%}; random batches of "
            f"{size} would give {expected:.1%}).",
            "Shuffle the data (DataLoader(..., shuffle=True)) or build balanced batches.",
            evidence={"single_label_batches": single, "batches": len(batches), "expected_share": expected},
            place="loader")]


class BatchWeights(Check):
    """Sample weights that zero a whole batch, or a whole class."""

    id, title = "batch_weights", "Zero-weight batches"
    cause = "sample_weights"

    def run(self, ctx):
        W = ctx.data.W
        if W is None:
            raise Skip("no sample weights given (data as (X, y, sample_weight) or a loader yielding them)")
        findings = []
        batches = [w for _, w in ctx.data.batches if w is not None]
        zero = sum(bool((w == 0).all()) for w in batches)
        if zero:
            findings.append(self.finding(
                "error", f"{zero} of {len(batches)} batches have all-zero sample weights: they train nothing "
                "and can upset adaptive optimizers.",
                "Remove zero-weight samples before batching, or skip batches whose weights sum to zero.",
                evidence={"zero_weight_batches": zero, "batches": len(batches)}, place="loader"))
        if bool((W == 0).all()):
            findings.append(self.finding(
                "error", "Every sample weight is zero.", "Check how the sample weights are computed.",
                evidence={"samples": len(W)}, place="data", where="sample_weight"))
        elif ctx.data.classification and ctx.data.Y.dim() == 1:
            for c in torch.unique(ctx.data.Y):
                w = W[ctx.data.Y == c]
                if len(w) >= 5 and bool((w == 0).all()):
                    findings.append(self.finding(
                        "warning", f"Every sample of class {int(c)} has weight zero: the model never learns it.",
                        "Check how the sample weights are computed; weights correlated with the label bias the "
                        "model.", evidence={"class": int(c), "samples": len(w)}, place="data", where="sample_weight"))
        return findings


class DataOrder(Check):
    """Data sorted by label and not shuffled: every batch sees a narrow slice of the targets."""

    id, title = "data_order", "Sorted, unshuffled data"
    cause = "data_order"

    def run(self, ctx):
        loader = ctx.data.loader
        if loader is not None and isinstance(loader.sampler, torch.utils.data.RandomSampler):
            return []
        Y = ctx.data.order_Y
        if Y.dim() != 1 or len(Y) < 10:
            raise Skip("needs one target per sample and at least 10 samples")
        y = Y.double()
        if float(y.std()) == 0:
            raise Skip("every target is the same")
        ranks = torch.argsort(torch.argsort(y)).double()
        index = torch.arange(len(y), dtype=torch.float64)
        rho = float(torch.corrcoef(torch.stack([ranks, index]))[0, 1])
        if abs(rho) < 0.9:
            return []
        where = "loader" if loader is not None else "data"
        return [self.finding(
            "warning", f"The {'loader yields' if loader is not None else 'data is'} samples sorted by target "
            f"(rank correlation with position {rho:.2f}) without shuffling.",
            "Shuffle the training data every epoch (DataLoader(..., shuffle=True)).",
            evidence={"rank_correlation": rho, "samples": len(y)}, place=where)]


class ConflictingDuplicates(Check):
    """The same input with different labels: the loss cannot reach zero, and the labels may be noisy."""

    id, title = "conflicting_duplicates", "Duplicate inputs with conflicting labels"
    cause = "conflicting_labels"

    def run(self, ctx):
        X, Y = inputs.flat(ctx.data.order_X), ctx.data.order_Y
        conflict = conflicting_rows(X, Y)
        count = int(conflict.sum())
        if not count:
            return []
        share = count / len(X)
        return [self.finding(
            "warning" if share >= 0.01 else "note",
            f"{count} samples ({share:.1%}) share their input with a sample of another label.",
            "Check the labels of the duplicated inputs; remove or merge the duplicates.",
            evidence={"conflicting_samples": count, "samples": len(X)}, place="data", where="labels")]


class TrainTestOverlap(Check):
    """Test samples that are also in the training set, exactly or nearly (a copy with rounding noise,
    re-encoded, resized): more test rows sit next to a training row than training rows sit next to
    each other."""

    id, title = "train_test_overlap", "Training and test sets overlap"
    cause = "train_test_overlap"
    # Of the median distance between a training row and its nearest other training row: a copy with noise of
    # a few % of each column's spread sits within it; independent draws only as often as training rows do
    # among themselves, and that share is subtracted (natural near-twins are not overlap).
    closeness = 0.15

    def run(self, ctx):
        test = ctx.test_data
        if test is None:
            raise Skip("no test data given (pass test_data=...)")
        train = inputs.flat(ctx.data.order_X).float()[:4000]
        tx = inputs.flat(test.order_X).float()[:1000]
        if train.shape[1] != tx.shape[1]:
            raise Skip(f"training rows have {train.shape[1]} values, test rows {tx.shape[1]}")
        mean, std = train.mean(0), train.std(0)
        # Columns are scaled by their spread, but no less than the median column's: a near-constant column
        # (an image's border pixel) would otherwise blow a copy's small noise up to a full distance.
        scale = std.clamp(min=float(std.median()))
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        a, b = (train - mean) / scale, (tx - mean) / scale
        to_train = _nearest(b, a)
        within = _nearest(a[:1000], a, exclude_self=True)
        typical = float(within.median())
        limit = max(self.closeness * typical, 1e-6 * a.shape[1] ** 0.5)
        close = to_train <= limit
        shared = int(close.sum())
        natural = float((within <= limit).float().mean()) * len(tx)  # as many as independent draws would have
        share = (shared - natural) / len(tx)
        if share < 0.01 or shared < 2 * natural:
            return []
        exact = int((to_train == 0).sum())
        return [self.finding(
            "error" if share >= 0.05 else "warning",
            f"{shared} test samples ({shared / len(tx):.1%}) are in the training data ({exact} exactly, "
            f"{shared - exact} up to small noise): the test score is inflated.",
            "Split before any augmentation or duplication, deduplicate (after rounding), and split by a group "
            "key if samples come in groups.", evidence={"shared_samples": shared, "exact": exact,
                                                     "test_samples": len(tx), "typical_distance": typical,
                                                     "expected_by_chance": natural},
            place="data", where="test_data")]


def _nearest(queries: torch.Tensor, rows: torch.Tensor, exclude_self: bool = False) -> torch.Tensor:
    """Each query's distance to its nearest row, in chunks (no queries x rows matrix of the whole data)."""
    best = []
    for start in range(0, len(queries), 256):
        d = torch.cdist(queries[start:start + 256], rows)
        if exclude_self:
            idx = torch.arange(start, start + len(d))
            d[torch.arange(len(d)), idx] = float("inf")
        best.append(d.min(1).values)
    return torch.cat(best)
