"""Checkup-phase bugs on tabular data and MLPs: what a practitioner writes before the first epoch."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from heldout_common import MLP, DataLoader, F, TensorDataset, nn, seed, split, tabular, torch  # noqa: E402

CASES = []


def bug(name, cause, where, note, where_also=None):
    def register(build):
        CASES.append({"name": name, "kind": "bug", "phase": "checkup", "cause": cause, "where": where,
                      "where_also": where_also or [], "onset": None, "build": build, "note": note})
        return build
    return register


def _setup(model, data, loss_fn, lr=1e-3, test_data=None, opt=None):
    opt = opt or torch.optim.Adam(model.parameters(), lr=lr)
    out = {"model": model, "data": data, "loss_fn": loss_fn, "optimizer": opt}
    if test_data is not None:
        out["test_data"] = test_data
    return out


@bug("wine_loss_reduction_none", "loss_not_scalar", "loss",
     "CrossEntropyLoss(reduction='none') kept from a per-sample weighting experiment")
def _():
    seed(0)
    X, y = tabular("wine")
    return _setup(MLP(13, (32, 32), 3), (X, y), nn.CrossEntropyLoss(reduction="none"))


@bug("iris_labels_one_based", "label_range", "data", "class ids 1..3 read from a CSV, 3 outputs",
     where_also=["loss"])
def _():
    seed(1)
    X, y = tabular("iris")
    return _setup(MLP(4, (16,), 3), (X, y + 1), nn.CrossEntropyLoss())


@bug("digits_labels_float", "label_dtype", "data", "labels loaded as float32 from a numpy array",
     where_also=["loss"])
def _():
    seed(2)
    X, y = tabular("digits")
    return _setup(MLP(64, (64,), 10), (X, y.float()), nn.CrossEntropyLoss())


@bug("breast_cancer_bce_minus_one_plus_one", "bce_targets_not_probabilities", "data",
     "SVM-style targets in {-1, +1} fed to BCEWithLogitsLoss", where_also=["loss"])
def _():
    seed(3)
    X, y = tabular("breast_cancer")
    target = (2.0 * y.float() - 1.0).unsqueeze(1)
    return _setup(MLP(30, (32,), 1), (X, target), nn.BCEWithLogitsLoss())


@bug("wine_bce_on_class_ids", "bce_targets_not_probabilities", "data",
     "three-class ids 0..2 passed to BCEWithLogitsLoss of a single output", where_also=["loss"])
def _():
    seed(4)
    X, y = tabular("wine")
    return _setup(MLP(13, (32,), 1), (X, y.float().unsqueeze(1)), nn.BCEWithLogitsLoss())


@bug("wine_nll_on_logits", "nll_without_log_softmax", "loss", "NLLLoss on raw logits (no log_softmax)",
     where_also=["head"])
def _():
    seed(5)
    X, y = tabular("wine")
    return _setup(MLP(13, (32, 32), 3), (X, y), nn.NLLLoss())


@bug("digits_softmax_then_cross_entropy", "double_softmax", "net.5",
     "nn.Softmax as the model's last layer, then CrossEntropyLoss", where_also=["loss"])
def _():
    seed(6)
    X, y = tabular("digits")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10),
                                     nn.Softmax(dim=1))

        def forward(self, x):
            return self.net(x)
    return _setup(Net(), (X, y), nn.CrossEntropyLoss())


@bug("breast_cancer_sigmoid_then_bce_with_logits", "double_softmax", "out_act",
     "nn.Sigmoid in the model and BCEWithLogitsLoss as the loss", where_also=["loss"])
def _():
    seed(7)
    X, y = tabular("breast_cancer")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(30, 32), nn.ReLU())
            self.head = nn.Linear(32, 1)
            self.out_act = nn.Sigmoid()

        def forward(self, x):
            return self.out_act(self.head(self.body(x)))
    return _setup(Net(), (X, y.float().unsqueeze(1)), nn.BCEWithLogitsLoss())


@bug("diabetes_mse_n1_against_n", "loss_shape_broadcast", "loss",
     "regression head (N, 1) against targets (N,): MSELoss broadcasts to (N, N)")
def _():
    seed(8)
    X, y = tabular("diabetes")
    y = (y - y.mean()) / y.std()
    return _setup(MLP(10, (32, 32), 1), (X, y), nn.MSELoss())


@bug("breast_cancer_l1_n1_against_n", "loss_shape_broadcast", "loss",
     "probability head (N, 1) against labels (N,) with L1Loss")
def _():
    seed(9)
    X, y = tabular("breast_cancer")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = MLP(30, (16,), 1)

        def forward(self, x):
            return torch.sigmoid(self.mlp(x))
    return _setup(Net(), (X, y.float()), nn.L1Loss())


class LogLikelihood(nn.Module):
    """A 'log-likelihood' objective written to be maximised, then handed to a minimiser."""

    def forward(self, logits, y):
        return F.log_softmax(logits, 1).gather(1, y[:, None]).mean()


@bug("wine_log_likelihood_minimised", "loss_wrong_sign", "loss",
     "log-likelihood (to maximise) minimised by the optimizer")
def _():
    seed(10)
    X, y = tabular("wine")
    return _setup(MLP(13, (32,), 3), (X, y), LogLikelihood())


@bug("digits_sgd_lr_20", "lr_too_high", "optimizer", "SGD with lr=20 (a typo for 0.2)")
def _():
    seed(11)
    X, y = tabular("digits")
    model = MLP(64, (128, 64), 10)
    return _setup(model, (X, y), nn.CrossEntropyLoss(), opt=torch.optim.SGD(model.parameters(), lr=20.0))


@bug("breast_cancer_adam_lr_1", "lr_too_high", "optimizer", "Adam with lr=1 (SGD's value kept)")
def _():
    seed(12)
    X, y = tabular("breast_cancer")
    model = MLP(30, (64, 64), 2)
    return _setup(model, (X, y), nn.CrossEntropyLoss(), opt=torch.optim.Adam(model.parameters(), lr=1.0))


@bug("digits_adam_lr_1e-7", "lr_too_low", "optimizer", "Adam with lr=1e-7 (an exponent typo)")
def _():
    seed(13)
    X, y = tabular("digits")
    model = MLP(64, (64,), 10)
    return _setup(model, (X, y), nn.CrossEntropyLoss(), opt=torch.optim.Adam(model.parameters(), lr=1e-7))


@bug("wine_sgd_lr_1e-6", "lr_too_low", "optimizer", "plain SGD with lr=1e-6")
def _():
    seed(14)
    X, y = tabular("wine")
    model = MLP(13, (32,), 3)
    return _setup(model, (X, y), nn.CrossEntropyLoss(), opt=torch.optim.SGD(model.parameters(), lr=1e-6))


@bug("digits_adamw_weight_decay_50", "weight_decay_too_high", "optimizer",
     "AdamW weight_decay=50 (meant 5e-4): weights shrink by half every step")
def _():
    seed(15)
    X, y = tabular("digits")
    model = MLP(64, (64,), 10)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=50.0)
    return _setup(model, (X, y), nn.CrossEntropyLoss(), opt=opt)


@bug("iris_sgd_weight_decay_5", "weight_decay_too_high", "optimizer", "SGD weight_decay=5 with lr=0.1")
def _():
    seed(16)
    X, y = tabular("iris")
    model = MLP(4, (32,), 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5.0)
    return _setup(model, (X, y), nn.CrossEntropyLoss(), opt=opt)


@bug("housing_prices_in_dollars", "target_scale", "data",
     "generated house prices in dollars (1e5..1e6) regressed with MSE on standardised features")
def _():
    seed(17)
    g = torch.Generator().manual_seed(17)
    X = torch.randn(600, 8, generator=g)
    price = 350_000 + 90_000 * X[:, 0] + 40_000 * X[:, 1] - 25_000 * X[:, 2] * X[:, 3]
    price = price + 15_000 * torch.randn(600, generator=g)
    return _setup(MLP(8, (64, 64), 1), (X, price.unsqueeze(1)), nn.MSELoss())


@bug("diabetes_target_times_1000", "target_scale", "data", "disease progression in thousandths")
def _():
    seed(18)
    X, y = tabular("diabetes")
    return _setup(MLP(10, (32,), 1), (X, (y * 1000).unsqueeze(1)), nn.MSELoss())


@bug("breast_cancer_diagnosis_column_left_in", "label_leakage", "data",
     "a 'diagnosis code' column derived from the label left among the features")
def _():
    seed(19)
    X, y = tabular("breast_cancer")
    code = (y.float() * 2 - 1) + 0.05 * torch.randn(len(y))
    X = torch.cat([X[:, :12], code[:, None], X[:, 12:]], 1)
    return _setup(MLP(31, (32,), 2), (X, y), nn.CrossEntropyLoss())


@bug("wine_class_mean_feature", "label_leakage", "data",
     "target encoding computed on the whole set with the label: a feature = the class's mean alcohol")
def _():
    seed(20)
    X, y = tabular("wine")
    enc = torch.tensor([0.8, -1.1, 0.3])[y] + 0.01 * torch.randn(len(y))
    X = torch.cat([X, enc[:, None]], 1)
    return _setup(MLP(14, (32,), 3), (X, y), nn.CrossEntropyLoss())


@bug("wine_test_rows_are_noisy_train_rows", "train_test_overlap", "data",
     "augmented copies (tiny noise) of training rows ended up in the test set")
def _():
    seed(21)
    X, y = tabular("wine")
    (Xtr, ytr), (Xte, yte) = split(X, y)
    dup = torch.arange(0, 60)
    Xte = torch.cat([Xte[:10], Xtr[dup] + 1e-3 * torch.randn(60, 13)])
    yte = torch.cat([yte[:10], ytr[dup]])
    return _setup(MLP(13, (32,), 3), (Xtr, ytr), nn.CrossEntropyLoss(), test_data=(Xte, yte))


@bug("breast_cancer_test_rows_rounded", "train_test_overlap", "data",
     "the test set is training rows exported to CSV with 3 decimals and read back")
def _():
    seed(22)
    X, y = tabular("breast_cancer")
    (Xtr, ytr), (Xte, yte) = split(X, y)
    Xte = torch.cat([Xte[:40], torch.round(Xtr[:80] * 1000) / 1000])
    yte = torch.cat([yte[:40], ytr[:80]])
    return _setup(MLP(30, (32,), 2), (Xtr, ytr), nn.CrossEntropyLoss(), test_data=(Xte, yte))


@bug("wine_bn_last_batch_of_one", "batchnorm_batch_of_one", "body.1",
     "161 rows in batches of 32 without drop_last: the last batch has one row for BatchNorm1d",
     where_also=["data"])
def _():
    seed(23)
    X, y = tabular("wine", n=161)
    loader = DataLoader(TensorDataset(X, y), batch_size=32, shuffle=True)
    return _setup(MLP(13, (32, 32), 3, batchnorm=True), loader, nn.CrossEntropyLoss())


@bug("breast_cancer_unscaled", "input_scale", "data",
     "raw features: areas in the thousands next to smoothness around 0.1")
def _():
    seed(24)
    X, y = tabular("breast_cancer", standardise=False)
    return _setup(MLP(30, (64, 32), 2), (X, y), nn.CrossEntropyLoss())


@bug("breast_cancer_missing_values", "non_finite_inputs", "data",
     "missing measurements left as NaN (about 3 % of cells)")
def _():
    seed(25)
    X, y = tabular("breast_cancer")
    holes = torch.rand(X.shape, generator=torch.Generator().manual_seed(25)) < 0.03
    X = X.masked_fill(holes, float("nan"))
    return _setup(MLP(30, (32,), 2), (X, y), nn.CrossEntropyLoss())


@bug("digits_negative_bias_init", "dead_relu", "body.1",
     "first layer's biases set to -8 'for sparse activations': every ReLU is off", where_also=["body.0"])
def _():
    seed(26)
    X, y = tabular("digits")
    model = MLP(64, (64, 64), 10)
    nn.init.constant_(model.body[0].bias, -8.0)
    return _setup(model, (X, y), nn.CrossEntropyLoss())


@bug("breast_cancer_frozen_features_by_detach", "detached_graph", "encoder",
     "a feature-extraction snippet's .detach() kept: the encoder never learns")
def _():
    seed(27)
    X, y = tabular("breast_cancer")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Sequential(nn.Linear(30, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU())
            self.head = nn.Linear(32, 2)

        def forward(self, x):
            feats = self.encoder(x).detach()
            return self.head(feats)
    return _setup(Net(), (X, y), nn.CrossEntropyLoss())


@bug("wine_no_grad_projection", "no_gradient", "proj",
     "the input projection runs under torch.no_grad(), copied from inference code")
def _():
    seed(28)
    X, y = tabular("wine")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(13, 32)
            self.mlp = nn.Sequential(nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 3))

        def forward(self, x):
            with torch.no_grad():
                h = self.proj(x)
            return self.mlp(h)
    return _setup(Net(), (X, y), nn.CrossEntropyLoss())


@bug("digits_optimizer_head_only", "optimizer_missing_params", "optimizer",
     "optimizer built on model.head.parameters() while the body is meant to train (not frozen)",
     where_also=["body"])
def _():
    seed(29)
    X, y = tabular("digits")
    model = MLP(64, (64, 64), 10)
    opt = torch.optim.Adam(model.head.parameters(), lr=1e-3)
    return _setup(model, (X, y), nn.CrossEntropyLoss(), opt=opt)


@bug("wine_model_cell_rerun", "optimizer_missing_params", "optimizer",
     "the model cell was run again after the optimizer cell: the optimizer holds the old model's tensors")
def _():
    seed(30)
    X, y = tabular("wine")
    model = MLP(13, (32,), 3)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model = MLP(13, (32,), 3)
    return _setup(model, (X, y), nn.CrossEntropyLoss(), opt=opt)


class ManualLogSoftmax(nn.Module):
    def __init__(self, d_in, classes):
        super().__init__()
        self.fc = nn.Linear(d_in, classes)

    def forward(self, h):
        return torch.log(torch.softmax(self.fc(h), dim=1))


@bug("digits_log_of_softmax_head", "unstable_math", "head",
     "head computes torch.log(torch.softmax(...)) for NLLLoss; logits are large", where_also=["head.fc"])
def _():
    seed(31)
    X, y = tabular("digits")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(64, 128), nn.ReLU())
            self.head = ManualLogSoftmax(128, 10)
            nn.init.normal_(self.head.fc.weight, std=3.0)

        def forward(self, x):
            return self.head(self.body(x * 4))
    return _setup(Net(), (X, y), nn.NLLLoss())


class HandBCE(nn.Module):
    """Binary cross-entropy written out by hand: log(sigmoid) reaches log(0) for confident logits."""

    def forward(self, z, y):
        p = torch.sigmoid(z.squeeze(1))
        return -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()


@bug("breast_cancer_hand_written_bce", "unstable_math", "loss",
     "BCE by hand from sigmoid probabilities (log(0) once a logit passes ~17)")
def _():
    seed(32)
    X, y = tabular("breast_cancer")
    model = MLP(30, (64,), 1)
    nn.init.normal_(model.head.weight, std=4.0)
    return _setup(model, (X * 3, y.float()), HandBCE())


@bug("wine_functional_dropout_always_on", "dropout_left_on", "block",
     "F.dropout(h, 0.3) without training=self.training: eval outputs are random")
def _():
    seed(33)
    X, y = tabular("wine")

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(32, 32)

        def forward(self, h):
            return F.dropout(F.relu(self.fc(h)), 0.3)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp, self.block, self.out = nn.Linear(13, 32), Block(), nn.Linear(32, 3)

        def forward(self, x):
            return self.out(self.block(F.relu(self.inp(x))))
    return _setup(Net(), (X, y), nn.CrossEntropyLoss())


@bug("digits_sorted_by_label_no_shuffle", "data_not_shuffled", "data",
     "rows sorted by label and a DataLoader with shuffle=False")
def _():
    seed(34)
    X, y = tabular("digits")
    order = torch.argsort(y, stable=True)
    loader = DataLoader(TensorDataset(X[order], y[order]), batch_size=64, shuffle=False)
    return _setup(MLP(64, (64,), 10), loader, nn.CrossEntropyLoss())


@bug("wine_duplicates_relabelled", "conflicting_labels", "data",
     "two annotators' files concatenated: 40 rows appear twice with different labels")
def _():
    seed(35)
    X, y = tabular("wine")
    idx = torch.arange(40)
    X = torch.cat([X, X[idx]])
    y = torch.cat([y, (y[idx] + 1) % 3])
    order = torch.randperm(len(X), generator=torch.Generator().manual_seed(35))
    return _setup(MLP(13, (32,), 3), (X[order], y[order]), nn.CrossEntropyLoss())


@bug("digits_normal_init_std1", "bad_init", "body",
     "every Linear re-initialised with normal(0, 1) 'to break symmetry': activations grow ~10x per layer",
     where_also=["body.0", "body.2", "body.4", "head"])
def _():
    seed(36)
    X, y = tabular("digits")
    model = MLP(64, (256, 256, 256), 10)
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=1.0)
    return _setup(model, (X, y), nn.CrossEntropyLoss())


@bug("breast_cancer_deep_sigmoid", "vanishing_gradients", "body.0",
     "a 10-layer sigmoid MLP with default init: the first layers get almost no gradient",
     where_also=["body", "body.2", "body.4"])
def _():
    seed(37)
    X, y = tabular("breast_cancer")
    model = MLP(30, (32,) * 10, 2, act=nn.Sigmoid)
    return _setup(model, (X, y), nn.CrossEntropyLoss())


class BatchStandardise(nn.Module):
    """Standardises features with the batch's own mean and std, in training and in eval alike."""

    def forward(self, x):
        return (x - x.mean(0, keepdim=True)) / (x.std(0, keepdim=True) + 1e-5)


@bug("wine_hand_made_batch_standardisation", "batch_dependence", "norm",
     "a hand-made normalisation layer uses the batch's statistics even in eval mode")
def _():
    seed(38)
    X, y = tabular("wine", standardise=False)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = BatchStandardise()
            self.mlp = MLP(13, (32,), 3)

        def forward(self, x):
            return self.mlp(self.norm(x))
    return _setup(Net(), (X, y), nn.CrossEntropyLoss())


assert len({c["name"] for c in CASES}) == len(CASES)
