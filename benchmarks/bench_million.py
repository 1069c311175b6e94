"""A million instances end to end: each step of opening and exploring a store, against one plain pass.

The store (1,000,000 x 256 float16 activations, 10 classes, a metadata column) is written with
the same batch writer as bench_aggregation.py, not timed. Then, in this process, cold as a user
meets it, each step is timed and printed as a ratio against one plain chunked pass over the layer
(a float32 sum of every row, measured in the same run):
- open_store;
- ``Explorer(store)``: the kernel's share of the first frame (every view built, its first data
  sent; the evaluation panel's curves and intervals and the projection are left to threads);
- the evaluation panel's background work, until its curves and tables are there;
- the projection's PCA over every instance, in its thread;
- a brush of 10,000 instances (matrix row and instance panel), and the same brush grown by 100.
Peak memory is the process's maximum resident size (memory-map pages included). Run:

    .venv/bin/python benchmarks/bench_million.py [--instances 1000000] [--neurons 256]
"""

from __future__ import annotations

import argparse
import pathlib
import resource
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_aggregation import make_store, plain_pass  # noqa: E402

from activis.store import open_store  # noqa: E402
from activis.widgets.explorer import Explorer  # noqa: E402
from activis.widgets.selection import PROJECTION  # noqa: E402


def wait_for(condition, timeout: float = 600.0, step: float = 0.02) -> float:
    t0 = time.perf_counter()
    while not condition():
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError("the background step did not finish")
        time.sleep(step)
    return time.perf_counter() - t0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=1_000_000)
    parser.add_argument("--neurons", type=int, default=256)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="bench-million-")
    try:
        t0 = time.perf_counter()
        make_store(f"{workdir}/store", args.instances, args.neurons, dtype="float16")
        print(f"store: {args.instances:,} x {args.neurons} float16 written in {time.perf_counter() - t0:.0f} s "
              "(not timed)")
        steps = {}
        t0 = time.perf_counter()
        store = open_store(f"{workdir}/store")
        steps["open_store"] = time.perf_counter() - t0
        layer = store.activations("fc")
        chunk_rows = (64 << 20) // (args.neurons * 4)
        t0 = time.perf_counter()
        plain_pass(layer, chunk_rows)
        base = time.perf_counter() - t0

        t0 = time.perf_counter()
        explorer = Explorer(store, method="pca")
        first = time.perf_counter()
        steps["Explorer(store): first frame, kernel side"] = first - t0
        panel = explorer.evaluation
        wait_for(lambda: panel._ready)
        steps["  then: evaluation panel's curves and intervals (thread), since the first frame"] = \
            time.perf_counter() - first
        explorer.projection.job.wait(600)
        steps["  then: PCA of every instance (thread), since the first frame"] = time.perf_counter() - first
        rng = np.random.default_rng(0)
        brush = np.sort(rng.choice(args.instances, 10_000, replace=False))
        t0 = time.perf_counter()
        explorer.selection.set_brush(brush, PROJECTION)
        steps["brush of 10,000 (matrix row, instance panel, evaluation panel)"] = time.perf_counter() - t0
        grown = np.union1d(brush, rng.choice(args.instances, 100, replace=False))
        t0 = time.perf_counter()
        explorer.selection.set_brush(grown, PROJECTION)
        steps["the same brush grown by 100"] = time.perf_counter() - t0

        print(f"one plain pass over the layer ({layer.nbytes / 1e6:.0f} MB): {base * 1000:.0f} ms")
        for name, seconds in steps.items():
            print(f"  {name:66s} {seconds * 1000:8.0f} ms  = {seconds / base:6.2f} plain passes")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak resident memory: {peak:.0f} MB (memory-mapped pages included)")
        print(f"projection: {explorer.projection.shown_method} of {len(explorer.projection.positions):,} points")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
