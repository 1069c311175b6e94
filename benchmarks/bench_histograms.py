"""Per-step cost of the cockpit's gradient histograms (GradHist1d, GradHist2d), single thread.

    python benchmarks/bench_histograms.py [--rounds 7]

The per-sample gradients of one tracked step of `bench_cockpit`'s MLP and CNN (digits scaled to
28 x 28, standardised; batch 128), and of the MLP on unnormalised inputs (x 255: most products
beyond the range). Each histogram is timed with the current code and with the numpy code it
replaced (read from git at commit ``BEFORE``, when git is there), alternating within each round,
and against a plain training step measured in the same run. Also: numba's compile time in a
fresh process with an empty cache, and the import time with a warm one.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_cockpit import Runner, cnn, digits_28, mlp  # noqa: E402

from activis.cockpit import quantities as Q  # noqa: E402
from activis.cockpit.persample import Bins, Outer  # noqa: E402

BEFORE = "05a89ab"  # the last commit with the numpy histograms
ROOT = Path(__file__).resolve().parent.parent


def former_persample():
    """The numpy implementation at BEFORE, as a module, or None without git."""
    try:
        source = subprocess.run(["git", "show", f"{BEFORE}:activis/cockpit/persample.py"], cwd=ROOT,
                                capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = Path(tempfile.mkdtemp()) / "former_persample.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("former_persample", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def tracked_step(factory, data):
    """The per-sample gradient objects and parameters of the 4th tracked step, and a plain step's time."""
    grabbed = {}
    compute = Q.GradHist1d.compute

    def grab(self, ctx):
        grabbed["per_sample"], grabbed["params"] = ctx.per_sample(), [p.detach().clone() for p in ctx.params]
        return compute(self, ctx)

    Q.GradHist1d.compute = grab
    try:
        runner = Runner(factory, data, (lambda: [Q.GradHist1d()], {}))
        for _ in range(4):
            runner.step()
    finally:
        Q.GradHist1d.compute = compute
    plain = Runner(factory, data)
    plain_time = statistics.median([plain.step() for _ in range(15)][5:])
    return grabbed["per_sample"], grabbed["params"], plain_time


def elapsed(method, *args) -> float:
    start = time.perf_counter()
    method(*args)
    return time.perf_counter() - start


def bench(name, factory, data, former, rounds):
    per_sample, params, plain = tracked_step(factory, data)
    b1, gb, pb = Bins(100, -2.0, 2.0), Bins(40, -1.0, 1.0), Bins(50, -2.0, 2.0)
    print(f"\n{name}: plain training step {plain * 1e3:.2f} ms (median)")
    print(f"  {'parameter':<28} {'hist1d now':>10} {'before':>8} {'hist2d now':>11} {'before':>8}  (ms)")
    totals = [0.0, 0.0, 0.0, 0.0]
    for ps, param in zip(per_sample, params):
        if former is not None:
            old_ps = (former.Outer(ps.u, ps.v) if isinstance(ps, Outer) else former.Dense(ps.grads))
            ob1, ogb, opb = (former.Bins(b.bins, b.lo, b.hi) for b in (b1, gb, pb))
        samples = [[], [], [], []]  # hist1d now, before, hist2d now, before
        for _ in range(rounds):  # alternate now and before
            samples[0].append(elapsed(ps.hist1d, b1))
            samples[2].append(elapsed(ps.hist2d, param, gb, pb))
            if former is not None:
                samples[1].append(elapsed(old_ps.hist1d, ob1))
                samples[3].append(elapsed(old_ps.hist2d, param, ogb, opb))
        row = [statistics.median(t) if t else float("nan") for t in samples]
        kind = "Outer" if isinstance(ps, Outer) else "Dense"
        print(f"  {kind + ' ' + str(tuple(param.shape)):<28} " + " ".join(
            f"{v * 1e3:{w}.3f}" for v, w in zip(row, (10, 8, 11, 8))))
        totals = [t + v for t, v in zip(totals, row)]
    print(f"  {'all parameters':<28} " + " ".join(f"{v * 1e3:{w}.3f}" for v, w in zip(totals, (10, 8, 11, 8))))
    print(f"  GradHist1d: {totals[0] * 1e3:.2f} ms = {totals[0] / plain:.2f}x a plain step"
          + (f", {totals[1] / totals[0]:.1f}x faster than before" if former else ""))
    print(f"  GradHist2d: {totals[2] * 1e3:.2f} ms = {totals[2] / plain:.2f}x a plain step"
          + (f", {totals[3] / totals[2]:.1f}x faster than before" if former else ""))


def compile_times():
    """Seconds to import and run one histogram of each kind in a fresh process: empty cache, warm cache."""
    script = ("import time, torch; t = time.perf_counter(); from activis.cockpit.persample import Bins, Dense, "
              "Outer; b = Bins(10, -1., 1.); u = torch.randn(4, 3); v = torch.randn(4, 5); o = Outer(u, v); "
              "d = Dense(u[:, :, None] * v[:, None, :]); [f(x) for x in (o, d) for f in (lambda x: x.hist1d(b), "
              "lambda x: x.hist2d(torch.zeros(3, 5), b, b))]; print(time.perf_counter() - t)")
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        run = [sys.executable, "-c", script]
        cold = float(subprocess.run(run, env=env, capture_output=True, text=True, check=True).stdout)
        warm = float(subprocess.run(run, env=env, capture_output=True, text=True, check=True).stdout)
    return cold, warm


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    former = former_persample()
    print(f"torch {torch.__version__}, 1 thread; before = numpy histograms at {BEFORE}"
          + ("" if former else " (unavailable: no git)"))
    cold, warm = compile_times()
    print(f"first histograms in a fresh process: {cold:.2f} s with an empty numba cache, {warm:.2f} s warm")
    data = digits_28(8)
    bench("MLP", mlp, data, former, args.rounds)
    bench("CNN", cnn, data, former, args.rounds)
    bench("MLP, inputs x 255 (unnormalised)", mlp, [(x * 255, y) for x, y in data], former, args.rounds)


if __name__ == "__main__":
    main()
