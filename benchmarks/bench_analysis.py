"""Misclassification analysis of one instance on a 100,000 x 512 store, against one plain pass over the layer.

The baseline is the cheapest thing that reads every activation once: a chunked column mean (with the
same float16 -> float64 conversion), in the same process with the layer file already in the page
cache. ``explain (first)`` includes the per-class statistics pass; ``explain (cached)`` is any
further instance at the same layer. Also timed: the confusion pairs and a 1,000-instance panel
sample. Run:

    .venv/bin/python benchmarks/bench_analysis.py [--instances 100000] [--neurons 512] [--dtype float16]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

import numpy as np

from activis import analysis
from activis.store import LayerSpec, StoreWriter


def make_store(path, n: int, n_neurons: int, dtype: str, n_classes: int = 10, batch: int = 20_000):
    """Ten classes with class-dependent activations and ~8 % mistakes, written batch by batch."""
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((n_classes, n_neurons)).astype(np.float32)
    writer = StoreWriter(path, layers={"fc": LayerSpec(neurons=n_neurons, dtype=dtype)}, n_outputs=n_classes,
                         class_names=[f"class {k}" for k in range(n_classes)], n_expected=n)
    for lo in range(0, n, batch):
        m = min(n, lo + batch) - lo
        y = rng.integers(0, n_classes, m)
        logits = rng.standard_normal((m, n_classes)).astype(np.float32)
        logits[np.arange(m), y] += 3.0 * (rng.random(m) < 0.92)
        acts = np.maximum(centres[y] + rng.standard_normal((m, n_neurons), dtype=np.float32), 0)
        writer.append(activations={"fc": acts}, label=y, outputs=logits)
    return writer.finish()


def plain_pass(acts) -> np.ndarray:
    step = analysis._chunk_rows(acts.shape[1])
    total = np.zeros(acts.shape[1])
    for lo in range(0, len(acts), step):
        total += analysis.as_float64(acts[lo:lo + step]).sum(0)  # the same fast float16 conversion
    return total / len(acts)


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=100_000)
    parser.add_argument("--neurons", type=int, default=512)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="bench-analysis-")
    try:
        store = make_store(f"{root}/store", args.instances, args.neurons, args.dtype)
        acts = store.activations("fc")
        labels = np.asarray(store.column("label"))
        wrong = np.flatnonzero(labels != np.asarray(store.column("pred")))
        plain_pass(acts)  # page cache warm for everyone
        base = best(lambda: plain_pass(acts), args.repeat)

        def first_explain():
            analysis._STATS_CACHE.pop(store, None)
            return analysis.explain_instance(store, int(wrong[0]), "fc")

        cold = best(first_explain, args.repeat)
        others = iter(wrong[1:])
        warm = best(lambda: analysis.explain_instance(store, int(next(others)), "fc"), max(args.repeat, 5))
        pairs = best(lambda: analysis.confusion_pairs(store), args.repeat)
        sample = best(lambda: analysis.sample_instances(store, 1000, include=wrong[:5]), args.repeat)
        print(f"store: {args.instances:,} x {args.neurons} {args.dtype}, {len(wrong):,} misclassified")
        print(f"baseline, one plain pass over the layer:  {base * 1e3:8.1f} ms")
        print(f"explain one instance (first, with stats): {cold * 1e3:8.1f} ms  = {cold / base:5.2f} x baseline")
        print(f"explain one more instance (cached stats): {warm * 1e3:8.1f} ms  = {warm / base:5.3f} x baseline")
        print(f"confusion pairs:                          {pairs * 1e3:8.1f} ms  = {pairs / base:5.3f} x baseline")
        print(f"panel sample of 1,000:                    {sample * 1e3:8.1f} ms  = {sample / base:5.3f} x baseline")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
