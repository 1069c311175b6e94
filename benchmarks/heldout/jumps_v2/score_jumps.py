"""Scores a jump detector on the second set of held-out curves (the first set's interface).

    from score_jumps import score
    print(score(lambda values: my_marks(values)))   # detect(list of floats) -> step indices

    python score_jumps.py                    # a naive baseline (robust z of one-step log changes above 6)
    python score_jumps.py --activis [--tree /path/to/activis] [--out results.json]
                                             # activis.evaluation.training.sudden_jumps, its defaults

A mark within max(5, 1 % of the length) steps of a listed jump finds it; every other mark is a false alarm."""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from curves import CURVES  # noqa: E402


def score(detect, curves=CURVES, per_curve=False):
    found = total = false_marks = steps = 0
    marked_jumpless, rows = [], []
    for curve in curves:
        n = len(curve["values"])
        tolerance = max(5, n // 100)
        marks = sorted({int(m) for m in detect(list(curve["values"]))})
        matched, hits = set(), 0
        for jump in curve["jumps"]:
            hit = [m for m in marks if abs(m - jump) <= tolerance]
            hits += bool(hit)
            matched.update(hit)
        found += hits
        total += len(curve["jumps"])
        false = [m for m in marks if m not in matched]
        false_marks += len(false)
        steps += n
        if not curve["jumps"] and marks:
            marked_jumpless.append(curve["name"])
        rows.append({"name": curve["name"], "jumps": curve["jumps"], "marks": marks, "found": hits,
                     "false": false})
    jumpless = sum(1 for c in curves if not c["jumps"])
    result = {"recall": f"{found}/{total}", "jumpless curves marked": f"{len(marked_jumpless)}/{jumpless}",
              "false marks per 1000 steps": round(1000 * false_marks / steps, 2), "marked": marked_jumpless}
    if per_curve:
        result["curves"] = rows
    return result


def naive(values, threshold=6.0):
    v = np.log(np.abs(np.asarray(values)) + 1e-12)
    d = np.diff(v)
    mad = np.median(np.abs(d - np.median(d))) * 1.4826 + 1e-12
    z = (d - np.median(d)) / mad
    return [i + 1 for i in np.flatnonzero(np.abs(z) > threshold)]


def activis_detector():
    from activis.evaluation.training import sudden_jumps

    def detect(values):
        return list(np.flatnonzero(np.asarray(sudden_jumps(np.asarray(values, dtype=np.float64)))))
    return detect


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--activis", action="store_true")
    parser.add_argument("--tree", default=None, help="activis checkout to import")
    parser.add_argument("--out", default=None, help="write the per-curve marks as JSON")
    args = parser.parse_args()
    if args.tree:
        sys.path.insert(0, args.tree)
    detector = activis_detector() if args.activis else naive
    result = score(detector, per_curve=bool(args.out))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        result.pop("curves")
    print(result)
