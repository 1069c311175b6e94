"""A million instances end to end: each step of opening and exploring a store, against one plain pass.

The store (1,000,000 x 256 float16 activations, 10 classes, a metadata column) is written with
the same batch writer as bench_aggregation.py, not timed. Then, in this process, cold as a user
meets it, each step is timed and printed as a ratio against one plain chunked pass over the layer
(a float32 sum of every row, measured in the same run):
- open_store;
- ``Explorer(store)``: the kernel's share of the first frame (every view built, its first data
  sent; the matrix's class rows, the evaluation panel and the projection are left to threads or
  to the kernel's loop after the cell returned -- here the loop's callbacks are collected and run
  after the constructor, as a kernel would);
- the matrix's class rows (drawn empty with "computing … %" until then), in their thread;
- the evaluation panel, built after the first frame, and its curves and tables, in their thread;
- a brush of 10,000 instances while those threads run (the views stay interactive);
- the projection's PCA over every instance, in its thread;
- a subset row added while nothing else runs (one pass, in the background too);
- a brush of 10,000 instances (matrix row and instance panel; then the evaluation panel's
  comparison, which a kernel runs after them), and the same brush grown by 100.
Peak memory is the process's maximum resident size (memory-map pages included). Run:

    .venv/bin/python benchmarks/bench_million.py [--instances 1000000] [--neurons 256]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_aggregation import make_store, plain_pass  # noqa: E402

import activis  # noqa: E402
from activis.store import open_store  # noqa: E402
from activis.widgets import _base as base_module  # noqa: E402
from activis.widgets import evaluation_panel as evaluation_module  # noqa: E402
from activis.widgets import matrix_deferred as deferred_module  # noqa: E402
from activis.widgets.explorer import Explorer  # noqa: E402
from activis.widgets.selection import PROJECTION  # noqa: E402


def wait_for(condition, timeout: float = 600.0, step: float = 0.02) -> float:
    t0 = time.perf_counter()
    while not condition():
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError("the background step did not finish")
        time.sleep(step)
    return time.perf_counter() - t0


class KernelLoop:
    """What a kernel's event loop does with callbacks: runs them later, in order."""

    def __init__(self):
        self.callbacks = []

    def add_callback(self, callback, *args):
        self.callbacks.append((callback, args))

    def run(self):
        while self.callbacks:
            callback, args = self.callbacks.pop(0)
            callback(*args)


def cold_import_seconds() -> tuple[float, float, list[str]]:
    """A fresh process's import of the explorer, against numpy, pandas and ipywidgets alone (what any view
    needs), and the heavy libraries it pulled in: part of a first frame in a fresh kernel."""
    code = ("import time, sys; t = time.perf_counter(); import numpy, pandas, ipywidgets; "
            "base = time.perf_counter() - t; t = time.perf_counter(); import activis.widgets.explorer; "
            "took = time.perf_counter() - t; "
            "heavy = [m for m in ('torch', 'sklearn', 'scipy.stats', 'numba', 'umap') if m in sys.modules]; "
            "print(base, took, ','.join(heavy))")
    root = pathlib.Path(activis.__file__).resolve().parents[1]  # the activis this process imported, not the cwd's
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         cwd=root).stdout.split()
    return float(out[0]), float(out[1]), out[2].split(",") if len(out) > 2 else []


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
        base_import, explorer_import, heavy = cold_import_seconds()
        print(f"a fresh process imports the explorer in {explorer_import:.2f} s after numpy, pandas and ipywidgets "
              f"({base_import:.2f} s); heavy libraries it imports: {', '.join(heavy) or 'none'}")
        t0 = time.perf_counter()
        store = open_store(f"{workdir}/store")
        steps["open_store"] = time.perf_counter() - t0
        layer = store.activations("fc")
        chunk_rows = (64 << 20) // (args.neurons * 4)
        t0 = time.perf_counter()
        plain_pass(layer, chunk_rows)
        base = time.perf_counter() - t0

        # what a kernel's loop runs once the cell has returned (the evaluation panel is built, the matrix's rows
        # start), and where threads hand their results to the kernel: run here after the constructor, as a kernel would
        loop = KernelLoop()
        for module in (base_module, deferred_module, evaluation_module):
            module.kernel_loop = lambda: loop
        before = set(threading.enumerate())
        t0, cpu0 = time.perf_counter(), time.thread_time()
        explorer = Explorer(store, method="pca")
        first = time.perf_counter()
        steps["Explorer(store): first frame, kernel side"] = first - t0
        first_cpu = time.thread_time() - cpu0
        started = sorted(t.name for t in set(threading.enumerate()) - before)
        shown_first = explorer.matrix.progress
        loop.run()
        steps["  then: the evaluation panel built (kernel's loop), since the first frame"] = time.perf_counter() - first
        rng = np.random.default_rng(0)
        t0 = time.perf_counter()
        explorer.selection.set_brush(np.sort(rng.choice(args.instances, 10_000, replace=False)), PROJECTION)
        steps["  meanwhile: a brush of 10,000 while the threads run (matrix row, instance panel)"] = \
            time.perf_counter() - t0
        explorer.reset("brush")
        explorer.matrix.deferred.wait(600)
        steps["  then: the matrix's class rows (thread), since the first frame"] = time.perf_counter() - first
        panel = explorer.evaluation
        wait_for(lambda: loop.run() or panel._ready)
        steps["  then: evaluation panel's curves and intervals (thread), since the first frame"] = \
            time.perf_counter() - first
        explorer.projection.job.wait(600)
        steps["  then: PCA of every instance (thread), since the first frame"] = time.perf_counter() - first
        t0 = time.perf_counter()
        explorer.matrix.add_subset("group 3", "group == 3")
        steps["a subset row added: kernel side (its row computed in the background)"] = time.perf_counter() - t0
        loop.run()
        explorer.matrix.deferred.wait(600)
        steps["  then: its row (thread)"] = time.perf_counter() - t0
        brush = np.sort(rng.choice(args.instances, 10_000, replace=False))
        grown = np.union1d(brush, rng.choice(args.instances, 100, replace=False))
        loop.run()
        for what, indices in (("brush of 10,000", brush), ("the same brush grown by 100", grown)):
            t0 = time.perf_counter()
            explorer.selection.set_brush(indices, PROJECTION)
            steps[f"{what}: matrix row and instance panel"] = time.perf_counter() - t0
            loop.run()
            steps[f"  then: the evaluation panel's comparison (kernel's loop), {what}"] = time.perf_counter() - t0

        print(f"the matrix at its first frame: {shown_first!r}; the first frame's own CPU time (this thread): "
              f"{first_cpu * 1000:.0f} ms; threads started before it was out: {', '.join(started) or 'none'}; "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
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
