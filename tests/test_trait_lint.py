"""The lint's trait check: every trait name the JS uses is one its Python widget syncs (js/lint/traits.mjs).

`npm run lint` runs the same rule; this test makes CI catch a misspelt name even where only pytest runs.
"""

import json
import os
import pathlib
import shutil
import subprocess

import pytest

from activis.widgets.trait_names import synced_trait_names

ROOT = pathlib.Path(__file__).resolve().parent.parent
ESLINT = ROOT / "node_modules" / ".bin" / "eslint"


def test_each_view_bundle_has_its_synced_trait_names():
    names = synced_trait_names()
    views = {p.stem for p in (ROOT / "js").glob("*.js")} - {"export_page"}
    assert set(names) == views
    assert {"brush", "brush_source", "hover_instance"} <= set(names["selection"])
    assert "layer" in names["activation_matrix"]
    assert "selected_indices" not in names["activation_matrix"]  # a Python-only trait is not in the browser


@pytest.fixture(scope="module")
def eslint(tmp_path_factory):
    if shutil.which("node") is None or not ESLINT.exists():
        pytest.skip("node and node_modules (npm install) are needed to run ESLint")
    traits = tmp_path_factory.mktemp("traits") / "traits.json"
    traits.write_text(json.dumps(synced_trait_names()))
    env = {**os.environ, "ACTIVIS_TRAITS": str(traits)}

    def run(*args, source=None):
        return subprocess.run([str(ESLINT), *args], cwd=ROOT, env=env, input=source, capture_output=True, text=True,
                              timeout=600)

    return run


def test_the_views_use_only_their_widgets_traits(eslint):
    run = eslint("js")
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("path, old, new, bad", [
    ("js/activation_matrix.js", 'model.get("layer")', 'model.get("layerr")', "layerr"),  # a misspelt read
    ("js/activation_matrix.js", 'model.get("layer")', 'model.get("brush")', "brush"),  # another widget's trait
    ("js/activation_matrix.js", 'kit.on("values"', 'kit.on("valuez"', "valuez"),  # a trait followed
    ("js/cockpit_panel.js", 'kit.array("series")', 'kit.array("seriez")', "seriez"),  # a binary trait
    ("js/matrix/dom.js", "", 'export const probe = (model) => model.set("hoverd_row", "");\n', "hoverd_row"),
    ("js/export/explorer.js", 'matrix.get("values")', 'matrix.get("valuez")', "valuez"),  # a saved page's stand-in
    ("js/misclassification_view.js", 'shared.set({ neuron: next })', 'shared.set({ neuro: next })', "neuro"),
])
def test_a_trait_the_widget_does_not_sync_fails_the_lint(eslint, path, old, new, bad):
    source = (ROOT / path).read_text()
    assert old in source
    planted = source.replace(old, new, 1) if old else source + new
    run = eslint("--stdin", "--stdin-filename", path, source=planted)
    assert run.returncode == 1 and f'"{bad}" is not a synced trait' in run.stdout, run.stdout + run.stderr
