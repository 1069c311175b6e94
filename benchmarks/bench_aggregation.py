"""Aggregation of K = 20 subsets (mean, std, fraction active) against one plain chunked pass, cold.

Each case times, in the same process, interleaved round by round (``--repeat`` rounds; the figure
is the median over rounds of each call's time divided by that round's baseline):
- the baseline: one plain chunked pass over the same memory (every row read once and summed in
  float32, chunk by chunk; the faster of summing directly and converting first for float16);
- what a user meets: ``Subsets.aggregate(layer, names)`` with nothing cached, so the 20 memberships
  are evaluated inside the timed call, all three statistics (method ``auto``);
- each method of `aggregate_masks` on its own (masks also evaluated inside): ``patterns`` (each row
  added once to its membership pattern's sums, compiled) and ``matmul`` (BLAS S^T A per chunk);
- ``patterns, one thread``: the same on one thread, as the baseline runs (numpy sums on one thread;
  activis's pattern pass splits the rows into one range per CPU, at most one per 32,768 rows).
Cases: 100,000 x 512 and 1,000,000 x 256, float16 and float32; the layer read from the store
(a memory map) *cold*: before every call, baseline and activis alike, the file's pages are dropped
from the page cache (``madvise(MADV_DONTNEED)`` on the map, then
``posix_fadvise(POSIX_FADV_DONTNEED)`` on the file; needs no privileges), as for a store larger
than the page cache; and the layer held in memory (a numpy array). Every statistic of every subset
is checked against a float64 reference. Peak heap (tracemalloc: memory-map pages are not heap) is
measured on the store with a 16 MB chunk budget. Run:

    .venv/bin/python benchmarks/bench_aggregation.py [--cases 100000x512,1000000x256] [--dtypes float32,float16]
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import tempfile
import time
import tracemalloc

import numpy as np
import pandas as pd

from activis.store import LayerSpec, StoreWriter
from activis.subsets import Subsets, aggregate_masks
from activis.subsets import aggregation as aggregation_module


def make_store(path, n: int, n_neurons: int, n_classes: int = 10, dtype: str = "float32", batch: int = 20_000):
    """A store written batch by batch (bounded memory) with labels, predictions and a metadata column."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, n_classes, n)
    group = rng.integers(0, 8, n)
    writer = StoreWriter(path, layers={"fc": LayerSpec(neurons=n_neurons, dtype=dtype)}, n_outputs=n_classes,
                         class_names=[str(c) for c in range(n_classes)], n_expected=n,
                         metadata=pd.DataFrame({"group": group}))
    for lo in range(0, n, batch):
        hi = min(n, lo + batch)
        y = labels[lo:hi]
        logits = rng.standard_normal((hi - lo, n_classes)).astype(np.float32)
        logits[np.arange(hi - lo), y] += 2.5 * (rng.random(hi - lo) < 0.85)
        e = np.exp(logits - logits.max(1, keepdims=True))
        probs = e / e.sum(1, keepdims=True)
        acts = np.maximum(rng.standard_normal((hi - lo, n_neurons), dtype=np.float32), 0)
        writer.append(activations={"fc": acts}, label=y, pred=logits.argmax(1), confidence=probs.max(1),
                      outputs=logits)
    return writer.finish()


def define_subsets(store) -> list[str]:
    """20 overlapping subsets of the kinds people define: classes, predictions, errors, queries, a sample."""
    subsets = Subsets(store)
    names = subsets.by_class()
    names += subsets.by_prediction(classes=range(4))
    names += [subsets.misclassified().name, subsets.correct().name,
              subsets.by_score("low confidence", high=0.5).name,
              subsets.add("group 3", "group == 3").name,
              subsets.add("gathered sample", mask=np.random.default_rng(1).random(store.n_instances) < 0.05).name,
              subsets.add("true 0 or 1, wrong", "label in [0, 1] and not correct").name]
    assert len(names) == 20, names
    return names


def plain_pass(activations, chunk_rows: int) -> np.ndarray:
    """The baseline: every row read once and summed in float32, chunk by chunk."""
    total = np.zeros(activations.shape[1], np.float32)
    for lo in range(0, activations.shape[0], chunk_rows):
        total += np.add.reduce(activations[lo:lo + chunk_rows], axis=0, dtype=np.float32)
    return total


def plain_pass_converting(activations, chunk_rows: int) -> np.ndarray:
    total = np.zeros(activations.shape[1], np.float32)
    for lo in range(0, activations.shape[0], chunk_rows):
        total += activations[lo:lo + chunk_rows].astype(np.float32).sum(axis=0)
    return total


def one_thread(func):
    """``func`` with the pattern pass on one thread (every layer one row range), as the baseline runs."""
    def call():
        saved = aggregation_module.THREAD_ROWS
        aggregation_module.THREAD_ROWS = 1 << 62
        try:
            return func()
        finally:
            aggregation_module.THREAD_ROWS = saved
    return call


def evict(mapped: np.memmap) -> None:
    """Drop the layer file's pages from this process's map and from the page cache: the next read
    comes from the disk, as for a store larger than the page cache."""
    mapped._mmap.madvise(mmap.MADV_DONTNEED)
    fd = os.open(mapped.filename, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def timed(func, before=None) -> float:
    if before is not None:
        before()
    t0 = time.perf_counter()
    func()
    return time.perf_counter() - t0


def reference(activations, masks: np.ndarray, chunk_rows: int) -> dict[str, np.ndarray]:
    """Mean, std and fraction active (> 0) of every subset in float64: S^T A per chunk, then the
    squares around each subset's mean (a second pass)."""
    k, n_neurons = len(masks), activations.shape[1]
    sizes = masks.sum(1).astype(np.float64)[:, None]
    sums, active, squares = (np.zeros((k, n_neurons)) for _ in range(3))
    for lo in range(0, activations.shape[0], chunk_rows):
        x, m = np.asarray(activations[lo:lo + chunk_rows], np.float64), masks[:, lo:lo + chunk_rows].astype(np.float64)
        sums += m @ x
        active += m @ (x > 0)
    mean = sums / sizes
    for lo in range(0, activations.shape[0], chunk_rows):
        x = np.asarray(activations[lo:lo + chunk_rows], np.float64)
        for row in range(k):
            picked = x[masks[row, lo:lo + chunk_rows]] - mean[row]
            squares[row] += np.einsum("ij,ij->j", picked, picked)
    return {"mean": mean, "std": np.sqrt(squares / sizes), "active": active / sizes}


def run_case(workdir: str, n: int, n_neurons: int, dtype: str, repeat: int, small_chunk_mb: float) -> None:
    t0 = time.perf_counter()
    store = make_store(f"{workdir}/store-{n}-{n_neurons}-{dtype}", n, n_neurons, dtype=dtype)
    written = time.perf_counter() - t0
    names = define_subsets(store)
    subsets = Subsets(store)
    mapped = store.activations("fc")
    in_memory = np.array(mapped)
    chunk_rows = subsets.chunk_bytes // (n_neurons * 4)
    masks = np.stack([subsets.mask(m) for m in names])
    patterns = len(np.unique(np.packbits(masks, axis=0), axis=1).T)
    print(f"\n{n:,} x {n_neurons} {dtype} ({mapped.nbytes / 1e6:.0f} MB, written in {written:.1f} s, not timed); "
          f"K = {len(names)} subsets, {patterns} membership patterns; threads: plain pass 1, activis "
          f"{max(1, min(aggregation_module._cpu_count(), n // aggregation_module.THREAD_ROWS))}")

    def user_call():  # what a user meets: nothing cached, memberships evaluated in the call
        subsets.clear_cache()
        return subsets.aggregate("fc", names)

    def method_call(activations, method):  # memberships evaluated in the call too
        subsets.clear_cache()
        return aggregate_masks(activations, np.stack([subsets.mask(m) for m in names]), method=method)

    user_call()  # numba: compile or load from its cache once per process, outside the timing
    cases = {}
    for where, activations in (("store, cold", mapped), ("memory", in_memory)):
        cases[f"{where}: plain pass"] = lambda a=activations: plain_pass(a, chunk_rows)
        if dtype != "float32":
            cases[f"{where}: plain pass, converting"] = lambda a=activations: plain_pass_converting(a, chunk_rows)
        # the store case is the user's call itself; in memory, the same work (memberships, then "auto")
        cases[f"{where}: Subsets.aggregate (auto)"] = (
            user_call if where.startswith("store") else lambda a=activations: method_call(a, "auto"))
        for method in ("patterns", "matmul"):
            cases[f"{where}: {method}"] = lambda a=activations, m=method: method_call(a, m)
        cases[f"{where}: patterns, one thread"] = one_thread(lambda a=activations: method_call(a, "patterns"))
    times = {name: [] for name in cases}
    for _ in range(repeat):  # interleaved so that load from other processes hits every case
        for name, func in cases.items():
            times[name].append(timed(func, (lambda: evict(mapped)) if name.startswith("store") else None))
    for where in ("store, cold", "memory"):
        rounds = np.array([times[name] for name in cases if name.startswith(f"{where}: plain")])
        base = rounds.min(axis=0)  # per round, the faster baseline
        for name, values in times.items():
            if name.startswith(where):
                ratio = float(np.median(np.array(values) / base))
                target = "" if "plain" in name else "  (target <= 1.5)"
                print(f"  {name:45s} {np.median(values) * 1000:8.1f} ms  ratio {ratio:5.2f}{target}")

    # the figure is only worth something if the answer is right: every subset, every statistic
    expected = reference(in_memory, masks, chunk_rows)
    for result in (user_call(), method_call(in_memory, "patterns"), method_call(in_memory, "matmul")):
        for stat, values in expected.items():
            np.testing.assert_allclose(result[stat], values, rtol=2e-5, atol=2e-5, err_msg=stat)
    print("  every statistic of every subset equals the float64 reference (rtol = atol = 2e-5)")

    small = Subsets(store, chunk_bytes=int(small_chunk_mb * (1 << 20)))
    tracemalloc.start()
    small.aggregate("fc", names)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"  peak heap, store, {small_chunk_mb:g} MB chunk budget, masks included: {peak / 1e6:.1f} MB "
          f"for a {mapped.nbytes / 1e6:.0f} MB layer")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="100000x512,1000000x256")
    parser.add_argument("--dtypes", default="float32,float16")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--small-chunk-mb", type=float, default=16)
    args = parser.parse_args()
    print(f"load (uptime): {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}, "
          f"{os.cpu_count()} CPUs")
    workdir = tempfile.mkdtemp(prefix="bench-aggregation-")
    try:
        for case in args.cases.split(","):
            n, n_neurons = (int(v) for v in case.split("x"))
            for dtype in args.dtypes.split(","):
                run_case(workdir, n, n_neurons, dtype, args.repeat, args.small_chunk_mb)
                shutil.rmtree(workdir, ignore_errors=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nload at the end: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
