"""Shared data, models and loops for the held-out doctor cases (plain torch, no activis)."""

import numpy as np
import torch
import torch.nn.functional as F
from sklearn import datasets
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset


def seed(s=0):
    torch.manual_seed(s)
    np.random.seed(s)


def _std(X):
    return (X - X.mean(0)) / (X.std(0) + 1e-8)


def tabular(name, standardise=True, n=None, seed_=0):
    """(X float32 tensor, y tensor) of a bundled scikit-learn dataset, shuffled with a fixed seed."""
    loader = {"digits": datasets.load_digits, "wine": datasets.load_wine, "iris": datasets.load_iris,
              "breast_cancer": datasets.load_breast_cancer, "diabetes": datasets.load_diabetes}[name]
    d = loader()
    X, y = d.data.astype(np.float32), d.target
    order = np.random.default_rng(seed_).permutation(len(X))
    X, y = X[order], y[order]
    if name == "digits":
        X = X / 16.0
    elif standardise:
        X = _std(X)
    if n is not None:
        X, y = X[:n], y[:n]
    yt = torch.tensor(y, dtype=torch.float32) if name == "diabetes" else torch.tensor(y, dtype=torch.long)
    return torch.tensor(X, dtype=torch.float32), yt


def split(X, y, frac=0.8):
    k = int(len(X) * frac)
    return (X[:k], y[:k]), (X[k:], y[k:])


def digit_images(n=None):
    """Digits as (N, 1, 8, 8) in [0, 1], standardised per pixel mean over the set."""
    X, y = tabular("digits", n=n)
    X = (X - X.mean()) / X.std()
    return X.reshape(-1, 1, 8, 8), y


def text_data(n=256, vocab=50, max_len=20, classes=3, seed_=0, min_len=4):
    """Right-padded token ids (pad 0), lengths, mask and labels. Tokens 1..classes are the class words: a text of
    class c holds word c+1 more often than any other class word (two or more times, at most one distractor), the
    rest are filler words. The label is a function of the tokens: a GRU, an LSTM or a small transformer learns it."""
    g = torch.Generator().manual_seed(seed_)
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=g)
    mask = (torch.arange(max_len) < lengths[:, None]).long()
    ids = torch.randint(classes + 1, vocab, (n, max_len), generator=g)
    labels = torch.randint(0, classes, (n,), generator=g)
    for i in range(n):
        length = int(lengths[i])
        pos = torch.randperm(length, generator=g)
        k = max(2, length // 4)
        ids[i, pos[:k]] = labels[i] + 1
        if length >= 6:
            other = (labels[i] + 1 + torch.randint(0, classes - 1, (1,), generator=g)) % classes
            ids[i, pos[k]] = other + 1
    return ids * mask, lengths, mask, labels


class DictDataset(Dataset):
    """Items shaped like a tokenizer's output with labels: what a Hugging Face fine-tune feeds."""

    def __init__(self, ids, mask, labels):
        self.ids, self.mask, self.labels = ids, mask, labels

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": self.mask[i], "labels": self.labels[i]}


class MLP(nn.Module):
    def __init__(self, d_in, hidden=(64, 64), d_out=10, act=nn.ReLU, dropout=0.0, batchnorm=False):
        super().__init__()
        layers, prev = [], d_in
        for h in hidden:
            layers.append(nn.Linear(prev, h))
            if batchnorm:
                layers.append(nn.BatchNorm1d(h))
            layers.append(act())
            if dropout:
                layers.append(nn.Dropout(dropout))
            prev = h
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(prev, d_out)

    def forward(self, x):
        return self.head(self.body(x))


class SmallCNN(nn.Module):
    """Conv-BN-ReLU twice, global average pooling, a linear head: for 8x8 digits."""

    def __init__(self, classes=10, width=16):
        super().__init__()
        self.conv1 = nn.Conv2d(1, width, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(2 * width)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.pool(F.relu(self.bn2(self.conv2(x))))
        return self.head(x.mean((2, 3)))


class ResBlock(nn.Module):
    def __init__(self, c, zero_init=False):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        if zero_init:  # Goyal et al.: each block starts as the identity
            nn.init.zeros_(self.bn2.weight)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(h)))


class ResNetTiny(nn.Module):
    def __init__(self, classes=10, c=16, blocks=2, zero_init=False):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU())
        self.blocks = nn.Sequential(*[ResBlock(c, zero_init) for _ in range(blocks)])
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


class RNNText(nn.Module):
    """Embedding (pad 0) -> GRU/LSTM over packed sequences -> the last real step's state -> classes.
    Takes ids alone (lengths from the pads) so that (X, y) data works."""

    def __init__(self, vocab=50, dim=32, hidden=48, classes=3, cell="gru"):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.rnn = (nn.GRU if cell == "gru" else nn.LSTM)(dim, hidden, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, ids):
        lengths = (ids != 0).sum(1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(self.emb(ids), lengths, batch_first=True, enforce_sorted=False)
        _, h = self.rnn(packed)
        h = h[0] if isinstance(h, tuple) else h
        return self.head(h[-1])


class MaskedMeanText(nn.Module):
    """Embedding -> 1-d conv -> mean over the real tokens (mask from the pads) -> classes."""

    def __init__(self, vocab=50, dim=32, classes=3):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.conv = nn.Conv1d(dim, dim, 3, padding=1)
        self.head = nn.Linear(dim, classes)

    def forward(self, ids):
        mask = (ids != 0).float().unsqueeze(1)
        h = F.relu(self.conv(self.emb(ids).transpose(1, 2))) * mask
        return self.head(h.sum(2) / mask.sum(2).clamp(min=1))


class TinyTransformer(nn.Module):
    """nn.TransformerEncoder over tokens with a key padding mask, mean over real tokens."""

    def __init__(self, vocab=50, dim=32, classes=3, layers=2, max_len=64):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(max_len, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, 4, 64, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)

    def forward(self, ids):
        pad = ids == 0
        h = self.encoder(self.emb(ids) + self.pos[: ids.shape[1]], src_key_padding_mask=pad)
        keep = (~pad).float().unsqueeze(2)
        return self.head((h * keep).sum(1) / keep.sum(1).clamp(min=1))


def tiny_bert(classes=3, vocab=50):
    from transformers import BertConfig, BertForSequenceClassification
    cfg = BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64, num_labels=classes)
    return BertForSequenceClassification(cfg)


def tiny_gpt2(classes=3, vocab=50):
    from transformers import GPT2Config, GPT2ForSequenceClassification
    cfg = GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=2, n_positions=64, num_labels=classes,
                     bos_token_id=1, eos_token_id=2,
                     pad_token_id=0, use_cache=False)
    return GPT2ForSequenceClassification(cfg)


def batches(X, y, batch_size, seed_=0, shuffle=True):
    """An endless stream of mini-batches, reshuffled every epoch, with its own generator."""
    g = torch.Generator().manual_seed(seed_)
    while True:
        order = torch.randperm(len(X), generator=g) if shuffle else torch.arange(len(X))
        for i in range(0, len(X) - batch_size + 1, batch_size):
            idx = order[i: i + batch_size]
            yield X[idx], y[idx]


def dict_batches(ds, batch_size, seed_=0):
    loader = DataLoader(ds, batch_size=batch_size, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(seed_))
    while True:
        yield from loader


def accuracy(out, y):
    return float((out.argmax(1) == y).float().mean())


def run_loop(cockpit_factory, steps, model, opt, stream, per_sample_loss, scheduler=None, before_step=None,
             forward=None, clip=None, metric=accuracy, metric_name="accuracy"):
    """The README's cockpit loop. `before_step(step)` may change the set-up at a step (the planted faults that
    are not in the loop itself); `forward(model, batch)` -> (outputs, targets) for dict batches."""
    cockpit = cockpit_factory(model, opt)
    model.train()
    for step in range(steps):
        if before_step is not None:
            before_step(step)
        batch = next(stream)
        opt.zero_grad()
        out, y = forward(model, batch) if forward else (model(batch[0]), batch[1])
        cockpit.backward(per_sample_loss(out, y))
        if clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if scheduler is not None:
            scheduler.step()
        cockpit.log_metrics(step, **({metric_name: metric(out, y)} if metric else {}))
    return cockpit


def ce(out, y):
    return F.cross_entropy(out, y, reduction="none")


def mse(out, y):
    return F.mse_loss(out.squeeze(-1), y.reshape(-1), reduction="none")


def r2(out, y):
    y = y.reshape(-1)
    return float(1 - ((out.squeeze(-1) - y) ** 2).mean() / y.var().clamp(min=1e-12))


def hf_forward(model, batch):
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    return out.logits, batch["labels"]


def _build_of(recipe):
    def build():
        return {k: v for k, v in recipe().items() if not k.startswith("_")}
    return build


def _train_of(recipe):
    """A recipe's set-up trained by the README's loop; "_" keys: _batch, _stream, _loss, _forward, _clip,
    _metric, _metric_name."""
    def train(factory, steps):
        s = recipe()
        stream = s.get("_stream") or batches(*s["data"], s.get("_batch", 64))
        return run_loop(factory, steps, s["model"], s["optimizer"], stream, s.get("_loss", ce),
                        scheduler=s.get("scheduler"), forward=s.get("_forward"), clip=s.get("_clip"),
                        metric=s.get("_metric", accuracy), metric_name=s.get("_metric_name", "accuracy"))
    return train


def register_healthy(cases, name, note, steps):
    def register(recipe):
        cases.append({"name": name, "kind": "healthy", "phase": "checkup", "cause": None, "where": None,
                      "where_also": [], "onset": None, "steps": steps, "build": _build_of(recipe),
                      "train": _train_of(recipe), "note": note})
        return recipe
    return register


__all__ = ["np", "torch", "nn", "F", "DataLoader", "TensorDataset", "Dataset"]
