"""Slice discovery: planted slices are found, null data gives none, definitions are exact, bad input is clear."""

import itertools
import threading
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import activis
from activis.slices import SliceError, discover_slices
from activis.slices.activations import error_regions
from activis.slices.discover import _Candidate, _rank
from activis.slices.lattice import Scoring, pair_sizes, search
from activis.slices.predicates import predicates
from activis.slices.significance import adjust, conjunctions, families, p_bounds, p_values
from activis.store import write_store


def make_store(tmp_path, n=2000, *, planted=None, error_rate=0.06, slice_rate=0.5, seed=0, shift=None,
               unlabeled=0, name="s"):
    """A 3-class store whose predictions are wrong at ``error_rate``, and at ``slice_rate`` inside ``planted``."""
    rng = np.random.default_rng(seed)
    meta = pd.DataFrame({
        "age": rng.integers(0, 90, n),
        "height": rng.normal(170, 10, n).astype(np.float32),
        "city": rng.choice(["paris", "rome", "o'slo", "kyiv"], n),
        "my score": rng.random(n),
        "flag": rng.random(n) < 0.3,
    })
    meta.loc[rng.random(n) < 0.05, "my score"] = np.nan
    inside = np.zeros(n, bool) if planted is None else planted(meta, rng)
    labels = rng.integers(0, 3, n)
    wrong = rng.random(n) < np.where(inside, slice_rate, error_rate)
    pred = np.where(wrong, (labels + 1) % 3, labels)
    outputs = np.eye(3, dtype=np.float32)[pred] * 4
    acts = rng.normal(size=(n, 12)).astype(np.float32)
    if shift is not None:
        acts[inside] += shift
    if unlabeled:
        labels[:unlabeled] = -1
    store = write_store(tmp_path / name, {"fc": acts}, labels=labels, outputs=outputs, metadata=meta,
                        class_names=["a", "b", "c"])
    return store, inside


def jaccard(a, b):
    a, b = set(np.asarray(a).tolist()), set(np.flatnonzero(b).tolist())
    return len(a & b) / len(a | b)


def test_planted_metadata_slice_is_found_first(tmp_path):
    store, inside = make_store(tmp_path, planted=lambda m, rng: ((m.age > 60) & (m.city == "rome")).to_numpy())
    report = discover_slices(store)
    assert len(report) >= 1 and report.complete
    top = report[0]
    assert jaccard(top.members, inside) >= 0.5
    assert top.kind == "metadata" and "city == 'rome'" in top.description and "age" in top.description
    assert top.significant and top.p_adjusted <= 0.05 and top.lift > 3
    assert top.value == pytest.approx((~store.instances.correct.to_numpy())[top.members].mean())
    assert report.tested["2-predicate"] > 100 and report.correction == "holm"
    assert "rome" in repr(report) and list(report.to_frame().columns)[:3] == ["name", "kind", "size"]


def test_planted_latent_group_is_found_in_activation_space(tmp_path):
    # a group no metadata column describes, set apart in activation space
    store, inside = make_store(tmp_path, n=2400, planted=lambda m, rng: rng.random(len(m)) < 0.08, shift=2.5,
                               slice_rate=0.6)
    report = discover_slices(store, layer="fc")
    found = [s for s in report[:5] if s.kind == "activations"]
    assert found and max(jaccard(s.members, inside) for s in found) >= 0.5
    best = max(found, key=lambda s: jaccard(s.members, inside))
    assert best.layer == "fc" and len(best.neurons) == 5 and best.neurons[0][1] > 0  # the shifted neurons go up
    assert best.definition.kind == "indices" and best.name.startswith("fc ") and "at fc" in best.description
    assert set(report.tested) == {"1-predicate", "2-predicate", "3-predicate", "activation-group"}
    # the description says which classes the slice holds, as the store names them
    labels = store.instances["label"].to_numpy()[best.members]
    top = int(np.bincount(labels).argmax())
    names = store.class_names
    assert f"holds true {names[top] if top < len(names) else top} " in best.description, best.description


def test_error_regions_keep_a_failing_region_whole_and_place_rows_without_their_own_errors():
    # a blob where 60 % fail among rows failing at 5 %: the mixture's error term would cut it into its failing and
    # its passing rows; a region holds both
    rng = np.random.default_rng(0)
    n = 3000
    z = rng.normal(size=(n, 8)).astype(np.float32)
    blob = rng.random(n) < 0.1
    z[blob, :3] += 4.0
    errors = (rng.random(n) < np.where(blob, 0.6, 0.05)).astype(float)
    reference = np.flatnonzero(rng.random(n) < 0.5)
    regions = [mask for mask, _ in error_regions(z, reference, errors, min_size=30, seed=0)]
    assert regions and max(jaccard(np.flatnonzero(r), blob) for r in regions) >= 0.8
    # membership of a row outside the reference rows does not depend on its own error, so the test half is fair
    others = np.setdiff1d(np.arange(n), reference)
    flipped = errors.copy()
    flipped[others] = 1 - flipped[others]
    again = [mask for mask, _ in error_regions(z, reference, flipped, min_size=30, seed=0)]
    assert len(again) == len(regions) and all((a == b).all() for a, b in zip(again, regions))
    assert error_regions(z, reference, np.zeros(n), min_size=30, seed=0) == []


@pytest.mark.parametrize("case", ["nan", "inf", "constant", "repeated", "tiny"])
def test_activation_groups_take_awkward_layers_without_error_or_warning(tmp_path, case):
    # non-finite values (a diverged neuron), a layer without variance, repeated points, and a store so small that
    # the fitting half misses a class: groups are still searched, quietly
    rng = np.random.default_rng(3)
    n = 12 if case == "tiny" else 300
    acts = rng.normal(size=(n, 6)).astype(np.float32)
    if case in ("nan", "inf"):
        acts[rng.random(acts.shape) < 0.1] = np.nan if case == "nan" else np.inf
    acts = {"constant": np.zeros_like(acts), "repeated": np.repeat(acts[:3], n // 3, axis=0)}.get(case, acts)
    labels = np.arange(n) % 3
    if case == "tiny":
        labels = np.where(np.arange(n) == 10, 2, np.arange(n) % 2)  # class 2 once, in the half that is tested
    pred = np.where(rng.random(n) < 0.3, (labels + 1) % 3, labels)
    store = write_store(tmp_path / case, {"fc": acts}, labels=labels, outputs=np.eye(3, dtype=np.float32)[pred])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = discover_slices(store, layer="fc", columns=[], significant_only=False, min_support=3)
    assert report.tested["activation-group"] >= 1
    assert all(np.isfinite([d for s in report for _, d in s.neurons]))


def test_no_slice_on_data_without_one(tmp_path):
    # the level holds: over 40 null stores (errors independent of everything) at alpha = 0.05, a slice is
    # reported in at most 5 (P(Binomial(40, 0.05) > 5) = 0.014: this fails if the correction is missing)
    reported = {"holm": 0, "bh": 0}
    for seed in range(40):
        store, _ = make_store(tmp_path, n=600, seed=seed, error_rate=0.15, name=f"null{seed}")
        for correction in reported:
            reported[correction] += len(discover_slices(store, correction=correction, min_support=15)) > 0
    assert reported["holm"] <= 5 and reported["bh"] <= 5, reported


def test_no_activation_group_on_data_without_one(tmp_path):
    reported = 0
    for seed in range(12):
        store, _ = make_store(tmp_path, n=500, seed=100 + seed, error_rate=0.2, name=f"null{seed}")
        report = discover_slices(store, layer="fc", columns=[], min_support=15)
        reported += len(report) > 0
    assert reported <= 2  # P(Binomial(12, 0.05) > 2) = 0.02


def test_without_correction_the_null_test_would_fail(tmp_path):
    """The null test above can fail: uncorrected p-values flag slices on null data."""
    store, _ = make_store(tmp_path, n=600, seed=3, error_rate=0.15)
    report = discover_slices(store, significant_only=False, min_support=15)
    assert any(s.p_value < 0.05 for s in report) and not any(s.significant for s in report)


def test_definitions_give_exactly_the_members(tmp_path):
    store, _ = make_store(tmp_path, n=3000, unlabeled=40, shift=2.0,
                          planted=lambda m, rng: ((m["my score"] > 0.7) & ~m.flag & (m.height < 165)).to_numpy())
    subsets = activis.Subsets(store)
    report = discover_slices(store, layer="fc", significant_only=False, drop_redundant=False, top_k=20,
                             max_overlap=0.9)
    assert len(report) >= 10
    kinds = set()
    for i, found in enumerate(report):
        kinds.add(found.kind)
        assert np.array_equal(np.flatnonzero(subsets.mask(found.definition)), found.members), found.description
        adopted = found.adopt(subsets, name=f"slice {i}")
        assert np.array_equal(subsets.indices(adopted.name), found.members)
        assert found.size == len(found.members) and (found.members >= 40).all()  # unlabeled ones stay out
    assert kinds == {"metadata", "activations"}
    assert "`my score`" in " ".join(s.description for s in report)


def test_predicate_thresholds_are_short_and_exact():
    rng = np.random.default_rng(0)
    table = pd.DataFrame({"x": rng.normal(size=500).astype(np.float32), "big": rng.normal(1e6, 1e5, 500),
                          "n": rng.integers(0, 1000, 500)})
    found, _ = predicates(table, ["x", "big", "n"], n_bins=5, min_support=10, rows=np.arange(500))
    for p in found:
        assert len(p.text) < 40, p.text
        store_like = table.eval(p.text.replace("`", ""))
        assert np.array_equal(store_like.to_numpy(), p.mask), p.text


def test_lattice_matches_brute_force():
    rng = np.random.default_rng(1)
    n = 400
    table = pd.DataFrame({c: rng.integers(0, 4, n) for c in "abcd"})
    errors = (rng.random(n) < np.where((table.a == 1) & (table.b == 2), 0.6, 0.1)).astype(float)
    found, _ = predicates(table, list("abcd"), n_bins=5, min_support=5, rows=np.arange(n))
    masks = np.stack([p.mask for p in found])
    features = np.array(["abcd".index(p.column) for p in found])
    scoring = Scoring(n=n, mean_error=errors.mean(), min_support=5, weight=0.95)
    result = search(masks, features, errors, scoring, max_level=3, keep=10, max_candidates=10**6, deadline=1e18)
    got = {tuple(row): (s, e) for level in result.levels for row, s, e in zip(level.items.tolist(), level.sizes,
                                                                               level.errors)}
    best = []
    for level in (1, 2, 3):
        for combo in itertools.combinations(range(len(found)), level):
            if len(set(features[list(combo)])) < level:
                continue
            mask = np.logical_and.reduce(masks[list(combo)])
            if mask.sum() >= 5:
                best.append((float(scoring.score(mask.sum(), errors[mask].sum())), combo))
                if combo in got:
                    assert got[combo] == (mask.sum(), errors[mask].sum())
    best.sort(reverse=True)
    top = [combo for _, combo in best[:10]]
    assert all(combo in got for combo in top)  # pruning never loses a top-k slice
    assert result.tried < len(best)  # and it did prune


def test_p_values_bounds_and_corrections():
    sizes, errors = np.array([30, 50, 80, 200]), np.array([12, 9, 30, 25])
    exact = p_values(sizes, errors, n=1000, total=100, binary=True, variance=0)
    assert np.allclose(exact, stats.hypergeom.sf(errors - 1, 1000, 100, sizes))
    assert (p_bounds(sizes, errors, n=1000, total=100) >= exact).all()
    p = np.array([0.001, 0.02, 0.03, 0.5])
    assert np.allclose(adjust(p, 4, "holm"), [0.004, 0.06, 0.06, 0.5])
    assert np.allclose(adjust(p, 4, "bh"), [0.004, 0.04, 0.04, 0.5])
    assert np.allclose(adjust(p, 10, "holm")[0], 0.01)  # untested candidates count


def test_families_are_fixed_by_sizes_and_bound_every_slice_that_can_hold_the_support():
    rng = np.random.default_rng(0)
    masks = rng.random((12, 60)) < rng.uniform(0.2, 0.8, (12, 1))
    features = np.repeat(np.arange(4), 3)
    sizes = pair_sizes(masks)
    large = {level: [c for c in itertools.combinations(range(12), level) if len(set(features[list(c)])) == level
                     and np.logical_and.reduce(masks[list(c)]).sum() >= 8] for level in (1, 2, 3)}
    got = families(sizes, features, 8, 3)
    assert got[:2] == [len(large[1]), len(large[2])]  # exact for one and two predicates
    assert len(large[3]) <= got[2] < conjunctions(np.bincount(features), 3)[2]  # triples bounded by their pairs
    assert conjunctions([3, 3, 3, 3], 3) == [12, 54, 108]
    assert families(None, features, 8, 3) == [12, 54, 108]  # no pair sizes: every conjunction counts
    assert pair_sizes(masks, budget=10) is None


def test_a_coherent_group_is_kept_over_its_worse_part(tmp_path):
    # a corrupted group fails unevenly: nearly always where age > 72, more often than the rest elsewhere; the
    # rest of it is worse than the whole (p < 0.05) though not overwhelmingly (p > 1e-3), and the group is kept
    store, inside = make_store(tmp_path, n=1000, planted=lambda m, rng: (m.city == "kyiv").to_numpy(),
                               slice_rate=0.18, error_rate=0.05)
    worse = inside & (store.instances.age.to_numpy() > 72)
    wrong = ~store.instances.correct.to_numpy()
    wrong[worse] = np.random.default_rng(1).random(worse.sum()) < 0.9
    report = discover_slices(store, metric=wrong.astype(float))
    assert any(jaccard(s.members, inside) == 1.0 for s in report[:5]), [s.description for s in report[:5]]
    assert any(jaccard(s.members, worse) >= 0.9 for s in report[:5])  # and its worse part, said apart


def test_a_chain_of_redundant_slices_keeps_one_of_them():
    # B (12 rows, 6 errors) lies in X (B and 2 rows without error), X in A (36 rows, no other error): B is said
    # by X, X by A (X is not clearly worse than the rest of A), and A by B (A has no error outside B). Each has
    # its reason to go; a slice is dropped only in favour of one that is shown, so one of them is shown.
    n = 400
    errors = np.zeros(n)
    errors[:6] = 1
    errors[100 + np.arange(0, 300, 12)] = 1  # 25 errors spread over the rest
    masks = {"A": np.arange(n) < 36, "X": np.arange(n) < 14, "B": np.arange(n) < 12}
    candidates = [_Candidate("metadata", m, int(m.sum()), float(errors[m].sum()), 1.0, 1e-5, 1e-4, items=(k,))
                  for k, m in enumerate(masks.values())]
    scoring = Scoring(n=n, mean_error=float(errors.mean()), min_support=10, weight=0.95)
    shown = _rank(candidates, errors, scoring, True, 0.05, True, True, 0.7, 10, "significance")
    assert len(shown) >= 1
    every = _rank(candidates, errors, scoring, True, 0.05, True, False, 1.0, 10, "significance")
    assert len(every) == 3


def test_loss_and_array_metrics(tmp_path):
    store, inside = make_store(tmp_path, planted=lambda m, rng: (m.city == "kyiv").to_numpy() & (m.age < 30))
    gaps = (~store.instances.correct.to_numpy()).astype(float) * 2.0
    gaps[::7] = np.nan  # instances without a value are left out, and out of the definitions too
    subsets = activis.Subsets(store)
    for metric in ("loss", (~store.instances.correct.to_numpy()).astype(float) * 2.0, gaps):
        report = discover_slices(store, metric=metric, max_level=2)
        assert jaccard(report[0].members, inside) >= 0.5
        assert np.array_equal(np.flatnonzero(subsets.mask(report[0].definition)), report[0].members)
    assert not (report[0].members % 7 == 0).any()


def test_stop_progress_and_limits(tmp_path):
    store, _ = make_store(tmp_path, planted=lambda m, rng: (m.city == "rome").to_numpy())
    seen = []
    discover_slices(store, progress=lambda f, m: seen.append(f))
    assert seen[-1] == 1.0 and all(0 <= f <= 1 for f in seen) and len(seen) > 3
    stop = threading.Event()
    stop.set()
    report = discover_slices(store, stop=stop)
    assert not report.complete and any("stopped" in n for n in report.notes)
    report = discover_slices(store, max_candidates=10)
    assert not report.complete and any("max_candidates" in n for n in report.notes)


def test_bad_inputs_name_the_valid_choices(tmp_path):
    store, _ = make_store(tmp_path, n=200)
    with pytest.raises(SliceError, match="captured layers: fc"):
        discover_slices(store, layer="nope")
    with pytest.raises(SliceError, match="columns of this store: .*age"):
        discover_slices(store, columns=["agee"])
    with pytest.raises(SliceError, match="'error', 'loss'"):
        discover_slices(store, metric="accuracy")
    with pytest.raises(SliceError, match="holm, bh"):
        discover_slices(store, correction="bonferroni")
    with pytest.raises(SliceError, match="one value per instance"):
        discover_slices(store, metric=np.ones(3))
    empty = write_store(tmp_path / "empty", {"fc": np.zeros((0, 2))}, labels=np.zeros(0, int),
                        outputs=np.zeros((0, 2)))
    with pytest.raises(SliceError, match="no instances"):
        discover_slices(empty)
    unlabeled = write_store(tmp_path / "unlabeled", {"fc": np.zeros((5, 2))}, labels=np.full(5, -1),
                            outputs=np.zeros((5, 2)))
    with pytest.raises(SliceError, match="labels="):
        discover_slices(unlabeled)
    assert activis.SliceError is SliceError and activis.discover_slices is discover_slices


def test_a_perfect_model_has_no_slices(tmp_path):
    store, _ = make_store(tmp_path, n=300, error_rate=0.0)
    report = discover_slices(store, layer="fc")
    assert len(report) == 0 and "no slice" in report.notes[0]


def _odd_store(tmp_path, n=1200, seed=3):
    """Metadata of every kind pandas and Parquet keep, and a failure planted after a date."""
    rng = np.random.default_rng(seed)
    when = pd.Timestamp("2024-01-01") + pd.to_timedelta(rng.integers(0, 365 * 24, n), unit="h")
    meta = pd.DataFrame({
        "when": when, "when_utc": when.tz_localize("UTC"),
        "gap": pd.to_timedelta(rng.integers(0, 100, n), unit="min"),
        "kind": pd.Categorical(rng.choice(["a", "b", "c"], n)),
        "count": pd.array(np.where(rng.random(n) < 0.2, None, rng.integers(0, 50, n)), dtype="Int64"),
        "ok": pd.array(np.where(rng.random(n) < 0.2, None, rng.random(n) < 0.5), dtype="boolean"),
        "tags": [[i % 3] for i in range(n)],
        "__private": rng.integers(0, 4, n),
        "odd`name": rng.integers(0, 4, n),
    })
    labels = rng.integers(0, 3, n)
    late = np.asarray(when >= pd.Timestamp("2024-10-01"))
    wrong = rng.random(n) < np.where(late, 0.6, 0.05)
    outputs = np.eye(3, dtype=np.float32)[np.where(wrong, (labels + 1) % 3, labels)] * 4
    store = write_store(tmp_path / "odd", {"fc": rng.normal(size=(n, 4)).astype(np.float32)}, labels=labels,
                        outputs=outputs, metadata=meta)
    return store, late


def test_dates_are_searched_in_time_bins_and_odd_columns_never_stop_the_search(tmp_path):
    """A date column is cut at quantiles like a number, each threshold the roundest time between two
    values; every kind of column gives predicates whose query selects exactly their rows, and a
    column that cannot be searched (here: a name with a backtick) is skipped with a warning naming it."""
    store, late = _odd_store(tmp_path)
    with pytest.warns(activis.slices.SliceWarning, match=r"column 'odd`name' skipped.*backtick"):
        report = discover_slices(store)
    assert any("odd`name" in note for note in report.notes)
    top = report[0]
    assert top.predicates[0].startswith("when") and jaccard(top.members, late) >= 0.7, report
    subsets = activis.Subsets(store)
    table = store.instances
    columns = ["when", "when_utc", "gap", "kind", "count", "ok", "tags", "__private"]
    found, _ = predicates(table, columns, n_bins=5, min_support=10, rows=np.arange(len(table)))
    assert {p.column for p in found} == {"when", "when_utc", "gap", "kind", "count", "ok", "__private"}
    for p in found:
        np.testing.assert_array_equal(subsets.mask(activis.Subset.query(p.text)), p.mask, err_msg=p.text)
    assert any(p.text.startswith("when <= '2024-") and p.text.endswith(":00:00'") for p in found)  # whole hours
    assert all("+00:00'" in p.text for p in found if p.column == "when_utc" and "isna" not in p.text)
    adopted = top.adopt(subsets, "late")
    np.testing.assert_array_equal(np.flatnonzero(subsets.mask(adopted)), top.members)


def test_one_column_that_fails_is_skipped_with_a_warning(tmp_path, monkeypatch):
    from activis.slices import predicates as module
    store, inside = make_store(tmp_path, planted=lambda m, rng: (m.age > 60).to_numpy())
    original = module._column_predicates

    def broken(values, name, *args):
        if name == "city":
            raise TypeError("unorderable values")
        return original(values, name, *args)

    monkeypatch.setattr(module, "_column_predicates", broken)
    with pytest.warns(activis.slices.SliceWarning, match=r"column 'city' skipped: TypeError: unorderable values"):
        report = discover_slices(store)
    assert "age > 60" in report[0].description or jaccard(report[0].members, inside) >= 0.5


def test_a_metadata_column_named_index_is_refused_and_one_written_elsewhere_reads_as_meta_index(tmp_path):
    """`index` is the row number in a query: a new store refuses a metadata column of that name (what
    df.reset_index() makes), and a store written elsewhere with one opens with it as meta_index, which
    subsets and slices then read exactly."""
    rng = np.random.default_rng(0)
    n = 600
    meta = pd.DataFrame({"v": rng.integers(0, 5, n)}, index=rng.permutation(n)).reset_index()  # an 'index' column
    labels = rng.integers(0, 3, n)
    wrong = rng.random(n) < np.where(meta["index"].to_numpy() >= 450, 0.7, 0.05)
    outputs = np.eye(3, dtype=np.float32)[np.where(wrong, (labels + 1) % 3, labels)] * 4
    with pytest.raises(activis.StoreError, match=r"column named 'index'.*row number.*rename it.*reset_index"):
        write_store(tmp_path / "s", {"fc": np.zeros((n, 2), np.float32)}, labels=labels, outputs=outputs,
                    metadata=meta)
    assert not (tmp_path / "s").exists()
    store = write_store(tmp_path / "s", {"fc": np.zeros((n, 2), np.float32)}, labels=labels, outputs=outputs,
                        metadata=meta.rename(columns={"index": "original"}))
    meta.to_parquet(tmp_path / "s" / "metadata.parquet", index=False)  # as another tool would have written it
    store = activis.open_store(tmp_path / "s")
    table = store.instances
    assert "index" not in table.columns and (table["meta_index"].to_numpy() == meta["index"].to_numpy()).all()
    subsets = activis.Subsets(store)
    np.testing.assert_array_equal(np.flatnonzero(subsets.mask(activis.Subset.query("index < 3"))), [0, 1, 2])
    np.testing.assert_array_equal(subsets.mask(activis.Subset.query("meta_index < 3")), meta["index"] < 3)
    report = discover_slices(store)
    assert report[0].predicates[0].startswith("meta_index >")
    np.testing.assert_array_equal(np.flatnonzero(subsets.mask(report[0].definition)), report[0].members)


def test_a_metric_with_missing_values_says_which_instances_it_leaves_out(tmp_path):
    store, _ = make_store(tmp_path)
    metric = (~store.instances.correct.to_numpy()).astype(float)
    metric[::7] = np.nan
    with pytest.warns(activis.slices.SliceWarning, match=r"no finite value for 286 labelled instance\(s\) "
                                                          r"\(instances 0, 7, 14, 21, 28, \.\.\.\): they are left out"):
        report = discover_slices(store, metric=metric)
    assert any("286 labelled" in note for note in report.notes)
