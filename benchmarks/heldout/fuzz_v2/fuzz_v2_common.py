"""Shared set-ups for the second fuzz set: the first set's helpers, a copy of the template run, a small store."""

import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "fuzz"))
from fuzz_common import adam, case, mlp, scores_and_labels, warned_about, wine  # noqa: E402

TEMPLATE_RUN = os.path.join(HERE, "template_run")  # written by make_template.py through activis's public API

__all__ = ["adam", "case", "mlp", "scores_and_labels", "warned_about", "wine", "np"]


def adder(cases):
    """A decorator factory: @add(name, expect, mentions, ...) registers the decorated call into `cases`."""
    def add(*args, **kwargs):
        def register(call):
            cases.append(case(*args, **kwargs)(call))
            return call
        return register
    return add


def copy_run(tmp, name="run"):
    dst = os.path.join(str(tmp), name)
    shutil.copytree(TEMPLATE_RUN, dst, symlinks=True)
    return dst


def open_copy(tmp):
    import activis
    return activis.open_run(copy_run(tmp))


def logits(checkpoints=4, n=50, classes=3, seed=0):
    """Logits of a model that learns: (checkpoints, n, classes), and the labels."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    learning = np.linspace(0, 4, checkpoints)[:, None, None] * np.eye(classes)[labels]
    return learning + rng.normal(scale=1.0, size=(checkpoints, n, classes)), labels


def explorer(tmp):
    import activis
    run = open_copy(tmp)
    return activis.Explorer(run.store, run=run, method="pca")


def files_of(path):
    """{relative path: bytes} of every file under path (to check that a refused call changed nothing)."""
    out = {}
    for root, _, names in os.walk(path):
        for name in names:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = f.read()
    return out


class ChangedFiles:
    """What a refused call returns when it changed files before refusing: the runner reads it as silently wrong."""

    def __init__(self, changed):
        self.changed = changed

    def __repr__(self):
        return f"ChangedFiles({self.changed})"


def unchanged_or(path, call):
    """Runs call(); if it raises, re-raises unless a file under path changed (then returns ChangedFiles)."""
    before = files_of(path)
    try:
        return call()
    except BaseException:
        after = files_of(path)
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        if changed:
            return ChangedFiles(changed)
        raise


def store(tmp, n=200):
    from fuzz_common import make_store
    return make_store(tmp, n=n)
