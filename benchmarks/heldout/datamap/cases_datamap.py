"""Training-dynamics cases with per-instance truth: which labels were flipped, which items are genuinely ambiguous.

Each case in `CASES` is {"name", "note", "noise_rate", "build"}; `build()` returns a dict:
  model        a torch module (seeded)
  X, y         the training inputs and the labels it trains on (the flipped ones included), tensors
  clean_y      the labels before flipping
  flipped      boolean numpy array: the label was changed to another class
  ambiguous    boolean numpy array: the item is genuinely near the boundary (its true class is uncertain), never
               flipped; all False where a case has none
  epochs, batch_size, optimizer (a callable: parameters -> optimizer)
Plain torch, scikit-learn's bundled or generated data; each case trains in seconds on a CPU."""

import numpy as np
import torch
from sklearn import datasets
from torch import nn

CASES = []


def case(name, note, noise_rate):
    def register(build):
        CASES.append({"name": name, "note": note, "noise_rate": noise_rate, "build": build})
        return build
    return register


def flip(y, rate, classes, rng, exclude=None):
    """Changes the label of `rate` of the items (never those in `exclude`) to another class, uniformly."""
    y = np.asarray(y).copy()
    candidates = np.flatnonzero(~exclude) if exclude is not None else np.arange(len(y))
    chosen = rng.choice(candidates, int(round(rate * len(y))), replace=False)
    y[chosen] = (y[chosen] + rng.integers(1, classes, len(chosen))) % classes
    mask = np.zeros(len(y), bool)
    mask[chosen] = True
    return y, mask


def _std(X):
    return (X - X.mean(0)) / (X.std(0) + 1e-8)


def mlp(d_in, classes, hidden=64):
    return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, classes))


def _result(model, X, y, clean, flipped, ambiguous, epochs, batch_size, optimizer):
    return {"model": model, "X": X, "y": torch.as_tensor(y, dtype=torch.long), "clean_y": np.asarray(clean),
            "flipped": flipped, "ambiguous": ambiguous, "epochs": epochs, "batch_size": batch_size,
            "optimizer": optimizer}


def gaussian_classes(n, d, classes, rng, spread=2.2):
    """Isotropic Gaussian classes around random means; returns X, y and each item's Bayes posterior of its class."""
    means = rng.normal(size=(classes, d)) * spread
    y = rng.integers(0, classes, n)
    X = means[y] + rng.normal(size=(n, d))
    logp = -0.5 * ((X[:, None, :] - means[None]) ** 2).sum(2)
    post = np.exp(logp - logp.max(1, keepdims=True))
    post /= post.sum(1, keepdims=True)
    return X, y, post[np.arange(n), y]


@case("mlp_gaussians_flip10_boundary", "3 Gaussian classes in 10-d; 10 % flipped; ambiguous: Bayes posterior of the "
      "true class below 0.6", 0.10)
def _():
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    X, y, post = gaussian_classes(1500, 10, 3, rng, spread=1.0)
    ambiguous = post < 0.6
    noisy, flipped = flip(y, 0.10, 3, rng, exclude=ambiguous)
    return _result(mlp(10, 3), torch.tensor(_std(X), dtype=torch.float32), noisy, y, flipped, ambiguous, 20, 64,
                   lambda p: torch.optim.Adam(p, lr=2e-3))


@case("mlp_breast_cancer_flip20", "breast_cancer, 20 % of the labels flipped; no ambiguous set", 0.20)
def _():
    rng = np.random.default_rng(1)
    torch.manual_seed(1)
    d = datasets.load_breast_cancer()
    X, y = _std(d.data), d.target
    noisy, flipped = flip(y, 0.20, 2, rng)
    return _result(mlp(30, 2, 32), torch.tensor(X, dtype=torch.float32), noisy, y, flipped,
                   np.zeros(len(y), bool), 25, 32, lambda p: torch.optim.Adam(p, lr=1e-3))


def digits_cnn():
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(32, 10))


def digits_with_blends(rng, blend_share):
    """The 1,797 digits (standardised) plus `blend_share` more items, each the pixel average of two digits of
    different classes, labelled as one of the two (a genuinely ambiguous image)."""
    d = datasets.load_digits()
    X, y = d.data / 16.0, d.target
    k = int(blend_share * len(X))
    a = rng.integers(0, len(X), k)
    b = np.array([rng.choice(np.flatnonzero(y != y[i])) for i in a], dtype=np.int64)
    blends = 0.5 * (X[a] + X[b])
    X = np.concatenate([X, blends])
    y = np.concatenate([y, y[a]])
    ambiguous = np.concatenate([np.zeros(len(d.data), bool), np.ones(k, bool)])
    order = rng.permutation(len(X))
    X, y, ambiguous = X[order], y[order], ambiguous[order]
    X = (X - X.mean()) / X.std()
    return X.reshape(-1, 1, 8, 8), y, ambiguous


@case("cnn_digits_flip5_blends", "digits CNN, 5 % flipped, plus 8 % blends of two digits (ambiguous)", 0.05)
def _():
    rng = np.random.default_rng(2)
    torch.manual_seed(2)
    X, y, ambiguous = digits_with_blends(rng, 0.08)
    noisy, flipped = flip(y, 0.05, 10, rng, exclude=ambiguous)
    return _result(digits_cnn(), torch.tensor(X, dtype=torch.float32), noisy, y, flipped, ambiguous, 15, 64,
                   lambda p: torch.optim.Adam(p, lr=3e-3))


@case("cnn_digits_flip30", "digits CNN, 30 % of the labels flipped; no ambiguous set", 0.30)
def _():
    rng = np.random.default_rng(3)
    torch.manual_seed(3)
    X, y, ambiguous = digits_with_blends(rng, 0.0)
    noisy, flipped = flip(y, 0.30, 10, rng)
    return _result(digits_cnn(), torch.tensor(X, dtype=torch.float32), noisy, y, flipped, ambiguous, 15, 64,
                   lambda p: torch.optim.Adam(p, lr=3e-3))


class GRUText(nn.Module):
    def __init__(self, vocab=60, dim=32, hidden=32, classes=3):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.rnn = nn.GRU(dim, hidden, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, ids):
        lengths = (ids != 0).sum(1).clamp(min=1)
        packed = nn.utils.rnn.pack_padded_sequence(self.emb(ids), lengths.cpu(), batch_first=True,
                                                   enforce_sorted=False)
        _, h = self.rnn(packed)
        return self.head(h[-1])


def keyword_texts(n, rng, classes=3, vocab=60, max_len=20, ambiguous_share=0.1):
    """Class c's keywords are ids 1+2c and 2+2c; a text holds 2-3 keywords of its class among filler ids. An
    ambiguous text holds two keywords of its class and two of another class (labelled with its own class)."""
    filler0 = 1 + 2 * classes
    ids = np.zeros((n, max_len), np.int64)
    y = rng.integers(0, classes, n)
    ambiguous = rng.random(n) < ambiguous_share
    for i in range(n):
        L = rng.integers(6, max_len + 1)
        row = rng.integers(filler0, vocab, L)
        pos = rng.permutation(L)
        own = 1 + 2 * y[i] + rng.integers(0, 2, 4)
        if ambiguous[i]:
            other = (y[i] + rng.integers(1, classes)) % classes
            row[pos[:2]] = own[:2]
            row[pos[2:4]] = 1 + 2 * other + rng.integers(0, 2, 2)
        else:
            k = rng.integers(2, 4)
            row[pos[:k]] = own[:k]
        ids[i, :L] = row
    return ids, y, ambiguous


@case("gru_text_flip15_two_class_texts", "GRU over padded keyword texts, 15 % flipped, 10 % texts with as many "
      "keywords of another class as of their own (ambiguous)", 0.15)
def _():
    rng = np.random.default_rng(4)
    torch.manual_seed(4)
    ids, y, ambiguous = keyword_texts(900, rng)
    noisy, flipped = flip(y, 0.15, 3, rng, exclude=ambiguous)
    return _result(GRUText(), torch.tensor(ids), noisy, y, flipped, ambiguous, 15, 32,
                   lambda p: torch.optim.Adam(p, lr=3e-3))


@case("mlp_wine_flip25_small", "wine (178 rows), 25 % flipped; no ambiguous set; batches of 16", 0.25)
def _():
    rng = np.random.default_rng(5)
    torch.manual_seed(5)
    d = datasets.load_wine()
    X, y = _std(d.data), d.target
    noisy, flipped = flip(y, 0.25, 3, rng)
    return _result(mlp(13, 3, 32), torch.tensor(X, dtype=torch.float32), noisy, y, flipped,
                   np.zeros(len(y), bool), 30, 16, lambda p: torch.optim.Adam(p, lr=2e-3))


@case("mlp_moons_flip10_overlap", "two moons with noise 0.3; 10 % flipped; ambiguous: about as close to the other "
      "moon's centre line as to its own (within 0.1), where the classes overlap", 0.10)
def _():
    rng = np.random.default_rng(6)
    torch.manual_seed(6)
    n = 1200
    X, y = datasets.make_moons(n, noise=0.3, random_state=6)
    clean_moons, clean_y = datasets.make_moons(4000, noise=0.0, random_state=0)
    line = [clean_moons[clean_y == 0], clean_moons[clean_y == 1]]  # each class's noise-free centre line
    dist_other = np.array([np.min(np.linalg.norm(line[1 - c] - x, axis=1)) for x, c in zip(X, y)])
    dist_own = np.array([np.min(np.linalg.norm(line[c] - x, axis=1)) for x, c in zip(X, y)])
    ambiguous = np.abs(dist_own - dist_other) < 0.1
    noisy, flipped = flip(y, 0.10, 2, rng, exclude=ambiguous)
    return _result(mlp(2, 2, 64), torch.tensor(_std(X), dtype=torch.float32), noisy, y, flipped, ambiguous, 20, 64,
                   lambda p: torch.optim.Adam(p, lr=3e-3))


@case("conv1d_waveforms_flip20", "Conv1d on four waveform kinds, 20 % flipped; ambiguous: 10 % waveforms that are the "
      "sum of their own kind and another at equal amplitude", 0.20)
def _():
    rng = np.random.default_rng(7)
    torch.manual_seed(7)
    n, length = 800, 64
    t = np.linspace(0, 1, length)

    def wave(kind):
        f, ph = rng.uniform(2, 6), rng.uniform(0, 2 * np.pi)
        phase = 2 * np.pi * f * t + ph
        return [np.sin(phase), np.sign(np.sin(phase)), 2 * ((phase / (2 * np.pi)) % 1) - 1,
                np.sin(2 * np.pi * (f * t + 4 * t ** 2) + ph)][kind]
    y = rng.integers(0, 4, n)
    ambiguous = rng.random(n) < 0.10
    X = np.empty((n, length))
    for i in range(n):
        X[i] = wave(y[i])
        if ambiguous[i]:
            X[i] = 0.5 * X[i] + 0.5 * wave((y[i] + rng.integers(1, 4)) % 4)
        X[i] += 0.3 * rng.normal(size=length)
    noisy, flipped = flip(y, 0.20, 4, rng, exclude=ambiguous)
    model = nn.Sequential(nn.Conv1d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
                          nn.Conv1d(16, 32, 5, padding=2), nn.ReLU(), nn.AdaptiveAvgPool1d(1), nn.Flatten(),
                          nn.Linear(32, 4))
    return _result(model, torch.tensor(X[:, None, :], dtype=torch.float32), noisy, y, flipped, ambiguous, 15, 32,
                   lambda p: torch.optim.Adam(p, lr=3e-3))
