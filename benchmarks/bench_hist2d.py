"""Per-step cost of GradHist2d (the 2D histogram of per-sample gradients against parameters).

    python benchmarks/bench_hist2d.py [--rounds 15] [--threads 1 2]

The per-sample gradients of one tracked step of `bench_cockpit`'s MLP and CNN (digits scaled to
28 x 28, standardised; batch 128) and of the MLP on unnormalised inputs (x 255). Each parameter's
histogram is timed with the current code and with the code at commit ``BEFORE`` (its
`persample` and `_kernels`, read from git), alternating within each round, and against a plain
training step measured in the same run; per torch thread count. Also: numba's compile time of the
whole `_kernels` module in a fresh process with an empty cache, now and before.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_cockpit import cnn, digits_28, mlp  # noqa: E402
from bench_histograms import elapsed, tracked_step  # noqa: E402

from activis.cockpit import quantities as Q  # noqa: E402
from activis.cockpit.persample import Outer  # noqa: E402

BEFORE = "0948c23"  # the last commit with the per-element popcount kernel and torch's parameter bins
ROOT = Path(__file__).resolve().parent.parent
FILES = ("persample.py", "_kernels.py")


def former_package() -> Path | None:
    """A copy of the cockpit's histogram code at BEFORE, as a package in a fixed temporary folder
    (numba caches its compiled code beside it), or None without git."""
    folder = Path(tempfile.gettempdir()) / f"activis_hist2d_{BEFORE}" / "former_cockpit"
    try:
        sources = [subprocess.run(["git", "show", f"{BEFORE}:activis/cockpit/{name}"], cwd=ROOT,
                                  capture_output=True, text=True, check=True).stdout for name in FILES]
    except (OSError, subprocess.CalledProcessError):
        return None
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "__init__.py").write_text("")
    for name, source in zip(FILES, sources):
        if not (folder / name).exists() or (folder / name).read_text() != source:
            (folder / name).write_text(source)
    return folder


def import_former(folder: Path):
    sys.path.insert(0, str(folder.parent))
    return importlib.import_module("former_cockpit.persample")


def bench(name, factory, data, former, rounds, threads):
    torch.set_num_threads(threads)
    per_sample, params, plain = tracked_step(factory, data)
    quantity = Q.GradHist2d()
    gb, pb = quantity.grad_bins, quantity.param_bins
    print(f"\n{name}, {threads} thread{'s' if threads > 1 else ''}: plain training step {plain * 1e3:.2f} ms (median)")
    print(f"  {'parameter':<28} {'now':>8} {'before':>8}  (ms, median of {rounds})")
    now_total = before_total = 0.0
    for ps, param in zip(per_sample, params):
        if former is not None:
            old = former.Outer(ps.u, ps.v) if isinstance(ps, Outer) else former.Dense(ps.grads)
            ogb, opb = (former.Bins(b.bins, b.lo, b.hi) for b in (gb, pb))
            assert torch.equal(ps.hist2d(param, gb, pb), old.hist2d(param, ogb, opb)), "not bit-exact"
        now, before = [], []
        for _ in range(rounds):  # alternate now and before
            now.append(elapsed(ps.hist2d, param, gb, pb))
            if former is not None:
                before.append(elapsed(old.hist2d, param, ogb, opb))
        now_ms = statistics.median(now) * 1e3
        before_ms = statistics.median(before) * 1e3 if before else float("nan")
        kind = "Outer" if isinstance(ps, Outer) else "Dense"
        print(f"  {kind + ' ' + str(tuple(param.shape)):<28} {now_ms:8.3f} {before_ms:8.3f}")
        now_total += now_ms
        before_total += before_ms
    print(f"  {'all parameters':<28} {now_total:8.3f} {before_total:8.3f}")
    print(f"  GradHist2d: {now_total:.2f} ms = {now_total / (plain * 1e3):.2f}x a plain step"
          + (f" (before: {before_total / (plain * 1e3):.2f}x); {before_total / now_total:.1f}x faster than before"
             if former else ""))


def compile_time(package: str, folder: Path | None = None) -> float:
    """Seconds to compile every kernel a histogram of each kind runs, in a fresh process with an
    empty numba cache."""
    script = (f"import time, torch; t = time.perf_counter(); from {package}.persample import Bins, Dense, Outer; "
              "b = Bins(10, -1., 1.); u = torch.randn(4, 3); v = torch.randn(4, 5); "
              "[f(x) for x in (Outer(u, v), Dense(u[:, :, None] * v[:, None, :])) for f in "
              "(lambda x: x.hist1d(b), lambda x: x.hist2d(torch.zeros(3, 5), b, b))]; print(time.perf_counter() - t)")
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        if folder is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(folder.parent), env.get("PYTHONPATH", "")])
        run = [sys.executable, "-c", script]
        return float(subprocess.run(run, env=env, capture_output=True, text=True, check=True).stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    folder = former_package()
    former = import_former(folder) if folder else None
    print(f"torch {torch.__version__}; before = {BEFORE}" + ("" if former else " (unavailable: no git)"))
    print(f"first histograms in a fresh process, empty numba cache: {compile_time('activis.cockpit'):.1f} s"
          + (f" (before: {compile_time('former_cockpit', folder):.1f} s)" if folder else ""))
    data = digits_28(8)
    for threads in args.threads:
        bench("MLP", mlp, data, former, args.rounds, threads)
        bench("CNN", cnn, data, former, args.rounds, threads)
        bench("MLP, inputs x 255 (unnormalised)", mlp, [(x * 255, y) for x, y in data], former, args.rounds,
              threads)


if __name__ == "__main__":
    main()
