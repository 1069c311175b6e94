"""The bundled demo: a small CNN trained on scikit-learn's digits in a few seconds.

Used by ``activis demo``, the quickstart notebook and the tests, so that everyone looks at the same
model. No download: the digits ship with scikit-learn.
"""

from __future__ import annotations

import pathlib
import pickle  # only for its error class: a file that is not plain tensors is refused, never unpickled

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


def weights_path(store_path) -> pathlib.Path:
    """Where the demo keeps its trained CNN: beside the store, ``digits.activis.weights.pt``."""
    store_path = pathlib.Path(store_path)
    return store_path.with_name(store_path.name + ".weights.pt")


def load_digits_cnn(store_path, store=None):
    """The demo CNN saved beside ``store_path``, when it is there and is the model the store captured
    (its predictions on every digit equal the store's); else None.

    Only tensors are read (``torch.load(weights_only=True)``): the file is never unpickled as objects.
    """
    import torch

    path = weights_path(store_path)
    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        model = digits_cnn()
        model.load_state_dict(state, strict=True)
    except (RuntimeError, ValueError, OSError, KeyError, TypeError, AttributeError, EOFError, pickle.UnpicklingError):
        return None  # another architecture, a truncated or foreign file: train again
    model.eval()
    if store is not None:
        images = digits_data()[0]
        with torch.no_grad():
            pred = model(torch.from_numpy(images)).argmax(1).numpy()
        try:
            stored = store.column("pred")
        except KeyError:
            return None
        if len(stored) != len(pred) or not np.array_equal(np.asarray(stored), pred):
            return None  # weights of another training run than the one captured
    return model


def digits_store(path="digits.activis", *, retrain: bool = False, verbose: bool = True):
    """The demo CNN and the store of its layers on every digit: trained and captured once, then reused.

    Returns ``(model, store)``. The store keeps the 8x8 inputs for thumbnails and the split, ink
    and width of each digit as metadata. The trained weights are saved beside the store
    (`weights_path`), so the quickstart loads the model ``activis demo`` trained instead of
    training it again; ``retrain=True`` trains and captures anew. ``verbose`` says which it did.
    """
    import torch

    from .capturing import capture
    from .store import StoreError, open_store

    path = pathlib.Path(path)
    say = print if verbose else (lambda *a, **k: None)
    store = None
    if path.exists() and not retrain:
        try:
            store = open_store(path)
            if not store.is_complete:
                store = None
        except StoreError:
            store = None
    if store is not None:
        model = load_digits_cnn(path, store)
        if model is not None:
            say(f"activis demo: loaded the trained CNN from {weights_path(path)} and the store {path}", flush=True)
            return model, store
    if store is not None and weights_path(path).is_file():
        say(f"activis demo: {weights_path(path)} is not the CNN this store captured; training it again", flush=True)
    say("activis demo: training the digits CNN (8 epochs on the CPU, about a minute)…", flush=True)
    model, images, labels, class_names, metadata = train_digits_cnn()
    if store is None:
        say(f"activis demo: capturing conv1, conv2, fc1 and fc2 on all {len(labels):,} digits into {path}…",
            flush=True)
        torch.manual_seed(0)
        store = capture(model, images, path, labels=labels, metadata=metadata, class_names=class_names,
                        layers=["conv1", "conv2", "fc1", "fc2"], keep_inputs=True, overwrite=True, progress=False)
    torch.save(model.state_dict(), weights_path(path))
    say(f"activis demo: saved the trained CNN to {weights_path(path)} (reused next time)", flush=True)
    return model, store
