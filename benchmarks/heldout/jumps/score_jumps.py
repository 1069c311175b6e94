"""Scores a jump detector on the held-out curves.

    from score_jumps import score
    print(score(lambda values: my_marks(values)))   # detect(list of floats) -> step indices

`python score_jumps.py` scores a naive baseline (robust z-score of one-step log changes above 6), to show the
set is neither trivial nor impossible."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from curves import CURVES  # noqa: E402


def score(detect):
    found = total = false_marks = steps = 0
    noisy_curves = []
    for curve in CURVES:
        n = len(curve["values"])
        tolerance = max(5, n // 100)
        marks = sorted({int(m) for m in detect(list(curve["values"]))})
        matched = set()
        for jump in curve["jumps"]:
            hit = [m for m in marks if abs(m - jump) <= tolerance]
            found += bool(hit)
            matched.update(hit)
        total += len(curve["jumps"])
        false = [m for m in marks if m not in matched]
        false_marks += len(false)
        steps += n
        if not curve["jumps"] and marks:
            noisy_curves.append(curve["name"])
    return {"recall": f"{found}/{total}", "jumpless curves marked": f"{len(noisy_curves)}/20",
            "false marks per 1000 steps": round(1000 * false_marks / steps, 2), "marked": noisy_curves}


def naive(values, threshold=6.0):
    v = np.log(np.abs(np.asarray(values)) + 1e-12)
    d = np.diff(v)
    mad = np.median(np.abs(d - np.median(d))) * 1.4826 + 1e-12
    z = (d - np.median(d)) / mad
    return [i + 1 for i in np.flatnonzero(np.abs(z) > threshold)]


if __name__ == "__main__":
    print(score(naive))
