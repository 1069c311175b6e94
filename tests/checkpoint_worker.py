"""Checkpoints in their own process, for the tests that kill one midway or run under torchrun.

    python tests/checkpoint_worker.py stall RUN MARKER   checkpoint 1, then stall inside checkpoint 2 once its
                                                         first 48 rows are handed to the writer (MARKER appears)
    torchrun --nproc_per_node=2 tests/checkpoint_worker.py ddp RUN
                                                         a DDP training loop with Checkpoints and DynamicsRecorder
"""

from __future__ import annotations

import pathlib
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from activis import Checkpoints, DynamicsRecorder
from activis.capturing import pipeline

STALL_ROW = 48


def model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))


class Rows(Dataset):
    """160 fixed rows; with ``marker``, fetching row 48 creates the marker and waits to be killed."""

    def __init__(self, marker: pathlib.Path | None = None):
        rng = np.random.default_rng(0)
        self.x = torch.from_numpy(rng.normal(size=(160, 6)).astype(np.float32))
        self.y = torch.from_numpy(rng.integers(0, 3, size=160))
        self.marker = marker

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if self.marker is not None and i == STALL_ROW:
            self.marker.touch()
            time.sleep(3600)
        return self.x[i], self.y[i]


def stall(run: str, marker: str) -> None:
    pipeline.BLOCK_BYTES = 1  # a block per batch: each batch is committed as soon as the next one starts
    Checkpoints(model(1), Rows(), run, steps=[1, 2], batch_size=16)(1)
    Checkpoints(model(2), Rows(pathlib.Path(marker)), run, steps=[1, 2], batch_size=16)(2)


class Indexed(Dataset):
    def __init__(self, n: int):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 6, generator=g)
        self.y = self.x[:, :4].argmax(1)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i], i


def ddp(run: str) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = DistributedDataParallel(nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4)))
    data = Indexed(64)
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data, shuffle=False))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    checkpoints = Checkpoints(net, (data.x[:40], data.y[:40]), run, every=2)
    with DynamicsRecorder(run) as recorder:
        for step, (x, y, index) in enumerate(loader):
            checkpoints(step)
            logits = net(x)
            loss = F.cross_entropy(logits, y)
            recorder.record(step, index, logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    {"stall": stall, "ddp": ddp}[sys.argv[1]](*sys.argv[2:])
