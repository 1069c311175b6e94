"""Planted-bug training set-ups for the doctor, each with a healthy twin (identical but for the bug).

``CASES`` lists one `Case` per planted bug: the check that must find it and the place it must be
found at. ``case.build(bug=True, seed=s)`` gives the keyword arguments of `activis.checkup`;
``bug=False`` gives the twin. Shared by tests/test_doctor*.py and benchmarks/bench_doctor.py.
Data: scikit-learn's bundled datasets or generated, never downloaded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

# ------------------------------------------------------------------ data


def _standardise(X):
    std = X.std(0)
    return ((X - X.mean(0)) / np.where(std > 0, std, 1)).astype(np.float32)


def digits(n=600, seed=0):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    idx = np.random.default_rng(seed).permutation(len(X))[:n]
    return (X[idx] / 16.0).astype(np.float32), y[idx]


def digit_images(n=600, seed=0):
    X, y = digits(n, seed)
    return X.reshape(-1, 1, 8, 8), y


def tabular(name: str, n=600, seed=0, scaled=True):
    from sklearn import datasets

    X, y = getattr(datasets, f"load_{name}")(return_X_y=True)
    idx = np.random.default_rng(seed).permutation(len(X))[:n]
    X, y = X[idx], y[idx]
    return (_standardise(X) if scaled else X.astype(np.float32)), y


def diabetes(n=442, seed=0):
    X, y = tabular("diabetes", n, seed)
    return X, ((y - y.mean()) / y.std()).astype(np.float32)


def sequences(n=600, seed=0, steps=12, features=4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, steps, features)).astype(np.float32)
    return X, (X[:, :, 0].sum(1) > 0).astype(np.int64)


# ------------------------------------------------------------------ models


class MLP(nn.Module):
    """Three Linear layers; ``bug`` plants one mistake in ``forward`` (resolved when torch.fx traces it)."""

    def __init__(self, n_in, n_out, hidden=64, bug=None, act=nn.ReLU, regression=False):
        super().__init__()
        self.bug, self.regression = bug, regression
        self.fc1, self.act1 = nn.Linear(n_in, hidden), act()
        self.fc2, self.act2 = nn.Linear(hidden, hidden), act()
        self.fc3 = nn.Linear(hidden, n_out)

    def forward(self, x):
        h = self.fc1(x)
        if self.bug == "sqrt":
            h = torch.sqrt(h)
        h = self.act1(h)
        if self.bug == "times_zero":
            h = h * 0.0
        if self.bug == "functional_dropout":
            h = F.dropout(h, 0.3)
        if self.bug != "skip_layer":
            h = self.act2(self.fc2(h))
        out = self.fc3(h)
        if self.bug == "softmax_out":
            return torch.softmax(out, 1)
        if self.bug == "log_of_softmax":
            return torch.log(torch.softmax(out, 1))
        if self.bug == "final_relu":
            out = torch.relu(out)
        return out.squeeze(-1) if self.regression and self.bug != "column_output" else out


class CNN(nn.Module):
    def __init__(self, classes=10, bug=None, batchnorm=False):
        super().__init__()
        self.bug = bug
        norm = [nn.BatchNorm2d(8)] if batchnorm else []
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), *norm, nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2))
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        h = self.features(x)
        if self.bug == "detach":
            h = h.detach()
        out = self.fc(torch.flatten(h, 1))
        return torch.softmax(out, 1) if self.bug == "softmax_out" else out


class RNN(nn.Module):
    def __init__(self, features=4, classes=2, bug=None, cell=nn.GRU):
        super().__init__()
        self.bug = bug
        self.rnn = cell(features, 32, batch_first=True)
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        out, _ = self.rnn(x)
        last = out[:, -1]
        if self.bug == "functional_dropout":
            last = F.dropout(last, 0.3)
        return self.fc(last)


# ------------------------------------------------------------------ cases


@dataclass
class Case:
    name: str
    arch: str  # "MLP", "CNN" or "RNN"
    check: str  # the check that must find the bug
    where: str  # where it must be found: Finding.where or Finding.node, or the place kind
    make: Callable[[bool, int], dict]

    def build(self, bug: bool = True, seed: int = 0) -> dict:
        torch.manual_seed(seed)
        return self.make(bug, seed)

    def found(self, report) -> bool:
        """Whether the report names this case's check at this case's place."""
        return any(f.check == self.check and self.where in (f.where, f.node, f.place) for f in report.findings)


def _setup(model, data, loss=None, lr=1e-3, **extra):
    loss = loss or nn.CrossEntropyLoss()
    return {"model": model, "data": data, "loss_fn": loss,
            "optimizer": torch.optim.Adam(model.parameters(), lr=lr), **extra}


def _mlp_digits(bug_name, **kw):
    def make(bug, seed):
        return _setup(MLP(64, 10, bug=bug_name if bug else None, **kw), digits(seed=seed))
    return make


def _reinit(make_model, change, data, loss=None):
    def make(bug, seed):
        model = make_model()
        if bug:
            with torch.no_grad():
                change(model)
        return _setup(model, data(seed), loss)
    return make


def _optimizer_rebuilt(bug, seed):
    model = MLP(64, 10)
    setup = _setup(model, digits(seed=seed))
    if bug:  # the model was rebuilt after the optimizer was made
        setup["model"] = MLP(64, 10)
    return setup


def _zero_lr(bug, seed):
    model = MLP(30, 2)
    return _setup(model, tabular("breast_cancer", seed=seed), lr=0.0 if bug else 1e-3)


def _partial_optimizer(bug, seed):
    model = CNN()
    setup = _setup(model, digit_images(seed=seed))
    if bug:
        setup["optimizer"] = torch.optim.SGD(model.fc.parameters(), lr=0.1)
    return setup


def _column_output(bug, seed):
    model = MLP(10, 1, bug="column_output" if bug else None, regression=True)
    return _setup(model, diabetes(seed=seed), nn.MSELoss())


def _final_relu(bug, seed):
    model = MLP(10, 1, bug="final_relu" if bug else None, regression=True)
    return _setup(model, diabetes(seed=seed), nn.MSELoss())


def _shuffled_labels(data, make_model):
    def make(bug, seed):
        X, y = data(seed=seed)
        if bug:  # the labels were shuffled on their own
            y = np.random.default_rng(seed + 7).permutation(y)
        return _setup(make_model(), (X, y))
    return make


def _negated_loss(bug, seed):
    loss = nn.CrossEntropyLoss()
    return _setup(MLP(13, 3), tabular("wine", seed=seed), (lambda o, y: -loss(o, y)) if bug else loss)


def _custom_cross_entropy(bug, seed):
    def naive(out, y):  # log of a softmax that reaches 0 at confident predictions
        return -(torch.log(torch.softmax(out, 1)) * F.one_hot(y, out.shape[1])).sum(1).mean()

    def stable(out, y):
        return -(F.log_softmax(out, 1) * F.one_hot(y, out.shape[1])).sum(1).mean()

    return _setup(MLP(4, 3), tabular("iris", seed=seed), naive if bug else stable)


def _nan_inputs(data, make_model):
    def make(bug, seed):
        X, y = data(seed=seed)
        if bug:
            X = X.copy()
            X.reshape(len(X), -1)[np.random.default_rng(seed).integers(0, len(X), 5), 0] = np.nan
        return _setup(make_model(), (X, y))
    return make


def _unscaled(data, make_model, factor=None):
    def make(bug, seed):
        X, y = data(seed=seed)
        if bug:
            X = X * factor if factor is not None else tabular("breast_cancer", seed=seed, scaled=False)[0]
        return _setup(make_model(), (X, y))
    return make


def _bias(value, attr):
    def change(model):
        layer = model
        for part in attr.split("."):
            layer = layer[int(part)] if part.isdigit() else getattr(layer, part)
        layer.bias.fill_(value)
    return change


def _stray_batchnorm(bug, seed):
    model = CNN(batchnorm=True)
    model.eval()
    if bug:  # back in training mode after model.eval()
        model.features[1].train()
    return _setup(model, digit_images(seed=seed))


def _sorted_loader(bug, seed):
    X, y = digits(seed=seed)
    if bug:
        order = np.argsort(y, kind="stable")
        X, y = X[order], y[order]
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(X), torch.from_numpy(y))
    return _setup(MLP(64, 10), torch.utils.data.DataLoader(dataset, batch_size=32, shuffle=not bug))


def _sorted_regression(bug, seed):
    X, y = diabetes(seed=seed)
    if bug:
        order = np.argsort(y, kind="stable")
        X, y = X[order], y[order]
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(X), torch.from_numpy(y))
    return _setup(MLP(10, 1, regression=True), torch.utils.data.DataLoader(dataset, batch_size=32, shuffle=not bug),
                  nn.MSELoss())


def _zero_weights(bug, seed):
    X, y = tabular("wine", seed=seed)
    w = np.ones(len(y), dtype=np.float32)
    if bug:
        w[y == 2] = 0.0
    return _setup(MLP(13, 3), (X, y, w))


def _conflicting(bug, seed):
    X, y = tabular("breast_cancer", seed=seed)
    if bug:  # 40 inputs repeated with the other label
        X = np.concatenate([X, X[:40]])
        y = np.concatenate([y, 1 - y[:40]])
    return _setup(MLP(30, 2), (X, y))


def _overlap(bug, seed):
    X, y = digits(n=900, seed=seed)
    train, test = (X[:600], y[:600]), (X[600:], y[600:])
    if bug:  # the test set was cut from data that includes the training set
        test = (X[500:800], y[500:800])
    return _setup(MLP(64, 10), train, test_data=test)


def _scaled_layer(factor):
    def change(model):
        model.fc2.weight.mul_(factor)
    return change


def _saturating(model):
    model.fc1.weight.mul_(30)


def _images(bug_name, **kw):
    def make(bug, seed):
        return _setup(CNN(bug=bug_name if bug else None, **kw), digit_images(seed=seed))
    return make


def _rnn(bug_name, cell=nn.GRU):
    def make(bug, seed):
        return _setup(RNN(bug=bug_name if bug else None, cell=cell), sequences(seed=seed))
    return make


def _log_softmax_nll(bug, seed):
    model = MLP(64, 10, bug="log_of_softmax" if bug else None)
    if not bug:
        return _setup(model, digits(seed=seed))
    return _setup(model, digits(seed=seed), nn.NLLLoss())


def _bce_signs(bug, seed):
    X, y = tabular("breast_cancer", seed=seed)
    y = (2.0 * y - 1.0 if bug else y).astype(np.float32)  # -1/+1 labels into BCE
    return _setup(MLP(30, 1, regression=True), (X, y), nn.BCEWithLogitsLoss())


def _nll_on_logits(bug, seed):
    model = MLP(64, 10) if bug else nn.Sequential(MLP(64, 10), nn.LogSoftmax(1))
    return _setup(model, digits(seed=seed), nn.NLLLoss())


def _raw_targets(bug, seed):
    X, y = tabular("diabetes", seed=seed)
    y = y.astype(np.float32) if bug else ((y - y.mean()) / y.std()).astype(np.float32)
    return _setup(MLP(10, 1, regression=True), (X, y), nn.MSELoss())


def _blank_images(bug, seed):
    X, y = digit_images(seed=seed)
    if bug:  # images that failed to load, kept as zeros
        X = X.copy()
        X[np.random.default_rng(seed).permutation(len(X))[:60]] = 0.0
    return _setup(CNN(), (X, y))


def _leaked_label(bug, seed):
    X, y = tabular("breast_cancer", seed=seed)
    rng = np.random.default_rng(seed)
    extra = (y + 0.01 * rng.normal(size=len(y))) if bug else rng.normal(size=len(y))  # e.g. "diagnosis_code"
    return _setup(MLP(31, 2), (np.column_stack([X, extra]).astype(np.float32), y))


class BNMLP(nn.Module):
    def __init__(self, n_in=64, n_out=10):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_in, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, n_out))

    def forward(self, x):
        return self.net(x)


def _last_batch_of_one(bug, seed):
    X, y = digits(n=601, seed=seed)  # 601 = 12 x 50 + 1
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(X), torch.from_numpy(y))
    return _setup(BNMLP(), torch.utils.data.DataLoader(dataset, batch_size=50, shuffle=True, drop_last=not bug))


class SeqGRU(nn.Module):
    """A GRU over (N, T, F) batches; the planted bug reshapes to time-major with view, not permute."""

    def __init__(self, bug=False, features=4, classes=2):
        super().__init__()
        self.bug = bug
        self.rnn = nn.GRU(features, 32)
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        n, t, f = x.shape
        seq = x.reshape(t, n, f) if self.bug else x.permute(1, 0, 2)
        out, _ = self.rnn(seq)
        return self.fc(out[-1])


def _view_not_permute(bug, seed):
    return _setup(SeqGRU(bug), sequences(seed=seed))


CASES = [
    Case("multiplied by zero", "MLP", "input_dependence", "mul", _mlp_digits("times_zero")),
    Case("skipped layer", "MLP", "gradient_coverage", "fc2.weight", _mlp_digits("skip_layer")),
    Case("detached features", "CNN", "gradient_coverage", "detach", _images("detach")),
    Case("optimizer of a rebuilt model", "MLP", "optimizer", "optimizer", _optimizer_rebuilt),
    Case("zero learning rate", "MLP", "optimizer_settings", "optimizer", _zero_lr),
    Case("optimizer misses the features", "CNN", "optimizer", "optimizer", _partial_optimizer),
    Case("(N, 1) output against (N,) target", "MLP", "loss_shapes", "loss", _column_output),
    Case("final ReLU on a regression", "MLP", "overfit_batch", "model", _final_relu),
    Case("shuffled labels", "MLP", "label_coupling", "labels", _shuffled_labels(digits, lambda: MLP(64, 10))),
    Case("shuffled labels, GRU", "RNN", "label_coupling", "labels", _shuffled_labels(sequences, RNN)),
    Case("negated loss", "MLP", "loss_sign", "loss", _negated_loss),
    Case("log of softmax in a custom loss", "MLP", "loss_sign", "loss", _custom_cross_entropy),
    Case("NaN in the inputs", "RNN", "non_finite", "inputs", _nan_inputs(sequences, RNN)),
    Case("sqrt of a Linear output", "MLP", "non_finite", "sqrt", _mlp_digits("sqrt")),
    Case("log(softmax) before NLLLoss", "MLP", "unstable_math", "log", _log_softmax_nll),
    Case("raw breast-cancer features", "MLP", "input_scale", "inputs",
         _unscaled(lambda seed: tabular("breast_cancer", seed=seed), lambda: MLP(30, 2))),
    Case("0-255 pixels", "CNN", "input_scale", "inputs", _unscaled(digit_images, CNN, factor=255.0)),
    Case("one layer initialised 100x too large", "MLP", "init_scale", "fc2",
         _reinit(lambda: MLP(64, 10), _scaled_layer(100.0), lambda seed: digits(seed=seed))),
    Case("tanh inputs in the tails", "MLP", "saturation", "act1",
         _reinit(lambda: MLP(64, 10, act=nn.Tanh), _saturating, lambda seed: digits(seed=seed))),
    Case("negative bias before ReLU", "MLP", "dead_relu", "act1",
         _reinit(lambda: MLP(64, 10), _bias(-10.0, "fc1"), lambda seed: digits(seed=seed))),
    Case("negative bias before ReLU, CNN", "CNN", "dead_relu", "features_1",
         _reinit(CNN, _bias(-10.0, "features.0"), lambda seed: digit_images(seed=seed))),
    Case("F.dropout always on", "MLP", "randomness", "dropout", _mlp_digits("functional_dropout")),
    Case("F.dropout always on, GRU", "RNN", "randomness", "dropout", _rnn("functional_dropout")),
    Case("BatchNorm back in training mode", "CNN", "randomness", "features.1", _stray_batchnorm),
    Case("sorted, unshuffled loader", "MLP", "batch_labels", "loader", _sorted_loader),
    Case("sorted regression targets", "MLP", "data_order", "loader", _sorted_regression),
    Case("a class weighted zero", "MLP", "batch_weights", "sample_weight", _zero_weights),
    Case("duplicates with flipped labels", "MLP", "conflicting_duplicates", "labels", _conflicting),
    Case("test set overlaps training", "MLP", "train_test_overlap", "test_data", _overlap),
    Case("softmax before CrossEntropyLoss", "CNN", "double_softmax", "softmax", _images("softmax_out")),
    Case("-1/+1 labels into BCEWithLogitsLoss", "MLP", "labels_fit_loss", "labels", _bce_signs),
    Case("raw logits into NLLLoss", "MLP", "labels_fit_loss", "loss", _nll_on_logits),
    Case("raw regression targets", "MLP", "target_scale", "labels", _raw_targets),
    Case("blank images", "CNN", "blank_inputs", "inputs", _blank_images),
    Case("the label left among the features", "MLP", "leakage", "data", _leaked_label),
    Case("last batch of one into BatchNorm1d", "MLP", "batchnorm_batch_of_one", "loader", _last_batch_of_one),
    Case("view instead of permute", "RNN", "batch_dependence", "reshape", _view_not_permute),
]

# healthy set-ups beyond the twins: standard recipes that must stay silent
HEALTHY = {
    "LSTM on sequences": lambda seed: _setup(RNN(cell=nn.LSTM), sequences(seed=seed)),
    "CNN with BatchNorm": lambda seed: _setup(CNN(batchnorm=True), digit_images(seed=seed)),
    "MLP with nn.Dropout on wine": lambda seed: _setup(
        nn.Sequential(nn.Linear(13, 64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 3)), tabular("wine", seed=seed)),
    "tanh MLP on iris": lambda seed: _setup(MLP(4, 3, act=nn.Tanh), tabular("iris", seed=seed)),
}
