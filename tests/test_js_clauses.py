"""The browser's one resolver of "every clause but mine" (js/common/selection.js), run in Node.

The live views and a saved page's links both go through `clausesFor`; the browser tests exercise it
inside views, this checks the rule itself: a view never follows, nor clears, another view's clause wrongly.
"""

import json
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
ESBUILD = ROOT / "node_modules" / ".bin" / "esbuild"

SCRIPT = """
import { clausesFor } from "./js/common/selection.js";
const state = { brush: null, brush_source: "" };
const set = (patch) => Object.assign(state, patch);
const model = { get: (k) => state[k] };
const projection = clausesFor(model, "projection"), matrix = clausesFor(model, "matrix");
const out = {};
set(projection.write("brush", [3, 1]));
out.followed = Array.from(matrix.clause("brush"));
out.own_followed = projection.clause("brush");
out.own = Array.from(projection.own("brush"));
out.others_own = matrix.own("brush");
out.clear_others = matrix.clear("brush");
set(projection.clear("brush"));
out.cleared = [state.brush, state.brush_source];
console.log(JSON.stringify(out));
"""


def test_a_view_follows_every_clause_but_its_own_and_clears_only_its_own():
    if shutil.which("node") is None or not ESBUILD.exists():
        pytest.skip("node and node_modules (npm install) are needed")
    bundled = subprocess.run([str(ESBUILD), "--bundle", "--format=esm", "--platform=node", "--log-level=warning"],
                             input=SCRIPT, cwd=ROOT, capture_output=True, text=True, timeout=120, check=True).stdout
    run = subprocess.run(["node", "--input-type=module"], input=bundled, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {"followed": [3, 1], "own_followed": None, "own": [3, 1], "others_own": None,
                                      "clear_others": None, "cleared": [None, "projection"]}
