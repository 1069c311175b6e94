"""The shown layer travels to the page for brushed rows drawn there first (`matrix_local`): in its stored dtype,
only under the byte budget, only with a shared selection, dropped before another layer's values are drawn."""

import base64
import json
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

from activis.store import LayerSpec, write_store
from activis.widgets.activation_matrix import ActivationMatrix
from activis.widgets.explorer import Explorer
from activis.widgets.matrix_local import page_layer
from activis.widgets.selection import PROJECTION, Selection


@pytest.fixture(scope="module")
def run_store(tmp_path_factory):
    from timeline_run import make_run

    from activis import open_run

    return open_run(make_run(tmp_path_factory.mktemp("run") / "run", steps=11, every=5)).store


@pytest.fixture
def store(tmp_path):
    rng = np.random.default_rng(0)
    n = 200
    layers = {"half": rng.normal(size=(n, 6)), "wide": rng.normal(size=(n, 40))}
    return write_store(tmp_path / "s", layers, labels=rng.integers(0, 3, n),
                       outputs=rng.normal(size=(n, 3)).astype(np.float32))


def test_the_layer_crosses_in_its_stored_dtype_as_bits(store):
    values, dtype = page_layer(store, "half")
    assert dtype == "float16" and values.dtype == np.uint16 and values.shape == (200, 6)
    np.testing.assert_array_equal(values.view(np.float16), store.activations("half"))


def test_above_the_budget_nothing_is_sent_and_the_page_is_told(store):
    assert page_layer(store, "wide", budget=100) == (None, "float16")
    matrix = ActivationMatrix(store, "wide")
    matrix.page_layer.budget = 100
    matrix.shared_selection = Selection()
    assert matrix.page_activations is None and matrix.page_dtype == "float16"


def test_only_with_a_shared_selection_and_following_the_layer(store):
    matrix = ActivationMatrix(store, "half")
    assert matrix.page_activations is None and matrix.page_dtype == ""  # nothing can brush it
    matrix.shared_selection = Selection()
    assert matrix.page_activations.shape == (200, 6)
    seen = []
    matrix.observe(lambda c: seen.append(("page", c["new"] is None)), "page_activations")
    matrix.observe(lambda c: seen.append(("values", None)), "values")
    matrix.layer = "wide"
    # the old layer is dropped before the new layer's values go out (in a kernel the new layer follows the
    # frame; in a script at once)
    assert seen[0] == ("page", True) and ("values", None) in seen
    assert matrix.page_activations.shape == (200, 40)


def test_a_brush_the_page_wrote_is_not_applied_twice(store):
    ex = Explorer(store, method="pca")
    calls = []
    original = ex.matrix.add_rows_from_indices
    ex.matrix.add_rows_from_indices = lambda *a: calls.append(a) or original(*a)
    ex.selection.set_brush([3, 1, 2], PROJECTION)
    ex.selection.set_brush(np.array([3, 1, 2]), PROJECTION)  # the projection's own trait, arriving after
    assert len(calls) == 1
    ex.selection.set_brush([3, 1, 2], "data_map")  # another owner: a new clause
    assert ex.selection.brush_source == "data_map"


# the page's brushed row (js/matrix/local_rows.js, the saved page's statistics) over the layer as it crosses
PAGE_ROW = """
import { readFileSync } from "fs";
import { pageRows } from "./js/matrix/local_rows.js";
const { layers, brush, threshold } = JSON.parse(readFileSync(0, "utf8"));
const out = {};
for (const [name, { dtype, bits, shape }] of Object.entries(layers)) {
  const bytes = Buffer.from(bits, "base64");
  const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  const data = dtype === "float16" ? new Uint16Array(buffer) : new Float32Array(buffer);
  for (const statistic of ["mean", "active", "std"]) {
    const traits = { page_dtype: dtype, threshold, statistic, compared_to: "" };
    const kit = { model: { get: (k) => traits[k] }, el: { dataset: {} }, on: () => {},
      array: () => ({ data, shape }) };
    const rows = pageRows(kit).withBrush({ raw: new Float32Array(0), rows: [], N: shape[1] }, brush);
    out[`${name} ${statistic}`] = { values: Array.from(rows.raw), row: rows.rows[0], dataset: kit.el.dataset };
  }
}
console.log(JSON.stringify(out));
"""


def _run_node(script: str, given=None):
    """`script` (an ES module importing the repository's js/) bundled and run in Node: its JSON output."""
    root = pathlib.Path(__file__).resolve().parent.parent
    esbuild = root / "node_modules" / ".bin" / "esbuild"
    if shutil.which("node") is None or not esbuild.exists():
        pytest.skip("node and node_modules (npm install) are needed")
    bundled = subprocess.run([str(esbuild), "--bundle", "--format=esm", "--platform=node", "--log-level=warning"],
                             input=script, cwd=root, capture_output=True, text=True, timeout=120, check=True).stdout
    run = subprocess.run(["node", "--input-type=module", "-e", bundled], capture_output=True, text=True, timeout=120,
                         input=json.dumps(given))
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_the_page_computes_the_brushed_row_the_kernel_computes(tmp_path):
    rng = np.random.default_rng(3)
    n = 3000
    layers = {"h16": rng.normal(size=(n, 17)) * 4, "h32": np.maximum(rng.normal(size=(n, 9)), 0)}
    store = write_store(tmp_path / "two", layers, labels=rng.integers(0, 3, n),
                        outputs=rng.normal(size=(n, 3)).astype(np.float32),
                        layer_specs={"h16": LayerSpec(17), "h32": LayerSpec(9, dtype="float32")})
    brush = rng.choice(n, 1200, replace=False)
    brush = np.concatenate([brush, brush[:5]])  # a brush may repeat instances: the row counts each once
    sent = {}
    for name in layers:
        values, dtype = page_layer(store, name)
        sent[name] = {"dtype": dtype, "shape": list(values.shape), "bits": base64.b64encode(values.tobytes()).decode()}
    assert [s["dtype"] for s in sent.values()] == ["float16", "float32"]
    page = _run_node(PAGE_ROW, {"layers": sent, "brush": brush.tolist(), "threshold": 0.5})
    for name in layers:
        matrix = ActivationMatrix(store, name, threshold=0.5)
        matrix.add_rows_from_indices("selection", f"selection ({len(brush)})", brush)
        for statistic in ("mean", "active", "std"):
            matrix.statistic = statistic
            got = page[f"{name} {statistic}"]
            np.testing.assert_allclose(got["values"], matrix.values[-1], rtol=1e-6, atol=1e-6)
            assert got["row"] == matrix.rows[-1]  # the same label, size and description
            assert got["dataset"] == {"pageRows": "on"}


def test_the_layer_sent_carries_its_checkpoint(run_store):
    matrix = ActivationMatrix(run_store, run_store.layers[0])
    matrix.shared_selection = Selection()
    assert matrix.page_step == run_store.checkpoints[-1]
    seen = []
    matrix.observe(lambda c: seen.append(c["new"]), "page_step")
    matrix.set_store(run_store.at(run_store.checkpoints[0]))
    # dropped with the old checkpoint's layer, then the new one's step with its layer
    assert seen == [-1, run_store.checkpoints[0]] and matrix.page_activations is not None
    np.testing.assert_array_equal(matrix.page_activations.view(np.float16),
                                  run_store.at(run_store.checkpoints[0]).activations(run_store.layers[0]))


# a brush between the page's checkpoint move and the kernel's new layer: the old checkpoint's layer is not used
STALE_ROW = """
import { pageRows } from "./js/matrix/local_rows.js";
const traits = { page_dtype: "float32", page_step: 5, threshold: 0, statistic: "mean", compared_to: "" };
const kit = { model: { get: (k) => traits[k] }, el: { dataset: {} }, on: () => {},
  array: () => ({ data: Float32Array.from([1, 2, 3, 4, 5, 6]), shape: [3, 2] }) };
const rows = pageRows(kit);
const drawn = { raw: new Float32Array(0), rows: [], N: 2 };
const values = (step) => { const got = rows.withBrush(drawn, [0, 2], step); return got && Array.from(got.raw); };
console.log(JSON.stringify({ same: values(5), other: values(9), outside: values(-1) }));
"""


def test_a_brush_after_the_page_moved_the_checkpoint_waits_for_the_kernel(tmp_path):
    out = _run_node(STALE_ROW)
    assert out == {"same": [3, 4], "other": None, "outside": [3, 4]}
