"""The activation store on its own: layout, reading without torch, bad stores, commits, shards, full disks."""

import errno
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

import activis
from activis.store import (
    LayerSpec,
    StoreError,
    StoreFullError,
    StoreWriter,
    check_finite,
    finish_shards,
    open_store,
    scores_from_outputs,
    write_store,
)

REPO = pathlib.Path(__file__).resolve().parent.parent


def small_store(path, n=50, **kwargs):
    rng = np.random.default_rng(1)
    acts = {"hidden": rng.normal(size=(n, 6)).astype(np.float32), "logits": rng.normal(size=(n, 3))}
    kwargs.setdefault("labels", np.arange(n) % 3)
    kwargs.setdefault("outputs", acts["logits"])
    return write_store(path, acts, **kwargs), acts


def batch(n, rng, width=6, classes=3):
    return {"activations": {"hidden": rng.normal(size=(n, width)).astype(np.float32)},
            "label": rng.integers(0, classes, size=n), "outputs": rng.normal(size=(n, classes))}


# ------------------------------------------------------------------------------ reading
def test_round_trip_memory_maps_instances_metadata_inputs_and_graph(tmp_path):
    import torch

    import model_zoo as zoo
    from activis.graph import extract_graph

    graph = extract_graph(zoo.mlp(), torch.randn(2, 20))
    n = 40
    images = np.random.default_rng(0).integers(0, 255, size=(n, 8, 8), dtype=np.uint8)
    meta = pd.DataFrame({"label": np.arange(n) * 10, "source": ["a", "b"] * (n // 2)})  # "label" clashes
    store, acts = small_store(tmp_path / "s", n=n, class_names=["cat", "dog", "<img src=x onerror=alert(1)>"],
                              metadata=meta, inputs=images, graph=graph,
                              layer_specs={"hidden": LayerSpec(neurons=6), "logits": LayerSpec(3, dtype="float32")})
    hidden = store.activations("hidden")
    assert isinstance(hidden, np.memmap) and not hidden.flags.writeable
    assert hidden.dtype == np.float16 and hidden.shape == (n, 6)
    np.testing.assert_array_equal(hidden, acts["hidden"].astype(np.float16))
    np.testing.assert_array_equal(store.activations("logits"), acts["logits"].astype(np.float32))
    assert store.activations("hidden") is hidden  # one map per layer, not one per call
    assert store.layer_spec("logits") == LayerSpec(neurons=3, dtype="float32")

    inst = store.instances
    assert list(inst.columns[:6]) == ["label", "pred", "correct", "confidence", "label_score", "nonfinite"]
    np.testing.assert_array_equal(inst["label"], np.arange(n) % 3)
    np.testing.assert_array_equal(inst["pred"], acts["logits"].argmax(1))
    np.testing.assert_array_equal(inst["correct"], inst["label"] == inst["pred"])
    scores = store.scores
    np.testing.assert_allclose(scores.sum(1), 1, rtol=1e-5)
    np.testing.assert_allclose(inst["confidence"], scores.max(1), rtol=1e-6)
    np.testing.assert_allclose(inst["label_score"], scores[np.arange(n), np.arange(n) % 3], rtol=1e-6)
    assert inst["label_name"].iloc[2] == "<img src=x onerror=alert(1)>"
    assert list(inst["meta_label"][:3]) == [0, 10, 20] and list(inst["source"][:2]) == ["a", "b"]
    assert inst.index.name == "index"

    assert store.inputs.dtype == np.uint8 and store.input_shape == [8, 8]
    np.testing.assert_array_equal(store.inputs.reshape(n, 8, 8), images)
    assert [node.name for node in store.graph.nodes] == [node.name for node in graph.nodes]
    assert store.is_complete and store.n_instances == n and "complete" in repr(store)


def test_scores_for_every_output_kind():
    logits = np.array([[2.0, 0.0, -1.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    np.testing.assert_allclose(scores_from_outputs(logits, "logits"), probs, rtol=1e-6)
    np.testing.assert_allclose(scores_from_outputs(probs, "probabilities"), probs)
    np.testing.assert_allclose(scores_from_outputs(np.log(probs), "log_probabilities"), probs, rtol=1e-6)
    binary = scores_from_outputs(np.array([[0.0], [2.0], [-800.0]]), "logits")  # one logit per instance
    np.testing.assert_allclose(binary[:, 1], [0.5, 1 / (1 + np.exp(-2)), 0.0], atol=1e-7)
    np.testing.assert_allclose(binary.sum(1), 1)
    with pytest.raises(ValueError, match="Unknown output kind"):
        scores_from_outputs(logits, "softmax")


def test_float16_overflow_nan_and_inf_are_counted_and_overflow_saturated(tmp_path):
    hidden = np.zeros((6, 4), dtype=np.float32)
    hidden[1, 0] = 1e6          # overflows float16
    hidden[1, 1] = -7e4         # overflows float16
    hidden[2, 2] = np.nan       # the model's own NaN
    hidden[4, 3] = np.inf       # the model's own Inf
    store = write_store(tmp_path / "s", {"hidden": hidden, "wide": hidden},
                        layer_specs={"hidden": LayerSpec(4), "wide": LayerSpec(4, dtype="float32")},
                        labels=np.zeros(6, int), outputs=np.zeros((6, 2)))
    counts = store.nonfinite
    assert counts.loc["hidden"].to_dict() == {"nan": 1, "inf": 1, "overflow": 2, "underflow": 0}
    assert counts.loc["wide"].to_dict() == {"nan": 1, "inf": 1, "overflow": 0, "underflow": 0}  # float32 holds 1e6
    stored = store.activations("hidden")
    assert stored[1, 0] == np.float16(65504) and stored[1, 1] == np.float16(-65504)
    assert np.isnan(stored[2, 2]) and stored[4, 3] == np.inf
    assert store.activations("wide")[1, 0] == 1e6
    # per instance: bad values over all layers
    assert list(store.instances["nonfinite"]) == [0, 2 + 0, 1 + 1, 0, 1 + 1, 0]
    assert "2 overflowed" in store.summary()


def test_check_finite_is_none_when_all_finite_and_counts_otherwise():
    ok = np.ones((3, 3), dtype=np.float16)
    assert check_finite(ok) is None
    stored = np.array([[np.inf, 1.0], [np.nan, -np.inf]], dtype=np.float16)
    source = np.array([[1e9, 1.0], [np.nan, -np.inf]], dtype=np.float32)
    found = check_finite(stored, lambda: source)
    assert (found.nan, found.inf, found.overflow) == (1, 1, 1)
    assert list(found.per_row) == [1, 2] and stored[0, 0] == np.float16(65504)


def test_open_store_never_imports_torch(tmp_path):
    import torch

    import model_zoo as zoo
    from activis.graph import extract_graph

    small_store(tmp_path / "s", graph=extract_graph(zoo.mlp(), torch.randn(2, 20)), class_names=list("abc"),
                metadata={"note": ["x"] * 50})
    script = textwrap.dedent(f"""
        import importlib.abc, json, sys

        class NoTorch(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ImportError("torch is blocked in this test")

        sys.meta_path.insert(0, NoTorch())
        from activis.store import open_store

        store = open_store({str(tmp_path / "s")!r})
        a = store.activations("hidden")
        out = {{"type": type(a).__name__, "shape": list(a.shape), "sum": float(a[10:20].astype("f8").sum()),
               "labels": store.instances["label_name"].tolist()[:3], "note": store.instances["note"][0],
               "scores": float(store.scores.sum()), "nodes": len(store.graph.nodes),
               "torch": any(m == "torch" or m.startswith("torch.") for m in sys.modules)}}
        print("RESULT " + json.dumps(out))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.split("RESULT ", 1)[1])
    expected = float(open_store(tmp_path / "s").activations("hidden")[10:20].astype("f8").sum())
    assert result == {"type": "memmap", "shape": [50, 6], "sum": expected, "labels": ["a", "b", "c"],
                      "note": "x", "scores": pytest.approx(50.0, rel=1e-5), "nodes": 7, "torch": False}


# -------------------------------------------------------------------------- bad stores
def edit_manifest(path, change):
    manifest = json.loads((path / "manifest.json").read_text())
    change(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))


BAD_STORES = {
    "newer version": (lambda p: edit_manifest(p, lambda m: m.update(version=4)), "newer than this activis reads"),
    "version not a number": (lambda p: edit_manifest(p, lambda m: m.update(version="2")), "unknown"),
    "version zero": (lambda p: edit_manifest(p, lambda m: m.update(version=0)), "unknown"),
    "foreign manifest": (lambda p: edit_manifest(p, lambda m: m.update(format="other")), "format tag missing"),
    "manifest not JSON": (lambda p: (p / "manifest.json").write_text("{not json"), "not valid JSON"),
    "manifest missing": (lambda p: (p / "manifest.json").unlink(), "manifest.json is missing"),
    "layer file missing": (lambda p: (p / "layers" / "0.bin").unlink(), "layers/0.bin is missing"),
    "layer file truncated": (lambda p: os.truncate(p / "layers" / "0.bin", 100), "layers/0.bin is truncated"),
    "column truncated": (lambda p: os.truncate(p / "columns" / "label.bin", 8), "columns/label.bin is truncated"),
    "metadata missing": (lambda p: (p / "metadata.parquet").unlink(), "metadata.parquet is missing"),
    "entry outside the store": (lambda p: edit_manifest(p, lambda m: m["layers"]["hidden"].update(
        file="../elsewhere.bin")), "points outside the store"),
    "absolute entry": (lambda p: edit_manifest(p, lambda m: m["layers"]["hidden"].update(file="/etc/passwd")),
                       "points outside the store"),
    "object dtype": (lambda p: edit_manifest(p, lambda m: m["layers"]["hidden"].update(dtype="O")),
                     "not a plain numeric type"),
    "negative count": (lambda p: edit_manifest(p, lambda m: m.update(complete=-1)), "'complete' is -1"),
    "neurons missing": (lambda p: edit_manifest(p, lambda m: m["layers"]["hidden"].pop("neurons")),
                        "no neuron count"),
}


@pytest.mark.parametrize("case", BAD_STORES)
def test_bad_store_is_a_clear_error(tmp_path, case):
    break_it, message = BAD_STORES[case]
    small_store(tmp_path / "s", metadata={"m": range(50)})
    (tmp_path / "elsewhere.bin").write_bytes(b"\0" * 10_000)
    break_it(tmp_path / "s")
    with pytest.raises(StoreError, match=message):
        open_store(tmp_path / "s")


def test_not_a_store(tmp_path):
    with pytest.raises(StoreError, match="no such directory"):
        open_store(tmp_path / "nowhere")


def test_unknown_layer_lists_the_captured_ones(tmp_path):
    store, _ = small_store(tmp_path / "s")
    for read in (store.activations, store.layer_spec):
        with pytest.raises(activis.UnknownLayerError, match="Did you mean 'hidden'.*captured layers: hidden, logits"):
            read("hiden")


def test_one_error_class_for_an_unknown_layer(tmp_path):
    """Graph, store, analysis and explorer: `except activis.UnknownLayerError` catches every one."""
    import importlib
    import pkgutil

    for info in pkgutil.walk_packages(activis.__path__, "activis."):
        if info.name != "activis.__main__":
            module = importlib.import_module(info.name)
            same = getattr(module, "UnknownLayerError", activis.UnknownLayerError)
            assert same is activis.UnknownLayerError, info.name
    from activis.widgets.explorer import LayerNotCaptured

    assert issubclass(LayerNotCaptured, activis.UnknownLayerError)
    store, _ = small_store(tmp_path / "s")
    with pytest.raises(activis.UnknownLayerError):
        activis.explain_instance(store, 0, "nope")


def test_format_1_stores_still_open(tmp_path):
    small_store(tmp_path / "s")

    def as_v1(m):
        m.update(version=1, outputs_are_probabilities=False)
        for key in ("columns", "output_kind", "shards", "outputs_nonfinite", "capture"):
            m.pop(key)

    edit_manifest(tmp_path / "s", as_v1)
    store = open_store(tmp_path / "s")
    assert list(store.instances.columns[:4]) == ["label", "pred", "correct", "confidence"]
    assert store.output_kind == "logits" and store.scores.shape == (50, 3)
    # an unfinished format 1 store can be continued
    rng = np.random.default_rng(0)
    writer = StoreWriter(tmp_path / "growing", layers={"hidden": LayerSpec(6)}, n_outputs=3)
    writer.append(**batch(4, rng))
    writer.close()
    edit_manifest(tmp_path / "growing", lambda m: (as_v1(m), [e.pop("nonfinite") for e in m["layers"].values()],
                                                   [os.remove(tmp_path / "growing" / "columns" / f"{c}.bin")
                                                    for c in ("label_score", "nonfinite")]))
    with StoreWriter.resume(tmp_path / "growing") as writer:
        writer.append(**batch(3, rng))
    assert open_store(tmp_path / "growing").n_instances == 7


def test_sections_live_inside_the_store(tmp_path):
    store, _ = small_store(tmp_path / "s")
    assert store.section("projections") == tmp_path / "s" / "projections" and store.section("projections").is_dir()
    for bad in ("../up", "layers", "a/b", ""):
        with pytest.raises(ValueError):
            store.section(bad)


# ------------------------------------------------------------------------------ writing
def test_each_append_commits_and_readers_see_only_committed_rows(tmp_path):
    rng = np.random.default_rng(0)
    writer = StoreWriter(tmp_path / "s", layers={"hidden": LayerSpec(6)}, n_outputs=3, n_expected=10)
    store = open_store(tmp_path / "s")
    assert store.n_instances == 0 and store.activations("hidden").shape == (0, 6)
    first = batch(4, rng)
    writer.append(**first)
    assert store.reload().n_instances == 4
    np.testing.assert_array_equal(store.activations("hidden"), first["activations"]["hidden"].astype(np.float16))
    writer.append(**batch(3, rng), commit=False)  # written, not committed: invisible
    assert store.reload().n_instances == 4 and "4/10 committed" in repr(store) and "resume" in repr(store)
    writer.commit()
    assert store.reload().n_instances == 7 and not store.is_complete
    with pytest.raises(ValueError, match="runs past the end"):
        writer.append(**batch(4, rng))
    with pytest.raises(ValueError, match="Label 7 is outside the model's 3 classes"):
        writer.append(**{**batch(3, rng), "label": [0, 7, 1]})
    with pytest.raises(ValueError, match=r"expected \(3, 6\)"):
        writer.append(**{**batch(3, rng), "activations": {"hidden": np.zeros((3, 5))}})
    assert store.reload().n_instances == 7  # bad batches wrote nothing
    writer.append(**batch(3, rng))
    assert writer.finish().is_complete


def test_a_store_is_created_whole_and_never_over_something_else(tmp_path):
    small_store(tmp_path / "s")
    with pytest.raises(FileExistsError, match="already holds a store"):
        small_store(tmp_path / "s")
    open_store(tmp_path / "s").section("projections")
    store, _ = small_store(tmp_path / "s", n=20, overwrite=True)
    assert store.n_instances == 20 and not (tmp_path / "s" / "projections").exists()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="other files in it"):
        small_store(tmp_path / "other", overwrite=True)
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"
    (tmp_path / "empty").mkdir()
    assert small_store(tmp_path / "empty")[0].n_instances == 50
    # nothing half-made is left beside the stores
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "other", "s"]


def test_metadata_of_the_wrong_length_writes_nothing(tmp_path):
    with pytest.raises(ValueError, match="metadata has 3 rows for 50 instances"):
        small_store(tmp_path / "s", metadata={"a": [1, 2, 3]})
    assert list(tmp_path.iterdir()) == []


def test_sharded_store_reads_as_one_array_and_finishes_when_every_rank_has(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "s"
    rank0 = StoreWriter(path, layers={"hidden": LayerSpec(6)}, n_outputs=3, n_expected=10, world_size=2)
    rank1 = StoreWriter.resume(path, rank=1)
    assert (rank0.start, rank0.stop, rank1.start, rank1.stop) == (0, 5, 5, 10)
    second = batch(5, rng)
    second["activations"]["hidden"][2, 1] = 1e5  # an overflow in rank 1's rows
    rank1.append(**second)
    rank1.finish()
    store = open_store(path)
    assert store.n_instances == 0 and store.committed == 5  # rows 5-9 wait behind rank 0's gap
    assert [p["complete"] for p in store.progress] == [0, 5]
    first = batch(3, rng)
    rank0.append(**first)
    assert store.reload().n_instances == 3 and "8 in all shards" in repr(store)
    with pytest.raises(StoreError, match="rank 0: 3/5"):
        finish_shards(path)
    with pytest.raises(StoreError, match="laid out for 2"):
        StoreWriter.resume(path)
    resumed = StoreWriter.resume(path, rank=0)
    assert resumed.complete == 3
    rest = batch(2, rng)
    resumed.append(**rest)
    resumed.finish()
    rank0.close()
    store = finish_shards(path)
    hidden = store.activations("hidden")
    assert isinstance(hidden, np.memmap) and hidden.shape == (10, 6) and store.is_complete
    expected = np.concatenate([first["activations"]["hidden"], rest["activations"]["hidden"],
                               second["activations"]["hidden"]])
    expected[7, 1] = 65504  # saturated
    np.testing.assert_array_equal(hidden, expected.astype(np.float16))
    assert store.nonfinite.loc["hidden", "overflow"] == 1
    assert list(store.instances["nonfinite"]) == [0] * 7 + [1] + [0] * 2


# ----------------------------------------------------------------------------- full disk
FULL_DISK_SCRIPT = """
import resource, signal, sys
import numpy as np
from activis.store import LayerSpec, StoreFullError, StoreWriter

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), int(sys.argv[2])))
writer = StoreWriter(sys.argv[1], layers={"hidden": LayerSpec(64, dtype="float32")}, n_outputs=2, n_expected=10_000)
rng = np.random.default_rng(0)
for i in range(100):
    try:
        writer.append(activations={"hidden": np.full((100, 64), i, dtype=np.float32)},
                      label=np.zeros(100, int), outputs=rng.normal(size=(100, 2)))
    except StoreFullError as exc:
        print("FULL", exc)
        break
"""


def test_a_full_disk_is_a_clear_error_and_keeps_the_committed_batches(tmp_path):
    # a file-size limit makes the kernel refuse the write exactly like a full disk does
    limit = 100 * 64 * 4 * 7 + 1000  # room for 7 batches and a bit of the 8th
    proc = subprocess.run([sys.executable, "-c", FULL_DISK_SCRIPT, str(tmp_path / "s"), str(limit)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "FULL [Errno 27] No space left while writing a batch" in proc.stdout
    assert "keeps its 700 committed instances" in proc.stdout and "resume=True" in proc.stdout
    store = open_store(tmp_path / "s")
    assert store.n_instances == 700
    np.testing.assert_array_equal(store.activations("hidden")[::100, 0], np.arange(7))


def test_a_full_disk_while_committing_keeps_the_previous_manifest(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    writer = StoreWriter(tmp_path / "s", layers={"hidden": LayerSpec(6)}, n_outputs=3)
    writer.append(**batch(4, rng))
    real_replace = os.replace

    def no_space(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", no_space)
    with pytest.raises(StoreFullError, match="manifest"):
        writer.append(**batch(4, rng))
    monkeypatch.setattr(os, "replace", real_replace)
    assert open_store(tmp_path / "s").n_instances == 4
    assert [p.name for p in (tmp_path / "s").iterdir() if p.name.endswith(".tmp")] == []


def test_a_really_full_file_system(tmp_path):
    """On a 1 MB tmpfs where this machine lets us mount one (root, not in every CI)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        writer = StoreWriter(mount / "s", layers={"hidden": LayerSpec(256, dtype="float32")}, n_outputs=2)
        rng = np.random.default_rng(0)
        with pytest.raises(StoreFullError, match="No space left") as info:
            for i in range(100):
                writer.append(activations={"hidden": np.full((64, 256), i, dtype=np.float32)},
                              label=np.zeros(64, int), outputs=rng.normal(size=(64, 2)))
        writer.close()
        store = open_store(mount / "s")
        assert store.n_instances > 0 and f"its {store.n_instances} committed" in str(info.value)
        np.testing.assert_array_equal(store.activations("hidden")[::64, 0], np.arange(store.n_instances // 64))
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=True)  # the store's maps may still be open


def _damage_manifest(path, change):
    manifest = json.loads((path / "manifest.json").read_text())
    change(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("case", ["class names", "shape overflow", "inputs shape overflow", "neurons"])
def test_open_refuses_a_manifest_that_does_not_add_up(tmp_path, case):
    path = tmp_path / "s"
    small_store(path, class_names=["a", "b", "c"], inputs=np.zeros((50, 4), np.float32))
    changes = {
        "class names": (lambda m: m.update(class_names=["a", "b"]), "2 class names for 3 outputs"),
        "shape overflow": (lambda m: m["layers"]["hidden"].update(shape=[1 << 32, 1 << 32, 1 << 32]),
                           "layer 'hidden' has shape"),
        "inputs shape overflow": (lambda m: m["inputs"].update(shape=[1 << 40, 1 << 40]), "'inputs.shape' is"),
        "neurons": (lambda m: m["layers"]["hidden"].update(neurons=1 << 62), "layer 'hidden' has"),
    }
    change, message = changes[case]
    _damage_manifest(path, change)
    with pytest.raises(StoreError, match=f"Manifest of .* is corrupt: {message}"):
        open_store(path)


def test_open_refuses_damaged_metadata_or_graph_naming_the_file(tmp_path):
    path = tmp_path / "s"
    meta = pd.DataFrame({"a": np.arange(50)})
    small_store(path, metadata=meta)
    meta.iloc[:40].to_parquet(path / "metadata.parquet")
    with pytest.raises(StoreError, match="metadata.parquet of .* has 40 metadata rows for 50 instances"):
        open_store(path)
    (path / "metadata.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(StoreError, match="metadata.parquet of .* is not a readable parquet file"):
        open_store(path)
    meta.to_parquet(path / "metadata.parquet")
    _damage_manifest(path, lambda m: m.update(graph_file="graph.json"))
    for text in ("{not json", '{"format": "activis.graph", "version": 1, "nodes": [{"bogus": 1}], "modules": []}'):
        (path / "graph.json").write_text(text)
        with pytest.raises(StoreError, match="graph.json of .* is not a valid activis graph"):
            open_store(path)
