"""What switching the explorer's checkpoint costs in the kernel, against opening those views afresh.

    .venv/bin/python benchmarks/bench_timeline.py            # 10,000 instances x 10 checkpoints
    .venv/bin/python benchmarks/bench_timeline.py --quick    # 2,000 instances

An MLP 64-128-64-10 on random blobs is captured at 10 checkpoints by `activis.Checkpoints`. Then
`explorer.checkpoint = step` (the matrix, the instance panel and the projection's colours moved to
`store.at(step)`, the aligned layout shown) is timed against the baseline a user without the timeline
would pay: a new `ActivationMatrix` and `InstancePanel` over `store.at(step)` (no projection at all),
alternating the two per step. The aligned layouts are computed before timing (they run in a thread).
Target (#23): switching <= 100 ms per checkpoint at 10,000 x 10 in the kernel, and not slower than the baseline.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import tempfile
import time

import torch

from activis import ActivationMatrix, Checkpoints, Explorer, InstancePanel, Subsets, open_store


def make_store(root: pathlib.Path, n: int, checkpoints: int):
    torch.manual_seed(0)
    y = torch.arange(n) % 10
    x = torch.randn(10, 64)[y] * 2 + torch.randn(n, 64)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    probe = Checkpoints(model, (x, y), root, every=1)
    for step in range(checkpoints):
        probe(step)
        batch = torch.randint(0, n, (256,))
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
        opt.step()
    return open_store(root / "probe")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n = 2_000 if args.quick else 10_000
    with tempfile.TemporaryDirectory() as tmp:
        store = make_store(pathlib.Path(tmp) / "run", n, 10)
        explorer = Explorer(store, method="pca", projection_params={"n_epochs": 20})
        explorer.timeline.wait_for_layouts()
        switch, fresh = [], []
        for step in store.checkpoints[-2::-1] + store.checkpoints[1:]:
            t0 = time.perf_counter()
            explorer.checkpoint = step
            switch.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            at = store.at(step)
            ActivationMatrix(at, explorer.selection.layer, subsets=Subsets(at)).close()
            InstancePanel(at).close()
            fresh.append(time.perf_counter() - t0)
        s, f = statistics.median(switch), statistics.median(fresh)
        print(f"{n:,} instances x {len(store.checkpoints)} checkpoints: switching {s * 1e3:.1f} ms (median of "
              f"{len(switch)}), fresh matrix + instance panel {f * 1e3:.1f} ms; ratio {s / f:.2f}")
        print(f"target <= 100 ms: {'met' if s <= 0.1 else 'NOT met'}; not slower than fresh: "
              f"{'met' if s <= f else 'NOT met'}")


if __name__ == "__main__":
    main()
