"""Evaluation: exact AUC of 1,000,000 scores against scikit-learn, and the threshold drag in the page.

1. `activis.evaluation.auc` and `sklearn.metrics.roc_auc_score` on the same 1e6 scores (random, and
   rounded to 3 decimals so that ties abound), timed in the same run: seconds, ratio, difference.
2. An EvaluationPanel of 100,000 instances (10 classes) in JupyterLab + Chromium: the threshold line
   dragged across the score distributions; per move, the view's own time from the pointer event to
   the recounted confusion matrix, metrics and marks (``data-update-ms``) and to the next animation
   frame (``data-frame-ms``). Baseline in the same page: one sort of the 100,000 scores (what a view
   that recomputed its curves on every move would pay at least). Run:

    .venv/bin/python benchmarks/bench_evaluation.py [--moves 40] [--no-browser]
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile
import time

import numpy as np

TESTS = pathlib.Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

N_AUC = 1_000_000
N_PAGE = 100_000

SORT_BASELINE = """() => {
  const scores = new Float32Array(100000).map(() => Math.random());
  const t0 = performance.now();
  const sorted = Float32Array.from(scores).sort();
  return performance.now() - t0 + sorted[0] * 0;
}"""


def timed(fn, repeat=3):
    best = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = fn()
        best.append(time.perf_counter() - t0)
    return value, statistics.median(best)


def bench_auc() -> None:
    from sklearn.metrics import roc_auc_score

    from activis.evaluation import auc
    rng = np.random.default_rng(0)
    y = rng.random(N_AUC) < 0.3
    for name, scores in (("random", rng.normal(size=N_AUC) + y),
                         ("tied (3 decimals)", np.round(1 / (1 + np.exp(-(rng.normal(size=N_AUC) + y))), 3))):
        scores = scores.astype(np.float32)
        ours, t_ours = timed(lambda s=scores: auc(y, s))
        ref, t_ref = timed(lambda s=scores: roc_auc_score(y, s))
        print(f"AUC of {N_AUC:,} {name} scores: activis {t_ours:.3f} s, sklearn {t_ref:.3f} s "
              f"(ratio {t_ours / t_ref:.2f}; target 1 s: {t_ours:.2f} of it); |difference| {abs(ours - ref):.1e}")


def bench_page(moves: int) -> None:
    from test_browser_evaluation_panel import grab_threshold

    from conftest import lab_page
    from jupyter_page import open_cells, run_cell
    root = pathlib.Path(tempfile.mkdtemp(prefix="bench-eval-"))
    with lab_page(root, timeout=180_000) as (lab, page):
        panel = open_cells(page, lab, "bench.ipynb", [
            "import numpy as np\nfrom activis.widgets.evaluation_panel import EvaluationPanel\n"
            f"rng = np.random.default_rng(0)\ny = rng.integers(0, 10, {N_PAGE})\n"
            f"z = rng.normal(size=({N_PAGE}, 10)) + 2 * np.eye(10)[y]\n"
            "p = np.exp(z) / np.exp(z).sum(1, keepdims=True)\n"
            "panel = EvaluationPanel(labels=y, scores=p)\npanel",
        ])
        t0 = time.perf_counter()
        view = run_cell(panel, 0, timeout=300_000).locator(".activis-eval[data-ready='1']")
        view.wait_for()
        print(f"panel of {N_PAGE:,} instances, 10 classes: cell run to drawn view {time.perf_counter() - t0:.1f} s")
        x, y = grab_threshold(page, view)
        updates, frames = [], []
        for i in range(moves):
            before = int(view.get_attribute("data-updates") or 0)
            page.mouse.move(x - 100 + 200 * (i % 10) / 9, y)
            page.wait_for_function("([el, n]) => Number(el.dataset.updates || 0) > n",
                                   arg=[view.element_handle(), before])
            updates.append(float(view.get_attribute("data-update-ms")))
            frames.append(float(view.get_attribute("data-frame-ms")))
        page.mouse.up()
        baseline = statistics.median(page.evaluate(SORT_BASELINE) for _ in range(5))
    update, frame = statistics.median(updates), statistics.median(frames)
    print(f"threshold drag on {N_PAGE:,} instances ({moves} moves): update {update:.2f} ms median, "
          f"{max(updates):.2f} ms max; to next frame {frame:.1f} ms median, {max(frames):.1f} ms max "
          f"(target 50 ms: {frame / 50:.2f} of it)")
    print(f"baseline, one sort of {N_PAGE:,} scores in the same page: {baseline:.1f} ms -> update ratio "
          f"{update / baseline:.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moves", type=int, default=40)
    parser.add_argument("--no-browser", action="store_true", help="only the AUC part")
    args = parser.parse_args()
    bench_auc()
    if not args.no_browser:
        bench_page(args.moves)


if __name__ == "__main__":
    main()
