"""Capture cost against a plain forward loop, and capture memory against the number of instances.

    .venv/bin/python benchmarks/bench_capture.py            # everything (several minutes on 2 cores)
    .venv/bin/python benchmarks/bench_capture.py --quick    # 10,000 instances, one repeat
    .venv/bin/python benchmarks/bench_capture.py --threads 1  # torch on one core, the writer on another

For an MLP (784-512-256-10) and a small CNN (32x32x3 inputs), over synthetic instances in batches
of 256, it times `capture` into a float16 store against a plain ``inference_mode`` forward loop over
the same in-memory data, alternating them so that load from other processes falls on all, and
prints capture / plain (target <= 1.15), instances per second and MB per second written. Beside
them it times the floor: the plain loop with forward hooks that write the same layers' rows
(float16, conv maps as channel means) into pre-faulted buffers reused block after block, as capture's
staging is -- what any capture costs before checking and storing anything; capture / floor is
what activis adds. Two layer sets: ``hidden``, the output of every hidden layer (after its
activation), and ``all``, every node with an output per instance (each Linear/Conv before and after
its activation, pools, flatten, logits). Conv feature maps are stored as per-channel means.

Then, in a fresh process per size, it captures every layer from batches generated on the fly (so
that the data itself takes no memory) and prints the peak growth of anonymous memory (RssAnon: the
store's memory-mapped pages are file-backed and do not count) at 50,000 and at 200,000 instances.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import torch
from torch import nn

import activis
from activis.capturing import capture

BATCH = 256


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, 10))


MODELS = {"mlp": (mlp, (784,)), "cnn": (cnn, (3, 32, 32))}


def layer_sets(model, shape) -> dict[str, list[str]]:
    graph = activis.extract_graph(model, torch.randn(2, *shape))
    every = [n.name for n in graph.capture_points]
    return {"hidden": [n.name for n in graph.capture_points if n.kind == "ReLU"], "all": every}


def cpu_seconds() -> float:
    """CPU time of this process, all threads: steadier than wall time on a machine shared with others."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def plain_loop(model, x) -> tuple[float, float]:
    start, cpu = time.perf_counter(), cpu_seconds()
    with torch.inference_mode():
        for i in range(0, len(x), BATCH):
            model(x[i:i + BATCH])
    return time.perf_counter() - start, cpu_seconds() - cpu


def floor_loop(model, x, layers) -> tuple[float, float]:
    """The plain loop plus each layer's rows written into reused, pre-faulted float16 buffers (no checks, no store)."""
    graph = activis.extract_graph(model, x[:2])
    modules = [model.get_submodule(graph.node(name).target) for name in layers]
    rows_of = {}  # module -> its (n, width) rows of the batch, as capture stores them

    def rows(out):
        return out.flatten(2).sum(-1) / out[0, 0].numel() if out.dim() > 2 else out.reshape(len(out), -1)

    probes = [m.register_forward_hook(lambda m, _i, out: rows_of.__setitem__(m, rows(out))) for m in modules]
    with torch.inference_mode():
        model(x[:2])
    for handle in probes:
        handle.remove()
    widths = {m: rows_of[m].shape[1] for m in modules}
    block = BATCH * max(1, (4 << 20) // (BATCH * 2 * sum(widths.values())))  # rows per staging block, as capture's
    rings = {m: torch.ones(3 * block, widths[m], dtype=torch.float16) for m in modules}  # faulted by ones
    at = [0]

    def write(module, _inputs, out):
        batch = rows(out)
        rings[module][at[0]:at[0] + len(batch)].copy_(batch)

    handles = [m.register_forward_hook(write) for m in modules]
    try:
        start, cpu = time.perf_counter(), cpu_seconds()
        with torch.inference_mode():
            for i in range(0, len(x), BATCH):
                at[0] = i % (3 * block)
                model(x[i:i + BATCH])
        return time.perf_counter() - start, cpu_seconds() - cpu
    finally:
        for handle in handles:
            handle.remove()


def timed_capture(model, x, y, layers, path) -> tuple[float, float, int]:
    """Capture into a new store (deleting the last one is not timed: it is no part of a capture)."""
    shutil.rmtree(path, ignore_errors=True)
    start, cpu = time.perf_counter(), cpu_seconds()
    store = capture(model, x, path, labels=y, layers=layers, batch_size=BATCH, keep_inputs=False,
                    progress=False)
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    written = sum(f.stat().st_size for f in pathlib.Path(path).rglob("*") if f.is_file())
    assert store.n_instances == len(x)
    return seconds, cpu, written


def compare(name: str, n: int, repeats: int, workdir: pathlib.Path) -> list[dict]:
    build, shape = MODELS[name]
    torch.manual_seed(0)
    model = build().eval()
    x = torch.randn(n, *shape)
    y = torch.randint(0, 10, (n,))
    sets = layer_sets(model, shape)
    plain_loop(model, x[: 20 * BATCH])  # warm up the kernels
    timed_capture(model, x[: 20 * BATCH], y[: 20 * BATCH], sets["all"], workdir / f"{name}-warm")
    floor_loop(model, x[: 20 * BATCH], sets["all"])
    plains, plain_cpu, written = [], [], {}
    captures, capture_cpu, floors = {k: [] for k in sets}, {k: [] for k in sets}, {k: [] for k in sets}
    for _ in range(repeats):
        seconds, cpu = plain_loop(model, x)
        plains.append(seconds)
        plain_cpu.append(cpu)
        for key, layers in sets.items():
            floors[key].append(floor_loop(model, x, layers)[0])
            seconds, cpu, written[key] = timed_capture(model, x, y, layers, workdir / f"{name}-{key}")
            captures[key].append(seconds)
            capture_cpu[key].append(cpu)
    plain = statistics.median(plains)
    results = []
    for key, layers in sets.items():
        took = statistics.median(captures[key])
        results.append({"model": name, "layers": key, "n_layers": len(layers), "n": n, "plain_s": plains,
                        "capture_s": captures[key], "ratio_median": took / plain,
                        "ratio_best": min(captures[key]) / min(plains),
                        "floor_ratio": statistics.median(floors[key]) / plain,
                        "over_floor": took / statistics.median(floors[key]),
                        "cpu_ratio": statistics.median(capture_cpu[key]) / statistics.median(plain_cpu),
                        "instances_per_s": n / took, "store_mb": written[key] / 1e6,
                        "mb_per_s": written[key] / 1e6 / took})
    return results


class SyntheticBatches:
    """Batches generated on the fly: data that takes no memory however many instances there are."""

    def __init__(self, n: int, shape):
        self.n, self.shape = n, shape

    def __len__(self):
        return self.n

    def __iter__(self):
        gen = torch.Generator().manual_seed(0)
        for i in range(0, self.n, BATCH):
            k = min(BATCH, self.n - i)
            yield torch.randn(k, *self.shape, generator=gen), torch.randint(0, 10, (k,), generator=gen)


def rss_anon_kb() -> int:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise RuntimeError("no RssAnon in /proc/self/status")


def peak_growth_mb(run) -> float:
    """Peak RssAnon growth (MB) while ``run()`` runs, sampled every 5 ms."""
    before = rss_anon_kb()
    peak = [before]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_anon_kb())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        run()
    finally:
        done.set()
        sampler.join()
    return (peak[0] - before) / 1024


def memory_child(name: str, n: int, path: str) -> None:
    """Runs in a fresh process: peak RssAnon growth of a plain loop (20 batches: its peak is the
    model's own working memory) and of a capture of n generated instances."""
    build, shape = MODELS[name]
    torch.manual_seed(0)
    model = build().eval()
    layers = layer_sets(model, shape)["all"]
    capture(model, SyntheticBatches(3 * BATCH, shape), path + "-warm", layers=layers, progress=False,
            keep_inputs=False)

    def plain():
        with torch.inference_mode():
            for x, _ in SyntheticBatches(20 * BATCH, shape):
                model(x)

    plain_mb = peak_growth_mb(plain)
    start = time.perf_counter()
    stores = []
    capture_mb = peak_growth_mb(lambda: stores.append(capture(model, SyntheticBatches(n, shape), path,
                                                              layers=layers, progress=False, keep_inputs=False)))
    seconds = time.perf_counter() - start
    assert stores[0].n_instances == n
    print(json.dumps({"model": name, "n": n, "peak_growth_mb": capture_mb, "plain_peak_growth_mb": plain_mb,
                      "seconds": seconds, "instances_per_s": n / seconds}))


def memory(name: str, n: int, workdir: pathlib.Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--memory-child", name, str(n), str(workdir / f"mem-{name}-{n}")],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 instances, one repeat, memory at 10k/40k")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--memory-child", nargs=3, metavar=("MODEL", "N", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_child:
        memory_child(args.memory_child[0], int(args.memory_child[1]), args.memory_child[2])
        return
    n, repeats, sizes = (10_000, 1, (10_000, 40_000)) if args.quick else (50_000, args.repeats, (50_000, 200_000))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {BATCH}")
    with tempfile.TemporaryDirectory(prefix="activis-bench-") as tmp:
        workdir = pathlib.Path(tmp)
        for name in args.models.split(","):
            for r in compare(name, n, repeats, workdir):
                print(f"{name} {r['layers']} ({r['n_layers']} layers): capture / plain = {r['ratio_median']:.3f} "
                      f"(median of {repeats}; best/best {r['ratio_best']:.3f}; CPU time {r['cpu_ratio']:.3f}; "
                      f"target <= 1.15) | floor / plain = {r['floor_ratio']:.3f}, capture / floor = "
                      f"{r['over_floor']:.3f} | plain "
                      f"{', '.join(f'{s:.2f}' for s in r['plain_s'])} s, capture "
                      f"{', '.join(f'{s:.2f}' for s in r['capture_s'])} s | {r['instances_per_s']:,.0f} inst/s, "
                      f"{r['mb_per_s']:.1f} MB/s written ({r['store_mb']:.1f} MB store)")
            if args.skip_memory:
                continue
            peaks = [memory(name, size, workdir) for size in sizes]
            text = ", ".join(f"{p['n']:,}: {p['peak_growth_mb']:.1f} MB" for p in peaks)
            plain = ", ".join(f"{p['plain_peak_growth_mb']:.1f}" for p in peaks)
            print(f"{name}: peak RssAnon growth during capture {text} "
                  f"(ratio {peaks[1]['peak_growth_mb'] / max(peaks[0]['peak_growth_mb'], 1e-9):.2f} for "
                  f"{sizes[1] // sizes[0]}x the instances; target: flat) | a plain forward loop's own peak in the "
                  f"same processes: {plain} MB")


if __name__ == "__main__":
    main()
