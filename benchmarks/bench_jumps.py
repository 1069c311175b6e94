"""How well `sudden_jumps` finds the jumps of training curves, and how fast it reads a long one.

Three sets, each scored the held-out way (a mark within max(5, 1 % of the length) steps of a listed jump
finds it, every other mark is false): the project's own curves (`jump_curves.project_curves`, 900), the
first held-out set (benchmarks/heldout/jumps, 40 curves: seen while the rule was redesigned, so a tuning set
now) and curves of kinds that set lacked (`jump_curves.new_kinds`, 35); then the held-out set's curves drawn
again with 5 other seeds (the same kinds: a check that the rule did not learn that set's noise). Beside the
rule: the held-out set's naive baseline (a robust z-score of one-step log changes above 6). Then the time to
read one 100,000-step curve, cold (wall and CPU), against a baseline measured in the same run (``np.median``
of the curve's changes, the least a robust rule reads). Run:

    .venv/bin/python benchmarks/bench_jumps.py
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "heldout", "jumps"), os.path.dirname(HERE)]

from jump_curves import new_kinds, project_curves  # noqa: E402

from activis.run.volatility import sudden_jumps  # noqa: E402


def score(curves, detect) -> dict:
    """Recall, precision, jump-free curves marked and false marks per 1,000 steps."""
    found = total = marks_total = false_marks = steps = marked_free = free = 0
    for curve in curves:
        n = len(curve["values"])
        marks = np.unique(np.asarray(detect(np.asarray(curve["values"], float)), dtype=int))
        near = np.abs(marks[:, None] - np.asarray(curve["jumps"], dtype=int)[None, :]) <= max(5, n // 100)
        found, total = found + near.any(axis=0).sum(), total + len(curve["jumps"])
        marks_total, false_marks = marks_total + marks.size, false_marks + (~near.any(axis=1)).sum()
        steps, free = steps + n, free + (not curve["jumps"])
        marked_free += bool(not curve["jumps"] and marks.size)
    return {"recall": f"{found}/{total} = {found / max(total, 1):.2f}",
            "precision": round(float(1 - false_marks / max(marks_total, 1)), 2),
            "jump-free curves marked": f"{marked_free}/{free}",
            "false marks per 1000 steps": round(float(1000 * false_marks / steps), 2)}


def reseeded_heldout(offset: int) -> list[dict]:
    """The first held-out set's curves drawn again with other noise (each seed + ``offset``): the same
    kinds, so not new evidence about kinds, but a check that the rule did not learn that set's draws."""
    spec = importlib.util.spec_from_file_location("curves_redrawn", os.path.join(HERE, "heldout", "jumps", "curves.py"))
    module = importlib.util.module_from_spec(spec)
    default_rng = np.random.default_rng
    np.random.default_rng = lambda seed: default_rng(seed + offset)
    try:
        spec.loader.exec_module(module)
    finally:
        np.random.default_rng = default_rng
    return module.CURVES


def naive(values, threshold=6.0):
    v = np.log(np.abs(np.asarray(values)) + 1e-12)
    d = np.diff(v)
    mad = np.median(np.abs(d - np.median(d))) * 1.4826 + 1e-12
    return np.flatnonzero(np.abs((d - np.median(d)) / mad) > threshold) + 1


def rule(values):
    return np.flatnonzero(sudden_jumps(values))


def timing(n: int = 100_000) -> tuple[float, float, float]:
    """Wall and CPU seconds of `sudden_jumps` on one n-step curve (the first call: cold), and the
    baseline's wall seconds. CPU time too: on a shared machine the wall clock also counts waiting."""
    rng = np.random.default_rng(0)
    values = (0.1 + 2 * np.exp(-np.arange(n) / (n / 5))) * np.exp(0.1 * rng.standard_normal(n))
    start = time.perf_counter()
    np.median(np.diff(values))
    baseline = time.perf_counter() - start
    start, cpu = time.perf_counter(), time.process_time()
    sudden_jumps(values)
    return time.perf_counter() - start, time.process_time() - cpu, baseline


def main():
    from curves import CURVES
    sets = {"own (900)": project_curves(), "held-out v1, tuning (40)": CURVES, "new kinds (35)": new_kinds()}
    for name, curves in sets.items():
        print(f"{name:26s} rule:  {score(curves, rule)}")
        print(f"{'':26s} naive: {score(curves, naive)}")
    redrawn = [curve for offset in (1000, 2000, 3000, 4000, 5000) for curve in reseeded_heldout(offset)]
    print(f"{'held-out v1 redrawn (200)':26s} rule:  {score(redrawn, rule)}")
    seconds, cpu, baseline = timing()
    print(f"100,000 steps: {seconds:.3f} s ({cpu:.3f} s of CPU; np.median of the changes: {baseline:.4f} s, "
          f"ratio {seconds / baseline:.0f})")


if __name__ == "__main__":
    main()
