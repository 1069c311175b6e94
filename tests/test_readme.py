"""The README's code as a user runs it, and every public name as a user reaches it.

Every ```python block of README.md runs as written, in order, twice, in one fresh kernel: a
second call of the same code is where a public name shadowed by a submodule, or a store path
that is already taken, shows up. The blocks speak of the user's own `images`, `labels`, `loader`...:
the prelude gives them those, from the bundled digits, and nothing else.
"""

import importlib
import pathlib
import pkgutil
import re
import subprocess
import sys

import nbformat
from nbclient import NotebookClient

import activis

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"

# the names the README's blocks take as the user's own
PRELUDE = """
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset
from activis.demo import digits_data

torch.set_num_threads(1)  # on a loaded machine two threads that wait for each other are 10x slower than one
images, labels, names, df = digits_data()
test_set = TensorDataset(torch.from_numpy(images), torch.from_numpy(labels))
test_df, classes = df, names
flags = np.arange(len(images)) % 7 == 0
idx = [0, 1, 2]
loader = DataLoader(test_set, batch_size=256)
loss_fn = torch.nn.CrossEntropyLoss()
"""
# blocks that train the model they are given (the demo's, from the first block) need its optimizer
BEFORE = {"Cockpit(": "opt = torch.optim.SGD(model.parameters(), lr=0.01)",
          # the cockpit's loop leaves its last batch in y
          "checkup(": "optimizer = torch.optim.SGD(model.parameters(), lr=0.01)\n"
                      "X, y = torch.from_numpy(images), torch.from_numpy(labels)"}


def readme_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), flags=re.S | re.M)


def test_readme_has_python_blocks():
    assert len(readme_blocks()) >= 5


def test_readme_blocks_run_twice_in_one_kernel(tmp_path):
    cells = [nbformat.v4.new_code_cell(PRELUDE)]
    for run in range(2):  # each pass in a folder of its own: a cockpit log refuses a second run in its folder
        (tmp_path / f"pass{run}").mkdir()
        cells.append(nbformat.v4.new_code_cell(f"import os; os.chdir({str(tmp_path / f'pass{run}')!r})"))
        for block in readme_blocks():
            cells += [nbformat.v4.new_code_cell(setup) for key, setup in BEFORE.items() if key in block]
            cells.append(nbformat.v4.new_code_cell(block))
    nb = nbformat.v4.new_notebook(cells=cells)
    # raises CellExecutionError, with the cell and its traceback, at the first cell that fails
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()


def _public_names_check(import_everything: bool) -> str:
    """Python source that checks every public name, in a fresh interpreter (imports are process-wide)."""
    return f"""
import importlib, pkgutil, activis
if {import_everything}:
    for info in pkgutil.walk_packages(activis.__path__, "activis."):
        if not info.name.startswith("activis.__main__"):
            importlib.import_module(info.name)
bad = []
for name in activis.__all__:
    first = getattr(activis, name)
    ns = {{}}
    exec(f"from activis import {{name}} as value", ns)
    if not (first is ns["value"] is getattr(activis, name)):
        bad.append(name)
print(bad)
"""


def test_every_public_name_is_one_object():
    for import_everything in (False, True):
        out = subprocess.run([sys.executable, "-c", _public_names_check(import_everything)], capture_output=True,
                             text=True, timeout=120, check=True).stdout
        assert out.strip() == "[]", (import_everything, out)


def test_capture_called_twice_after_its_package_is_imported(tmp_path):
    """The defect itself: the second call, after something imported the capture package."""
    script = f"""
import importlib
import numpy as np, torch, activis
import importlib
model = torch.nn.Sequential(torch.nn.Linear(4, 3))
x = np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32)
activis.capture(model, x, {str(tmp_path / 'a')!r}, progress=False)
importlib.import_module("activis.capturing")
from activis import capture
capture(model, x, {str(tmp_path / 'b')!r}, progress=False)
activis.capture(model, x, {str(tmp_path / 'c')!r}, progress=False)
"""
    subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)


def test_no_submodule_is_named_like_a_public_name():
    """A submodule named like a public name replaces it on the package once imported."""
    modules = {info.name.rsplit(".", 1)[-1] for info in pkgutil.iter_modules(activis.__path__)}
    assert not modules & set(activis.__all__)
    for name, module in activis._EXPORTS.items():  # and each is defined where the table says
        assert getattr(importlib.import_module(f"activis.{module}"), name) is getattr(activis, name)
