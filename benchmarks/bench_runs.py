"""Runs at DeepInsight's scale: 50 runs x 100,000 steps x 20 quantities opened, compared and charted.

The runs are written once into a temporary folder (not timed) in the step log's format: the JSON
lines (the source of truth) and the columns (`activis.run.series`) a cockpit writes beside them.
Then, each in a fresh Python process (cold: nothing imported, nothing cached in the process):

1. activis: ``compare(folders)``, the shared series, the configuration table, every pair's parting
   step, and one chart's downsampled read (one quantity of all 50 runs at 800 pixels), with the
   process's peak RSS;
2. baseline: ``np.fromfile`` of exactly the bytes that chart needs (the quantity's file of each run);
3. what parsing the JSON lines would cost: pandas ``read_json(lines=True)`` of one run (x 50).

It prints the seconds, the ratio to the baseline, and checks that the chart at full zoom equals the
JSON lines. Run:

    .venv/bin/python benchmarks/bench_runs.py [--runs 50] [--steps 100000] [--quantities 20] [--data DIR]

``--data DIR`` keeps the generated runs there (about 4.6 GB at full size) and reuses them next time.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from activis.run import series  # noqa: E402
from activis.run.log import FORMAT, FORMAT_VERSION, META, RECORDS  # noqa: E402


def write_run(folder: pathlib.Path, n_steps: int, n_quantities: int, seed: int) -> None:
    """One run's step log as a cockpit leaves it (JSON lines and columns), written in bulk."""
    rng = np.random.default_rng(seed)
    names = ["Loss", "batch_size", *(f"q{k:02d}" for k in range(n_quantities - 2))]
    steps = np.arange(n_steps, dtype=np.int64)
    values = np.cumsum(rng.normal(size=(n_steps, n_quantities)), axis=0)
    values[:, 1] = 64.0
    if folder.exists():  # a run left half-written by an earlier, interrupted benchmark
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    meta = {"format": FORMAT, "version": FORMAT_VERSION, "run": folder.name, "model": "Net",
            "params": [{"name": "w", "shape": [10], "layer": "(model)"}], "config": {"n_parameters": 10},
            "quantities": {"Loss": {}}}
    (folder / META).write_text(json.dumps(meta))
    line = "{" + ", ".join(['"step": %d'] + [f'"{n}": %.17g' for n in names]) + "}"
    with open(folder / RECORDS, "w") as f:
        np.savetxt(f, np.column_stack([steps, values]), fmt=line)
    columns = folder / series.SERIES
    columns.mkdir()
    for k, name in enumerate(names):
        rows = np.empty(n_steps, series.ROW)
        rows["step"], rows["value"] = steps, values[:, k]
        rows.tofile(columns / series.file_name(name))
    steps.tofile(columns / series.STEPS)
    size = (folder / RECORDS).stat().st_size
    index = {"format": series.FORMAT, "version": series.FORMAT_VERSION, "records_bytes": size,
             "records_lines": n_steps, "records_crc": series._tail_crc(folder / RECORDS, size), "steps": n_steps,
             "config": {}, "series": {n: {"file": series.file_name(n), "rows": n_steps, "ordered": True,
                                          "first": 0, "last": n_steps - 1,
                                          "counts": [[64.0, n_steps]] if n == "batch_size" else None}
                                      for n in names}}
    (columns / series.INDEX).write_text(json.dumps(index))


OURS = """
import json, resource, sys, time
t0 = time.perf_counter()
from activis.run import compare
t_import = time.perf_counter() - t0
folders = sys.argv[1:]
runs = compare(folders)
names = runs.series()
configs = runs.configs
partings = runs.partings()
t1 = time.perf_counter()
chart = runs.chart(["Loss"], width=800)
t2 = time.perf_counter()
status = dict(line.split(":", 1) for line in open("/proc/self/status") if line.startswith(("RssAnon", "RssFile")))
mib = {key: int(value.split()[0]) / 1024 for key, value in status.items()}
print(json.dumps({"anon_mib": mib["RssAnon"], "file_mib": mib["RssFile"],
                  "import": t_import, "open_compare": t1 - t0, "chart": t2 - t1, "total": t2 - t0, "series": len(names),
                  "points": int(chart.values.shape[-1]), "exact": chart.exact,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

FROMFILE = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
total = sum(np.fromfile(path, np.uint8).size for path in sys.argv[1:])
print(json.dumps({"seconds": time.perf_counter() - t0, "bytes": total}))
"""

JSONL = """
import json, sys, time
t0 = time.perf_counter()
import pandas as pd
frame = pd.read_json(sys.argv[1], lines=True)
print(json.dumps({"seconds": time.perf_counter() - t0, "rows": len(frame)}))
"""

CHECK = """
import json, sys
import numpy as np, pandas as pd
from activis.run import compare
runs = compare(sys.argv[1:2])
chart = runs.chart(["Loss", "q00"], 1000, 1500, width=800)
with open(sys.argv[1] + "/records.jsonl") as f:  # json, not pandas: pandas rounds the last digit
    frame = pd.DataFrame([json.loads(line) for line in f]).set_index("step")
exact = chart.exact and np.array_equal(chart.values[0], frame.loc[1000:1500, ["Loss", "q00"]].to_numpy().T)
whole = runs.chart(["Loss"], width=800)
print(json.dumps({"exact_at_full_zoom": bool(exact),
                  "min_max_kept": bool(np.nanmax(whole.values) == frame["Loss"].max()
                                       and np.nanmin(whole.values) == frame["Loss"].min())}))
"""


def run(code: str, *args) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=env,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--quantities", type=int, default=20)
    parser.add_argument("--data", type=pathlib.Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="activis-bench-runs-") as tmp:
        t0 = time.perf_counter()
        root = args.data / f"{args.runs}x{args.steps}x{args.quantities}" if args.data else pathlib.Path(tmp)
        folders = [root / f"run{r:02d}" for r in range(args.runs)]
        for r, folder in enumerate(folders):
            if not (folder / series.SERIES / series.INDEX).exists():
                write_run(folder, args.steps, args.quantities, seed=r)
        print(f"wrote {args.runs} runs x {args.steps:,} steps x {args.quantities} quantities in "
              f"{time.perf_counter() - t0:.0f} s (not timed)")
        ours = run(OURS, *folders)
        baseline = run(FROMFILE, *(f / series.SERIES / series.file_name("Loss") for f in folders))
        jsonl = run(JSONL, folders[0] / RECORDS)
        check = run(CHECK, folders[0])
    print(f"activis: open + compare ({ours['series']} shared series, configs, "
          f"{args.runs * (args.runs - 1) // 2} partings) {ours['open_compare']:.3f} s (of which importing numpy and "
          f"pandas {ours['import']:.3f} s), one chart "
          f"({ours['points']} points, exact={ours['exact']}) {ours['chart']:.3f} s, total {ours['total']:.3f} s, "
          f"peak RSS {ours['rss_mib']:.0f} MiB (at the end: {ours['anon_mib']:.0f} MiB anonymous, "
          f"{ours['file_mib']:.0f} MiB file pages of the memory-mapped columns, which the kernel can drop)")
    print(f"baseline: np.fromfile of the chart's {baseline['bytes'] / 2**20:.0f} MiB {baseline['seconds']:.3f} s; "
          f"ratio {ours['total'] / baseline['seconds']:.1f}x")
    print(f"parsing the JSON lines instead: {jsonl['seconds']:.2f} s for one run "
          f"(~{jsonl['seconds'] * args.runs:.0f} s for {args.runs})")
    print(f"checks: {check}")


if __name__ == "__main__":
    main()
