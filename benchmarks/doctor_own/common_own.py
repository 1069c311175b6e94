"""Data and models for activis's own extra doctor cases (families the held-out sets lack).

Same case format as the held-out sets (see `../heldout/doctor/README.md`), whose loop and registration helpers
(`../heldout/doctor_v2/common_v2.py`) these cases reuse. These are the implementers' own cases: used for tuning,
never a held-out figure."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "heldout", "doctor_v2"))
from common_v2 import (  # noqa: E402, F401
    DictDataset,
    F,
    accuracy,
    batches,
    bug,
    classification,
    dict_batches,
    fault,
    healthy,
    hf_forward,
    keyword_text,
    logits_of,
    loop,
    math,
    nn,
    np,
    r2,
    regression,
    seed,
    standardise,
    torch,
)
from sklearn import datasets  # noqa: E402


def digits_images(n=None):
    """scikit-learn's bundled 8x8 digits as (N, 1, 8, 8) floats scaled to [0, 1] and their labels."""
    d = datasets.load_digits()
    X = torch.tensor(d.images / 16.0, dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(d.target, dtype=torch.long)
    return (X[:n], y[:n]) if n else (X, y)


def tabular_categorical(n=600, numeric=6, cards=(7, 12), seed_=0):
    """Numeric features (standardised) then categorical ids as float columns; the label depends on both."""
    rng = np.random.default_rng(seed_)
    num = rng.normal(size=(n, numeric))
    cats = np.stack([rng.integers(0, c, n) for c in cards], 1)
    effect = [rng.normal(size=c) for c in cards]
    score = num[:, 0] - num[:, 1] + sum(e[cats[:, i]] for i, e in enumerate(effect))
    y = (score > np.median(score)).astype(np.int64)
    X = np.concatenate([num, cats], 1)
    return torch.tensor(X, dtype=torch.float32), torch.tensor(y)


def counts(n=600, features=8, seed_=0):
    """Poisson counts whose log-rate is linear in standardised features."""
    rng = np.random.default_rng(seed_)
    X = rng.normal(size=(n, features))
    rate = np.exp(0.4 * X[:, 0] - 0.3 * X[:, 1] + 0.5)
    return torch.tensor(X, dtype=torch.float32), torch.tensor(rng.poisson(rate), dtype=torch.float32)


def ordinal(n=600, features=8, levels=5, seed_=0):
    """Ordered grades 0..levels-1 cut from a noisy linear score."""
    rng = np.random.default_rng(seed_)
    X = rng.normal(size=(n, features))
    score = X[:, :3].sum(1) + 0.5 * rng.normal(size=n)
    y = np.digitize(score, np.quantile(score, np.linspace(0, 1, levels + 1)[1:-1]))
    return torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.long)


def tagging(n=320, vocab=60, tags=5, max_len=16, seed_=0):
    """Token tagging: each token's tag is its id modulo `tags` (ids >= 1); padding (id 0) tagged -100."""
    rng = np.random.default_rng(seed_)
    ids = np.zeros((n, max_len), dtype=np.int64)
    for i, length in enumerate(rng.integers(4, max_len + 1, n)):
        ids[i, :length] = rng.integers(1, vocab, length)
    ids = torch.tensor(ids)
    tags_ = torch.where(ids == 0, torch.tensor(-100), ids % tags)
    return ids, tags_


# ---------------------------------------------------------------- models

class NormCNN(nn.Module):
    """Two conv blocks with GroupNorm (or LayerNorm over channels), global average pooling, a head."""

    def __init__(self, classes=10, c=16, norm="group"):
        super().__init__()
        make = (lambda ch: nn.GroupNorm(4, ch)) if norm == "group" else (lambda ch: nn.GroupNorm(1, ch))
        self.conv1, self.norm1 = nn.Conv2d(1, c, 3, padding=1), make(c)
        self.conv2, self.norm2 = nn.Conv2d(c, 2 * c, 3, padding=1), make(2 * c)
        self.head = nn.Linear(2 * c, classes)

    def forward(self, x):
        x = F.relu(self.norm1(self.conv1(x)))
        x = F.max_pool2d(F.relu(self.norm2(self.conv2(x))), 2)
        return self.head(x.mean((2, 3)))


class AutoEncoder(nn.Module):
    """64 pixels -> 32 -> 8 -> 32 -> 64 (sigmoid output: pixels are in [0, 1])."""

    def __init__(self, d=64, code=8):
        super().__init__()
        self.encoder = nn.Sequential(nn.Flatten(), nn.Linear(d, 32), nn.ReLU(), nn.Linear(32, code))
        self.decoder = nn.Sequential(nn.Linear(code, 32), nn.ReLU(), nn.Linear(32, d), nn.Sigmoid())

    def forward(self, x):
        return self.decoder(self.encoder(x))


class TabEmbed(nn.Module):
    """Numeric columns plus categorical ids (the last columns) through one embedding each."""

    def __init__(self, numeric=6, cards=(7, 12), classes=2, dim=4, dropout=0.0):
        super().__init__()
        self.numeric = numeric
        self.embs = nn.ModuleList(nn.Embedding(c, dim) for c in cards)
        self.mlp = nn.Sequential(nn.Linear(numeric + dim * len(cards), 32), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(32, classes))

    def forward(self, x):
        cats = [e(x[:, self.numeric + i].long()) for i, e in enumerate(self.embs)]
        return self.mlp(torch.cat([x[:, :self.numeric], *cats], 1))


class Tagger(nn.Module):
    """Token and position embeddings, nn.TransformerEncoder, one tag per token: (N, L, tags)."""

    def __init__(self, vocab=60, dim=32, tags=5, max_len=16, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.pos = nn.Embedding(max_len, dim)
        layer = nn.TransformerEncoderLayer(dim, 2, 64, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, tags)

    def forward(self, ids):
        h = self.emb(ids) + self.pos(torch.arange(ids.shape[1]))
        return self.head(self.encoder(h, src_key_padding_mask=ids == 0))


class Siamese(nn.Module):
    """One encoder applied to both halves of a pair (N, 2, 64); outputs the pair's embedding distance."""

    def __init__(self, d=64, dim=16):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, dim))

    def forward(self, pair):
        a, b = self.encoder(pair[:, 0]), self.encoder(pair[:, 1])
        return (a - b).pow(2).sum(1).add(1e-9).sqrt()


class MultiTask(nn.Module):
    """A shared trunk, a class head and a regression head; output (N, classes + 1)."""

    def __init__(self, d_in, classes=3):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(d_in, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.cls = nn.Linear(64, classes)
        self.reg = nn.Linear(64, 1)

    def forward(self, x):
        h = self.trunk(x)
        return torch.cat([self.cls(h), self.reg(h)], 1)


def mlp(d_in, d_out, hidden=64, dropout=0.0):
    return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, hidden),
                         nn.ReLU(), nn.Linear(hidden, d_out))


def tiny_roberta(classes=4, vocab=80):
    from transformers import RobertaConfig, RobertaForSequenceClassification
    cfg = RobertaConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, num_labels=classes, pad_token_id=0)
    return RobertaForSequenceClassification(cfg)


def tiny_vit(classes=10):
    from transformers import ViTConfig, ViTForImageClassification
    cfg = ViTConfig(image_size=8, patch_size=4, num_channels=1, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=2, intermediate_size=64, num_labels=classes)
    return ViTForImageClassification(cfg)


def pixel_forward(model, batch):
    return model(pixel_values=batch[0]).logits, batch[1]


def multitask_data(n=600, seed_=0):
    """Classes and a standardised regression target in one (N, 2) float target: column 0 the class."""
    X, y = classification(n=n, features=12, classes=3, seed_=seed_)
    reg = X[:, 0] * 0.7 + X[:, 1] * 0.3
    reg = (reg - reg.mean()) / reg.std()
    return X, torch.stack([y.float(), reg], 1)


def multitask_loss(out, target, reduction="mean"):
    cls = F.cross_entropy(out[:, :-1], target[:, 0].long(), reduction="none")
    reg = F.mse_loss(out[:, -1], target[:, 1], reduction="none")
    both = cls + reg
    return both.mean() if reduction == "mean" else both
