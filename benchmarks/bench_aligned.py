"""Aligned projections across checkpoints: activis.aligned_projection against umap-learn's AlignedUMAP.

    .venv/bin/python benchmarks/bench_aligned.py                    # everything (5-25 min on 2 shared cores)
    .venv/bin/python benchmarks/bench_aligned.py --skip-reference   # ours (+ independent UMAPs) only

The frames: the 64 hidden units of a 64-64-10 MLP (scikit-learn's, so no torch) trained on the 1,797
digits, recorded after epochs 1, 2, 3, 4, 6, 8, 11, 15, 20 and 30 (training accuracy 0.54 -> 0.98).
Each method runs in a fresh process (cold: imports and compiles included; numba's disk cache as earlier
runs left it) and is scored the same way:

- displacement: each frame centred and scaled to unit Frobenius norm; the mean over instances of
  ||e(t+1) - e(t)|| x sqrt(n), averaged over the 9 steps (target <= 0.040, AlignedUMAP's own figure);
- trustworthiness (k = 10, scikit-learn's) of every frame against its own activations (target >= 0.985).

Methods: ``aligned`` (ours), ``independent`` (ten activis UMAPs, each rotated onto the previous by
Procrustes), ``reference`` (``umap.AlignedUMAP(alignment_regularisation=1e-2,
alignment_window_size=3)``, the shared note's call; 4-25 minutes). With ``--skip-reference`` the
reference's figure is the one an earlier run saved (printed as such), if any.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve()
ROOT = HERE.parent.parent
CHECKPOINT_EPOCHS = (1, 2, 3, 4, 6, 8, 11, 15, 20, 30)
SAVED_REFERENCE = pathlib.Path(tempfile.gettempdir()) / "activis-bench-aligned-reference.json"


def digits_frames() -> list[np.ndarray]:
    """Hidden activations of the digits MLP at the ten checkpoints (deterministic)."""
    import warnings

    from sklearn.datasets import load_digits
    from sklearn.neural_network import MLPClassifier

    digits = load_digits()
    x, y = digits.data / 16.0, digits.target
    clf = MLPClassifier(hidden_layer_sizes=(64,), random_state=0, learning_rate_init=1e-3, batch_size=64)
    frames = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for epoch in range(1, CHECKPOINT_EPOCHS[-1] + 1):
            clf.partial_fit(x, y, classes=np.arange(10))
            if epoch in CHECKPOINT_EPOCHS:
                frames.append(np.maximum(x @ clf.coefs_[0] + clf.intercepts_[0], 0).astype(np.float32))
    return frames


def displacement(layouts) -> float:
    """Mean step-to-step displacement of unit-norm frames, x sqrt(n) (the shared note's measure)."""
    unit = []
    for e in layouts:
        e = np.asarray(e, dtype=np.float64)
        e = e - e.mean(axis=0)
        unit.append(e / np.linalg.norm(e))
    n = len(unit[0])
    return float(np.mean([np.linalg.norm(b - a, axis=1).mean() * np.sqrt(n) for a, b in zip(unit, unit[1:])]))


def score(frames, layouts) -> dict:
    from sklearn.manifold import trustworthiness

    trust = [float(trustworthiness(f, e, n_neighbors=10)) for f, e in zip(frames, layouts)]
    return {"displacement": displacement(layouts), "trust_min": min(trust), "trust_mean": float(np.mean(trust)),
            "finite": bool(all(np.isfinite(e).all() for e in layouts))}


def independent_layouts(frames, seed=0, n_neighbors=10):
    """Ten separate activis UMAPs (the same engine and settings as ours), each rotated onto the previous."""
    from activis.dynamics.aligned import _frame_graph, _optimise, _procrustes
    from activis.projection.umap import _ab_params, _initial_layout

    layouts = []
    for x in frames:
        graph, _, pca2 = _frame_graph(x, n_neighbors, seed)
        layout = _optimise(graph, _initial_layout(pca2, seed), 500, 1.0, _ab_params(1.0, 0.1), seed)
        layouts.append(_procrustes(layout, layouts[-1]) if layouts else layout)
    return layouts


# ----------------------------------------------------------------------------- children (fresh processes)
def child(method: str, folder: pathlib.Path) -> None:
    t0 = time.perf_counter()
    frames = [np.load(folder / f"frame{i}.npy") for i in range(len(CHECKPOINT_EPOCHS))]
    if method == "reference":
        import umap

        relations = [{i: i for i in range(len(frames[0]))} for _ in frames[1:]]
        model = umap.AlignedUMAP(alignment_regularisation=1e-2, alignment_window_size=3)
        layouts = model.fit(frames, relations=relations).embeddings_
    elif method == "aligned":
        from activis.dynamics import aligned_projection

        layouts = aligned_projection(frames, random_state=0)
    else:
        layouts = independent_layouts(frames)
    np.save(folder / f"layouts-{method}.npy", np.stack([np.asarray(e, dtype=np.float32) for e in layouts]))
    print(json.dumps({"seconds": time.perf_counter() - t0}))


def run_child(method: str, folder: pathlib.Path, frames) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, str(HERE), "--child", method, str(folder)], env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"{method} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result.update(score(frames, np.load(folder / f"layouts-{method}.npy")))
    return result


def line(name: str, r: dict) -> str:
    return (f"{name:<34} {r['seconds']:7.1f} s   displacement {r['displacement']:.3f}   "
            f"trustworthiness min {r['trust_min']:.4f} mean {r['trust_mean']:.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-reference", action="store_true", help="do not run AlignedUMAP (4-25 min)")
    parser.add_argument("--only", choices=("aligned", "independent", "reference"), action="append",
                        help="run only these methods")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child[0], pathlib.Path(args.child[1]))
    methods = args.only or ["aligned", "independent"] + ([] if args.skip_reference else ["reference"])
    frames = digits_frames()
    print(f"{len(frames)} checkpoints x {frames[0].shape[0]:,} digits x {frames[0].shape[1]} hidden units")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp)
        for i, f in enumerate(frames):
            np.save(folder / f"frame{i}.npy", f)
        for method in methods:
            results[method] = run_child(method, folder, frames)
            print(line(method, results[method]), flush=True)
    same_run = "reference" in results
    if same_run:
        SAVED_REFERENCE.write_text(json.dumps(results["reference"]))
    elif SAVED_REFERENCE.exists():
        results["reference"] = json.loads(SAVED_REFERENCE.read_text())
        print(line("reference (saved by an earlier run)", results["reference"]))
    if "aligned" in results and "reference" in results:
        ours, ref = results["aligned"], results["reference"]
        print(f"aligned_projection: {ref['seconds'] / ours['seconds']:.1f}x faster than AlignedUMAP"
              f"{'' if same_run else ' (measured in another run: the load may differ)'}")
    if "aligned" in results:
        ours = results["aligned"]
        met = ours["seconds"] <= 45 and ours["displacement"] <= 0.040 and ours["trust_min"] >= 0.985
        print(f"targets (<= 45 s, displacement <= 0.040, trustworthiness >= 0.985 on every frame): "
              f"{'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
