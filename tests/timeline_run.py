"""A small run with a cockpit step log and probe checkpoints, for the timeline tests (Python and browser)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from activis import Checkpoints, Cockpit


def make_run(path, *, steps: int = 16, every: int = 5, n: int = 120, seed: int = 0):
    """Train a 2-layer MLP on separable blobs with a cockpit and checkpoints every ``every`` steps into ``path``."""
    torch.manual_seed(seed)
    centres = torch.randn(4, 8) * 3
    y = torch.arange(n) % 4
    x = centres[y] + torch.randn(n, 8)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    cockpit = Cockpit(model, ["Loss", "GradNorm"], optimizer=opt, log_dir=str(path))
    checkpoints = Checkpoints(model, (x, y), path, every=every, class_names=list("abcd"))
    for step in range(steps):
        checkpoints(step)
        batch = torch.arange(step * 16, step * 16 + 16) % n
        opt.zero_grad()
        cockpit.backward(F.cross_entropy(model(x[batch]), y[batch], reduction="none"))
        opt.step()
    cockpit.close()
    return path
