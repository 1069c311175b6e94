"""Watched training runs for the doctor: faults switched on mid-run, and healthy recipes that must stay silent.

``FAULTS`` x ``ARCHS`` x onsets give the planted runs (`planted_runs`), each with the cause the
doctor must name, the place it must name it at and the step the fault begins; ``HEALTHY_RECIPES``
are runs people do on purpose (warm-up from 0, cosine and per-epoch schedules, label smoothing,
class weights, clipping at 1.0, gradient accumulation, frozen and zero-initialised layers, small
noisy batches, BatchNorm and residual CNNs, padded GRU text, small transformers). `train` runs one
with a cockpit and the doctor attached, and returns the doctor's report. Shared by
tests/test_doctor_live.py and benchmarks/bench_doctor.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from doctor_cases import digit_images, digits, sequences
from torch import nn

QUANTITIES = ["Loss", "GradNorm", "UpdateSize", "Alpha"]


# ------------------------------------------------------------------ models with switchable faults


class LogLayer(nn.Module):
    """log(relu(h) + 1); the fault drops the + 1: log(0) = -inf in the forward pass."""

    def __init__(self):
        super().__init__()
        self.broken = False

    def forward(self, h):
        return torch.log(torch.relu(h) + (0.0 if self.broken else 1.0))


class Gate(nn.Module):
    """h * sqrt(||h - h|| + level): finite forward; with level 0 its backward is inf * 0 = NaN."""

    def __init__(self):
        super().__init__()
        self.broken = False

    def forward(self, h):
        level = 0.0 if self.broken else 1.0
        return h * torch.sqrt((h - h.detach()).pow(2).sum(1, keepdim=True) + level)


class Net(nn.Module):
    """An MLP, CNN, GRU or transformer encoder classifier with a LogLayer and a Gate in the middle."""

    def __init__(self, arch: str, n_in, classes, hidden=64):
        super().__init__()
        self.arch = arch
        if arch == "MLP":
            self.body = nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU())
        elif arch == "CNN":
            self.body = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 64, hidden))
        elif arch == "GRU":
            self.body = nn.GRU(n_in, hidden, batch_first=True)
        else:
            self.proj = nn.Linear(n_in, hidden)
            layer = nn.TransformerEncoderLayer(hidden, 4, 2 * hidden, dropout=0.0, batch_first=True)
            self.body = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.log = LogLayer()
        self.mid = nn.Linear(hidden, hidden)
        self.gate = Gate()
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        if self.arch == "GRU":
            h = self.body(x)[0][:, -1]
        elif self.arch == "TRF":
            h = self.body(self.proj(x)).mean(1)
        else:
            h = self.body(x)
        return self.head(self.gate(self.mid(self.log(h))))


def data_for(arch: str, seed: int):
    if arch == "CNN":
        X, y = digit_images(n=600, seed=seed)
    elif arch in ("GRU", "TRF"):
        X, y = sequences(n=600, seed=seed)
    else:
        X, y = digits(n=600, seed=seed)
    return torch.from_numpy(X), torch.from_numpy(y)


def n_in(arch: str) -> int:
    return {"MLP": 64, "CNN": 1, "GRU": 4, "TRF": 4}[arch]


# ------------------------------------------------------------------ the loop


@dataclass
class Loop:
    """What a training loop does; ``fault(loop, step)`` changes it from the onset on."""

    model: nn.Module
    X: torch.Tensor
    y: torch.Tensor
    optimizer: torch.optim.Optimizer
    batch: int = 32
    steps: int = 150
    scheduler: object = None
    per_batch_scheduler: bool = True
    epoch_batches: int = 0  # steps per epoch for a per-epoch scheduler (0: len(X) // batch)
    loss_options: dict = field(default_factory=dict)
    clip: float | None = None
    accumulate: int = 1
    zero_grad: bool = True
    step_optimizer: bool = True
    shuffle_labels: bool = False
    lengths: torch.Tensor | None = None  # padded sequences: packed by length


def train(loop: Loop, fault=None, onset: int | None = None, *, quantities=QUANTITIES, on_finding=None):
    """Run the loop with a cockpit and the doctor watching; returns the doctor's report."""
    import activis

    cockpit = activis.Cockpit(loop.model, quantities, optimizer=loop.optimizer)
    doctor = activis.watch(cockpit, on_finding=on_finding)
    g = torch.Generator().manual_seed(0)
    per_epoch = loop.epoch_batches or max(1, len(loop.X) // loop.batch)
    order = torch.randperm(len(loop.X), generator=g)
    position = 0
    try:
        for step in range(loop.steps):
            if fault is not None and onset is not None and step == onset:
                fault(loop)
            if position + loop.batch > len(order):
                order, position = torch.randperm(len(loop.X), generator=g), 0
            idx = order[position:position + loop.batch]
            position += loop.batch
            xb, yb = loop.X[idx], loop.y[idx]
            if loop.shuffle_labels:
                yb = yb[torch.randperm(len(yb), generator=g)]
            if loop.zero_grad and step % loop.accumulate == 0:
                loop.optimizer.zero_grad()
            out = loop.model(xb)
            out = out.logits if hasattr(out, "logits") else out
            losses = F.cross_entropy(out, yb, reduction="none", **loop.loss_options)
            loss = losses.mean()
            with cockpit(step, loss=loss, individual_losses=losses):
                (loss / loop.accumulate).backward()
            if loop.clip is not None:
                nn.utils.clip_grad_norm_(loop.model.parameters(), loop.clip)
            if loop.step_optimizer and (step + 1) % loop.accumulate == 0:
                loop.optimizer.step()
            if loop.scheduler is not None and (loop.per_batch_scheduler or (step + 1) % per_epoch == 0):
                loop.scheduler.step()
    finally:
        cockpit.close()
    return doctor.report()


def base_loop(arch: str, seed: int, **options) -> Loop:
    torch.manual_seed(seed)
    X, y = data_for(arch, seed)
    model = Net(arch, n_in(arch), int(y.max()) + 1)
    lr = options.pop("lr", 3e-3)
    return Loop(model, X, y, torch.optim.Adam(model.parameters(), lr=lr), **options)


# ------------------------------------------------------------------ faults: (name, cause, where, fault, setup)


def _set(attr, value):
    def fault(loop):
        setattr(loop, attr, value)
    return fault


def _lr_times(factor):
    def fault(loop):
        for g in loop.optimizer.param_groups:
            g["lr"] *= factor
    return fault


def _freeze(loop):
    loop.model.mid.requires_grad_(False)


def _broken(module):
    def fault(loop):
        getattr(loop.model, module).broken = True
    return fault


def _epoch_schedule_per_batch(loop):
    loop.scheduler = torch.optim.lr_scheduler.StepLR(loop.optimizer, step_size=5, gamma=0.3)
    loop.per_batch_scheduler = True


@dataclass
class Fault:
    name: str
    cause: str
    where: str  # a module path, or the place kind (optimizer, data, loss)
    fault: object
    mid_run: bool = True
    options: dict = field(default_factory=dict)


FAULTS = [
    Fault("zero_grad dropped", "missing_zero_grad", "optimizer", _set("zero_grad", False)),
    Fault("optimizer.step dropped", "missing_optimizer_step", "optimizer", _set("step_optimizer", False)),
    Fault("learning rate x100", "lr_spike", "optimizer", _lr_times(100.0)),
    Fault("layer frozen", "frozen_layer", "mid", _freeze),
    Fault("labels shuffled", "labels_corrupted", "data", _set("shuffle_labels", True)),
    Fault("clip_grad_norm_ at 1e-5", "clipping", "optimizer", _set("clip", 1e-5)),
    Fault("log(0) in forward", "numerical", "log", _broken("log")),
    Fault("sqrt(0) in backward", "numerical", "gate", _broken("gate")),
    Fault("epoch scheduler stepped per batch", "scheduler_per_batch", "optimizer", _epoch_schedule_per_batch),
    Fault("learning rate far too high", "learning_rate_too_high", "optimizer", None, mid_run=False,
          options={"lr": 3.0}),
]
ARCHS = ["MLP", "CNN", "GRU", "TRF"]


@dataclass
class PlantedRun:
    name: str
    arch: str
    cause: str
    where: str
    onset: int
    seed: int
    fault: Fault

    def run(self, **kw):
        loop = base_loop(self.arch, self.seed, **self.fault.options)
        return train(loop, self.fault.fault, self.onset if self.fault.fault is not None else None, **kw)

    def found(self, report) -> tuple[bool, int | None]:
        """(the right cause at the right place, the step it was dated to) among the report's diagnoses."""
        for d in report.diagnoses:
            if d.cause == self.cause and any(self.where in (f.where, f.node, f.place) for f in d.findings
                                             if f.cause == self.cause):
                return True, d.step
        return False, None


def planted_runs(seeds=(0,), onsets=(30, 50, 70, 100)) -> list[PlantedRun]:
    runs = []
    for seed in seeds:
        for f in FAULTS:
            for arch in ARCHS:
                for onset in (onsets if f.mid_run else (0,)):
                    if f.name.startswith("epoch") and onset != onsets[0]:
                        continue
                    runs.append(PlantedRun(f"{f.name} @{onset}", arch, f.cause, f.where, onset, seed, f))
    return runs


# ------------------------------------------------------------------ healthy recipes


def _warmup_linear(loop, warm=20):
    total = loop.steps
    loop.scheduler = torch.optim.lr_scheduler.LambdaLR(
        loop.optimizer, lambda s: s / warm if s < warm else max(0.0, (total - s) / (total - warm)))


def _cosine(loop):
    loop.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(loop.optimizer, T_max=loop.steps)


def _step_per_epoch(loop):
    loop.optimizer = torch.optim.SGD(loop.model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    loop.scheduler = torch.optim.lr_scheduler.StepLR(loop.optimizer, step_size=3, gamma=0.3)
    loop.per_batch_scheduler = False


def _onecycle(loop):
    loop.scheduler = torch.optim.lr_scheduler.OneCycleLR(loop.optimizer, max_lr=5e-3, total_steps=loop.steps)


def _zero_head(loop):
    with torch.no_grad():
        loop.model.head.weight.zero_()
        loop.model.head.bias.zero_()


def _frozen_body(loop):
    loop.model.body.requires_grad_(False)
    loop.optimizer = torch.optim.Adam([p for p in loop.model.parameters() if p.requires_grad], lr=3e-3)


def _gpt2_init(loop):
    with torch.no_grad():
        for m in loop.model.modules():
            if isinstance(m, nn.Linear):
                m.weight.normal_(0, 0.02)
                m.bias.zero_()
        loop.model.mid.weight.mul_(1 / math.sqrt(2 * 2))


def _imbalanced(loop):
    keep = (loop.y != 0) | (torch.arange(len(loop.y)) % 5 == 0)  # class 0 at a fifth of its share
    loop.X, loop.y = loop.X[keep], loop.y[keep]
    counts = torch.bincount(loop.y).float()
    loop.loss_options = {"weight": counts.sum() / (len(counts) * counts)}


def _adamw(loop):
    loop.optimizer = torch.optim.AdamW(loop.model.parameters(), lr=2e-3, weight_decay=0.05)
    _warmup_linear(loop, 15)


RECIPES = {
    "Adam, constant lr": lambda loop: None,
    "linear warm-up from 0, then decay": _warmup_linear,
    "cosine schedule per step": _cosine,
    "SGD momentum, StepLR per epoch": _step_per_epoch,
    "one-cycle": _onecycle,
    "label smoothing 0.1": lambda loop: setattr(loop, "loss_options", {"label_smoothing": 0.1}),
    "class weights on imbalanced classes": _imbalanced,
    "clip_grad_norm_ at 1.0": lambda loop: setattr(loop, "clip", 1.0),
    "gradient accumulation over 4": lambda loop: setattr(loop, "accumulate", 4),
    "frozen backbone from the start": _frozen_body,
    "zero-initialised head": _zero_head,
    "GPT-2-style scaled init": _gpt2_init,
    "small noisy batches of 8": lambda loop: setattr(loop, "batch", 8),
    "AdamW with warm-up": _adamw,
}


@dataclass
class HealthyRun:
    name: str
    arch: str
    seed: int
    make: object

    def run(self, **kw):
        if self.arch in EXTRA_ARCHS:
            return train(EXTRA_ARCHS[self.arch](self.seed), **kw)
        loop = base_loop(self.arch, self.seed)
        self.make(loop)
        return train(loop, **kw)


def healthy_runs(seeds=(0,), archs=("MLP", "CNN", "GRU")) -> list[HealthyRun]:
    runs = [HealthyRun(f"{name}", arch, seed, make) for seed in seeds for arch in archs
            for name, make in RECIPES.items()]
    runs += [HealthyRun(name, name, seed, None) for seed in seeds for name in EXTRA_ARCHS]
    return runs


# ------------------------------------------------------------------ healthy recipes on other architectures


class ResBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        nn.init.zeros_(self.bn2.weight)  # zero-init residual scale

    def forward(self, x):
        return torch.relu(x + self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))


def _resnet(seed):
    torch.manual_seed(seed)
    X, y = data_for("CNN", seed)
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), ResBlock(16),
                          ResBlock(16), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
    loop = Loop(model, X, y, opt)
    _cosine(loop)
    return loop


class PaddedGRU(nn.Module):
    def __init__(self, vocab=50, classes=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, 16, padding_idx=0)
        self.rnn = nn.GRU(16, 32, batch_first=True)
        self.fc = nn.Linear(32, classes)

    def forward(self, ids):
        lengths = (ids != 0).sum(1).clamp(min=1)
        packed = nn.utils.rnn.pack_padded_sequence(self.emb(ids), lengths, batch_first=True, enforce_sorted=False)
        _, h = self.rnn(packed)
        return self.fc(h[-1])


def token_texts(seed, n=600, vocab=50, longest=16):
    rng = np.random.default_rng(seed)
    ids = np.zeros((n, longest), dtype=np.int64)
    labels = rng.integers(0, 2, n)
    for i in range(n):
        length = rng.integers(3, longest + 1)
        ids[i, :length] = rng.integers(3, vocab, length)
        ids[i, rng.integers(0, length)] = 1 + labels[i]  # a label word somewhere in the text
    return torch.from_numpy(ids), torch.from_numpy(labels)


def _padded_gru(seed):
    torch.manual_seed(seed)
    X, y = token_texts(seed)
    model = PaddedGRU()
    return Loop(model, X, y, torch.optim.Adam(model.parameters(), lr=3e-3))


def _hf(kind):
    def make(seed):
        import transformers

        torch.manual_seed(seed)
        X, y = token_texts(seed)
        if kind == "bert":
            config = transformers.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                             intermediate_size=64, max_position_embeddings=32, num_labels=2)
            model = transformers.BertForSequenceClassification(config)
        else:
            config = transformers.GPT2Config(vocab_size=50, n_embd=32, n_layer=2, n_head=2, n_positions=32,
                                             num_labels=2, pad_token_id=0)
            model = transformers.GPT2ForSequenceClassification(config)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        loop = Loop(model, X, y, opt, steps=100)
        _warmup_linear(loop, 10)
        return loop
    return make


EXTRA_ARCHS = {"residual CNN, BatchNorm, zero-init residual, cosine": _resnet,
               "padded GRU text, packed sequences": _padded_gru,
               "BERT (small config), AdamW warm-up": _hf("bert"), "GPT-2 (small config), AdamW warm-up": _hf("gpt2")}
