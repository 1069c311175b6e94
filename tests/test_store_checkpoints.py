"""The store's checkpoint axis without torch: one instance table, per-checkpoint arrays, the format-2 layout
converted in place, a step written once, an unfinished checkpoint, and damaged checkpoint files."""

import json
import os
import pathlib

import numpy as np
import pandas as pd
import pytest

from activis.store import StoreError, StoreWriter, open_store, write_store
from activis.store.checkpoints import add_checkpoint

N = 40


def arrays(seed: int):
    rng = np.random.default_rng(seed)
    return {"hidden": rng.normal(size=(N, 6)).astype(np.float32)}, rng.normal(size=(N, 3)).astype(np.float32)


LABELS = np.arange(N) % 3


def checkpointed(path, steps=(3, 7, 12), **kwargs):
    for step in steps:
        acts, outputs = arrays(step)
        store = write_store(path, acts, labels=LABELS, outputs=outputs, checkpoint=step,
                            metadata={"name": [f"i{i}" for i in range(N)]}, inputs=np.eye(N, 5), **kwargs)
    return store


def snapshot(path: pathlib.Path) -> dict:
    return {str(p.relative_to(path)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(path.rglob("*"))
            if p.is_file()}


def test_each_checkpoint_keeps_its_arrays_and_the_instances_are_stored_once(tmp_path):
    store = checkpointed(tmp_path / "s")
    assert store.checkpoints == [3, 7, 12] and store.step == 12 and store.unfinished_checkpoints == []
    assert "step 12 of 3 checkpoints · complete" in repr(store)
    for step in store.checkpoints:
        at = store.at(step)
        acts, outputs = arrays(step)
        assert at.step == step and at.is_complete and at.checkpoints == [3, 7, 12]
        np.testing.assert_array_equal(at.activations("hidden"), acts["hidden"].astype(np.float16))
        np.testing.assert_array_equal(at.outputs, outputs)
        np.testing.assert_array_equal(at.instances["pred"], outputs.argmax(1))
        np.testing.assert_allclose(at.scores.sum(1), 1, rtol=1e-5)
        assert at.instances["label"].tolist() == LABELS.tolist()
        assert at.instances["name"].tolist() == [f"i{i}" for i in range(N)]
        np.testing.assert_array_equal(at.inputs, np.eye(N, 5))
    assert open_store(tmp_path / "s", step=7).step == 7
    # the instances once, the arrays per checkpoint
    files = {str(p.relative_to(tmp_path / "s")) for p in (tmp_path / "s").rglob("*.bin")}
    assert {"columns/label.bin", "columns/inputs.bin"} <= files
    assert not any(f.startswith("checkpoints/") and ("label.bin" in f or "inputs" in f) for f in files)
    assert "checkpoints/7/layers/0.bin" in files and "checkpoints/7/columns/outputs.bin" in files
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert manifest["version"] == 3 and [c["step"] for c in manifest["checkpoints"]] == [3, 7, 12]


def test_a_checkpoint_added_before_the_others_takes_its_place_in_order(tmp_path):
    store = checkpointed(tmp_path / "s", steps=(10, 2))
    assert store.checkpoints == [2, 10] and open_store(tmp_path / "s").step == 10


def test_a_store_from_before_checkpoints_is_step_0_and_takes_more(tmp_path):
    acts, outputs = arrays(0)
    plain = write_store(tmp_path / "s", acts, labels=LABELS, outputs=outputs, metadata={"m": range(N)})
    assert plain.checkpoints == [0] and plain.step == 0 and plain.at(0) is plain
    assert json.loads((tmp_path / "s" / "manifest.json").read_text())["version"] == 2  # old readers read it
    with pytest.raises(StoreError, match="Checkpoint 5 is not in the store .* one checkpoint: 0"):
        plain.at(5)
    before = plain.at(0).activations("hidden").copy()
    acts5, outputs5 = arrays(5)
    store = write_store(tmp_path / "s", acts5, labels=LABELS, outputs=outputs5, checkpoint=5)
    assert store.checkpoints == [0, 5]
    np.testing.assert_array_equal(store.at(0).activations("hidden"), before)
    np.testing.assert_array_equal(store.at(5).outputs, outputs5)
    assert store.at(0).instances["m"].tolist() == list(range(N))
    assert not (tmp_path / "s" / "layers").exists()  # linked into checkpoints/0, the old names gone


def test_a_step_written_twice_is_an_error_that_changes_no_file(tmp_path):
    checkpointed(tmp_path / "s")
    before = snapshot(tmp_path / "s")
    acts, outputs = arrays(99)
    with pytest.raises(StoreError, match=r"Checkpoint 7 is already in the store .*3, 7, 12.*written once"):
        write_store(tmp_path / "s", acts, labels=LABELS, outputs=outputs, checkpoint=7)
    with pytest.raises(StoreError, match="holds its 40 instances"):
        write_store(tmp_path / "s", {"hidden": acts["hidden"][:30]}, labels=LABELS[:30], outputs=outputs[:30],
                    checkpoint=20)
    assert snapshot(tmp_path / "s") == before
    plain = tmp_path / "plain"
    write_store(plain, acts, labels=LABELS, outputs=outputs)
    before = snapshot(plain)
    with pytest.raises(StoreError, match="without checkpoint= holds step 0"):
        write_store(plain, acts, labels=LABELS, outputs=outputs, checkpoint=0)
    assert snapshot(plain) == before


def test_other_instances_are_refused_and_the_checkpoint_is_not_added(tmp_path):
    store = checkpointed(tmp_path / "s", steps=(1,))
    acts, outputs = arrays(2)
    with pytest.raises(StoreError, match="label of row 0 is 2, the store's is 0"):
        write_store(tmp_path / "s", acts, labels=(LABELS + 2) % 3, outputs=outputs, checkpoint=2)
    assert store.reload().checkpoints == [1] and not (tmp_path / "s" / "checkpoints" / "2").exists()


def test_a_checkpoint_killed_midway_leaves_the_complete_ones_readable_and_resumes(tmp_path):
    path = tmp_path / "s"
    checkpointed(path, steps=(1, 2))
    acts, outputs = arrays(3)
    add_checkpoint(path, 3)
    writer = StoreWriter.resume(path, step=3)
    writer.append(activations={"hidden": acts["hidden"][:16]}, label=LABELS[:16], outputs=outputs[:16])
    writer.close()  # killed: never finished
    store = open_store(path)
    assert store.checkpoints == [1, 2] and store.unfinished_checkpoints == [3] and store.step == 2
    partial = store.at(3)
    assert partial.n_instances == 16 and not partial.is_complete
    assert "16/40 committed, resume with capture(..., checkpoint=3, resume=True)" in repr(partial)
    with pytest.raises(StoreError, match="Checkpoint 3 of the store .* is unfinished"):
        add_checkpoint(path, 4)
    writer = StoreWriter.resume(path, step=3)
    writer.append(activations={"hidden": acts["hidden"][16:]}, label=LABELS[16:], outputs=outputs[16:])
    writer.finish()
    store = open_store(path)
    assert store.checkpoints == [1, 2, 3]
    np.testing.assert_array_equal(store.at(3).outputs, outputs)
    with pytest.raises(StoreError, match="Checkpoint 3 of the store .* is finished"):
        StoreWriter.resume(path, step=3)


def test_a_kill_before_a_checkpoint_is_listed_leaves_only_a_stray_folder_that_is_replaced(tmp_path):
    path = tmp_path / "s"
    checkpointed(path, steps=(1,))
    (path / "checkpoints" / "5" / "layers").mkdir(parents=True)
    (path / "checkpoints" / "5" / "layers" / "0.bin").write_bytes(b"junk")
    assert open_store(path).checkpoints == [1]
    acts, outputs = arrays(5)
    store = write_store(path, acts, labels=LABELS, outputs=outputs, checkpoint=5)
    np.testing.assert_array_equal(store.at(5).activations("hidden"), acts["hidden"].astype(np.float16))


def edit(path, change, name="manifest.json"):
    data = json.loads((path / name).read_text())
    change(data)
    (path / name).write_text(json.dumps(data))


BAD = {
    "checkpoint folder outside": (lambda p: edit(p, lambda m: m["checkpoints"][0].update(dir="../x")),
                                  "has folder '../x'"),
    "negative step": (lambda p: edit(p, lambda m: m["checkpoints"][0].update(step=-1)), "no whole step"),
    "steps twice": (lambda p: edit(p, lambda m: m["checkpoints"].append(m["checkpoints"][0])), "not distinct"),
    "no checkpoints": (lambda p: edit(p, lambda m: m.update(checkpoints=[])), "'checkpoints' is not a list"),
    "state missing": (lambda p: (p / "checkpoints" / "7" / "checkpoint.json").unlink(),
                      "checkpoints/7/checkpoint.json is missing"),
    "state not JSON": (lambda p: (p / "checkpoints" / "7" / "checkpoint.json").write_text("{"), "not valid JSON"),
    "state of another step": (lambda p: edit(p, lambda s: s.update(step=8), "checkpoints/7/checkpoint.json"),
                              "not checkpoint 7's"),
    "count past the instances": (lambda p: edit(p, lambda s: s.update(complete=41), "checkpoints/7/checkpoint.json"),
                                 "'complete' is 41 for 40 instances"),
    "counts not numbers": (lambda p: edit(p, lambda s: s.update(outputs_nonfinite={"nan": "x"}),
                                          "checkpoints/7/checkpoint.json"), "not whole numbers"),
    "layer file truncated": (lambda p: os.truncate(p / "checkpoints" / "12" / "layers" / "0.bin", 10),
                             "checkpoints/12/layers/0.bin is truncated"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_damaged_checkpoint_is_a_clear_error(tmp_path, case):
    checkpointed(tmp_path / "s")
    (tmp_path / "x").mkdir()
    damage, message = BAD[case]
    damage(tmp_path / "s")
    with pytest.raises(StoreError, match=message):
        open_store(tmp_path / "s")


def test_steps_are_whole_numbers(tmp_path):
    store = checkpointed(tmp_path / "s", steps=(1,))
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(StoreError, match="whole number of 0 or more"):
            store.at(bad)
    with pytest.raises(StoreError, match=r"Checkpoint 4 is not in the store .*: 1\."):
        store.at(4)


def test_views_read_a_checkpoint_like_any_store(tmp_path):
    """Everything downstream takes the store a checkpoint gives: here, the subsets' aggregation."""
    from activis.subsets import Subsets

    store = checkpointed(tmp_path / "s", steps=(1, 2))
    means = []
    for step in (1, 2):
        subsets = Subsets(store.at(step))
        subsets.misclassified()
        means.append(subsets.aggregate("hidden", ["misclassified"]).mean[0])
        wrong = ~store.at(step).instances["correct"].to_numpy()
        np.testing.assert_allclose(means[-1], store.at(step).activations("hidden")[wrong].astype(np.float64).mean(0),
                                   rtol=1e-3, atol=1e-3)
    assert not np.allclose(means[0], means[1])
    assert isinstance(store.at(1).instances, pd.DataFrame)


def test_an_activis_from_before_checkpoints_refuses_the_new_format_clearly(tmp_path, monkeypatch):
    """What the reader of formats 1 and 2 (activis before checkpoints) says of a store with checkpoints."""
    from activis.store import manifest

    checkpointed(tmp_path / "s", steps=(1,))
    monkeypatch.setattr(manifest, "FORMAT_VERSION", 2)
    monkeypatch.setattr(manifest, "READABLE_VERSIONS", (1, 2))
    with pytest.raises(StoreError, match="format version 3 is newer than this activis reads .*upgrade activis"):
        open_store(tmp_path / "s")
