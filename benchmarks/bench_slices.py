"""Planted error slices: are they found, and how fast is the search on 100,000 instances x 30 columns?

Recovery. On scikit-learn's bundled breast_cancer, wine and digits and on generated data, each seed
splits the data in half, trains a small torch MLP on one half and captures the other with activis
(features as metadata, the penultimate layer's activations), after planting one error slice in it:

- ``predicate``: a group given by one or two feature predicates at random thresholds (10-30 % of
  the instances) gets 60 % of its labels flipped;
- ``latent``: a hidden group (one k-means cluster of the inputs, 8-35 %, not a metadata column)
  gets 60 % of its labels flipped;
- ``corrupt``: a predicate group's inputs are negated before the model sees them (the metadata
  keeps the true feature values).

`discover_slices(store, layer)` then ranks the slices. A planted slice is recovered when one of the
top 5 has Jaccard overlap >= 0.5 with it; precision is the share of the reported top-5 slices whose
members lie mostly (>= 50 %) inside the planted one. Recall is given over every planting and over
those that made an error slice (the group's error rate >= 1.5x the rest's and more than chance,
p < 0.05 uncorrected). Targets: recall >= 80 %. ``by_groups`` is the recall of the activation groups
on their own (``columns=[]``: no metadata searched), the figure for a group no metadata column names.

Speed. A 100,000 x 30 store (25 float32 and 5 categorical columns, a planted slice) is searched to
three predicates; the figure is the wall time of the metadata search, and, as the baseline measured
in the same run, the time plain numpy boolean masks take for the same level-1 and level-2
candidates (timed on a sample of pairs, scaled to their number). Target: <= 10 s. Run:

    .venv/bin/python benchmarks/bench_slices.py [--seeds 10] [--correction holm|bh] [--rank-by significance|score]
        [--skip-recovery] [--skip-speed]
"""

from __future__ import annotations

import argparse
import pathlib
import tempfile
import time

import numpy as np
import pandas as pd
import torch
from sklearn.cluster import KMeans
from sklearn.datasets import load_breast_cancer, load_digits, load_wine, make_classification
from torch import nn

import activis
from activis.slices.predicates import default_columns, predicates
from activis.store import write_store


def bundled(name: str):
    if name == "generated":
        x, y = make_classification(n_samples=3000, n_features=12, n_informative=6, n_classes=3, random_state=0)
        frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(12)])
        rng = np.random.default_rng(0)
        frame["site"] = rng.choice(["north", "south", "east", "west"], len(frame))
        frame["device"] = rng.choice(["a", "b", "c"], len(frame))
        return frame, y
    data = {"breast_cancer": load_breast_cancer, "wine": load_wine, "digits": load_digits}[name]()
    columns = [str(c).replace(" ", "_") for c in data.feature_names]
    return pd.DataFrame(data.data, columns=columns), data.target


def plant_predicate(frame: pd.DataFrame, rng) -> tuple[np.ndarray, str]:
    numeric = [c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c]) and frame[c].nunique() > 8]
    categorical = [c for c in frame.columns if c not in numeric and frame[c].nunique() > 1]
    for _ in range(200):
        parts, mask = [], np.ones(len(frame), bool)
        for column in rng.choice(numeric + categorical, size=rng.integers(1, 3), replace=False):
            if column in numeric:
                q = rng.uniform(0.15, 0.85)
                t = float(frame[column].quantile(q))
                above = rng.random() < 0.5
                mask &= (frame[column] > t).to_numpy() if above else (frame[column] <= t).to_numpy()
                parts.append(f"{column} {'>' if above else '<='} {t:.3g}")
            else:
                value = rng.choice(frame[column].unique())
                mask &= (frame[column] == value).to_numpy()
                parts.append(f"{column} == {value!r}")
        if 0.10 <= mask.mean() <= 0.30:
            return mask, " and ".join(parts)
    raise RuntimeError("no predicate group of 10-30 % found")


def train(x: np.ndarray, y: np.ndarray, n_classes: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(x.shape[1], 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, n_classes))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=1e-4)
    xt, yt = torch.tensor(x, dtype=torch.float32), torch.tensor(y)
    for _ in range(150):
        opt.zero_grad()
        nn.functional.cross_entropy(model(xt), yt).backward()
        opt.step()
    return model.eval()


def one_run(name: str, setting: str, seed: int, root: pathlib.Path, correction: str = "holm",
            rank_by: str = "significance") -> dict:
    frame, y = bundled(name)
    rng = np.random.default_rng(seed)
    numeric = frame.select_dtypes("number")
    x = ((numeric - numeric.mean()) / numeric.std().replace(0, 1)).to_numpy(np.float32)
    if name == "generated":
        x = np.concatenate([x, pd.get_dummies(frame[["site", "device"]]).to_numpy(np.float32)], axis=1)
    order = rng.permutation(len(y))
    fit, held = order[: len(y) // 2], order[len(y) // 2:]
    model = train(x[fit], y[fit], int(y.max()) + 1, seed)
    meta = frame.iloc[held].reset_index(drop=True)
    labels, inputs = y[held].copy(), x[held].copy()
    if setting == "latent":  # one k-means cluster of the inputs: a group no metadata column names
        k = 6
        clusters = KMeans(n_clusters=k, n_init=3, random_state=seed).fit_predict(inputs)
        sizes = np.bincount(clusters, minlength=k) / len(held)
        eligible = np.flatnonzero((sizes >= 0.08) & (sizes <= 0.35))
        planted = clusters == (rng.choice(eligible) if len(eligible) else int(np.argmin(np.abs(sizes - 0.2))))
    else:
        planted, _ = plant_predicate(meta, rng)
    if setting == "corrupt":  # the model sees the group's inputs negated; the metadata keeps the true values
        inputs[planted] *= -1
    else:
        flip = planted & (rng.random(len(held)) < 0.6)
        n_classes = int(y.max()) + 1
        labels[flip] = (labels[flip] + rng.integers(1, n_classes, flip.sum())) % n_classes
    wrong = model(torch.from_numpy(inputs)).argmax(1).numpy() != labels
    effective = _is_error_slice(wrong, planted)
    store = activis.capture(model, inputs, root / f"{name}-{setting}-{seed}", labels=labels, metadata=meta,
                            layers=["3"], overwrite=True, progress=False)
    started = time.perf_counter()
    report = activis.discover_slices(store, layer="3", seed=seed, correction=correction, rank_by=rank_by)
    seconds = time.perf_counter() - started
    top = list(report)[:5]
    planted_set = set(np.flatnonzero(planted).tolist())
    overlaps = [len(planted_set & set(s.members.tolist())) / len(planted_set | set(s.members.tolist())) for s in top]
    alone = list(activis.discover_slices(store, layer="3", columns=[], seed=seed, correction=correction,
                                         rank_by=rank_by))[:5]  # the activation groups on their own
    by_groups = [len(planted_set & set(s.members.tolist())) / len(planted_set | set(s.members.tolist()))
                 for s in alone]
    inside = [len(planted_set & set(s.members.tolist())) / max(1, s.size) for s in top]
    return {"dataset": name, "setting": setting, "seed": seed, "effective": effective,
            "recovered": any(o >= 0.5 for o in overlaps), "by_groups": any(o >= 0.5 for o in by_groups),
            "best_jaccard": max(overlaps, default=0.0), "reported": len(top),
            "correct": sum(f >= 0.5 for f in inside), "seconds": seconds,
            "found_by": next((s.kind for s, o in zip(top, overlaps) if o >= 0.5), "")}


def _is_error_slice(wrong: np.ndarray, planted: np.ndarray) -> bool:
    """Did the planting make the group worse? Its error rate at least 1.5x the rest's, and more than chance
    (one-sided exact test, p < 0.05): a corruption the model shrugs off plants no slice to find."""
    from scipy.stats import hypergeom

    inside, n = int(planted.sum()), len(planted)
    errors_in, errors = int(wrong[planted].sum()), int(wrong.sum())
    rest = (errors - errors_in) / max(1, n - inside)
    return errors_in / max(1, inside) >= 1.5 * rest and hypergeom.sf(errors_in - 1, n, errors, inside) < 0.05


def recovery(seeds: int, correction: str, rank_by: str) -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("breast_cancer", "wine", "digits", "generated"):
            for setting in ("predicate", "latent", "corrupt"):
                for seed in range(seeds):
                    rows.append(one_run(name, setting, seed, pathlib.Path(tmp), correction, rank_by))
    table = pd.DataFrame(rows)
    summary = table.groupby(["dataset", "setting"]).agg(
        runs=("seed", "size"), error_slices=("effective", "sum"), recall_top5=("recovered", "mean"),
        by_groups=("by_groups", "mean"), mean_best_jaccard=("best_jaccard", "mean"), reported=("reported", "sum"),
        correct=("correct", "sum"),
        seconds=("seconds", "mean"))
    summary["recall_of_error_slices"] = table[table.effective].groupby(["dataset", "setting"]).recovered.mean()
    summary["precision_top5"] = summary["correct"] / summary["reported"].clip(lower=1)
    print(summary[["runs", "error_slices", "recall_top5", "recall_of_error_slices", "by_groups", "precision_top5",
                   "mean_best_jaccard", "seconds"]].round(3).to_string())
    effective = table[table.effective]
    found = table[table.recovered].found_by.value_counts().to_dict()
    latent = table[table.setting == "latent"]
    print(f"\nall {len(table)} plantings: recall of the planted slice in the top 5 {table.recovered.mean():.1%} "
          f"({int(table.recovered.sum())}/{len(table)}); of the {len(effective)} that made an error slice (error "
          f"rate >= 1.5x the rest, p < 0.05): {effective.recovered.mean():.1%} ({int(effective.recovered.sum())}/"
          f"{len(effective)}); precision of the top 5 {table.correct.sum() / max(1, table.reported.sum()):.1%} "
          f"({int(table.correct.sum())}/{int(table.reported.sum())} reported slices mostly inside the planted one); "
          f"recovered by: {found}; the activation groups alone (columns=[]) recover {table.by_groups.mean():.1%} "
          f"({int(table.by_groups.sum())}/{len(table)}), of the hidden groups {latent.by_groups.mean():.1%} "
          f"({int(latent.by_groups.sum())}/{len(latent)})")


def speed() -> None:
    rng = np.random.default_rng(1)
    n = 100_000
    meta = pd.DataFrame({f"x{i}": rng.normal(size=n).astype(np.float32) for i in range(25)})
    for i in range(5):
        meta[f"c{i}"] = rng.choice(list("abcdef"), n)
    labels = rng.integers(0, 3, n)
    planted = ((meta.x0 > 1.0) & (meta.c0 == "a")).to_numpy()
    wrong = rng.random(n) < np.where(planted, 0.5, 0.05)
    outputs = np.eye(3, dtype=np.float32)[np.where(wrong, (labels + 1) % 3, labels)] * 4
    with tempfile.TemporaryDirectory() as tmp:
        store = write_store(pathlib.Path(tmp) / "big", {"fc": rng.normal(size=(n, 32)).astype(np.float32)},
                            labels=labels, outputs=outputs, metadata=meta)
        store.instances  # noqa: B018 - read the table once, as an open explorer has
        activis.discover_slices(store, max_level=1)  # compile the kernel (cached on disk after the first run)
        started = time.perf_counter()
        report = activis.discover_slices(store)
        seconds = time.perf_counter() - started
        started = time.perf_counter()
        activis.discover_slices(store, layer="fc")
        layer_seconds = time.perf_counter() - started
        baseline = _naive_pairs_seconds(store, report.min_support)
    top = report[0]
    print(f"\n100,000 x 30 (25 numeric, 5 categorical), up to 3 predicates: {seconds:.2f} s "
          f"(families {', '.join(f'{k} {n:,}' for k, n in report.tested.items())}, "
          f"search {'complete' if report.complete else 'INCOMPLETE'}); "
          f"top slice {top.description!r} ({top.size} instances, error {top.value:.3f} vs {top.overall:.3f})")
    print(f"  with the activation groups of a 32-neuron layer too: {layer_seconds:.2f} s")
    print(f"  baseline, numpy boolean masks for levels 1-2 only: {baseline:.2f} s "
          f"(the full three-level search takes {seconds / baseline:.2f}x that)")


def _naive_pairs_seconds(store, support: int) -> float:
    table = store.instances
    errors = (~table["correct"].to_numpy()).astype(np.float64)
    found, _ = predicates(table, default_columns(table), n_bins=5, min_support=support, rows=np.arange(len(table)))
    masks = [p.mask for p in found]
    pairs = [(i, j) for i in range(len(found)) for j in range(i + 1, len(found)) if found[i].column != found[j].column]
    sample = np.random.default_rng(0).choice(len(pairs), size=min(2000, len(pairs)), replace=False)
    started = time.perf_counter()
    for k in sample:
        both = masks[pairs[k][0]] & masks[pairs[k][1]]
        both.sum(), errors[both].sum()
    return (time.perf_counter() - started) * len(pairs) / len(sample)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--skip-recovery", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--correction", default="holm", choices=["holm", "bh"])
    parser.add_argument("--rank-by", default="significance", choices=["significance", "score"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    if not args.skip_recovery:
        print(f"correction: {args.correction}, ranked by {args.rank_by}")
        recovery(args.seeds, args.correction, args.rank_by)
    if not args.skip_speed:
        speed()


if __name__ == "__main__":
    main()
