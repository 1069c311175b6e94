"""Data, models and one training loop for the second held-out doctor set (plain torch, no activis).

Reuses the first set's stream and metric helpers (`../doctor/heldout_common.py`); the data and models here are new:
1-d signals, multi-label and regression tables, imbalanced tables, keyword text, DistilBERT from a tiny config."""

import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from sklearn import datasets
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "doctor"))
from heldout_common import DictDataset, accuracy, batches, dict_batches, tabular, tiny_bert, tiny_gpt2  # noqa: E402

__all__ = ["np", "torch", "nn", "F", "DataLoader", "TensorDataset", "Dataset", "math", "DictDataset", "accuracy",
           "batches", "dict_batches", "tabular", "tiny_bert", "tiny_gpt2"]


def seed(s=0):
    torch.manual_seed(s)
    np.random.seed(s)


def standardise(X):
    return (X - X.mean(0)) / (X.std(0) + 1e-8)


# ---------------------------------------------------------------- data

def signals(n=640, length=64, classes=4, seed_=0, noise=0.3):
    """(N, 1, L) waveforms: sine, square, sawtooth, and a chirp, random frequency, phase and amplitude 0.5-1.5,
    Gaussian noise; labels the waveform kind."""
    rng = np.random.default_rng(seed_)
    t = np.linspace(0, 1, length, dtype=np.float64)
    y = rng.integers(0, classes, n)
    X = np.empty((n, length))
    for i in range(n):
        f, ph, a = rng.uniform(2, 6), rng.uniform(0, 2 * np.pi), rng.uniform(0.5, 1.5)
        phase = 2 * np.pi * f * t + ph
        kind = y[i]
        if kind == 0:
            s = np.sin(phase)
        elif kind == 1:
            s = np.sign(np.sin(phase))
        elif kind == 2:
            s = 2 * ((phase / (2 * np.pi)) % 1.0) - 1
        else:
            s = np.sin(2 * np.pi * (f * t + 4 * t ** 2) + ph)
        X[i] = a * s + noise * rng.normal(size=length)
    return torch.tensor(X[:, None, :], dtype=torch.float32), torch.tensor(y, dtype=torch.long)


def signal_amplitudes(n=512, length=64, seed_=0):
    """(N, 1, L) noisy sines and the standardised log-amplitude each one has (a regression target)."""
    rng = np.random.default_rng(seed_)
    t = np.linspace(0, 1, length)
    amp = rng.uniform(0.2, 3.0, n)
    X = amp[:, None] * np.sin(2 * np.pi * rng.uniform(2, 5, (n, 1)) * t + rng.uniform(0, 6, (n, 1)))
    X = X + 0.2 * rng.normal(size=X.shape)
    target = np.log(amp)
    target = (target - target.mean()) / target.std()
    return torch.tensor(X[:, None, :], dtype=torch.float32), torch.tensor(target, dtype=torch.float32)


def multilabel(n=512, features=20, labels=5, seed_=0):
    X, Y = datasets.make_multilabel_classification(n_samples=n, n_features=features, n_classes=labels,
                                                   n_labels=2, random_state=seed_)
    return torch.tensor(standardise(X), dtype=torch.float32), torch.tensor(Y, dtype=torch.float32)


def regression(n=512, features=10, targets=1, seed_=0, noise=10.0):
    X, y = datasets.make_regression(n_samples=n, n_features=features, n_informative=6, n_targets=targets,
                                    noise=noise, random_state=seed_)
    y = (y - y.mean(0)) / y.std(0)
    return torch.tensor(standardise(X), dtype=torch.float32), torch.tensor(y, dtype=torch.float32)


def classification(n=600, features=16, classes=3, seed_=0, weights=None, sep=1.0):
    informative = min(8, features // 2)
    X, y = datasets.make_classification(n_samples=n, n_features=features, n_informative=informative,
                                        n_redundant=min(2, features - informative - 1),
                                        n_classes=classes, weights=weights, class_sep=sep, random_state=seed_)
    return torch.tensor(standardise(X), dtype=torch.float32), torch.tensor(y, dtype=torch.long)


def moons(n=512, seed_=0, noise=0.2):
    X, y = datasets.make_moons(n_samples=n, noise=noise, random_state=seed_)
    return torch.tensor(standardise(X), dtype=torch.float32), torch.tensor(y, dtype=torch.long)


def circles(n=512, seed_=0):
    X, y = datasets.make_circles(n_samples=n, noise=0.08, factor=0.5, random_state=seed_)
    return torch.tensor(standardise(X), dtype=torch.float32), torch.tensor(y, dtype=torch.long)


def keyword_text(n=320, vocab=80, classes=4, min_len=5, max_len=24, seed_=0):
    """Right-padded ids (pad 0). Class c has three keywords (ids 1 + 3c .. 3 + 3c); a text of class c holds 2-4 of
    its keywords and at most one keyword of another class among filler words. Returns ids, mask, labels."""
    rng = np.random.default_rng(seed_)
    first_filler = 1 + 3 * classes
    ids = np.zeros((n, max_len), dtype=np.int64)
    labels = rng.integers(0, classes, n)
    lengths = rng.integers(min_len, max_len + 1, n)
    for i in range(n):
        L = lengths[i]
        row = rng.integers(first_filler, vocab, L)
        pos = rng.permutation(L)
        k = rng.integers(2, 5)
        row[pos[:k]] = 1 + 3 * labels[i] + rng.integers(0, 3, k)
        if L > k + 2 and rng.random() < 0.5:
            other = (labels[i] + rng.integers(1, classes)) % classes
            row[pos[k]] = 1 + 3 * other + rng.integers(0, 3)
        ids[i, :L] = row
    ids = torch.tensor(ids)
    return ids, (ids != 0).long(), torch.tensor(labels, dtype=torch.long)


def loader(X, y, batch_size=32, shuffle=True, seed_=0, drop_last=False):
    return DataLoader(TensorDataset(X, y), batch_size=batch_size, shuffle=shuffle, drop_last=drop_last,
                      generator=torch.Generator().manual_seed(seed_))


def stream_of(data_loader):
    """An endless stream over a DataLoader's epochs."""
    while True:
        yield from data_loader


# ---------------------------------------------------------------- models

class SignalCNN(nn.Module):
    """Conv1d-BN-ReLU-pool twice, global average pooling over time, a linear head."""

    def __init__(self, classes=4, width=16, batchnorm=True, out=None):
        super().__init__()
        norm = nn.BatchNorm1d if batchnorm else (lambda c: nn.Identity())
        self.conv1, self.bn1 = nn.Conv1d(1, width, 5, padding=2), norm(width)
        self.conv2, self.bn2 = nn.Conv1d(width, 2 * width, 5, padding=2), norm(2 * width)
        self.pool = nn.MaxPool1d(2)
        self.head = nn.Linear(2 * width, out or classes)

    def features(self, x):
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = self.pool(F.relu(self.bn2(self.conv2(x))))
        return x.mean(2)

    def forward(self, x):
        return self.head(self.features(x))


class ResBlock1d(nn.Module):
    def __init__(self, c, zero_init=False):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv1d(c, c, 3, padding=1, bias=False), nn.BatchNorm1d(c)
        self.conv2, self.bn2 = nn.Conv1d(c, c, 3, padding=1, bias=False), nn.BatchNorm1d(c)
        if zero_init:
            nn.init.zeros_(self.bn2.weight)

    def forward(self, x):
        return F.relu(x + self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))


class SignalResNet(nn.Module):
    def __init__(self, classes=4, c=16, blocks=2, zero_init=False):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv1d(1, c, 7, padding=3, bias=False), nn.BatchNorm1d(c), nn.ReLU())
        self.blocks = nn.Sequential(*[ResBlock1d(c, zero_init) for _ in range(blocks)])
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean(2))


class Net(nn.Module):
    """Linear blocks (optionally LayerNorm / BatchNorm, any activation) and a head."""

    def __init__(self, d_in, hidden=(64, 64), d_out=3, act=nn.ReLU, norm=None, dropout=0.0):
        super().__init__()
        layers, prev = [], d_in
        for h in hidden:
            layers.append(nn.Linear(prev, h))
            if norm == "layer":
                layers.append(nn.LayerNorm(h))
            elif norm == "batch":
                layers.append(nn.BatchNorm1d(h))
            layers.append(act())
            if dropout:
                layers.append(nn.Dropout(dropout))
            prev = h
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(prev, d_out)

    def forward(self, x):
        return self.head(self.body(x))


class AttnPoolGRU(nn.Module):
    """Embedding (pad 0) -> GRU -> attention pooling over the real tokens -> classes."""

    def __init__(self, vocab=80, dim=32, hidden=32, classes=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.rnn = nn.GRU(dim, hidden, batch_first=True)
        self.score = nn.Linear(hidden, 1)
        self.head = nn.Linear(hidden, classes)

    def forward(self, ids):
        h, _ = self.rnn(self.emb(ids))
        s = self.score(h).squeeze(-1).masked_fill(ids == 0, -1e9)
        w = torch.softmax(s, dim=1)
        return self.head((w.unsqueeze(-1) * h).sum(1))


class BiLSTMMean(nn.Module):
    """Embedding -> bidirectional LSTM over packed sequences -> mean over real steps -> classes."""

    def __init__(self, vocab=80, dim=32, hidden=24, classes=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.lstm = nn.LSTM(dim, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, ids):
        lengths = (ids != 0).sum(1).clamp(min=1)
        packed = nn.utils.rnn.pack_padded_sequence(self.emb(ids), lengths.cpu(), batch_first=True,
                                                   enforce_sorted=False)
        out, _ = self.lstm(packed)
        h, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=ids.shape[1])
        return self.head(h.sum(1) / lengths.unsqueeze(1))


class BagOfEmbeddings(nn.Module):
    """Mean of the real tokens' embeddings (fastText-style) -> a hidden layer -> classes."""

    def __init__(self, vocab=80, dim=32, classes=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.hidden = nn.Linear(dim, 32)
        self.head = nn.Linear(32, classes)

    def forward(self, ids):
        keep = (ids != 0).float().unsqueeze(-1)
        mean = (self.emb(ids) * keep).sum(1) / keep.sum(1).clamp(min=1)
        return self.head(F.relu(self.hidden(mean)))


class PositionalText(nn.Module):
    """Token plus learned position embeddings, one transformer encoder layer, mean over real tokens."""

    def __init__(self, vocab=80, dim=32, classes=4, max_len=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.pos = nn.Embedding(max_len, dim)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(dim, 2, 64, dropout=0.0, batch_first=True),
                                             1, enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device)
        pad = ids == 0
        h = self.encoder(self.emb(ids) + self.pos(positions), src_key_padding_mask=pad)
        keep = (~pad).float().unsqueeze(-1)
        return self.head((h * keep).sum(1) / keep.sum(1).clamp(min=1))


class WideDeep(nn.Module):
    """Numeric features plus one categorical column (its ids in the last input column) through an embedding."""

    def __init__(self, d_num, categories, classes=2, dim=8):
        super().__init__()
        self.cat = nn.Embedding(categories, dim)
        self.deep = nn.Sequential(nn.Linear(d_num + dim, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.wide = nn.Linear(d_num, classes)
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        num, cat = x[:, :-1], x[:, -1].long()
        return self.wide(num) + self.head(self.deep(torch.cat([num, self.cat(cat)], 1)))


def tiny_distilbert(classes=4, vocab=80, dropout=0.1):
    from transformers import DistilBertConfig, DistilBertForSequenceClassification
    cfg = DistilBertConfig(vocab_size=vocab, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                           max_position_embeddings=64, num_labels=classes, dropout=dropout,
                           attention_dropout=dropout, seq_classif_dropout=dropout, pad_token_id=0)
    return DistilBertForSequenceClassification(cfg)


def text_dataset(n=320, vocab=80, classes=4, seed_=0, max_len=24):
    ids, mask, labels = keyword_text(n=n, vocab=vocab, classes=classes, seed_=seed_, max_len=max_len)
    return DictDataset(ids, mask, labels)


# ---------------------------------------------------------------- losses and the loop

def logits_of(out):
    """A Hugging Face output's logits, or the tensor itself (what a custom `compute_loss` does)."""
    return out.logits if hasattr(out, "logits") else out


def ce(out, y):
    return F.cross_entropy(logits_of(out), y, reduction="none")


def hf_ce(out, y):
    return F.cross_entropy(logits_of(out), y)


def hf_forward(model, batch):
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits, batch["labels"]


def mse_rows(out, y):
    return F.mse_loss(out.reshape(y.shape), y, reduction="none").reshape(len(y), -1).mean(1)


def bce_rows(out, y):
    return F.binary_cross_entropy_with_logits(out, y, reduction="none").mean(1)


def r2(out, y):
    y = y.reshape(len(y), -1)
    out = out.reshape(y.shape)
    return float(1 - ((out - y) ** 2).mean() / y.var().clamp(min=1e-12))


def multilabel_f1(out, y):
    pred = (out > 0).float()
    tp = (pred * y).sum()
    return float(2 * tp / (pred.sum() + y.sum()).clamp(min=1))


def loop(factory, steps, model, opt, stream, loss, *, scheduler=None, forward=None, metric=accuracy,
         metric_name="accuracy", accumulate=1, clip=None, before=None, batch_fn=None, zero_grad=None,
         do_step=None, sched_step=None, sched_epoch=None):
    """The README's cockpit loop, with hooks for faults switched on at a step:
    before(step) changes the set-up; batch_fn(step, batch) changes the batch; zero_grad(step) / do_step(step)
    return False to skip the call; clip(step) -> max norm or None; sched_step(step) False to skip the scheduler;
    sched_epoch: steps per epoch (the scheduler is then stepped once per epoch). `accumulate`: micro-batches per
    update (the losses are divided by it)."""
    cockpit = factory(model, opt)
    model.train()
    for step in range(steps):
        if before is not None:
            before(step)
        batch = next(stream)
        if batch_fn is not None:
            batch = batch_fn(step, batch)
        boundary = (step + 1) % accumulate == 0
        if step % accumulate == 0 and (zero_grad is None or zero_grad(step)):
            opt.zero_grad()
        out, y = forward(model, batch) if forward else (model(batch[0]), batch[1])
        cockpit.backward(loss(out, y) / accumulate)
        max_norm = clip(step) if callable(clip) else clip
        if boundary:
            if max_norm is not None:
                nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            if do_step is None or do_step(step):
                opt.step()
            if scheduler is not None:
                if sched_epoch is not None:
                    if (step + 1) % sched_epoch == 0:
                        scheduler.step()
                elif sched_step is None or sched_step(step):
                    scheduler.step()
        if metric is not None:
            cockpit.log_metrics(step, **{metric_name: metric(out.detach(), y)})
    return cockpit


def _build_and_train(recipe):
    """build() -> the set-up without its "_" keys; train(factory, steps) -> the loop over it ("_loop": the loop's
    keyword arguments, with "stream" or "batch" for the data)."""
    def build():
        return {k: v for k, v in recipe().items() if not k.startswith("_")}

    def train(factory, steps):
        s = recipe()
        kw = dict(s.get("_loop", {}))
        batch = kw.pop("batch", 32)
        stream = kw.pop("stream", None) or batches(*s["data"], batch)
        return loop(factory, steps, s["model"], s["optimizer"], stream, kw.pop("loss", ce),
                    scheduler=s.get("scheduler"), **kw)
    return build, train


def healthy(cases, name, note, steps):
    """Registers `recipe()` (-> dict with model, data, loss_fn, optimizer, optional scheduler / test_data, and
    "_loop" (the loop's keyword arguments, "stream" among them)) as a healthy recipe with build and train."""
    def register(recipe):
        build, train = _build_and_train(recipe)
        cases.append({"name": name, "kind": "healthy", "phase": "checkup", "cause": None, "where": None,
                      "where_also": [], "onset": None, "steps": steps, "build": build, "train": train,
                      "note": note})
        return recipe
    return register


def bug(cases, name, cause, where, note, where_also=()):
    """Registers `build()` as a checkup-phase bug."""
    def register(build):
        cases.append({"name": name, "kind": "bug", "phase": "checkup", "cause": cause, "where": where,
                      "where_also": list(where_also), "onset": None, "steps": None, "build": build,
                      "train": None, "note": note})
        return build
    return register


def fault(cases, name, cause, where, onset, steps, note, where_also=()):
    """Registers `recipe()` as a training-phase fault: the recipe returns the healthy set-up plus "_loop" (the loop's
    keyword arguments with the fault's hooks, which switch it on at `onset`)."""
    def register(recipe):
        build, train = _build_and_train(recipe)
        cases.append({"name": name, "kind": "bug", "phase": "training", "cause": cause, "where": where,
                      "where_also": list(where_also), "onset": onset, "steps": steps, "build": build,
                      "train": train, "note": note})
        return recipe
    return register
