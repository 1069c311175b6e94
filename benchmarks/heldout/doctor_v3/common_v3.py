"""Data, models and losses for the third held-out doctor set (plain torch, no activis).

The training loop with its fault hooks and the registration helpers are the second set's
(`../doctor_v2/common_v2.py`), which reuses the first set's streams. New here: 2-d CNNs with GroupNorm and a
ConvNeXt-style LayerNorm block on the 8x8 digits, autoencoders and a VAE, siamese / contrastive / triplet
embeddings, a multi-task head, tables with categorical embeddings, Poisson / quantile / ordinal / mixture /
heteroscedastic regression, token tagging with `nn.TransformerEncoder` and a BiLSTM, a weight-tied language model,
and RoBERTa, ViT and BERT-for-tokens from tiny `transformers` configs."""

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
_path = list(sys.path)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "doctor_v2"))
from common_v2 import (  # noqa: E402
    accuracy,
    batches,
    bug,
    dict_batches,
    fault,
    healthy,
    keyword_text,
    loader,
    logits_of,
    loop,
    r2,
    standardise,
    stream_of,
    tabular,
)

sys.path[:] = _path  # the earlier sets' folders off the path again: their cases_*.py share these files' names

__all__ = ["np", "torch", "nn", "F", "DataLoader", "TensorDataset", "Dataset", "math", "accuracy", "batches",
           "bug", "dict_batches", "fault", "healthy", "keyword_text", "loader", "logits_of", "loop", "r2",
           "standardise", "stream_of", "tabular"]


def seed(s=0):
    torch.manual_seed(s)
    np.random.seed(s)


# ---------------------------------------------------------------- data

def digits_images():
    """The 1,797 digits as (N, 1, 8, 8), standardised over the whole set, and their labels (shuffled, seed 0)."""
    X, y = tabular("digits")
    X = (X - X.mean()) / X.std()
    return X.reshape(-1, 1, 8, 8), y


def digits_flat01():
    """The digits as (N, 64) pixels in [0, 1] (what an autoencoder reconstructs), and their labels."""
    return tabular("digits")


def digit_pairs(n=1024, seed_=0, raw=None):
    """(N, 2, 64) pairs of digits (pixels in [0, 1]) and float targets: 1 for the same class, 0 otherwise (half and
    half); the two images of a pair are never the same image."""
    X, y = raw if raw is not None else digits_flat01()
    g = np.random.default_rng(seed_)
    by_class = [np.flatnonzero(y.numpy() == c) for c in range(10)]
    a = g.integers(0, len(X), n)
    same = g.random(n) < 0.5
    b = np.empty(n, dtype=np.int64)
    for i in range(n):
        c = int(y[a[i]])
        pool = by_class[c] if same[i] else np.flatnonzero(y.numpy() != c)
        j = a[i]
        while j == a[i]:
            j = g.choice(pool)
        b[i] = j
    pairs = torch.stack([X[torch.tensor(a)], X[torch.tensor(b)]], 1)
    return pairs, torch.tensor(same, dtype=torch.float32)


def categorical_table(n=900, classes=3, seed_=0, weights=None, regression=False):
    """Six numeric features and two categorical columns (12 and 6 categories, their ids stored as floats in the
    last two columns, as a DataFrame's `.values` gives them). The label: thresholds on a score made of the numeric
    features and one learned effect per category (tertiles, or `weights` quantiles); `regression`: the score,
    standardised, with noise."""
    g = np.random.default_rng(seed_)
    num = g.normal(size=(n, 6))
    a, b = g.integers(0, 12, n), g.integers(0, 6, n)
    effect_a, effect_b = g.normal(scale=1.2, size=12), g.normal(scale=1.0, size=6)
    score = num @ g.normal(size=6) * 0.8 + effect_a[a] + effect_b[b] + 0.3 * g.normal(size=n)
    X = np.concatenate([num, a[:, None], b[:, None]], 1).astype(np.float32)
    if regression:
        y = (score - score.mean()) / score.std()
        return torch.tensor(X), torch.tensor(y, dtype=torch.float32)
    cuts = np.cumsum(weights)[:-1] if weights is not None else np.arange(1, classes) / classes
    y = np.searchsorted(np.quantile(score, cuts), score)
    return torch.tensor(X), torch.tensor(y, dtype=torch.long)


def count_table(n=800, seed_=0, exposure=False):
    """Eight standardised features and Poisson counts with log-rate 0.2 + x @ w (|w| ~ 0.3); with `exposure`,
    a ninth column of exposures in years (0.25-2) that multiply the rate."""
    g = np.random.default_rng(seed_)
    X = g.normal(size=(n, 8))
    log_rate = 0.2 + X @ (g.normal(size=8) * 0.3)
    if exposure:
        t = g.uniform(0.25, 2.0, n)
        counts = g.poisson(np.exp(log_rate) * t)
        X = np.concatenate([X, t[:, None]], 1)
    else:
        counts = g.poisson(np.exp(log_rate))
    return torch.tensor(X, dtype=torch.float32), torch.tensor(counts, dtype=torch.float32)


def skewed_regression(n=800, seed_=0):
    """Ten standardised features and a standardised target with heteroscedastic, skewed noise (for quantiles and
    predicted variances)."""
    g = np.random.default_rng(seed_)
    X = g.normal(size=(n, 10))
    mean = X[:, :4] @ np.array([1.0, -0.7, 0.5, 0.3])
    scale = 0.3 + 0.5 * np.abs(X[:, 4])
    y = mean + scale * g.gamma(2.0, 1.0, n)
    y = (y - y.mean()) / y.std()
    return torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)


def ordinal_table(n=800, levels=5, seed_=0):
    """Ten standardised features and grades 0..levels-1 (quantiles of a noisy linear score)."""
    X, score = datasets.make_regression(n_samples=n, n_features=10, n_informative=6, noise=15.0, random_state=seed_)
    y = np.searchsorted(np.quantile(score, np.arange(1, levels) / levels), score)
    return torch.tensor(standardise(X), dtype=torch.float32), torch.tensor(y, dtype=torch.long)


def inverse_sine(n=1000, seed_=0):
    """Bishop's inverse problem: x = t + 0.3 sin(2 pi t) + noise, predict t from x (several t for one x)."""
    g = np.random.default_rng(seed_)
    t = g.uniform(0, 1, n)
    x = t + 0.3 * np.sin(2 * np.pi * t) + g.uniform(-0.1, 0.1, n)
    x = (x - x.mean()) / x.std()
    t = (t - t.mean()) / t.std()
    return torch.tensor(x[:, None], dtype=torch.float32), torch.tensor(t, dtype=torch.float32)


def tagging(n=600, vocab=40, tags=4, min_len=4, max_len=16, seed_=0, pad_label=-100):
    """Right-padded token ids (pad 0) and one tag per token: tag = 2 * (id odd) + (previous id > vocab / 2), so a
    model needs the token and its left neighbour. Pads carry `pad_label` (-100: what cross-entropy ignores)."""
    g = np.random.default_rng(seed_)
    ids = np.zeros((n, max_len), dtype=np.int64)
    labels = np.full((n, max_len), pad_label, dtype=np.int64)
    for i in range(n):
        L = g.integers(min_len, max_len + 1)
        row = g.integers(1, vocab, L)
        prev = np.concatenate([[0], row[:-1]])
        ids[i, :L] = row
        labels[i, :L] = 2 * (row % 2) + (prev > vocab // 2)
    return torch.tensor(ids), torch.tensor(labels)


def progressions(n=600, vocab=40, length=16, seed_=0):
    """Language-model data: each row counts up from a random start by a stride of 1, 2 or 3 (mod vocab - 1, ids
    1..vocab-1), with a random real length 8..length and pad 0; targets are the next ids, -100 where there is
    none."""
    g = np.random.default_rng(seed_)
    ids = np.zeros((n, length), dtype=np.int64)
    targets = np.full((n, length), -100, dtype=np.int64)
    for i in range(n):
        L = g.integers(8, length + 1)
        start, stride = g.integers(0, vocab - 1), g.integers(1, 4)
        row = 1 + (start + stride * np.arange(L)) % (vocab - 1)
        ids[i, :L] = row
        targets[i, :L - 1] = row[1:]
    return torch.tensor(ids), torch.tensor(targets)


class Items(Dataset):
    """Dict items, the way a Hugging Face fine-tune feeds them (`labels` the target, the rest to forward)."""

    def __init__(self, **columns):
        self.columns = columns
        self.n = len(next(iter(columns.values())))

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.columns.items()}


def text_items(n=320, vocab=80, classes=4, max_len=24, seed_=0):
    ids, mask, labels = keyword_text(n=n, vocab=vocab, classes=classes, max_len=max_len, seed_=seed_)
    return Items(input_ids=ids, attention_mask=mask, labels=labels)


def image_items(X=None, y=None):
    if X is None:
        X, y = digits_images()
    return Items(pixel_values=X, labels=y)


def tag_items(n=600, seed_=0):
    ids, labels = tagging(n=n, seed_=seed_)
    return Items(input_ids=ids, attention_mask=(ids != 0).long(), labels=labels)


# ---------------------------------------------------------------- models

class GNCNN(nn.Module):
    """Conv-GroupNorm-ReLU twice, max-pool, global average pooling, a linear head: for the 8x8 digits. `drop`,
    `out`: modules after the pooled features and after the head (identity by default)."""

    def __init__(self, classes=10, width=16, groups=4, drop=None, out=None):
        super().__init__()
        self.conv1, self.gn1 = nn.Conv2d(1, width, 3, padding=1), nn.GroupNorm(groups, width)
        self.conv2, self.gn2 = nn.Conv2d(width, 2 * width, 3, padding=1), nn.GroupNorm(groups, 2 * width)
        self.pool = nn.MaxPool2d(2)
        self.drop = drop or nn.Identity()
        self.head = nn.Linear(2 * width, classes)
        self.out = out or nn.Identity()

    def features(self, x):
        x = F.relu(self.gn1(self.conv1(x)))
        return self.pool(F.relu(self.gn2(self.conv2(x)))).mean((2, 3))

    def forward(self, x):
        return self.out(self.head(self.drop(self.features(x))))


class CNBlock(nn.Module):
    """A ConvNeXt block: depthwise conv, channels-last LayerNorm, inverted MLP, layer scale, residual."""

    def __init__(self, c, scale=0.1):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.norm = nn.LayerNorm(c)
        self.pw1, self.act, self.pw2 = nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.full((c,), scale))

    def forward(self, x):
        h = self.dw(x).permute(0, 2, 3, 1)
        h = self.pw2(self.act(self.pw1(self.norm(h)))) * self.gamma
        return x + h.permute(0, 3, 1, 2)


class TinyConvNeXt(nn.Module):
    def __init__(self, classes=10, c=24, blocks=2):
        super().__init__()
        self.stem = nn.Conv2d(1, c, 2, stride=2)
        self.blocks = nn.Sequential(*[CNBlock(c) for _ in range(blocks)])
        self.norm = nn.LayerNorm(c)
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        return self.head(self.norm(self.blocks(self.stem(x)).mean((2, 3))))


class GNResBlock(nn.Module):
    def __init__(self, c, zero_init=False):
        super().__init__()
        self.conv1, self.gn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.GroupNorm(4, c)
        self.conv2, self.gn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.GroupNorm(4, c)
        if zero_init:  # each block starts as the identity
            nn.init.zeros_(self.gn2.weight)

    def forward(self, x):
        return F.relu(x + self.gn2(self.conv2(F.relu(self.gn1(self.conv1(x))))))


class GNResNet(nn.Module):
    """A small residual network with GroupNorm; `checkpointing` recomputes each block in the backward pass."""

    def __init__(self, classes=10, c=16, blocks=2, zero_init=False, checkpointing=False):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, c, 3, padding=1, bias=False), nn.GroupNorm(4, c), nn.ReLU())
        self.blocks = nn.ModuleList([GNResBlock(c, zero_init) for _ in range(blocks)])
        self.head = nn.Linear(c, classes)
        self.checkpointing = checkpointing

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            if self.checkpointing and self.training:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.head(x.mean((2, 3)))


class AutoEncoder(nn.Module):
    """64 -> 32 -> 8 -> 32 -> 64 pixels; `out` after the decoder (a Sigmoid for pixels in [0, 1])."""

    def __init__(self, d=64, hidden=32, code=8, out=None):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, code))
        self.decoder = nn.Sequential(nn.Linear(code, hidden), nn.ReLU(), nn.Linear(hidden, d))
        self.out = out or nn.Identity()

    def forward(self, x):
        return self.out(self.decoder(self.encoder(x)))


class VAE(nn.Module):
    """Returns [reconstruction logits (64), mu (8), logvar (8)] side by side; samples only in training mode."""

    def __init__(self, d=64, hidden=48, code=8):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(d, hidden), nn.ReLU())
        self.mu, self.logvar = nn.Linear(hidden, code), nn.Linear(hidden, code)
        self.dec = nn.Sequential(nn.Linear(code, hidden), nn.ReLU(), nn.Linear(hidden, d))
        self.d = d

    def forward(self, x):
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h).clamp(-8, 8)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar) if self.training else mu
        return torch.cat([self.dec(z), mu, logvar], 1)


def vae_rows(out, x, beta=1.0, d=64):
    recon, mu, logvar = out[:, :d], out[:, d:d + 8], out[:, d + 8:]
    rec = F.binary_cross_entropy_with_logits(recon, x, reduction="none").sum(1)
    kl = -0.5 * (1 + logvar - mu ** 2 - logvar.exp()).sum(1)
    return (rec + beta * kl) / d


def vae_loss(out, x):
    return vae_rows(out, x).mean()


class Siamese(nn.Module):
    """One embedding net for both images of a pair; `mode="logit"`: a same/different logit from |e1 - e2| and
    e1 * e2; `mode="distance"`: the Euclidean distance of the embeddings."""

    def __init__(self, d=64, dim=32, mode="logit", batchnorm=False, head_out=None):
        super().__init__()
        layers = [nn.Linear(d, 64)] + ([nn.BatchNorm1d(64)] if batchnorm else []) + [nn.ReLU(), nn.Linear(64, dim)]
        self.embed = nn.Sequential(*layers)
        if mode == "logit":  # a distance model owns no head (it would be parameters without a gradient)
            self.head = nn.Sequential(nn.Linear(2 * dim, 1), *([head_out] if head_out is not None else []))
        self.mode = mode

    def forward(self, pairs):
        e1, e2 = self.embed(pairs[:, 0]), self.embed(pairs[:, 1])
        if self.mode == "distance":
            return torch.sqrt(((e1 - e2) ** 2).sum(1) + 1e-9)
        return self.head(torch.cat([(e1 - e2).abs(), e1 * e2], 1)).squeeze(1)


def contrastive_rows(d, y, margin=1.0):
    """Hadsell et al.: pull same-class pairs together, push others beyond the margin."""
    return y * d ** 2 + (1 - y) * F.relu(margin - d) ** 2


def contrastive_loss(d, y):
    return contrastive_rows(d, y).mean()


class Embedder(nn.Module):
    """Digits -> a unit-length 16-d embedding (for triplet losses)."""

    def __init__(self, d=64, dim=16):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, dim))

    def forward(self, x):
        return F.normalize(self.body(x), dim=1)


def batch_hard_triplet_rows(emb, y, margin=0.2):
    """For each anchor, its farthest same-class and nearest other-class sample in the batch (Hermans et al.)."""
    dist = torch.cdist(emb, emb)
    same = y[:, None] == y[None, :]
    hardest_pos = (dist * same.float()).max(1).values
    hardest_neg = dist.masked_fill(same, float("inf")).min(1).values
    return F.relu(hardest_pos - hardest_neg + margin)


def batch_hard_triplet_loss(emb, y):
    return batch_hard_triplet_rows(emb, y).mean()


class MultiTask(nn.Module):
    """A shared trunk with a 10-class head and a regression head, outputs side by side (N, 11)."""

    def __init__(self, d=64, classes=10):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.cls_head, self.reg_head = nn.Linear(64, classes), nn.Linear(64, 1)

    def forward(self, x):
        h = self.trunk(x)
        return torch.cat([self.cls_head(h), self.reg_head(h)], 1)


def multitask_rows(out, y):
    return F.cross_entropy(out[:, :-1], y[:, 0].long(), reduction="none") + 0.5 * (out[:, -1] - y[:, 1]) ** 2


def multitask_loss(out, y):
    return multitask_rows(out, y).mean()


def multitask_data():
    """Digit pixels in [0, 1] and targets [class, ink] (ink: the standardised mean pixel value)."""
    X, y = digits_flat01()
    ink = X.mean(1)
    ink = (ink - ink.mean()) / ink.std()
    return X, torch.stack([y.float(), ink], 1)


def multitask_accuracy(out, y):
    return float((out[:, :-1].argmax(1) == y[:, 0].long()).float().mean())


class TabEmbed(nn.Module):
    """Numeric columns plus two categorical columns (ids in the last two columns) through embeddings, an MLP."""

    def __init__(self, d_num=6, cards=(12, 6), dims=(4, 3), out=3, hidden=64, head_post=None, dropout=0.0):
        super().__init__()
        self.emb_a, self.emb_b = nn.Embedding(cards[0], dims[0]), nn.Embedding(cards[1], dims[1])
        layers = [nn.Linear(d_num + sum(dims), hidden), nn.ReLU()]
        if dropout:
            layers.append(nn.Dropout(dropout))
        layers += [nn.Linear(hidden, hidden), nn.ReLU()]
        self.mlp = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.Linear(hidden, out), *([head_post] if head_post is not None else []))
        self.d_num = d_num

    def forward(self, x):
        num, a, b = x[:, :self.d_num], x[:, self.d_num].long(), x[:, self.d_num + 1].long()
        return self.head(self.mlp(torch.cat([num, self.emb_a(a), self.emb_b(b)], 1)))


class ResidualMLP(nn.Module):
    """Residual blocks whose branch is multiplied by a learned scale that starts at zero (ReZero)."""

    def __init__(self, d_in=8, width=64, blocks=3, out=3):
        super().__init__()
        self.inp = nn.Linear(d_in, width)
        self.blocks = nn.ModuleList([nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.GELU(),
                                                   nn.Linear(width, width)) for _ in range(blocks)])
        self.scales = nn.Parameter(torch.zeros(blocks))
        self.head = nn.Linear(width, out)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, x):
        h = self.inp(x)
        for scale, block in zip(self.scales, self.blocks):
            h = h + scale * block(h)
        return self.head(h)


class Net(nn.Module):
    """Linear blocks (an activation each) and a head; `pre`: a module before the first layer."""

    def __init__(self, d_in, hidden=(64, 64), d_out=1, act=nn.ReLU, pre=None):
        super().__init__()
        self.pre = pre or nn.Identity()
        layers, prev = [], d_in
        for h in hidden:
            layers += [nn.Linear(prev, h), act()]
            prev = h
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(prev, d_out)

    def forward(self, x):
        return self.head(self.body(self.pre(x)))


class LogExposure(nn.Module):
    """Splits off the exposure column and returns [features, log(exposure)]."""

    def forward(self, x):
        return torch.cat([x[:, :-1], torch.log(x[:, -1:])], 1)


class PoissonOffset(nn.Module):
    """log rate = f(features) + log(exposure) (the offset of a Poisson GLM), f an MLP."""

    def __init__(self, d=8):
        super().__init__()
        self.log_exposure = LogExposure()
        self.f = nn.Sequential(nn.Linear(d, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, x):
        h = self.log_exposure(x)
        return self.f(h[:, :-1]).squeeze(1) + h[:, -1]


def poisson_rows(log_rate, y):
    return F.poisson_nll_loss(log_rate.reshape(y.shape), y, log_input=True, full=False, reduction="none")


def poisson_loss(log_rate, y):
    return poisson_rows(log_rate, y).mean()


QUANTILES = (0.1, 0.5, 0.9)


def pinball_rows(out, y):
    q = torch.tensor(QUANTILES)
    e = y[:, None] - out
    return torch.maximum(q * e, (q - 1) * e).mean(1)


def pinball_loss(out, y):
    return pinball_rows(out, y).mean()


def coral_rows(logits, grade):
    """Ordinal regression as K-1 cumulative binary tasks: logit k says grade > k."""
    k = torch.arange(logits.shape[1])
    targets = (grade[:, None] > k[None, :]).float()
    return F.binary_cross_entropy_with_logits(logits, targets, reduction="none").sum(1)


def coral_loss(logits, grade):
    return coral_rows(logits, grade).mean()


def coral_accuracy(logits, grade):
    return float(((logits > 0).sum(1) == grade).float().mean())


class MDN(nn.Module):
    """A mixture density network: K mixing logits, K means and K standard deviations (softplus + 1e-3)."""

    def __init__(self, k=3, hidden=32):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(1, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.pi, self.mu, self.sigma = nn.Linear(hidden, k), nn.Linear(hidden, k), nn.Linear(hidden, k)

    def forward(self, x):
        h = self.body(x)
        return torch.cat([self.pi(h), self.mu(h), F.softplus(self.sigma(h)) + 1e-3], 1)


def mdn_rows(out, t):
    k = out.shape[1] // 3
    log_pi, mu, sigma = F.log_softmax(out[:, :k], 1), out[:, k:2 * k], out[:, 2 * k:]
    log_prob = -0.5 * ((t[:, None] - mu) / sigma) ** 2 - torch.log(sigma) - 0.5 * math.log(2 * math.pi)
    return -torch.logsumexp(log_pi + log_prob, 1)


def mdn_loss(out, t):
    return mdn_rows(out, t).mean()


class Heteroscedastic(nn.Module):
    """Predicts a mean and a variance (softplus + 1e-4) for each row: [mean, var]."""

    def __init__(self, d=10, hidden=48):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.mean_head = nn.Linear(hidden, 1)
        self.var_head = nn.Sequential(nn.Linear(hidden, 1), nn.Softplus())

    def forward(self, x):
        h = self.body(x)
        return torch.cat([self.mean_head(h), self.var_head(h) + 1e-4], 1)


def gaussian_rows(out, y):
    return F.gaussian_nll_loss(out[:, 0], y, out[:, 1], reduction="none")


def gaussian_loss(out, y):
    return gaussian_rows(out, y).mean()


class TETagger(nn.Module):
    """nn.TransformerEncoder over tokens (learned positions, key padding mask), one tag per token: (N, L, tags)."""

    def __init__(self, vocab=40, dim=32, tags=4, layers=2, max_len=32, batch_first=True, dropout=0.1):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.pos = nn.Embedding(max_len, dim)
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(dim, 4, 64, dropout=dropout, batch_first=batch_first), layers,
            enable_nested_tensor=False)
        self.head = nn.Linear(dim, tags)

    def forward(self, ids):
        h = self.emb(ids) + self.pos(torch.arange(ids.shape[1]))
        return self.head(self.encoder(h, src_key_padding_mask=ids == 0))


class TEClassifier(nn.Module):
    """A learned [CLS] vector before the tokens, nn.TransformerEncoder with a key padding mask, the [CLS] output
    -> classes. `autocast`: the forward runs under bf16 autocast on the CPU (the logits come back in float32)."""

    def __init__(self, vocab=80, dim=32, classes=4, layers=2, max_len=40, autocast=False):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Embedding(max_len, dim)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(dim, 4, 64, dropout=0.1, batch_first=True),
                                             layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)
        self.autocast = autocast

    def forward(self, ids):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast):
            n, length = ids.shape
            h = torch.cat([self.cls.expand(n, 1, -1), self.emb(ids)], 1) + self.pos(torch.arange(length + 1))
            pad = torch.cat([torch.zeros(n, 1, dtype=torch.bool), ids == 0], 1)
            logits = self.head(self.encoder(h, src_key_padding_mask=pad)[:, 0])
        return logits.float()


class TiedLM(nn.Module):
    """A causal transformer language model whose output layer is the embedding matrix (weight tying)."""

    def __init__(self, vocab=40, dim=32, layers=2, max_len=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.pos = nn.Embedding(max_len, dim)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(dim, 4, 64, dropout=0.0, batch_first=True,
                                                                        norm_first=True),
                                             layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        nn.init.normal_(self.emb.weight, std=0.02)  # GPT-2's embedding init: tied logits start small
        self.lm_head.weight = self.emb.weight

    def forward(self, ids):
        length = ids.shape[1]
        causal = torch.triu(torch.full((length, length), float("-inf")), 1)
        h = self.encoder(self.emb(ids) + self.pos(torch.arange(length)), mask=causal, is_causal=True)
        return self.lm_head(self.norm(h))


class BiLSTMTagger(nn.Module):
    """Embedding -> BiLSTM over packed sequences -> a tag per token (N, L, tags)."""

    def __init__(self, vocab=40, dim=32, hidden=32, tags=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.rnn = nn.LSTM(dim, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, tags)

    def forward(self, ids):
        lengths = (ids != 0).sum(1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(self.emb(ids), lengths, batch_first=True, enforce_sorted=False)
        h, _ = nn.utils.rnn.pad_packed_sequence(self.rnn(packed)[0], batch_first=True, total_length=ids.shape[1])
        return self.head(h)


def tag_rows(out, y):
    """Per-sequence mean of the token losses over the real tokens (-100 ignored)."""
    losses = F.cross_entropy(logits_of(out).transpose(1, 2), y, ignore_index=-100, reduction="none")
    keep = (y != -100).float()
    return (losses * keep).sum(1) / keep.sum(1).clamp(min=1)


def tag_loss(out, y):
    return F.cross_entropy(logits_of(out).transpose(1, 2), y, ignore_index=-100)


def tag_accuracy(out, y):
    keep = y != -100
    return float((logits_of(out).argmax(-1)[keep] == y[keep]).float().mean())


def tiny_roberta(classes=4, vocab=80, max_positions=64):
    from transformers import RobertaConfig, RobertaForSequenceClassification
    cfg = RobertaConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=max_positions, type_vocab_size=1,
                        num_labels=classes, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return RobertaForSequenceClassification(cfg)


def tiny_vit(classes=10, initializer_range=0.02):
    from transformers import ViTConfig, ViTForImageClassification
    cfg = ViTConfig(image_size=8, patch_size=2, num_channels=1, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=2, intermediate_size=64, num_labels=classes,
                    initializer_range=initializer_range)
    return ViTForImageClassification(cfg)


def tiny_bert_tagger(tags=4, vocab=40):
    from transformers import BertConfig, BertForTokenClassification
    cfg = BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64, num_labels=tags)
    return BertForTokenClassification(cfg)


def tiny_bert_classifier(classes=4, vocab=80):
    from transformers import BertConfig, BertForSequenceClassification
    cfg = BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64, num_labels=classes)
    return BertForSequenceClassification(cfg)


def dict_forward(model, batch):
    """A Hugging Face batch: everything but the labels goes to forward by name; the logits and the labels back."""
    out = model(**{k: v for k, v in batch.items() if k != "labels"})
    return out.logits, batch["labels"]


def hf_ce(out, y):
    return F.cross_entropy(logits_of(out), y)


def ce(out, y):
    return F.cross_entropy(logits_of(out), y, reduction="none")


def soft_ce_rows(out, target):
    """Cross-entropy against class probabilities (mixup / cutmix targets)."""
    return -(target * F.log_softmax(out, 1)).sum(1)


def soft_accuracy(out, y):
    return float((out.argmax(1) == (y.argmax(1) if y.dim() == 2 else y)).float().mean())


def linear_warmup_cosine(optimizer, warmup, total):
    """LambdaLR from 0: linear warm-up over `warmup` steps, then cosine to 0 at `total` (stepped per batch)."""
    def factor(step):
        if step < warmup:
            return step / warmup
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def linear_warmup_decay(optimizer, warmup, total):
    def factor(step):
        if step < warmup:
            return step / warmup
        return max(0.0, (total - step) / max(1, total - warmup))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
