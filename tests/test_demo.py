"""The demo's first minute: `digits_store` trains the CNN once and saves it beside the store, so the
quickstart's first cell, run after ``activis demo``, loads that model instead of training it again."""

import pathlib

import nbformat
import numpy as np
import pytest
import torch
from nbclient import NotebookClient

from activis.__main__ import notebooks_dir
from activis.demo import digits_cnn, digits_store, load_digits_cnn, weights_path


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    folder = tmp_path_factory.mktemp("demo")
    model, store = digits_store(folder / "digits.activis", verbose=False)
    return folder, model, store


def test_the_trained_model_is_saved_beside_the_store_and_loaded_back(demo):
    folder, model, store = demo
    assert weights_path(store.path) == folder / "digits.activis.weights.pt" and weights_path(store.path).is_file()
    loaded = load_digits_cnn(store.path, store)
    assert loaded is not None and not loaded.training
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor)


def test_quickstart_first_cell_loads_the_demo_model_instead_of_training(demo):
    folder, model, _ = demo
    nb = nbformat.read(str(notebooks_dir() / "quickstart.ipynb"), as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert "digits_store(" in first.source
    check = nbformat.v4.new_code_cell("import json\nprint('RESULT', json.dumps("
                                      "{k: v.tolist() for k, v in model.state_dict().items() if k.endswith('bias')}))")
    nb.cells = [first, check]
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute()
    printed = "".join(o.get("text", "") for o in first.outputs if o.output_type == "stream")
    assert "loaded the trained CNN" in printed and "training" not in printed, printed
    import json
    biases = json.loads("".join(o.get("text", "") for o in check.outputs).split("RESULT", 1)[1])
    for name, values in biases.items():  # the very model the demo trained
        np.testing.assert_allclose(values, model.state_dict()[name].numpy(), rtol=0, atol=0)


def test_weights_of_another_model_or_not_plain_tensors_are_not_loaded(demo, tmp_path):
    folder, model, store = demo
    other = tmp_path / "digits.activis"
    other.symlink_to(store.path, target_is_directory=True)
    target = weights_path(other)
    torch.manual_seed(1)
    torch.save(digits_cnn().state_dict(), target)  # same architecture, untrained: not what the store captured
    assert load_digits_cnn(other, store) is None
    torch.save({"layer": pathlib.Path("x")}, target)  # an object, not a tensor: refused, never unpickled
    assert load_digits_cnn(other, store) is None
    target.write_bytes(b"not a checkpoint")
    assert load_digits_cnn(other, store) is None
