"""Training dynamics against independent references: data maps, forgetting events, CKA, dynamics subsets."""

import math

import numpy as np
import pandas as pd
import pytest

import activis
from activis.dynamics import (
    DynamicsError,
    ambiguous,
    cka,
    cka_matrix,
    data_map,
    data_map_of,
    easy_to_learn,
    forgotten,
    hard_to_learn,
    never_learned,
    prediction_changed,
)
from activis.subsets import Subset


# ----------------------------------------------------------------------------- independent references
def reference_data_map(logits, labels):
    """Cartography's compute_train_dy_metrics and Toneva's forgetting count, one instance at a time."""
    rows = []
    for i, label in enumerate(labels):
        probs, correct = [], []
        for t in range(len(logits)):
            z = [float(v) for v in logits[t][i]]
            top = max(z)
            denominator = sum(math.exp(v - top) for v in z)
            probs.append(math.exp(z[label] - top) / denominator)
            correct.append(int(np.argmax(logits[t][i])) == label)
        mean = sum(probs) / len(probs)
        std = math.sqrt(sum((p - mean) ** 2 for p in probs) / len(probs))
        events = sum(1 for before, after in zip(correct, correct[1:]) if before and not after)
        learned = any(correct)
        rows.append({"confidence": mean, "variability": std, "correctness": sum(correct) / len(correct),
                     "forgetting": events if learned else len(correct), "learned": learned})
    return pd.DataFrame(rows)


def gram_linear(x):
    return x @ x.T


def gram_rbf(x, threshold):
    d2 = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    return np.exp(-d2 / (2 * threshold ** 2 * np.median(d2)))


def hsic(k, m, debiased):
    """HSIC from its textbook formulas: H K H for the biased one, Song et al.'s unbiased estimator."""
    n = len(k)
    if not debiased:
        h = np.eye(n) - np.ones((n, n)) / n
        return np.trace(k @ h @ m @ h)
    k, m = k - np.diag(np.diag(k)), m - np.diag(np.diag(m))
    one = np.ones(n)
    return (np.trace(k @ m) + (one @ k @ one) * (one @ m @ one) / ((n - 1) * (n - 2))
            - 2 / (n - 2) * one @ k @ m @ one)


def reference_cka(x, y, kernel="linear", threshold=1.0, debiased=False):
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    k, m = (gram_linear(x), gram_linear(y)) if kernel == "linear" else (gram_rbf(x, threshold),
                                                                         gram_rbf(y, threshold))
    return hsic(k, m, debiased) / math.sqrt(hsic(k, k, debiased) * hsic(m, m, debiased))


# ----------------------------------------------------------------------------- data map
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_data_map_equals_reference(seed):
    rng = np.random.default_rng(seed)
    t, n, c = 6, 300, 5
    logits = (rng.standard_normal((t, n, c)) * 3).astype(np.float32)
    logits[:, :40] = np.round(logits[:, :40])  # ties: argmax takes the first
    labels = rng.integers(0, c, n)
    got = data_map(logits, labels)
    want = reference_data_map(logits, labels)
    for column in ("confidence", "variability", "correctness"):
        np.testing.assert_allclose(got[column], want[column], rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(got["forgetting"], want["forgetting"])
    np.testing.assert_array_equal(got["learned"], want["learned"])
    assert list(got.columns) == ["confidence", "variability", "correctness", "forgetting", "learned", "region"]


def test_data_map_takes_a_list_a_memmap_and_any_block_size(tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((4, 1000, 3)).astype(np.float32)
    labels = rng.integers(0, 3, 1000)
    whole = data_map(logits, labels)
    path = tmp_path / "logits.bin"
    logits.tofile(path)
    mapped = np.memmap(path, dtype=np.float32, mode="r", shape=logits.shape)
    pd.testing.assert_frame_equal(data_map(mapped, labels), whole)
    pd.testing.assert_frame_equal(data_map(list(logits), labels), whole)
    monkeypatch.setattr("activis.dynamics.cartography._BLOCK_VALUES", 7)  # blocks of 2 instances, a ragged last one
    pd.testing.assert_frame_equal(data_map(logits, labels), whole)


def test_data_map_memory_grows_with_instances_not_checkpoints(tmp_path):
    import tracemalloc

    t, n, c = 40, 20_000, 10
    rng = np.random.default_rng(8)
    path = tmp_path / "logits.bin"
    rng.standard_normal((t, n, c)).astype(np.float32).tofile(path)
    logits = np.memmap(path, dtype=np.float32, mode="r", shape=(t, n, c))  # 32 MB on disk
    labels = rng.integers(0, c, n)
    data_map(logits, labels)
    tracemalloc.start()
    try:
        data_map(logits, labels)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < t * n * 8 / 2  # half of one float64 per checkpoint and instance


def test_forgetting_counts_transitions_and_never_learned_counts_checkpoints():
    # correct pattern per instance over 5 checkpoints: logits favour class 1 where correct
    patterns = np.array([[1, 0, 1, 0, 1],   # forgotten twice
                         [0, 0, 0, 0, 0],   # never learned: 5 (Toneva)
                         [1, 1, 1, 1, 1],   # unforgettable
                         [0, 0, 0, 1, 1],   # learned late, never forgotten
                         [1, 1, 1, 1, 0]])  # forgotten once at the end
    logits = np.where(patterns.T[:, :, None] == 1, [0.0, 2.0], [2.0, 0.0])
    frame = data_map(logits, np.ones(5, dtype=int))
    assert frame["forgetting"].tolist() == [2, 5, 0, 0, 1]
    assert frame["learned"].tolist() == [True, False, True, True, True]
    assert frame["correctness"].tolist() == [0.6, 0.0, 1.0, 0.4, 0.8]


def test_regions_follow_confidence_and_variability():
    steps = np.linspace(-4, 4, 8)
    easy = np.stack([[0.0, 6.0]] * 8)                      # confident throughout
    hard = np.stack([[6.0, 0.0]] * 8)                      # never believed
    swinging = np.stack([[0.0, s] for s in steps])         # from wrong to right: high variability
    logits = np.stack([easy, hard, swinging], axis=1)      # (8 checkpoints, 3 instances, 2 classes)
    frame = data_map(logits, [1, 1, 1])
    assert frame["region"].tolist() == ["easy to learn", "hard to learn", "ambiguous"]
    assert frame["variability"].iloc[0] == 0


def test_minus_infinity_is_a_masked_class_and_nan_is_an_error():
    logits = np.zeros((2, 3, 3))
    logits[:, :, 2] = -np.inf
    frame = data_map(logits, [0, 1, 0])
    np.testing.assert_allclose(frame["confidence"], 0.5)
    logits[1, 2, 0] = np.nan
    logits[0, 1, 1] = np.inf
    with pytest.raises(DynamicsError, match=r"2 NaN or \+inf value\(s\) \(checkpoint 0: 1, checkpoint 1: 1\)"):
        data_map(logits, [0, 1, 0])


@pytest.mark.parametrize("logits, labels, message", [
    (np.zeros((3, 4)), [0, 1, 0], r"shaped \(checkpoints, instances, classes\), got shape \(3, 4\)"),
    (np.zeros((1, 3, 4)), [0, 1, 0], "at least 2 checkpoints, got 1"),
    (np.zeros((2, 3, 4)), [0, 1], r"3 of them, got shape \(2,\)"),
    (np.zeros((2, 3, 4)), [0, 4, 0], r"1 label\(s\) outside the 4 classes \[0, 3\], e.g. instance 1 has label 4"),
    (np.zeros((2, 3, 4)), [0, -1, 0], "outside the 4 classes"),
    (np.zeros((2, 3, 4)), [0.5, 1, 0], "integer class indices"),
    (np.zeros((2, 3, 1)), [0, 0, 0], "at least 2 classes"),
    ([np.zeros((3, 4)), np.zeros((2, 4))], [0, 1, 0], "differ in shape"),
    (np.array([[["a", "b"]], [["a", "b"]]]), [0], "must be numbers"),
])
def test_data_map_bad_input_names_the_problem(logits, labels, message):
    with pytest.raises(DynamicsError, match=message):
        data_map(logits, labels)


def test_data_map_does_not_change_its_input():
    rng = np.random.default_rng(4)
    logits = rng.standard_normal((3, 50, 4))
    labels = rng.integers(0, 4, 50)
    before = logits.copy(), labels.copy()
    data_map(logits, labels)
    np.testing.assert_array_equal(logits, before[0])
    np.testing.assert_array_equal(labels, before[1])


# ----------------------------------------------------------------------------- a store with checkpoints
class FakeCheckpoint:
    def __init__(self, outputs, labels, layers):
        self.outputs = outputs
        self.instances = pd.DataFrame({"label": labels})
        self._layers = layers
        self.layers = list(layers)

    def activations(self, layer):
        return self._layers[layer]


class FakeStore:
    """The interface of activis.store's checkpoints: ``checkpoints`` (sorted steps) and ``at(step)``."""

    def __init__(self, steps, outputs, labels, layers):
        self.checkpoints = list(steps)
        self._at = {s: FakeCheckpoint(o, labels, {name: acts[i] for name, acts in layers.items()})
                    for i, (s, o) in enumerate(zip(steps, outputs))}
        self.layers = list(layers)

    def at(self, step):
        return self._at[step]


def fake_store(seed=0, steps=(100, 200, 300, 400), n=120, label_seed=None):
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((len(steps), n, 4))
    labels = np.random.default_rng(seed if label_seed is None else label_seed).integers(0, 4, n)
    final = {"early": rng.standard_normal((n, 6)), "late": rng.standard_normal((n, 8))}
    layers = {name: [f + (len(steps) - 1 - i) * (0.2 if name == "early" else 1.5) * rng.standard_normal(f.shape)
                     for i in range(len(steps))] for name, f in final.items()}
    return FakeStore(steps, logits, labels, layers), logits, labels


def test_data_map_of_a_store_reads_its_checkpoints():
    store, logits, labels = fake_store()
    pd.testing.assert_frame_equal(data_map_of(store), data_map(logits, labels))


def test_a_store_without_checkpoints_is_a_clear_error():
    with pytest.raises(DynamicsError, match="no checkpoints"):
        data_map_of(object())


def test_cka_matrix_against_the_final_checkpoint_shows_which_layer_settled_first():
    store, _, _ = fake_store()
    matrix = cka_matrix(store)
    assert list(matrix.index) == ["early", "late"] and list(matrix.columns) == [100, 200, 300, 400]
    np.testing.assert_allclose(matrix[400], 1.0)
    assert (matrix.loc["early", 100] > matrix.loc["late", 100])  # the early layer moved less
    layer, step = "late", 200
    want = reference_cka(store.at(step).activations(layer), store.at(400).activations(layer))
    assert matrix.loc[layer, step] == pytest.approx(want, rel=1e-10)


def test_cka_matrix_between_two_stores():
    store, _, _ = fake_store(0)
    other, _, _ = fake_store(1, label_seed=0)  # another model over the same instances
    matrix = cka_matrix(store, other=other, kernel="rbf")
    assert matrix.shape == (2, 2)
    want = reference_cka(store.at(400).activations("early"), other.at(400).activations("late"), "rbf")
    assert matrix.loc["early", "late"] == pytest.approx(want, rel=1e-10)
    smaller, _, _ = fake_store(1, n=60)
    with pytest.raises(DynamicsError, match="same instances: 120 and 60"):
        cka_matrix(store, other=smaller)
    with pytest.raises(DynamicsError, match="Unknown layer"):
        cka_matrix(store, ["nope"])
    shuffled, _, _ = fake_store(2)
    with pytest.raises(DynamicsError, match="labels differ at .* of 120 instances"):
        cka_matrix(store, other=shuffled)


# ----------------------------------------------------------------------------- CKA
def test_cka_reproduces_the_authors_demo():
    np.random.seed(1337)
    x = np.random.randn(100, 10)
    y = np.random.randn(100, 10) + x
    assert cka(x, y) == pytest.approx(0.55761, abs=5e-6)
    assert cka(x, y, kernel="rbf", threshold=0.5) == pytest.approx(0.65483, abs=5e-6)
    assert cka(x, y, debiased=True) == pytest.approx(0.51346, abs=5e-6)


@pytest.mark.parametrize("kernel, threshold", [("linear", 1.0), ("rbf", 1.0), ("rbf", 0.3)])
@pytest.mark.parametrize("debiased", [False, True])
@pytest.mark.parametrize("shape", [(60, 5, 7), (20, 40, 30)])  # n >> d (feature-space form) and n < d (Gram)
def test_cka_equals_the_gram_reference(kernel, threshold, debiased, shape):
    n, p, q = shape
    rng = np.random.default_rng(n + p)
    x = rng.standard_normal((n, p))
    y = np.tanh(x @ rng.standard_normal((p, q))) + 0.5 * rng.standard_normal((n, q))
    want = reference_cka(x, y, kernel, threshold, debiased)
    assert cka(x, y, kernel, threshold, debiased) == pytest.approx(want, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("debiased", [False, True])
def test_linear_cka_in_blocks_of_rows_equals_the_reference(debiased):
    from activis.dynamics.similarity import _feature_space_linear

    rng = np.random.default_rng(9)
    x = rng.standard_normal((103, 6)).astype(np.float16) + 40  # a large common offset, in half precision
    y = x[:, :3] * 2 + rng.standard_normal((103, 3))
    centre = lambda a: a.astype(np.float64) - a.astype(np.float64).mean(axis=0)  # noqa: E731
    want = reference_cka(centre(x), centre(y), debiased=debiased)  # linear CKA ignores offsets
    assert _feature_space_linear(x, y, debiased, block=10) == pytest.approx(want, rel=1e-9)


def test_cka_is_one_on_itself_and_invariant_to_rotation_and_scale():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((200, 6)).astype(np.float32)
    rotation, _ = np.linalg.qr(rng.standard_normal((6, 6)))
    assert cka(x, x) == pytest.approx(1.0)
    assert cka(x, 3 * x @ rotation + 7) == pytest.approx(1.0)
    assert cka(x, x, debiased=True) == pytest.approx(1.0)
    assert cka(x, x, kernel="rbf") == pytest.approx(1.0)


def test_debiased_cka_of_independent_data_is_near_zero_and_may_be_negative():
    values = [cka(np.random.default_rng(s).standard_normal((32, 8)),
                  np.random.default_rng(s + 100).standard_normal((32, 8)), debiased=True) for s in range(20)]
    assert abs(np.mean(values)) < 0.03 and min(values) < 0 and all(np.isfinite(values))


def test_cka_samples_rows_for_gram_forms_only():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((300, 5))
    y = x + rng.standard_normal((300, 5))
    assert cka(x, y, max_rows=50) == cka(x, y)  # linear, n >> d: exact over every row
    rows = np.sort(np.random.default_rng(0).choice(300, 50, replace=False))
    assert cka(x, y, "rbf", max_rows=50) == pytest.approx(reference_cka(x[rows], y[rows], "rbf"), rel=1e-10)


def test_cka_flattens_feature_maps_and_a_constant_layer_aligns_with_nothing():
    rng = np.random.default_rng(7)
    maps = rng.standard_normal((30, 2, 3, 3))
    assert cka(maps, maps.reshape(30, -1)) == pytest.approx(1.0)
    assert cka(np.ones((30, 4)), maps) == 0.0


@pytest.mark.parametrize("x, y, options, message", [
    (np.zeros((5, 2)), np.zeros((6, 2)), {}, "same instances: x has 5 rows, y has 6"),
    (np.zeros(5), np.zeros((5, 2)), {}, r"x must be shaped \(instances, features...\)"),
    (np.zeros((5, 2)), np.zeros((5, 2)), {"kernel": "cosine"}, "Unknown kernel 'cosine'; choose one of linear, rbf"),
    (np.zeros((5, 2)), np.zeros((5, 2)), {"threshold": 0}, "threshold must be a positive number"),
    (np.zeros((5, 2)), np.zeros((5, 2)), {"threshold": "wide"}, "threshold must be a positive number"),
    (np.zeros((3, 2)), np.zeros((3, 2)), {"debiased": True}, "at least 4 instances"),
    (np.full((5, 2), np.nan), np.zeros((5, 2)), {}, "x holds 10 NaN or infinite"),
])
def test_cka_bad_input_names_the_problem(x, y, options, message):
    with pytest.raises(DynamicsError, match=message):
        cka(x, y, **options)


# ----------------------------------------------------------------------------- subsets from dynamics
def test_dynamics_subsets_are_named_index_subsets():
    patterns = np.array([[1, 0, 1, 0, 1], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1], [0, 1, 0, 1, 1], [1, 1, 1, 1, 0]])
    logits = np.where(patterns.T[:, :, None] == 1, [0.0, 2.0], [2.0, 0.0])
    frame = data_map(logits, np.ones(5, dtype=int))
    twice = forgotten(frame, 2)
    assert isinstance(twice, Subset) and twice.name == "forgotten ≥ 2"
    assert twice.definition["indices"] == [0]  # instance 1 was never learned: not "forgotten"
    assert forgotten(frame).definition["indices"] == [0, 3, 4]
    assert never_learned(frame).definition["indices"] == [1]
    assert forgotten(frame[frame["correctness"] > 0.7], 1).definition["indices"] == [4]
    regions = {s.name: s.definition["indices"] for s in (easy_to_learn(frame), ambiguous(frame), hard_to_learn(frame))}
    assert sorted(sum(regions.values(), [])) == [0, 1, 2, 3, 4]  # the regions partition the instances
    assert regions["easy to learn"] == [2]
    changed = prediction_changed(logits, 0, -1)
    assert changed.name == "prediction changed 0 → -1" and changed.definition["indices"] == [3, 4]
    assert (twice | changed).describe() == "forgotten ≥ 2 | prediction changed 0 → -1"


def test_prediction_changed_between_two_steps_of_a_store():
    store, logits, _ = fake_store()
    want = np.flatnonzero(logits[1].argmax(1) != logits[3].argmax(1)).tolist()
    subset = prediction_changed(store, 200, 400)
    assert subset.definition["indices"] == want and subset.name == "prediction changed 200 → 400"
    with pytest.raises(DynamicsError, match="No checkpoint at step 250"):
        prediction_changed(store, 250, 400)
    with pytest.raises(DynamicsError, match="out of range for logits of 4 checkpoints"):
        prediction_changed(logits, 0, 4)
    with pytest.raises(DynamicsError, match="k must be at least 1"):
        forgotten(data_map(logits, np.zeros(len(logits[0]), int)), 0)


def test_dynamics_names_are_public():
    assert activis.data_map is data_map and activis.cka is cka and activis.DynamicsError is DynamicsError


# ----------------------------------------------------------------------------- aligned projections
def unit_frames(layouts):
    out = []
    for e in layouts:
        e = np.asarray(e, np.float64) - np.mean(e, axis=0)
        out.append(e / np.linalg.norm(e) * math.sqrt(len(e)))  # unit RMS radius
    return out


def sheet(seed=0, n=150):
    """A 2-D sheet in 8-D: one connected manifold, as a layer's activations mostly are."""
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.uniform(0, 10, (n, 2)), 0.1 * rng.standard_normal((n, 6))], axis=1), rng


def test_aligned_projection_moves_an_instance_only_when_its_representation_moves():
    base, rng = sheet()
    frames, swapped = [base], []
    for _ in range(3):  # at each checkpoint, five pairs of instances swap representations
        x = frames[-1].copy()
        pairs = rng.choice(len(x), (5, 2), replace=False)
        x[pairs.ravel()] = x[pairs[:, ::-1].ravel()]
        frames.append(x)
        swapped.append(pairs.ravel())
    layouts = activis.aligned_projection(frames, random_state=0)
    assert len(layouts) == 4 and all(e.shape == (150, 2) and e.dtype == np.float32 for e in layouts)
    assert all(np.isfinite(e).all() for e in layouts)
    unit = unit_frames(layouts)
    for step, moved in enumerate(swapped):
        distance = np.linalg.norm(unit[step + 1] - unit[step], axis=1)
        still = np.delete(distance, moved)
        assert still.mean() < 0.15  # of the layout's RMS radius
        assert distance[moved].mean() > 4 * still.mean()


def test_aligned_projection_of_unchanged_checkpoints_barely_moves_and_is_deterministic():
    base, _ = sheet(1)
    frames = [base, base.copy(), base.astype(np.float32)]
    first = activis.aligned_projection(frames, random_state=3)
    unit = unit_frames(first)
    assert max(np.linalg.norm(b - a, axis=1).mean() for a, b in zip(unit, unit[1:])) < 0.05
    again = activis.aligned_projection(np.stack(frames), random_state=3)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("arrays, message", [
    ([], "a list of one \\(instances, features\\) array per checkpoint"),
    (np.zeros((5, 3)), "a list of one"),
    ([np.zeros((6, 3)), np.zeros((5, 3))], "arrays\\[0\\] has 6 rows, arrays\\[1\\] has 5"),
    ([np.zeros(6)], "arrays\\[0\\] must be numbers shaped \\(instances, features\\)"),
    ([np.full((6, 3), np.inf)], "arrays\\[0\\] holds 18 NaN or infinite"),
    ([np.zeros((3, 3))], "at least 4 instances, got 3"),
])
def test_aligned_projection_bad_input_names_the_problem(arrays, message):
    with pytest.raises(DynamicsError, match=message):
        activis.aligned_projection(arrays)


@pytest.mark.parametrize("options, message", [({"n_neighbors": "many"}, "n_neighbors must be at least 2 .*'many'"),
                                              ({"min_dist": 2}, "min_dist must lie in"),
                                              ({"n_epochs": 1}, "n_epochs must be at least 5")])
def test_aligned_projection_bad_parameters_name_the_problem(options, message):
    with pytest.raises(DynamicsError, match=message):
        activis.aligned_projection([np.zeros((6, 3))], **options)


def test_dynamics_subsets_work_in_a_stores_subsets(tmp_path):
    from activis.store import write_store
    from activis.subsets import Subsets

    store, logits, labels = fake_store()
    real = write_store(tmp_path / "s.activis", {"early": store.at(400).activations("early")}, labels=labels,
                       outputs=logits[-1])
    subsets = Subsets(real)
    frame = data_map(logits, labels)
    subsets.add("flaky", forgotten(frame, 1) | prediction_changed(logits, 0, -1))
    want = (frame["learned"] & (frame["forgetting"] >= 1)) | (logits[0].argmax(1) != logits[-1].argmax(1))
    np.testing.assert_array_equal(subsets.mask("flaky"), want.to_numpy())
    aggregate = subsets.aggregate("early", ["flaky"])
    assert aggregate.names == ["flaky"] and aggregate.sizes.tolist() == [int(want.sum())]


@pytest.mark.parametrize("kind", ["probabilities", "log_probabilities"])
def test_data_map_of_a_store_of_probabilities_reads_them_as_such(kind):
    store, logits, labels = fake_store()
    probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    for step, p in zip(store.checkpoints, probabilities):
        store.at(step).outputs = p if kind == "probabilities" else np.log(p)
        store.at(step).output_kind = kind
    pd.testing.assert_frame_equal(data_map_of(store), data_map(logits, labels), rtol=1e-9)


def test_data_map_of_a_binary_store_with_one_output_column():
    store, logits, labels = fake_store()
    binary = logits[:, :, 1] - logits[:, :, 0]
    for step, x in zip(store.checkpoints, binary):
        store.at(step).outputs = x[:, None]
        store.at(step).instances = pd.DataFrame({"label": labels % 2})
    want = data_map(np.stack([np.zeros_like(binary), binary], axis=-1), labels % 2)
    pd.testing.assert_frame_equal(data_map_of(store), want)


def test_dynamics_runs_where_torch_and_widgets_cannot_be_imported():
    import subprocess
    import sys

    code = ("import sys\n"
            "for name in ('torch', 'anywidget', 'ipywidgets'): sys.modules[name] = None\n"
            "import numpy as np, activis\n"
            "x = np.random.default_rng(0).normal(size=(3, 40, 4))\n"
            "activis.data_map(x, np.arange(40) % 4); activis.cka(x[0], x[1])\n"
            "activis.aligned_projection(list(x), n_epochs=10)\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "ok", out.stderr
