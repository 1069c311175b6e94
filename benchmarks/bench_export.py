"""Exported pages: file size and first paint, cold, against the floor of loading a page of the same bytes.

    python benchmarks/bench_export.py [--instances 100000]

The digits explorer (the demo, 1,797 instances, four layers), an explorer over a generated store
(a 256-unit layer, sampled to 20,000 instances in the page) and an explorer over a digits training run
(notebooks/training_timeline.ipynb: the digits CNN trained for 4 epochs with a cockpit, 10 checkpoints of
every digit) are saved with `save_html`, then opened from file:// in headless Chromium, each in a fresh
browser context, three times. First paint is the time from navigation until every view has drawn (each
view's root carries data-rendered / data-ready); the baseline is the same browser loading a page with
the same bytes and no script. For the run, "move" is the time from a click on the timeline's first
checkpoint until the page has moved every view there.
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


def digits_run(folder: pathlib.Path):
    """An explorer over the training run of notebooks/training_timeline.ipynb (4 epochs, 10 checkpoints)."""
    import torch
    import torch.nn.functional as F

    from activis.demo import digits_cnn, digits_data

    images, labels, class_names, metadata = digits_data()
    train = np.flatnonzero(metadata["split"].to_numpy() == "train")
    x, y = torch.from_numpy(images), torch.from_numpy(labels)
    torch.manual_seed(0)
    model = digits_cnn()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    cockpit = activis.Cockpit(model, "economy", optimizer=opt, log_dir=folder / "run")
    epochs, batch = 4, 64
    steps = epochs * -(-len(train) // batch)
    checkpoints = activis.Checkpoints(model, (x, y), folder / "run", class_names=class_names, metadata=metadata,
                                      steps=np.linspace(0, steps - 1, 10).astype(int).tolist(),
                                      capture_options={"dtype": "float32"})
    gen, step = torch.Generator().manual_seed(0), 0
    for _ in range(epochs):
        for index in torch.from_numpy(train)[torch.randperm(len(train), generator=gen)].split(batch):
            checkpoints(step)
            opt.zero_grad()
            cockpit.backward(F.cross_entropy(model(x[index]), y[index], reduction="none"))
            opt.step()
            step += 1
    cockpit.close()
    run = activis.open_run(folder / "run")
    explorer = activis.Explorer(run.store, run=run, method="pca")
    explorer.timeline.wait_for_layouts()
    return explorer


MOVED = """(step) => document.querySelector('#activis-page [data-checkpoint]')?.dataset.checkpoint === String(step)
  && Array.from(window.activisPage.models.values()).some((m) => m.get('__module') === 'projection_view'
  && m.get('shown_method') === `aligned · step ${step}`)"""


def move_time(browser, path: pathlib.Path, step: int) -> float:
    """Seconds from a click on the timeline's checkpoint ``step`` until the page has moved there."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort())
    page.goto(path.as_uri())
    page.wait_for_function(DRAWN, timeout=120_000)
    tick = page.locator(f".activis-timeline .av-tick[data-step='{step}']")
    tick.scroll_into_view_if_needed()
    t0 = time.perf_counter()
    tick.click()
    page.wait_for_function(MOVED, arg=step, timeout=120_000)
    seconds = time.perf_counter() - t0
    context.close()
    return seconds


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
                 f"{args.instances:,}-instance explorer": generated_explorer(folder, args.instances),
                 "digits run, 10 checkpoints": digits_run(folder)}
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
            print(f"{'page':<28} {'MB':>6} {'export s':>9} {'first paint s':>14} {'same bytes s':>13} {'ratio':>6} "
                  f"{'move s':>7}")
            for name, explorer in cases.items():
                t0 = time.perf_counter()
                page = explorer.save_html(folder / "page.html")
                export = time.perf_counter() - t0
                inert = folder / "inert.html"  # the same bytes, no script: the floor of reading the file
                inert.write_text(page.read_text().replace('<script type="module">', '<script type="text/plain">'))
                paint = statistics.median(open_times(browser, page, args.rounds, DRAWN))
                floor = statistics.median(open_times(browser, inert, args.rounds, None))
                move = (f"{move_time(browser, page, explorer.timeline.steps[0]):>7.2f}"
                        if explorer.timeline is not None else f"{'':>7}")
                print(f"{name:<28} {page.stat().st_size / 1e6:>6.1f} {export:>9.1f} {paint:>14.2f} {floor:>13.2f} "
                      f"{paint / floor:>6.1f} {move}")
            browser.close()
    print("targets: digits page <= 3 MB, 100,000 instances <= 25 MB, first paint <= 2 s")


if __name__ == "__main__":
    main()
