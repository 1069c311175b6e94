"""Healthy recipes on tabular data and CNNs that a doctor must stay silent on, in checkup and in a watched run.

A recipe returns its set-up; keys starting with "_" say how it trains (batch size, per-sample loss, ...)."""

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from heldout_common import (  # noqa: E402
    MLP,
    F,
    ResNetTiny,
    SmallCNN,
    batches,
    digit_images,
    mse,
    nn,
    r2,
    register_healthy,
    seed,
    split,
    tabular,
    torch,
)

CASES = []
STEPS = 150


def healthy(name, note, steps=STEPS):
    return register_healthy(CASES, name, note, steps)


def _digits_split():
    X, y = tabular("digits")
    return split(X, y)


@healthy("digits_label_smoothing", "CrossEntropyLoss(label_smoothing=0.1): the loss floor is ~0.5, not 0")
def _():
    seed(200)
    train, test = _digits_split()
    model = MLP(64, (128, 64), 10)
    return {"model": model, "data": train, "test_data": test, "loss_fn": nn.CrossEntropyLoss(label_smoothing=0.1),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3),
            "_loss": lambda out, y: F.cross_entropy(out, y, reduction="none", label_smoothing=0.1)}


def warmup_cosine(opt, warmup, total):
    def factor(step):
        if step < warmup:
            return step / warmup
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))
    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


@healthy("digits_warmup_from_zero_then_cosine", "AdamW, linear warm-up from lr 0 over 30 steps, cosine decay")
def _():
    seed(201)
    train, test = _digits_split()
    model = MLP(64, (128, 64), 10)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    return {"model": model, "data": train, "test_data": test, "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "scheduler": warmup_cosine(opt, 30, STEPS)}


@healthy("cnn_multistep_milestones_in_iterations", "SGD momentum 0.9, MultiStepLR milestones [80, 120] in "
         "iterations, stepped every batch (iteration-based schedule, as detectron does)")
def _():
    seed(202)
    X, y = digit_images()
    model = SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "scheduler": torch.optim.lr_scheduler.MultiStepLR(opt, [80, 120], gamma=0.1)}


def _imbalanced_breast_cancer():
    X, y = tabular("breast_cancer")
    keep = (y == 1) | (torch.arange(len(y)) % 5 == 0)  # class 0 (malignant) kept one row in five: ~10 %
    return X[keep], y[keep]


@healthy("breast_cancer_imbalanced_class_weights", "one class is ~10 % of rows; CrossEntropyLoss with inverse "
         "frequency class weights")
def _():
    seed(203)
    X, y = _imbalanced_breast_cancer()
    counts = torch.bincount(y, minlength=2).float()
    w = counts.sum() / (2 * counts)
    model = MLP(30, (32,), 2)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(weight=w),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3), "_batch": 32,
            "_loss": lambda out, t: F.cross_entropy(out, t, weight=w, reduction="none")}


@healthy("breast_cancer_bce_pos_weight", "single logit, BCEWithLogitsLoss(pos_weight=neg/pos) on imbalanced rows")
def _():
    seed(204)
    X, y = _imbalanced_breast_cancer()
    y = 1 - y  # the rare class is the positive one
    pos_weight = (y == 0).sum() / (y == 1).sum()
    model = MLP(30, (32,), 1)
    target = y.float().unsqueeze(1)
    return {"model": model, "data": (X, target), "loss_fn": nn.BCEWithLogitsLoss(pos_weight=pos_weight),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3), "_batch": 32,
            "_loss": lambda out, t: F.binary_cross_entropy_with_logits(out, t, pos_weight=pos_weight,
                                                                       reduction="none").squeeze(1),
            "_metric": lambda out, t: float(((out > 0).float() == t).float().mean())}


@healthy("digits_zero_initialised_head", "the classifier head's weight and bias start at zero (as ViT/timm "
         "fine-tunes do): the body's first gradient is exactly zero")
def _():
    seed(205)
    train, test = _digits_split()
    model = MLP(64, (128, 64), 10)
    nn.init.zeros_(model.head.weight)
    nn.init.zeros_(model.head.bias)
    return {"model": model, "data": train, "test_data": test, "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


@healthy("resnet_zero_init_residual", "tiny ResNet with BatchNorm, last BN of each block zero-initialised "
         "(Goyal et al.), SGD nesterov with weight decay")
def _():
    seed(206)
    X, y = digit_images()
    model = ResNetTiny(zero_init=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt}


@healthy("resnet_bn_cosine", "tiny ResNet with BatchNorm, default init, cosine schedule over the run")
def _():
    seed(207)
    X, y = digit_images()
    model = ResNetTiny(blocks=3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "scheduler": torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS)}


@healthy("wine_small_batches_of_8", "batches of 8 rows: noisy losses step to step, Adam lr 1e-3")
def _():
    seed(208)
    X, y = tabular("wine")
    train, test = split(X, y)
    model = MLP(13, (32, 32), 3)
    return {"model": model, "data": train, "test_data": test, "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3), "_batch": 8}


@healthy("cnn_frozen_backbone_linear_probe", "a pretrained feature extractor frozen on purpose "
         "(requires_grad False), only the new head trains")
def _():
    seed(209)
    X, y = digit_images()
    model = SmallCNN()
    pre = torch.optim.Adam(model.parameters(), lr=3e-3)  # "pretraining": three epochs on the same images
    for _epoch in range(3):
        for xb, yb in zip(*(t.split(64) for t in (X, y))):
            pre.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            pre.step()
    for p in model.parameters():
        p.requires_grad_(False)
    model.head = nn.Linear(model.head.in_features, 10)  # a fresh head for the new task
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.head.parameters(), lr=1e-2)}


@healthy("diabetes_standardised_targets", "regression with standardised features and targets, MSE, Adam")
def _():
    seed(210)
    X, y = tabular("diabetes")
    y = (y - y.mean()) / y.std()
    model = MLP(10, (64, 32), 1)
    return {"model": model, "data": (X, y.unsqueeze(1)), "loss_fn": nn.MSELoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3), "_batch": 32, "_loss": mse,
            "_metric": r2, "_metric_name": "r2"}


@healthy("digits_sgd_clip_norm_1", "SGD lr 0.1 momentum 0.9 with clip_grad_norm_(max_norm=1.0)")
def _():
    seed(211)
    train, test = _digits_split()
    model = MLP(64, (128, 64), 10)
    return {"model": model, "data": train, "test_data": test, "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), "_clip": 1.0}


@healthy("digits_dropout_0.3", "MLP with Dropout(0.3) after each hidden layer")
def _():
    seed(212)
    train, test = _digits_split()
    model = MLP(64, (256, 128), 10, dropout=0.3)
    return {"model": model, "data": train, "test_data": test, "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


class MixupStream:
    """Mixup (Zhang et al., 2018) with alpha 0.2: inputs mixed in pairs, targets the mixed one-hot vectors."""

    def __init__(self, X, y, classes, batch=64, alpha=0.2, seed_=0):
        self.inner, self.classes = batches(X, y, batch, seed_), classes
        self.beta = torch.distributions.Beta(alpha, alpha)
        self.g = torch.Generator().manual_seed(seed_)

    def __next__(self):
        x, y = next(self.inner)
        lam = float(self.beta.sample())
        perm = torch.randperm(len(x), generator=self.g)
        onehot = F.one_hot(y, self.classes).float()
        return lam * x + (1 - lam) * x[perm], lam * onehot + (1 - lam) * onehot[perm]


@healthy("digits_mixup_soft_labels", "mixup: float probability targets (N, 10) into cross_entropy")
def _():
    seed(213)
    X, y = tabular("digits")
    soft = 0.9 * F.one_hot(y, 10).float() + 0.01  # distilled-style soft targets for the checkup
    model = MLP(64, (128, 64), 10)
    return {"model": model, "data": (X, soft), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3),
            "_stream": MixupStream(X, y, 10), "_loss": lambda out, t: F.cross_entropy(out, t, reduction="none"),
            "_metric": lambda out, t: float((out.argmax(1) == t.argmax(1)).float().mean())}


@healthy("digits_onecycle_per_batch", "OneCycleLR stepped every batch, as it is meant to be")
def _():
    seed(214)
    train, test = _digits_split()
    model = MLP(64, (128, 64), 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return {"model": model, "data": train, "test_data": test, "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "scheduler": torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.2, total_steps=STEPS + 10)}


@healthy("wine_tanh_xavier", "tanh MLP with Xavier init, Adam: tanh units are not saturated at the start")
def _():
    seed(215)
    X, y = tabular("wine")
    model = MLP(13, (64, 64), 3, act=nn.Tanh)
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3), "_batch": 32}


@healthy("iris_tiny_dataset_adam", "150 rows, batches of 16, Adam lr 1e-2, one hidden layer of 16")
def _():
    seed(216)
    X, y = tabular("iris")
    model = MLP(4, (16,), 3)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(model.parameters(), lr=1e-2), "_batch": 16}


@healthy("digits_bn_mlp_weight_decay", "MLP with BatchNorm1d, AdamW weight_decay 0.05, batches of 128",
         steps=120)
def _():
    seed(217)
    train, test = _digits_split()
    model = MLP(64, (128, 128), 10, batchnorm=True)
    return {"model": model, "data": train, "test_data": test, "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.05), "_batch": 128}


assert len({c["name"] for c in CASES}) == len(CASES)
