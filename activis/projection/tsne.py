"""scikit-learn's t-SNE, run in a child process (`tsne_child.py`) so that it can be stopped."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from .errors import ProjectionError

if TYPE_CHECKING:
    from .jobs import ProjectionJob

_CHILD_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tsne_child.py")
_TSNE_ITERATION = re.compile(r"\[t-SNE\] Iteration (\d+):")


def _tsne_in_child(x: np.ndarray, init: np.ndarray, params: dict, job: ProjectionJob,
                   stage: Callable[[float], None]) -> np.ndarray:
    """scikit-learn's t-SNE in a child process: it can be stopped, and it never holds our GIL.

    Progress comes from the iteration lines scikit-learn prints with ``verbose=2``.
    """
    folder = pathlib.Path(tempfile.mkdtemp(prefix="activis-tsne-"))
    try:
        np.save(folder / "input.npy", x)
        np.save(folder / "init.npy", init)
        child = subprocess.Popen([sys.executable, "-u", _CHILD_SCRIPT, "tsne", str(folder), json.dumps(params)],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        job._attach_child(child)
        tail: list[str] = []
        for line in child.stdout:
            tail = (tail + [line.rstrip()])[-20:]
            match = _TSNE_ITERATION.search(line)
            if match:
                stage(int(match.group(1)) / params["max_iter"])
        code = child.wait()
        job._tick()
        if code != 0:
            raise ProjectionError(f"t-SNE stopped with exit code {code}:\n" + "\n".join(tail))
        return np.load(folder / "output.npy", allow_pickle=False)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
