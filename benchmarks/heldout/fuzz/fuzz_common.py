"""Shared set-ups for the held-out fuzz cases: a small model and data, a real cockpit log to damage, a store."""

import json
import os
import shutil

import numpy as np
import pandas as pd
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE_LOG = os.path.join(HERE, "template_log")  # a 6-step economy log written by activis's Cockpit


def case(name, expect, mentions=(), check=None, error_ok=False):
    """Registers `call` as a case: expect "error" (an activis error naming `mentions`) or "handled" (`check`
    returns True on the result; `error_ok`: a clear activis error naming `mentions` is as good)."""
    def register(call):
        return {"name": name, "call": call, "expect": expect, "mentions": list(mentions), "check": check,
                "error_ok": error_ok}
    return register


def wine(n=120):
    from sklearn.datasets import load_wine
    d = load_wine()
    X = (d.data - d.data.mean(0)) / d.data.std(0)
    order = np.random.default_rng(0).permutation(len(X))[:n]
    return torch.tensor(X[order], dtype=torch.float32), torch.tensor(d.target[order])


def mlp(d_in=13, classes=3, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d_in, 32), nn.ReLU(), nn.Linear(32, classes))


def adam(model):
    return torch.optim.Adam(model.parameters(), lr=1e-3)


def copy_log(tmp, name="log"):
    dst = os.path.join(str(tmp), name)
    shutil.copytree(TEMPLATE_LOG, dst)
    return dst


def edit_meta(log_dir, change):
    path = os.path.join(log_dir, "meta.json")
    with open(path) as f:
        meta = json.load(f)
    meta = change(meta)
    with open(path, "w") as f:
        json.dump(meta, f)


def append_record_lines(log_dir, lines, raw=False):
    path = os.path.join(log_dir, "records.jsonl")
    with open(path, "rb") as f:
        ends_with_newline = f.read().endswith(b"\n")
    with open(path, "ab") as f:
        if not ends_with_newline:
            f.write(b"\n")
        for line in lines:
            f.write(line if raw else json.dumps(line).encode())
            f.write(b"\n")


def replace_records(log_dir, lines):
    with open(os.path.join(log_dir, "records.jsonl"), "w") as f:
        for line in lines:
            f.write(line if isinstance(line, str) else json.dumps(line))
            f.write("\n")


def warned_about(warnings, *words):
    text = " ".join(str(w.message).lower() for w in warnings)
    return all(w.lower() in text for w in words)


def scores_and_labels(n=200, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    logits = rng.normal(size=(n, classes)) + 2.0 * np.eye(classes)[labels]
    scores = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    return labels, scores


def make_store(tmp, metadata=None, n=400, seed=0, name="s.activis", planted=None):
    """A store from arrays: 2 classes, a 16-unit layer, errors where `planted` (a boolean mask) is True
    plus 5 % noise."""
    import activis
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    wrong = rng.random(n) < 0.05
    if planted is not None:
        wrong = wrong | (planted & (rng.random(n) < 0.7))
    pred = np.where(wrong, 1 - labels, labels)
    outputs = np.stack([np.where(pred == 0, 2.0, -2.0), np.where(pred == 1, 2.0, -2.0)], 1).astype(np.float32)
    acts = rng.normal(size=(n, 16)).astype(np.float32)
    return activis.write_store(os.path.join(str(tmp), name), {"fc": acts}, labels=labels, outputs=outputs,
                               class_names=["neg", "pos"], metadata=metadata)


def frame(n=400, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"age": rng.integers(18, 90, n), "city": rng.choice(["a", "b", "c"], n),
                         "width": rng.normal(size=n)})
