"""What checkpoints and recorded dynamics cost, against baselines measured in the same run.

    .venv/bin/python benchmarks/bench_checkpoints.py            # 10,000 instances, 3 repeats
    .venv/bin/python benchmarks/bench_checkpoints.py --quick    # one repeat

1. Ten checkpoints of 10,000 instances (an MLP 784-512-256-10, its two hidden layers and logits)
   through `activis.Checkpoints` into one store, against ten separate `capture` calls into ten stores,
   cold (fresh folders), alternating the two so that load from other processes falls on both. The
   model's weights change between checkpoints as training would change them. Target: <= 1.10.
2. A training step (the same MLP, batches of 128, SGD) with `DynamicsRecorder.record` of every
   instance's loss and logits, against the same step without, alternating per block of steps.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F
from torch import nn

from activis import Checkpoints, DynamicsRecorder, capture

N, CHECKPOINTS, LAYERS = 10_000, 10, ["1", "3", "4"]


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))


def nudge(model: nn.Module) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.999)


def ten_checkpoints(model, x, y, folder: pathlib.Path) -> float:
    checkpoints = Checkpoints(model, (x, y), folder / "run", every=1, layers=LAYERS)
    start = time.perf_counter()
    for step in range(CHECKPOINTS):
        checkpoints(step)
        nudge(model)
    return time.perf_counter() - start


def ten_captures(model, x, y, folder: pathlib.Path) -> float:
    start = time.perf_counter()
    for step in range(CHECKPOINTS):
        capture(model, (x, y), folder / f"store-{step}", layers=LAYERS, progress=False)
        nudge(model)
    return time.perf_counter() - start


def training(model, x, y, steps: int, recorder: DynamicsRecorder | None, first_step: int) -> float:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    index = torch.arange(len(x))
    start = time.perf_counter()
    for step in range(first_step, first_step + steps):
        rows = slice((step * 128) % (len(x) - 128), (step * 128) % (len(x) - 128) + 128)
        logits = model(x[rows])
        losses = F.cross_entropy(logits, y[rows], reduction="none")
        if recorder is not None:
            recorder.record(step, index[rows], logits, y[rows], losses)
        opt.zero_grad()
        losses.mean().backward()
        opt.step()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    repeats = 1 if args.quick else 3
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(N, 784, generator=g), torch.randint(0, 10, (N,), generator=g)

    ours, separate = [], []
    for _ in range(repeats):
        for which in ("separate", "ours"):  # cold: a fresh folder each time, both orders
            folder = pathlib.Path(tempfile.mkdtemp(prefix="bench-checkpoints-"))
            try:
                if which == "ours":
                    ours.append(ten_checkpoints(mlp(), x, y, folder))
                else:
                    separate.append(ten_captures(mlp(), x, y, folder))
            finally:
                shutil.rmtree(folder, ignore_errors=True)
    a, b = statistics.median(ours), statistics.median(separate)
    print(f"ten checkpoints of {N:,} instances into one store: {a:.2f} s; ten separate captures: {b:.2f} s; "
          f"ratio {a / b:.3f} (target <= 1.10)")

    steps, blocks = 50, 4 if args.quick else 10
    with_record, without = [], []
    folder = pathlib.Path(tempfile.mkdtemp(prefix="bench-dynamics-"))
    try:
        model = mlp()
        training(model, x, y, 10, None, 0)  # warm up
        with DynamicsRecorder(folder) as recorder:
            for block in range(blocks):
                without.append(training(model, x, y, steps, None, block * steps))
                with_record.append(training(model, x, y, steps, recorder, block * steps))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    a, b = statistics.median(with_record) / steps, statistics.median(without) / steps
    print(f"training step (batch 128) recording every instance's loss and logits: {a * 1e3:.3f} ms; without: "
          f"{b * 1e3:.3f} ms; ratio {a / b:.3f}")


if __name__ == "__main__":
    main()
