"""Data map of 10 checkpoints x 100,000 instances x 10 classes against one pass over the same logits.

    .venv/bin/python benchmarks/bench_dynamics.py            # ~10 s
    .venv/bin/python benchmarks/bench_dynamics.py --instances 20000

Baselines measured in the same run on the same float32 logits: one float64 softmax (``x - max``,
``exp``, divide by the sum: what any data map must at least do), and ``logits.sum()`` (the memory pass
alone, for scale). The data map is timed cold (its first call in this process) and warm (best of
``--repeat``); target: cold data map <= 1 x one softmax. Also: CKA of 100,000 x 512 against 100,000 x 256
(linear, the exact feature-space form) against one ``x.T @ y`` of the same arrays.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))


def softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    x -= x.max(axis=-1, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=-1, keepdims=True)
    return x


def timed(func, repeat: int) -> tuple[float, float]:
    """(first call, best of ``repeat`` calls) in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return times[0], min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", type=int, default=10)
    parser.add_argument("--instances", type=int, default=100_000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    shape = (args.checkpoints, args.instances, args.classes)
    logits = (rng.standard_normal(shape) * 2).astype(np.float32)
    labels = rng.integers(0, args.classes, args.instances)

    from activis.dynamics import cka, data_map

    cold_map, warm_map = timed(lambda: data_map(logits, labels), args.repeat)
    cold_softmax, warm_softmax = timed(lambda: softmax(logits), args.repeat)
    _, warm_sum = timed(logits.sum, args.repeat)
    print(f"logits {shape[0]} x {shape[1]:,} x {shape[2]} float32 ({logits.nbytes / 1e6:.0f} MB)")
    print(f"data_map      cold {cold_map * 1e3:7.1f} ms   warm {warm_map * 1e3:7.1f} ms")
    print(f"one softmax   cold {cold_softmax * 1e3:7.1f} ms   warm {warm_softmax * 1e3:7.1f} ms")
    print(f"logits.sum()                    warm {warm_sum * 1e3:7.1f} ms")
    print(f"data map / one softmax: cold {cold_map / cold_softmax:.2f}x, warm {warm_map / warm_softmax:.2f}x "
          f"(target <= 1); / logits.sum(): {warm_map / warm_sum:.0f}x")

    x = rng.standard_normal((args.instances, 512)).astype(np.float32)
    y = np.tanh(x[:, :256]) + rng.standard_normal((args.instances, 256)).astype(np.float32)
    _, warm_cka = timed(lambda: cka(x, y), 2)
    _, warm_product = timed(lambda: x.T @ y, 2)
    print(f"linear CKA {args.instances:,} x 512 vs x 256: {warm_cka * 1e3:.0f} ms, "
          f"{warm_cka / warm_product:.1f}x one x.T @ y ({warm_product * 1e3:.0f} ms)")


if __name__ == "__main__":
    main()
