"""The bundled demo: a small CNN trained on scikit-learn's digits in a few seconds.

Used by ``activis demo``, the quickstart notebook and the tests, so that everyone looks at the same
model. No download: the digits ship with scikit-learn.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def digits_data(seed: int = 0):
    """Digits as (images N x 1 x 8 x 8 float32 in [0, 1], labels, class names, metadata)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]
    labels = digits.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    split = np.where(rng.random(len(labels)) < 0.75, "train", "test")
    metadata = pd.DataFrame({
        "split": split,
        "ink": images.reshape(len(images), -1).mean(axis=1),  # how much of the 8x8 grid is drawn
        "width": (images.max(axis=(1, 2)) > 0.25).sum(axis=1),  # drawn columns
    })
    return images, labels, [str(d) for d in range(10)], metadata


def digits_cnn():
    """The demo architecture: two conv blocks and a two-layer classifier head."""
    from torch import nn

    class DigitsCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU())
            self.conv2 = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
            self.fc1 = nn.Sequential(nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU())
            self.fc2 = nn.Linear(64, 10)

        def forward(self, x):
            return self.fc2(self.fc1(self.conv2(self.conv1(x))))

    return DigitsCNN()


def train_digits_cnn(epochs: int = 8, seed: int = 0):
    """Train the demo CNN on the training split; returns (model, images, labels, class_names, metadata)."""
    import torch

    torch.manual_seed(seed)
    images, labels, class_names, metadata = digits_data(seed)
    train = np.flatnonzero(metadata["split"].to_numpy() == "train")
    x = torch.from_numpy(images[train])
    y = torch.from_numpy(labels[train])
    model = digits_cnn()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=gen).split(64):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    model.eval()
    return model, images, labels, class_names, metadata


def digits_store(path="digits.activis", *, retrain: bool = False):
    """Train the demo CNN and capture its layers on every digit into a store (reused when present).

    Returns ``(model, store)``. The store keeps the 8x8 inputs for thumbnails and the split, ink
    and width of each digit as metadata.
    """
    import pathlib

    import torch

    from .capturing import capture
    from .store import StoreError, open_store

    model, images, labels, class_names, metadata = train_digits_cnn()
    path = pathlib.Path(path)
    if path.exists() and not retrain:
        try:
            store = open_store(path)
            if store.is_complete:
                return model, store
        except StoreError:
            pass
    torch.manual_seed(0)
    store = capture(model, images, path, labels=labels, metadata=metadata, class_names=class_names,
                    layers=["conv1", "conv2", "fc1", "fc2"], keep_inputs=True, overwrite=True, progress=False)
    return model, store
