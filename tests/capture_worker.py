"""A capture in its own process, for the tests that kill it or run it under torchrun.

    python tests/capture_worker.py STORE [--rows N] [--batch B] [--resume] [--slow SECONDS] [--distributed]
                                         [--checkpoint STEP]

The model, data and metadata are the same in every process (fixed seeds), so stores written by
separate runs of this script can be compared bit for bit. ``--slow`` sleeps in the dataset once
per batch so that a test can kill (or interrupt) the process mid-capture at a moment of its choosing.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.utils.data import Dataset

from activis.capturing import CaptureInterrupted, capture


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 48), nn.ReLU(), nn.Linear(48, 24), nn.Tanh(), nn.Linear(24, 4))


def arrays(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 12)).astype(np.float32), rng.integers(0, 4, size=n)


def metadata(n: int) -> pd.DataFrame:
    return pd.DataFrame({"row": np.arange(n), "group": [f"g{i % 3}" for i in range(n)]})


class Rows(Dataset):
    classes = ["north", "east", "south", "west"]

    def __init__(self, n: int, slow: float, batch: int):
        self.x, self.y = arrays(n)
        self.slow, self.batch = slow, batch

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if self.slow and i % self.batch == 0:
            time.sleep(self.slow)
        return torch.from_numpy(self.x[i]), int(self.y[i])


def capture_rows(store, rows: int, batch: int, *, resume: bool = False, slow: float = 0.0, checkpoint=None):
    return capture(model(), Rows(rows, slow, batch), store, batch_size=batch, metadata=metadata(rows),
                   resume=resume, progress=False, checkpoint=checkpoint)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--slow", type=float, default=0.0)
    parser.add_argument("--distributed", action="store_true")
    parser.add_argument("--checkpoint", type=int, default=None)
    args = parser.parse_args()
    if args.distributed:
        import torch.distributed as dist

        dist.init_process_group("gloo")
    try:
        store = capture_rows(args.store, args.rows, args.batch, resume=args.resume, slow=args.slow,
                             checkpoint=args.checkpoint)
    except CaptureInterrupted as stopped:  # Ctrl-C, or SIGINT from a test
        print(f"INTERRUPTED {stopped.committed} {stopped}", flush=True)
        sys.exit(130)
    print(f"DONE {store.n_instances}", flush=True)
    if args.distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
