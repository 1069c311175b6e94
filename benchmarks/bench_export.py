"""Exported pages: file size and first paint, cold, against the floor of loading a page of the same bytes.

    python benchmarks/bench_export.py [--instances 100000]

The digits explorer (the demo, 1,797 instances, four layers) and an explorer over a generated store
(a 256-unit layer, sampled to 20,000 instances in the page) are saved with `save_html`, then opened
from file:// in headless Chromium, each in a fresh browser context, three times. First paint is the
time from navigation until every view has drawn (each view's root carries data-rendered / data-ready);
the baseline is the same browser loading a page with the same bytes and no script.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile
import time

import numpy as np
import pandas as pd

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import activis  # noqa: E402
from activis.demo import digits_store  # noqa: E402
from conftest import CHROMIUM, CHROMIUM_FLAGS  # noqa: E402

DRAWN = """() => {
  const roots = Array.from(document.querySelectorAll('#activis-page .activis-root'));
  return document.getElementById('activis-page').dataset.ready === 'true' && roots.length > 0 &&
    roots.every((r) => r.dataset.rendered !== undefined || r.dataset.ready !== undefined || !r.offsetParent);
}"""


def generated_explorer(folder: pathlib.Path, n: int):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, n)
    hidden = rng.normal(size=(n, 256)).astype(np.float32) + labels[:, None] * 0.05
    logits = rng.normal(size=(n, 10)).astype(np.float32)
    logits[np.arange(n), labels] += 2.5
    store = activis.write_store(folder / "generated.activis", {"hidden": hidden, "logits": logits}, labels=labels,
                                outputs=logits, metadata=pd.DataFrame({"group": rng.integers(0, 5, n)}))
    return activis.Explorer(store, method="pca")


def open_times(browser, path: pathlib.Path, rounds: int, wait: str | None) -> list[float]:
    times = []
    for _ in range(rounds):
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort())
        t0 = time.perf_counter()
        page.goto(path.as_uri())
        if wait:
            page.wait_for_function(wait, timeout=120_000)
        else:
            page.wait_for_load_state("load")
        times.append(time.perf_counter() - t0)
        context.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp)
        cases = {"digits explorer": activis.Explorer(digits_store(folder / "digits.activis")[1], method="pca"),
                 f"{args.instances:,}-instance explorer": generated_explorer(folder, args.instances)}
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
            print(f"{'page':<28} {'MB':>6} {'export s':>9} {'first paint s':>14} {'same bytes s':>13} {'ratio':>6}")
            for name, explorer in cases.items():
                t0 = time.perf_counter()
                page = explorer.save_html(folder / "page.html")
                export = time.perf_counter() - t0
                inert = folder / "inert.html"  # the same bytes, no script: the floor of reading the file
                inert.write_text(page.read_text().replace('<script type="module">', '<script type="text/plain">'))
                paint = statistics.median(open_times(browser, page, args.rounds, DRAWN))
                floor = statistics.median(open_times(browser, inert, args.rounds, None))
                print(f"{name:<28} {page.stat().st_size / 1e6:>6.1f} {export:>9.1f} {paint:>14.2f} {floor:>13.2f} "
                      f"{paint / floor:>6.1f}")
            browser.close()
    print("targets: digits page <= 3 MB, 100,000 instances <= 25 MB, first paint <= 2 s")


if __name__ == "__main__":
    main()
