"""Aggregation (S^T A) against numpy, its paths, cache and memory bound; neuron ordering."""

import tracemalloc

import numpy as np
import pytest

import activis.subsets.aggregation as aggregation_module
import activis.subsets.collection as collection_module
import activis.subsets.ordering as ordering_module
from activis.store import LayerSpec, StoreWriter, open_store, write_store
from activis.subsets import (
    STATS,
    Subset,
    Subsets,
    aggregate_masks,
    cluster_neurons,
    difference,
    sort_neurons,
)


def random_store(path, n=3000, n_neurons=37, dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 5, n)
    acts = (rng.standard_normal((n, n_neurons)) * rng.uniform(0.1, 3, n_neurons) + rng.uniform(-1, 2, n_neurons))
    acts[:, 3] = np.maximum(acts[:, 3], 0)  # a ReLU-like neuron, often exactly 0
    outputs = rng.standard_normal((n, 5)).astype(np.float32)
    return write_store(path, {"layer": acts.astype(dtype)}, labels=labels, outputs=outputs,
                       class_names=list("abcde"), layer_specs={"layer": LayerSpec(n_neurons, dtype)})


def define(subsets, rng):
    """Overlapping subsets of every size: classes, a union, a tiny set, a single instance, an empty one."""
    n = subsets.store.n_instances
    names = subsets.by_class()
    names += [subsets.add("wide", "label != 2 or confidence > 0.5").name,
              subsets.add("tiny", indices=rng.choice(n, 7, replace=False)).name,
              subsets.add("one", indices=[11]).name,
              subsets.add("empty", "label > 10").name,
              subsets.add("random half", mask=rng.random(n) < 0.5).name]
    return names


def reference(activations, mask, threshold=0.0):
    rows = np.asarray(activations, dtype=np.float64)[mask]
    if not len(rows):
        return {s: np.full(activations.shape[1], np.nan) for s in STATS}
    return {"mean": rows.mean(0), "active": (rows > threshold).mean(0), "std": rows.std(0)}


def assert_matches_numpy(subsets, layer, names, aggregate, threshold=0.0):
    activations = subsets.store.activations(layer)
    for k, name in enumerate(names):
        mask = subsets.mask(name)
        assert aggregate.sizes[k] == mask.sum()
        expected = reference(activations, mask, threshold)
        for stat in STATS:
            got = aggregate[stat][k]
            assert got.dtype == np.float32
            np.testing.assert_allclose(got, expected[stat], rtol=2e-5, atol=2e-5, err_msg=f"{name} {stat}")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("path", ["kernel", "dense", "gather"])
def test_aggregate_equals_numpy(tmp_path, monkeypatch, dtype, path):
    store = random_store(tmp_path / "s", dtype=dtype)
    subsets = Subsets(store, chunk_bytes=4096)  # many chunks, and a chunk boundary inside every subset
    names = define(subsets, np.random.default_rng(1))
    if path == "dense":
        monkeypatch.setattr(aggregation_module, "PATTERN_BYTES", 0)  # too many patterns: dense S^T A per chunk
    if path == "gather":
        names = ["tiny", "one", "empty"]
    aggregate = subsets.aggregate("layer", names)
    assert aggregate.names == names and aggregate.mean.shape == (len(names), 37)
    assert_matches_numpy(subsets, "layer", names, aggregate)
    assert np.isnan(aggregate.mean[names.index("empty")]).all()
    assert aggregate.n_neurons == 37


def test_paths_agree_on_one_store(tmp_path, monkeypatch):
    store = random_store(tmp_path / "s", n=2000, n_neurons=16)
    rng = np.random.default_rng(2)
    masks = rng.random((30, 2000)) < rng.uniform(0.001, 0.6, (30, 1))  # 30 overlapping subsets: many patterns
    activations = store.activations("layer")
    kernel = aggregate_masks(activations, masks, chunk_bytes=1000)
    monkeypatch.setattr(aggregation_module, "PATTERN_BYTES", 0)
    dense = aggregate_masks(activations, masks, chunk_bytes=1000)
    monkeypatch.setattr(aggregation_module, "GATHER_FRACTION", 100.0)
    gather = aggregate_masks(activations, masks, chunk_bytes=1000)
    for stat in STATS:
        np.testing.assert_allclose(kernel[stat], dense[stat], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(kernel[stat], gather[stat], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_methods_agree_with_numpy(tmp_path, monkeypatch, dtype):
    """Both one-pass methods, with pattern partials flushed every 3 rows, chunks of a few rows and blocks of
    a few dozen, summed by three threads."""
    store = random_store(tmp_path / "s", n=2500, n_neurons=21, dtype=dtype)
    activations = store.activations("layer")
    rng = np.random.default_rng(5)
    masks = rng.random((12, 2500)) < rng.uniform(0.05, 0.7, (12, 1))
    masks[3] = False
    masks[3, 17] = True  # one instance: std exactly 0
    masks[4] = False     # empty: NaN
    monkeypatch.setattr(aggregation_module, "FLUSH_ROWS", 3)
    monkeypatch.setattr(aggregation_module, "THREAD_ROWS", 1000)  # two or more row ranges, summed apart
    monkeypatch.setattr(aggregation_module, "_cpu_count", lambda: 3)
    monkeypatch.setattr(aggregation_module, "READ_AHEAD_BYTES", 4096)  # blocks of a few dozen rows
    dense = np.asarray(activations, dtype=np.float64)
    for method in ("patterns", "matmul"):
        result = aggregate_masks(activations, masks, threshold=0.25, chunk_bytes=500, method=method)
        for k in range(12):
            expected = reference(dense, masks[k], threshold=0.25)
            for stat in STATS:
                np.testing.assert_allclose(result[stat][k], expected[stat], rtol=2e-5, atol=2e-5,
                                           err_msg=f"{method} {k} {stat}")
    with pytest.raises(aggregation_module.SubsetError, match="auto, patterns, matmul"):
        aggregate_masks(activations, masks, method="blas")


def test_more_than_64_subsets(tmp_path):
    store = random_store(tmp_path / "s", n=1500, n_neurons=9)
    activations = store.activations("layer")
    rng = np.random.default_rng(12)
    masks = rng.random((70, 1500)) < rng.uniform(0.01, 0.5, (70, 1))  # membership needs two 64-bit words
    masks[69] = False
    result = aggregate_masks(activations, masks, chunk_bytes=2000)
    dense = np.asarray(activations, dtype=np.float64)
    for k in range(69):
        np.testing.assert_allclose(result["mean"][k], dense[masks[k]].mean(0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(result["std"][k], dense[masks[k]].std(0), rtol=1e-5, atol=1e-6)
    assert np.isnan(result["mean"][69]).all()


def test_threshold_and_precision(tmp_path):
    rng = np.random.default_rng(4)
    n = 20_000
    acts = rng.standard_normal((n, 4)).astype(np.float32)
    acts[:, 0] = 1000 + 0.01 * acts[:, 0]  # a large mean next to a tiny spread: no cancellation
    store = write_store(tmp_path / "p", {"l": acts}, labels=np.zeros(n, int), outputs=np.zeros((n, 2)),
                        layer_specs={"l": LayerSpec(4, "float32")})
    subsets = Subsets(store)
    subsets.add("all", "index >= 0")
    subsets.add("most", "index % 7 != 0")
    aggregate = subsets.aggregate("l", ["all", "most"], threshold=0.5)
    assert_matches_numpy(subsets, "l", ["all", "most"], aggregate, threshold=0.5)
    assert aggregate.std[0, 0] == pytest.approx(acts[:, 0].astype(np.float64).std(), rel=1e-3)
    assert aggregate.threshold == 0.5


def test_stats_selection_and_result_object(tmp_path):
    subsets = Subsets(random_store(tmp_path / "s"))
    subsets.by_class()
    only_mean = subsets.aggregate("layer", stats="mean")
    assert only_mean.std is None and only_mean.active is None
    with pytest.raises(KeyError, match="'std' was not computed; this aggregate has mean"):
        only_mean["std"]
    with pytest.raises(ValueError, match="Unknown statistic"):
        subsets.aggregate("layer", stats=("median",))
    with pytest.raises(KeyError, match="Layer 'nope' is not in this store"):
        subsets.aggregate("nope")
    frame = subsets.aggregate("layer").to_frame("active")
    assert frame.index.tolist() == ["true a", "true b", "true c", "true d", "true e"]
    assert frame.shape == (5, 37)
    # anonymous Subset objects aggregate too, named by their definition
    anonymous = subsets.aggregate("layer", [Subset.query("label == 1"), "true b"])
    assert anonymous.names == ["label == 1", "true b"]
    np.testing.assert_array_equal(anonymous.mean[0], anonymous.mean[1])
    assert subsets.aggregate("layer", []).mean.shape == (0, 37)


def test_cache_hits_and_invalidation(tmp_path, monkeypatch):
    store = random_store(tmp_path / "s")
    subsets = Subsets(store)
    subsets.by_class()
    calls = []
    real = collection_module.aggregate_masks

    def counting(activations, masks, **kwargs):
        calls.append(len(masks))
        return real(activations, masks, **kwargs)

    monkeypatch.setattr(collection_module, "aggregate_masks", counting)
    first = subsets.aggregate("layer")
    again = subsets.aggregate("layer", ["true b", "true a"])
    assert calls == [5]  # served from the cache, in the order asked
    np.testing.assert_array_equal(again.mean[1], first.mean[0])
    subsets.aggregate("layer", [Subset.query("label == 0 or label == 0")])
    assert calls == [5]  # the same members under another definition: the same row

    subsets.add("true a", "label == 0 and confidence > 0.3")  # redefined: its row is recomputed, alone
    redefined = subsets.aggregate("layer")
    assert calls == [5, 1]
    assert redefined.sizes[0] < first.sizes[0]
    assert_matches_numpy(subsets, "layer", subsets.names, redefined)

    subsets.aggregate("layer", threshold=1.0)  # another threshold is another result
    assert calls == [5, 1, 5]
    subsets.aggregate("layer", stats="mean")
    assert calls == [5, 1, 5]  # the mean is part of the cached moments
    subsets.clear_cache()
    subsets.aggregate("layer")
    assert calls == [5, 1, 5, 5]

    small = Subsets(store, cache_bytes=3 * 37 * 4 * 2)  # room for two rows: older ones are dropped
    result = small.aggregate("layer", ["true a", "true b", "true c"])
    assert len(small._rows) == 2 and result.mean.shape == (3, 37)
    assert small._masks_bytes <= max(small.cache_bytes, store.n_instances)


def test_cache_follows_a_growing_and_rewritten_store(tmp_path):
    rng = np.random.default_rng(5)
    path = tmp_path / "grow"
    writer = StoreWriter(path, layers={"l": LayerSpec(3, "float32")}, n_outputs=2, n_expected=20)
    writer.append(activations={"l": np.ones((10, 3))}, label=np.zeros(10, int), pred=np.zeros(10, int),
                  confidence=np.ones(10), outputs=np.zeros((10, 2)))
    store = open_store(path)
    subsets = Subsets(store)
    subsets.add("all", "label == 0")
    assert subsets.aggregate("l").mean[0].tolist() == [1, 1, 1]
    writer.append(activations={"l": np.full((10, 3), 3.0)}, label=np.zeros(10, int), pred=np.zeros(10, int),
                  confidence=np.ones(10), outputs=np.zeros((10, 2)))
    store.reload()
    assert subsets.aggregate("l").mean[0].tolist() == [2, 2, 2]

    write_store(path, {"l": rng.random((20, 3)) + 5}, labels=np.zeros(20, int), outputs=np.zeros((20, 2)),
                layer_specs={"l": LayerSpec(3, "float32")}, overwrite=True)
    store.reload()
    assert (subsets.aggregate("l").mean[0] > 5).all()  # same size, new bytes: not the cached row


def test_memory_stays_bounded(tmp_path):
    n, n_neurons = 40_000, 128
    store = random_store(tmp_path / "big", n=n, n_neurons=n_neurons)
    subsets = Subsets(store, chunk_bytes=256 << 10)
    names = define(subsets, np.random.default_rng(6))
    for name in names:
        subsets.mask(name)  # the masks are the caller's (n bytes each), not the aggregation's
    array_bytes = n * n_neurons * 4
    tracemalloc.start()
    subsets.aggregate("layer", names)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < array_bytes / 4, f"peak heap {peak / 1e6:.1f} MB for a {array_bytes / 1e6:.1f} MB array"


def test_aggregate_masks_checks_its_input():
    with pytest.raises(ValueError, match="masks must be K x 10"):
        aggregate_masks(np.zeros((10, 2), np.float32), np.zeros((2, 9), bool))
    empty = aggregate_masks(np.zeros((0, 2), np.float32), np.zeros((3, 0), bool))
    assert empty["mean"].shape == (3, 2) and np.isnan(empty["mean"]).all()


# ----------------------------------------------------------------------------- ordering
def test_sort_neurons():
    values = np.array([0.5, np.nan, 2.0, 0.5, -1.0])
    assert sort_neurons(values).tolist() == [2, 0, 3, 4, 1]  # largest first, ties by index, NaN last
    assert sort_neurons(values, descending=False).tolist() == [4, 0, 3, 2, 1]
    assert sort_neurons(values).dtype == np.int32


def test_difference():
    values = np.array([[1.0, 2.0], [3.0, 5.0]])
    np.testing.assert_array_equal(difference(values, 1), [[-2.0, -3.0], [0.0, 0.0]])


def test_cluster_puts_duplicated_neurons_together():
    rng = np.random.default_rng(7)
    values = rng.random((12, 60))
    twins = [(3, 41), (10, 55), (20, 21), (0, 59)]
    for a, b in twins:
        values[:, b] = values[:, a]
    order = cluster_neurons(values)
    assert sorted(order.tolist()) == list(range(60)) and order.dtype == np.int32
    position = np.argsort(order)
    for a, b in twins:
        assert abs(position[a] - position[b]) == 1, (a, b, order)


def test_cluster_groups_neurons_with_similar_profiles():
    rng = np.random.default_rng(8)
    groups = rng.permutation(np.repeat(np.arange(4), 25))  # 100 neurons in 4 behaviours, shuffled
    profiles = np.eye(4)[:, groups] * 5 + rng.normal(0, 0.1, (4, 100))
    values = np.vstack([profiles, np.full((1, 100), np.nan)])  # an empty subset's row is ignored
    order = cluster_neurons(values)
    runs = np.count_nonzero(np.diff(groups[order])) + 1
    assert runs == 4  # each behaviour is one contiguous block


def test_cluster_edge_cases():
    assert cluster_neurons(np.zeros((0, 5))).tolist() == [0, 1, 2, 3, 4]
    assert cluster_neurons(np.ones((3, 2))).tolist() == [0, 1]
    constant = np.zeros((4, 10))
    constant[:, :5] = np.arange(4)[:, None]
    order = cluster_neurons(constant, metric="correlation")  # constant profiles have no correlation
    assert sorted(order.tolist()) == list(range(10))
    with pytest.raises(ValueError, match="rows x neurons"):
        cluster_neurons(np.zeros(5))


def test_cluster_many_neurons_goes_through_centroids(monkeypatch):
    monkeypatch.setattr(ordering_module, "EXACT_CLUSTER_LIMIT", 256)
    rng = np.random.default_rng(9)
    groups = rng.permutation(np.repeat(np.arange(3), 200))
    values = np.eye(3)[:, groups] * 10 + rng.normal(0, 0.1, (3, 600))
    order = cluster_neurons(values)
    assert sorted(order.tolist()) == list(range(600))
    assert np.count_nonzero(np.diff(groups[order])) + 1 == 3


def test_float16_conversion_is_exact_for_every_bit_pattern():
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16).reshape(256, 256)
    out = np.empty((256, 256), np.float32)
    aggregation_module._kernels().half_to_float(bits, aggregation_module.HALF_SCALES, out)
    expected = bits.view(np.float16).astype(np.float32)
    same = (out.view(np.uint32) == expected.view(np.uint32)) | (np.isnan(out) & np.isnan(expected))
    assert same.all()
