"""capture(): stored activations against direct forward passes, every neuron definition, every input
form, every bad input, interrupts, kills at random moments, resume, and torchrun shards."""

import filecmp
import os
import pathlib
import random
import signal
import socket
import subprocess
import sys
import time
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from capture_worker import capture_rows
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

import model_zoo as zoo
from activis.capturing import CaptureError, CaptureInterrupted, NonFiniteWarning, capture
from activis.graph import GraphTraceWarning, ModelInputError, UnknownLayerError
from activis.store import open_store

REPO = pathlib.Path(__file__).resolve().parent.parent
WORKER = pathlib.Path(__file__).resolve().parent / "capture_worker.py"


def run(model, data, path, **kwargs):
    kwargs.setdefault("progress", False)
    return capture(model, data, path, **kwargs)


def hooked(model, x, modules):
    """Direct forward pass recording every call of the named modules: what capture must reproduce."""
    seen = {name: [] for name in modules}
    handles = [model.get_submodule(name).register_forward_hook(
        lambda _m, _i, out, name=name: seen[name].append(out.detach().clone() if torch.is_tensor(out) else out))
        for name in modules]
    try:
        with torch.no_grad():
            out = model.eval()(x)
    finally:
        for h in handles:
            h.remove()
    return seen, out


# ----------------------------------------------------------------------- correctness
def test_mlp_every_layer_equals_a_direct_forward_pass(tmp_path):
    torch.manual_seed(0)
    model = zoo.mlp()
    x, y = torch.randn(300, 20), torch.randint(0, 3, (300,))
    exact = run(model, x, tmp_path / "f32", labels=y, dtype="float32", batch_size=64)
    half = run(model, x, tmp_path / "f16", labels=y, batch_size=64)
    seen, logits = hooked(model, x, ["0", "1", "2", "3", "4"])
    assert exact.layers == ["0", "1", "2", "3", "4"]  # the module paths the graph view shows
    for node, module in zip(exact.layers, seen):
        expected = seen[module][0].numpy()
        np.testing.assert_allclose(exact.activations(node), expected, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(half.activations(node), expected.astype(np.float16))
        assert half.activations(node).dtype == np.float16 and exact.layer_spec(node).neuron_kind == "unit"
    np.testing.assert_allclose(exact.outputs, logits.numpy(), rtol=1e-6, atol=1e-6)
    inst = exact.instances
    np.testing.assert_array_equal(inst["pred"], logits.argmax(1).numpy())
    np.testing.assert_array_equal(inst["label"], y.numpy())
    np.testing.assert_array_equal(inst["correct"], (logits.argmax(1) == y).numpy())
    np.testing.assert_allclose(inst["confidence"], torch.softmax(logits, 1).amax(1).numpy(), rtol=1e-5)
    assert exact.output_kind == "logits" and exact.class_names == ["0", "1", "2"]
    assert exact.graph.method == "fx" and exact.layer_spec("_2").node == "_2"
    assert exact.input_shape == [20]  # 20 values per instance: kept by default, for the instance view
    np.testing.assert_array_equal(exact.inputs, x.numpy())


def test_feature_maps_are_channels_by_mean_max_or_every_element(tmp_path):
    torch.manual_seed(0)
    model = zoo.SmallCNN()
    x = torch.randn(40, 1, 8, 8)
    layers = ["features.0", "features.6", "features_3", "classifier.1"]
    mean = run(model, x, tmp_path / "mean", layers=layers, dtype="float32", batch_size=16)
    peak = run(model, x, tmp_path / "max", layers=layers, dtype="float32", channel_reduction="max",
               reduce={"features.0": "none"})
    seen, _ = hooked(model, x, ["features.0", "features.6", "features.3", "classifier.1"])
    conv, relu, pool, flat = (seen[k][0] for k in ["features.0", "features.6", "features.3", "classifier.1"])
    np.testing.assert_allclose(mean.activations("features.0"), conv.mean((2, 3)).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mean.activations("features.6"), relu.mean((2, 3)).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mean.activations("features_3"), pool.mean((2, 3)).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mean.activations("classifier.1"), flat.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(peak.activations("features.6"), relu.amax((2, 3)).numpy(), rtol=1e-6)
    np.testing.assert_allclose(peak.activations("features.0"), conv.reshape(40, -1).numpy(), rtol=1e-5, atol=1e-6)
    spec = mean.layer_spec("features.6")
    assert (spec.neurons, spec.neuron_kind, spec.reduction, spec.shape) == (16, "channel", "mean", [16, 4, 4])
    assert (peak.layer_spec("features.6").reduction, peak.layer_spec("features.0").neurons) == ("max", 8 * 64)
    assert (peak.layer_spec("features.0").neuron_kind, peak.layer_spec("features.0").reduction) == ("unit", "none")
    assert mean.layer_spec("features.0").node == "features_0" and mean.layer_spec("classifier.1").neurons == 32


def test_a_module_called_twice_is_captured_per_call(tmp_path):
    torch.manual_seed(0)
    model = zoo.ResNet(blocks=1)
    x = torch.randn(24, 3, 8, 8)
    store = run(model, x, tmp_path / "s", layers=["layer1_0_relu", "layer1_0_relu_1", "layer1.0.relu", "layer1.0"],
                dtype="float32")
    seen, _ = hooked(model, x, ["layer1.0.relu"])
    first, second = (t.mean((2, 3)).numpy() for t in seen["layer1.0.relu"])
    np.testing.assert_allclose(store.activations("layer1_0_relu"), first, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(store.activations("layer1_0_relu_1"), second, rtol=1e-5, atol=1e-6)
    # a module path names the module's output: its last call
    np.testing.assert_array_equal(store.activations("layer1.0.relu"), store.activations("layer1_0_relu_1"))
    np.testing.assert_array_equal(store.activations("layer1.0"), store.activations("layer1_0_relu_1"))
    assert not np.allclose(first, second)


def test_sequences_are_features_by_mean_max_first_or_last_step(tmp_path):
    torch.manual_seed(0)
    model = zoo.TransformerClassifier()
    tokens = torch.randint(0, 50, (30, 12))
    store = run(model, tokens, tmp_path / "s", dtype="float32", batch_size=8,
                layers=["embed", "encoder.layers.0", "encoder", "head"],
                reduce={"embed": "last", "encoder": "first"}, sequence_reduction="max")
    seen, logits = hooked(model, tokens, ["embed", "encoder.layers.0", "encoder"])
    embed, layer0, encoder = seen["embed"][0], seen["encoder.layers.0"][0], seen["encoder"][0]
    np.testing.assert_allclose(store.activations("embed"), embed[:, -1].numpy(), rtol=1e-6)
    np.testing.assert_allclose(store.activations("encoder.layers.0"), layer0.amax(1).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(store.activations("encoder"), encoder[:, 0].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(store.outputs, logits.numpy(), rtol=1e-5, atol=1e-6)
    assert [store.layer_spec(n).reduction for n in store.layers] == ["last", "max", "first", "none"]
    assert [store.layer_spec(n).neuron_kind for n in store.layers] == ["feature", "feature", "feature", "unit"]
    # encoder.layers.0 lives inside a module fx keeps whole: it is hooked, and has no graph node
    assert store.layer_spec("encoder.layers.0").node is None
    assert store.input_shape == [12] and store.inputs.dtype == np.int32
    mean = run(model, tokens, tmp_path / "mean", layers=["embed"], dtype="float32")
    np.testing.assert_allclose(mean.activations("embed"), embed.mean(1).numpy(), rtol=1e-5, atol=1e-6)


def test_1d_convolutions_are_channels_and_layout_can_say_otherwise(tmp_path):
    model = nn.Sequential(nn.Conv1d(4, 6, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(6 * 10, 2))
    x = torch.randn(16, 4, 10)
    store = run(model, x, tmp_path / "s", layers=["0", "1"], dtype="float32")
    seen, _ = hooked(model, x, ["1"])
    assert store.layer_spec("1").neuron_kind == "channel"  # F: relu after a Conv1d keeps its layout
    np.testing.assert_allclose(store.activations("1"), seen["1"][0].mean(2).numpy(), rtol=1e-5, atol=1e-6)
    as_sequence = run(model, x, tmp_path / "seq", layers=["1"], layout={"1": "sequence"}, dtype="float32")
    assert as_sequence.layer_spec("1").neurons == 10
    np.testing.assert_allclose(as_sequence.activations("1"), seen["1"][0].mean(1).numpy(), rtol=1e-5, atol=1e-6)


def test_tuple_outputs_need_an_element_and_get_the_one_chosen(tmp_path):
    torch.manual_seed(0)
    model = zoo.LSTMClassifier()
    tokens = torch.randint(0, 50, (20, 7))
    tuple_error = r"Layer 'lstm' is tuple\(\[0\] tensor\(8, 7, 24\).*select=\{'lstm': \.\.\.\}"
    with pytest.raises(CaptureError, match=tuple_error):
        run(model, tokens, tmp_path / "a", layers=["lstm"])
    assert not (tmp_path / "a").exists()
    store = run(model, tokens, tmp_path / "b", layers=["lstm"], select={"lstm": 0}, reduce={"lstm": "last"},
                dtype="float32")
    seen, _ = hooked(model, tokens, ["lstm"])
    np.testing.assert_allclose(store.activations("lstm"), seen["lstm"][0][0][:, -1].numpy(), rtol=1e-5, atol=1e-6)
    assert store.layer_spec("lstm").element == [0]
    with pytest.raises(CaptureError, match="first dimension is not the batch"):  # h_n is (layers, N, H)
        run(model, tokens, tmp_path / "c", layers=["lstm"], select={"lstm": (1, 0)})
    with pytest.raises(CaptureError, match="has no element 5"):
        run(model, tokens, tmp_path / "d", layers=["lstm"], select={"lstm": 5})


class DictOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(5, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        h = torch.relu(self.body(x))
        return {"hidden": h, "logits": self.head(h)}


def test_dict_model_outputs_use_logits_or_the_element_named(tmp_path):
    model = DictOutput()
    x = torch.randn(12, 5)
    store = run(model, x, tmp_path / "a", layers=["body"], dtype="float32")
    with torch.no_grad():
        np.testing.assert_allclose(store.outputs, model(x)["logits"].numpy(), rtol=1e-6)
        other = run(model, x, tmp_path / "b", layers=["body"], output_element="hidden")
        assert other.outputs.shape == (12, 8)
    with pytest.raises(CaptureError, match="has no element 'scores'"):
        run(model, x, tmp_path / "c", output_element="scores")


def test_untraceable_model_is_captured_with_hooks(tmp_path):
    torch.manual_seed(0)
    model = zoo.DataDependent()
    x = torch.randn(30, 6) + 2  # the branch through fc2 is taken
    with pytest.warns(GraphTraceWarning):
        store = run(model, x, tmp_path / "s", dtype="float32", batch_size=8)
    assert store.graph.method == "hooks" and store.layers == ["fc1", "fc2", "out"]
    seen, logits = hooked(model, x, ["fc1", "fc2"])
    np.testing.assert_allclose(store.activations("fc2"), seen["fc2"][0].numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(store.outputs, logits.numpy(), rtol=1e-6)
    with pytest.warns(GraphTraceWarning), pytest.raises(CaptureError, match=r"\['fc2'\] did not run on rows 8-15"):
        with torch.no_grad():
            model.fc1.bias.fill_(-1.0)  # zeros in, all-zero ReLU out: the branch through fc2 is skipped
        run(model, torch.cat([x[:8], torch.zeros(8, 6)]), tmp_path / "skip", layers=["fc2"], batch_size=8)
    assert open_store(tmp_path / "skip").n_instances == 8  # the batch that ran fc2 is committed


def sign_batches():
    """Batches of 8 whose sums alternate in sign: SignBranch takes its two paths in turn."""
    x = torch.randn(32, 6, generator=torch.Generator().manual_seed(3)).abs()
    return x * torch.tensor([1.0, -1.0, 1.0, -1.0]).repeat_interleave(8)[:, None]


def hooked_per_batch(model, x, modules, batch_size=8):
    """`hooked`, one batch at a time as capture runs them (the branch is chosen per batch)."""
    runs = [hooked(model, x[i:i + batch_size], modules) for i in range(0, len(x), batch_size)]
    return ({name: torch.cat([seen[name][-1] for seen, _ in runs]) for name in modules},
            torch.cat([out for _, out in runs]))


def test_default_layers_of_a_branching_model_are_those_every_batch_runs(tmp_path):
    torch.manual_seed(0)
    model = zoo.SignBranch()
    x = sign_batches()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = run(model, x, tmp_path / "s", dtype="float32", batch_size=8)
    assert store.graph.method == "hooks" and store.n_instances == 32
    assert store.layers == ["stem", "head"]  # the hooks graph saw 'positive' too: the first batch ran it
    left_out = [str(w.message) for w in caught if "left out of the default layers" in str(w.message)]
    assert len(left_out) == 1 and "['positive']" in left_out[0] and "rows 8-15" in left_out[0]
    seen, logits = hooked_per_batch(model, x, ["stem", "head"])
    for layer in store.layers:
        np.testing.assert_allclose(store.activations(layer), seen[layer].numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(store.outputs, logits.numpy(), rtol=1e-6, atol=1e-6)


def test_a_chosen_layer_that_a_batch_skips_is_an_error_naming_it_and_the_batch(tmp_path):
    torch.manual_seed(0)
    model = zoo.SignBranch()
    x, path, layers = sign_batches(), tmp_path / "s", ["stem", "positive"]
    with pytest.warns(GraphTraceWarning), pytest.raises(CaptureError, match=r"\['positive'\] did not run on rows 8-15"):
        run(model, x, path, layers=layers, batch_size=8)
    assert open_store(path).n_instances == 8  # the batch before it is committed, the store opens
    fixed = x.abs()  # the same first rows; every batch now takes the positive path
    with pytest.warns(GraphTraceWarning):
        resumed = run(model, fixed, path, layers=layers, batch_size=8, resume=True)
        whole = run(model, fixed, tmp_path / "whole", layers=layers, batch_size=8)
    for layer in layers:
        np.testing.assert_array_equal(resumed.activations(layer), whole.activations(layer))
    with pytest.warns(GraphTraceWarning), pytest.raises(CaptureError, match=r"\['negative'\] did not run on the first"):
        run(model, x, tmp_path / "first", layers=["negative"], batch_size=8)


def test_an_in_place_operation_later_does_not_change_what_was_captured(tmp_path):
    model = nn.Sequential(nn.Linear(6, 10), nn.ReLU(inplace=True), nn.Linear(10, 2))
    x = torch.randn(50, 6)
    store = run(model, x, tmp_path / "s", layers=["0", "1"], dtype="float32")
    with torch.no_grad():
        linear = model[0](x)
    np.testing.assert_allclose(store.activations("0"), linear.numpy(), rtol=1e-6)
    assert (store.activations("0") < 0).any() and (store.activations("1") >= 0).all()


def test_functional_layers_and_a_log_softmax_output(tmp_path):
    model = zoo.Functional()
    x = torch.randn(25, 10)
    store = run(model, x, tmp_path / "s", layers=["relu", "tanh", "cat", "fc2"], dtype="float32")
    with torch.no_grad():
        h = torch.relu(model.fc1(x))
        out = model(x)
    np.testing.assert_allclose(store.activations("relu"), h.numpy(), rtol=1e-6)
    np.testing.assert_allclose(store.activations("tanh"), h.tanh().numpy(), rtol=1e-6)
    assert store.layer_spec("cat").neurons == 40
    assert store.output_kind == "log_probabilities"
    np.testing.assert_allclose(store.scores, out.exp().numpy(), rtol=1e-5)


def test_a_single_logit_is_a_binary_classifier(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 1))
    x = torch.randn(40, 4)
    store = run(model, x, tmp_path / "s", labels=(x[:, 0] > 0).long())
    with torch.no_grad():
        logit = model(x)[:, 0]
    assert store.output_kind == "logits" and store.class_names == ["0", "1"] and store.scores.shape == (40, 2)
    np.testing.assert_array_equal(store.instances["pred"], (logit > 0).long().numpy())
    np.testing.assert_allclose(store.scores[:, 1], torch.sigmoid(logit).numpy(), rtol=1e-5)


# ------------------------------------------------------------------------- input forms
class Items(Dataset):
    classes = ["zero", "one", "two"]

    def __init__(self, x, y, as_dict=False):
        self.x, self.y, self.as_dict = x, y, as_dict

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "label": int(self.y[i])} if self.as_dict else (self.x[i], int(self.y[i]))


class Batches:
    """Re-iterable batches that are no Dataset."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __iter__(self):
        return ((self.x[i:i + 16], self.y[i:i + 16]) for i in range(0, len(self.x), 16))


class Stream(IterableDataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __iter__(self):
        return iter(zip(self.x, self.y.tolist()))


def input_forms():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(70, 20))  # float64: cast to the model's float32
    y = rng.integers(0, 3, size=70)
    xt, yt = torch.from_numpy(x).float(), torch.from_numpy(y)
    return x, y, {
        "tensor + labels": (xt, {"labels": yt}),
        "array + labels": (x, {"labels": y}),
        "(inputs, labels)": ((x, y), {}),
        "DataFrame + labels": (pd.DataFrame(x, columns=[f"f{i}" for i in range(20)]), {"labels": list(y)}),
        "TensorDataset": (TensorDataset(xt, yt), {}),
        "DataLoader": (DataLoader(TensorDataset(xt, yt), batch_size=9), {}),
        "Dataset of tuples": (Items(xt, y), {}),
        "Dataset of dicts": (Items(xt, y, as_dict=True), {}),
        "IterableDataset": (Stream(xt, y), {}),
        "list of samples": ([(xt[i], int(y[i])) for i in range(70)], {}),
        "iterable of batches": (Batches(xt, yt), {}),
        "string labels": (xt, {"labels": [["zero", "one", "two"][v] for v in y],
                               "class_names": ["zero", "one", "two"]}),
    }


@pytest.mark.parametrize("form", list(input_forms()[2]))
def test_every_input_form_gives_the_same_store(tmp_path, form):
    x, y, forms = input_forms()
    data, kwargs = forms[form]
    torch.manual_seed(0)
    model = zoo.mlp()
    store = run(model, data, tmp_path / "s", batch_size=16, dtype="float32", **kwargs)
    with torch.no_grad():
        expected = model[1](model[0](torch.from_numpy(x).float()))
    assert store.n_instances == 70 and store.is_complete
    np.testing.assert_allclose(store.activations("_1"), expected.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(store.instances["label"], y)
    if form in ("Dataset of tuples", "Dataset of dicts", "string labels"):
        assert store.class_names == ["zero", "one", "two"]


def test_labels_class_names_and_metadata(tmp_path):
    x = torch.randn(30, 20)
    model = zoo.mlp()
    onehot = np.eye(3)[np.arange(30) % 3]
    meta = {"source": [f"s{i}" for i in range(30)], "weight": np.linspace(0, 1, 30)}
    store = run(model, x, tmp_path / "a", labels=onehot, class_names=["a", "b", "c"], metadata=meta)
    np.testing.assert_array_equal(store.instances["label"], np.arange(30) % 3)
    assert list(store.instances["label_name"][:3]) == ["a", "b", "c"] and store.instances["source"][29] == "s29"
    unlabelled = run(model, x, tmp_path / "b")
    assert (unlabelled.instances["label"] == -1).all() and not unlabelled.instances["correct"].any()
    assert unlabelled.instances["label_score"].isna().all()


BAD_INPUTS = {
    "metadata length": ({"metadata": pd.DataFrame({"a": range(5)})}, "metadata has 5 rows for 30 instances"),
    "labels length": ({"labels": np.zeros(29, int)}, "29 labels for 30 instances"),
    "label out of range": ({"labels": np.full(30, 3)}, "Label 3 is outside the model's 3 classes"),
    "class names length": ({"class_names": ["a", "b"]}, "2 class names for a model with 3 classes"),
    "string labels without names": ({"labels": ["a"] * 30}, "String labels need class_names"),
    "unknown string label": ({"labels": ["a"] * 29 + ["z"], "class_names": list("abc")}, r"Labels \['z'\]"),
    "fractional labels": ({"labels": np.full(30, 0.5)}, "fractional"),
    "dtype": ({"dtype": "int8"}, "dtype must be one of float16, float32"),
    "channel reduction": ({"channel_reduction": "median"}, "channel_reduction must be one of"),
    "reduce a vector": ({"layers": ["_0"], "reduce": {"_0": "mean"}}, "reduce='mean' does not apply"),
    "reduce unknown layer": ({"layers": ["_0"], "reduce": {"_9": "mean"}}, r"reduce names \['_9'\]"),
    "resume and overwrite": ({"resume": True, "overwrite": True}, "choose one"),
    "batch size": ({"batch_size": 0}, "batch_size must be a positive integer"),
    "keep inputs": ({"keep_inputs": "yes"}, "keep_inputs must be"),
    "output kind": ({"output_kind": "softmax"}, "output_kind must be one of"),
    "integer layer": ({"layers": ["argmax"]}, "only floating-point values are activations"),
}


class WithArgmax(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(20, 3)

    def forward(self, x):
        h = self.fc(x)
        return h + 0 * h.argmax(1, keepdim=True)


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_is_a_clear_error_and_writes_nothing(tmp_path, case):
    kwargs, message = BAD_INPUTS[case]
    model = WithArgmax() if case == "integer layer" else zoo.mlp()
    with pytest.raises(CaptureError, match=message):
        run(model, torch.randn(30, 20), tmp_path / "s", **kwargs)
    assert not (tmp_path / "s").exists()


def test_unknown_layer_lists_valid_names_and_closest(tmp_path):
    message = r"Unknown layer 'features.9'\. Closest: features\.7.*Valid layer names: features_0, features_1"
    with pytest.raises(UnknownLayerError, match=message):
        run(zoo.SmallCNN(), torch.randn(4, 1, 8, 8), tmp_path / "s", layers=["features.9"])


def test_more_bad_data(tmp_path):
    model = zoo.mlp()
    with pytest.raises(CaptureError, match="does not read the dataset in order"):
        run(model, DataLoader(TensorDataset(torch.randn(10, 20)), shuffle=True), tmp_path / "s")
    with pytest.raises(CaptureError, match="one-shot iterator"):
        run(model, (torch.randn(4, 20) for _ in range(3)), tmp_path / "s")
    with pytest.raises(CaptureError, match="holds no instances"):
        run(model, torch.randn(0, 20), tmp_path / "s")
    with pytest.raises(CaptureError, match="one row of class scores per instance"):
        run(nn.Sequential(nn.Linear(20, 3), nn.Unflatten(1, (3, 1))), torch.randn(4, 20), tmp_path / "s")
    with pytest.raises(CaptureError, match="Cannot read instances from a int"):
        run(model, 5, tmp_path / "s")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(FileExistsError, match="other files in it"):
        run(model, torch.randn(4, 20), tmp_path / "mine")
    assert not (tmp_path / "s").exists() and (tmp_path / "mine" / "notes.txt").read_text() == "keep"


def test_an_existing_store_needs_resume_or_overwrite(tmp_path):
    model = zoo.mlp()
    x = torch.randn(20, 20)
    run(model, x, tmp_path / "s")
    with pytest.raises(FileExistsError, match="resume=True to continue it or overwrite=True"):
        run(model, x, tmp_path / "s")
    assert run(model, x, tmp_path / "s", resume=True).n_instances == 20  # finished: nothing to do
    assert run(model, x[:10], tmp_path / "s", overwrite=True).n_instances == 10


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 6)
        self.b = nn.Linear(3, 6)
        self.head = nn.Linear(6, 2)

    def forward(self, image, extra):
        return self.head(torch.relu(self.a(image) + self.b(extra)))


class Records(Dataset):
    def __len__(self):
        return 20

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"extra": torch.randn(3, generator=g), "target": i % 2, "image": torch.randn(4, generator=g)}


def test_dict_items_are_passed_to_the_model_by_name(tmp_path):
    model = TwoInputs()
    store = run(model, Records(), tmp_path / "s", layers=["a", "b", "head"], dtype="float32", batch_size=8)
    items = [Records()[i] for i in range(20)]
    image, extra = torch.stack([r["image"] for r in items]), torch.stack([r["extra"] for r in items])
    with torch.no_grad():
        np.testing.assert_allclose(store.activations("a"), model.a(image).numpy(), rtol=1e-6)
        np.testing.assert_allclose(store.outputs, model(image, extra).numpy(), rtol=1e-6)
    np.testing.assert_array_equal(store.instances["label"], np.arange(20) % 2)
    assert store.inputs is None  # two inputs: nothing to show as one thumbnail


def test_low_precision_models_and_durable_commits(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3)).to(torch.bfloat16)
    x = torch.randn(12, 2, 8, 8)  # float32 data: cast to the model's dtype
    store = run(model, x, tmp_path / "s", durable=True)
    with torch.no_grad():
        relu = model[1](model[0](x.to(torch.bfloat16)))
    np.testing.assert_allclose(store.activations("_1"), relu.float().mean((2, 3)).numpy(), rtol=1e-2, atol=1e-2)
    assert store.manifest["finished"] and (tmp_path / "s" / "manifest.json").read_text().startswith("{\n")


# ---------------------------------------------------------------------- model & outputs
def test_nonfinite_values_are_counted_reported_and_saturated(tmp_path):
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1e5, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]]))
        model[0].bias.zero_()
    x = torch.tensor([[1.0, 0, 0], [0, 1, 0], [-1, 0, 0], [0, float("nan"), 0]] * 5)
    with pytest.warns(NonFiniteWarning, match=r"_0: 20 NaN, 0 Inf, 10 beyond float16.*dtype='float32'"):
        store = run(model, x, tmp_path / "s", layers=["_0"])
    assert store.nonfinite.loc["_0"].to_dict() == {"nan": 20, "inf": 0, "overflow": 10, "underflow": 0}
    assert store.nonfinite.loc["<outputs>", "nan"] == 10
    hidden = store.activations("_0")
    assert hidden[0, 0] == 65504 and hidden[2, 0] == -65504 and np.isnan(hidden[3, 1])
    assert list(store.instances["nonfinite"][:4]) == [1, 0, 1, 4 + 2]  # row 3: 4 NaN activations, 2 NaN outputs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonFiniteWarning)
        wide = run(model, x, tmp_path / "wide", layers=["_0"], dtype="float32")
    assert wide.activations("_0")[0, 0] == 1e5 and wide.nonfinite.loc["_0", "overflow"] == 0


def test_float16_underflow_is_counted_and_warned_like_overflow(tmp_path):
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 2))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1e-6, 0], [1e-9, 0], [0, 1]]))
        model[0].bias.zero_()
    x = torch.tensor([[1.0, 1.0], [1.0, 0.0]] * 4)  # units 0 and 1 tiny (subnormal, zero), unit 2 fine or exactly 0
    with pytest.warns(NonFiniteWarning, match=r"_0: 0 NaN, 0 Inf, 16 below float16's smallest normal.*float32"):
        store = run(model, x, tmp_path / "s", layers=["_0"])
    assert store.nonfinite.loc["_0", "underflow"] == 16 and store.activations("_0")[0, 1] == 0
    assert list(store.instances["nonfinite"]) == [0] * 8  # imprecise, not wrong: no instance is flagged
    with warnings.catch_warnings():
        warnings.simplefilter("error", NonFiniteWarning)
        assert run(model, x, tmp_path / "wide", layers=["_0"], dtype="float32").nonfinite.loc["_0", "underflow"] == 0


def test_the_compiled_underflow_count_equals_torchs():
    """Signed zeros, NaN, inf, values either side of float16's smallest normal, every magnitude."""
    from activis.capturing.layers import FLOAT16_TINY, _count_tiny

    rng = np.random.default_rng(3)
    tiny = np.float32(FLOAT16_TINY)
    for scale in (1e-12, 1e-8, 1e-5, 1.0):
        values = (rng.standard_normal(5000) * scale).astype(np.float32)
        values[rng.random(5000) < 0.3] = 0
        values[:7] = [-0.0, np.nan, np.inf, -np.inf, tiny, np.nextafter(tiny, 0), -np.nextafter(tiny, 0)]
        rows = torch.from_numpy(values.reshape(50, 100))
        expected = int(torch.count_nonzero((rows.abs() < FLOAT16_TINY) & (rows != 0)))
        assert _count_tiny(rows) == expected
        assert _count_tiny(rows.t()) == expected  # not contiguous: torch's own count
        assert _count_tiny(rows.double()) == expected


class ReturnsIndices(nn.Module):
    def __init__(self, as_float=False):
        super().__init__()
        self.fc = nn.Linear(20, 5)
        self.as_float = as_float

    def forward(self, x):
        pred = self.fc(x).argmax(1)
        return pred.float() if self.as_float else pred


@pytest.mark.parametrize("as_float", [False, True])
def test_a_model_returning_class_indices_is_not_a_binary_classifier(tmp_path, as_float):
    with pytest.raises(CaptureError, match=r"returns class indices .*values [0-4]\.\.[2-4].*before the argmax"):
        run(ReturnsIndices(as_float), torch.randn(40, 20), tmp_path / "s")
    assert not (tmp_path / "s").exists()
    binary = run(nn.Sequential(nn.Linear(20, 1), nn.Sigmoid()), torch.randn(40, 20), tmp_path / "b")
    assert binary.class_names == ["0", "1"]  # a single score still is one


def test_the_model_is_left_as_it_was(tmp_path):
    model = zoo.SmallCNN()
    model.train()
    model.features[1].eval()  # a frozen batch norm inside a training model
    run(model, torch.randn(10, 1, 8, 8), tmp_path / "s", layers=["features.1"])
    assert model.training and not model.features[1].training and model.classifier.training
    assert not model.features[1].weight.is_inference()
    assert not any(m._forward_hooks for m in model.modules())


def test_keep_inputs_keeps_small_inputs_for_thumbnails(tmp_path):
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.from_numpy(digits.images[:100]).float().unsqueeze(1)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    store = run(model, images, tmp_path / "digits", labels=digits.target[:100])
    assert store.input_shape == [1, 8, 8]
    np.testing.assert_array_equal(store.inputs.reshape(100, 8, 8), digits.images[:100])
    big = run(nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 2)), torch.randn(4, 3, 32, 32), tmp_path / "big")
    assert big.inputs is None
    kept = run(nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 2)), torch.randn(4, 3, 32, 32), tmp_path / "kept",
               keep_inputs=True)
    assert kept.inputs.shape == (4, 3072)


def test_progress_bar_shows_instances_per_second(tmp_path, capfd):
    capture(zoo.mlp(), torch.randn(64, 20), tmp_path / "s", batch_size=16)
    err = capfd.readouterr().err
    assert "capture: 100%" in err and "inst/s" in err


# ---------------------------------------------------------------- interrupt & resume
class Interrupting(Dataset):
    """Presses Ctrl-C (raises KeyboardInterrupt) when the loader reaches row ``at``."""

    def __init__(self, x, y, at=None):
        self.x, self.y, self.at = x, y, at

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if i == self.at:
            raise KeyboardInterrupt
        return self.x[i], int(self.y[i])


def test_a_full_disk_stops_the_capture_with_a_clear_error_and_keeps_what_was_committed(tmp_path, monkeypatch):
    import errno

    from activis.store import StoreFullError

    real_pwrite, calls = os.pwrite, []

    def filling_up(fd, data, offset):
        calls.append(len(data))
        if len(calls) > 40:  # the disk is full from the 41st write on
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr("activis.capturing.pipeline.BLOCK_BYTES", 1)  # one batch per commit, to count them
    monkeypatch.setattr(os, "pwrite", filling_up)
    model, x = zoo.mlp(), torch.randn(400, 20)
    with pytest.raises(StoreFullError, match=r"No space left while writing a batch.*keeps its \d+ committed"):
        run(model, x, tmp_path / "s", batch_size=10)
    monkeypatch.setattr(os, "pwrite", real_pwrite)  # space freed
    store = open_store(tmp_path / "s")
    assert 0 < store.n_instances < 400 and store.n_instances % 10 == 0
    assert not any(m._forward_hooks for m in model.modules()) and model.training
    assert run(model, x, tmp_path / "s", batch_size=10, resume=True).is_complete


def same_files(a: pathlib.Path, b: pathlib.Path) -> list[str]:
    """Row files that differ between two stores (the manifests differ in timings only)."""
    names = [p.relative_to(a) for p in sorted(a.rglob("*.bin"))] + [pathlib.Path("metadata.parquet"),
                                                                      pathlib.Path("graph.json")]
    return [str(n) for n in names if not filecmp.cmp(a / n, b / n, shallow=False)]


def test_an_interrupt_stops_cleanly_and_resume_equals_an_uninterrupted_capture(tmp_path):
    torch.manual_seed(0)
    model = zoo.mlp()
    model.train()
    x, y = torch.randn(200, 20), torch.randint(0, 3, (200,))
    meta = {"i": np.arange(200)}
    reference = run(model, Interrupting(x, y), tmp_path / "ref", batch_size=32, metadata=meta)
    with pytest.raises(CaptureInterrupted, match=r"96 of 200 instances are committed .*resume=True") as info:
        run(model, Interrupting(x, y, at=100), tmp_path / "s", batch_size=32, metadata=meta)
    assert info.value.committed == 96 and isinstance(info.value, KeyboardInterrupt)
    assert model.training and not any(m._forward_hooks for m in model.modules())
    partial = open_store(tmp_path / "s")
    assert partial.n_instances == 96 and not partial.is_complete and "96/200 committed" in repr(partial)
    np.testing.assert_array_equal(partial.activations("_1"), reference.activations("_1")[:96])
    with pytest.raises(CaptureError, match="batches of 32"):
        run(model, Interrupting(x, y), tmp_path / "s", batch_size=50, resume=True)
    with pytest.raises(CaptureError, match="the model's parameters differ"):
        run(zoo.mlp(), Interrupting(x, y), tmp_path / "s", resume=True)
    with pytest.raises(CaptureError, match="differ from the data given now"):
        run(model, Interrupting(x + 1, y), tmp_path / "s", resume=True)
    resumed = run(model, Interrupting(x, y), tmp_path / "s", resume=True, metadata=meta)
    assert resumed.is_complete and resumed.capture_info["last_session_rows"] == 104
    assert same_files(tmp_path / "ref", tmp_path / "s") == []


def test_resume_refuses_data_or_parameters_that_differ_past_their_first_values(tmp_path):
    """The digest covers every row written and every parameter value, not a prefix of them."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 300), nn.ReLU(), nn.Linear(300, 3))
    x, y = torch.randn(200, 20), torch.randint(0, 3, (200,))
    with pytest.raises(CaptureInterrupted):
        run(model, Interrupting(x, y, at=100), tmp_path / "s", batch_size=32)
    other_rows, other_labels = x.clone(), y.clone()
    other_rows[60] += 1  # the same first batches, a different row among those written
    other_labels[90] = (other_labels[90] + 1) % 3
    for data in (Interrupting(other_rows, y), Interrupting(x, other_labels)):
        with pytest.raises(CaptureError, match="the 96 instances already written differ from the data given now"):
            run(model, data, tmp_path / "s", resume=True)
    changed = nn.Sequential(nn.Linear(20, 300), nn.ReLU(), nn.Linear(300, 3))
    changed.load_state_dict(model.state_dict())
    with torch.no_grad():
        changed[0].weight[299, 19] += 1  # past the first values of the parameter
    with pytest.raises(CaptureError, match=r"parameters differ .*\(0\.weight\)"):
        run(changed, Interrupting(x, y), tmp_path / "s", resume=True)
    assert run(model, Interrupting(x, y), tmp_path / "s", resume=True).is_complete


@pytest.mark.parametrize("moment", ["digest", "end"])
def test_an_interrupt_between_a_batch_and_its_digest_leaves_a_store_that_resumes(tmp_path, monkeypatch, moment):
    # Ctrl-C lands between bytecodes: after the third batch is filled, either while its digest is computed
    # ("digest") or as it is added to the block ("end"). The committed rows and the digest they record must
    # agree, or resume=True refuses its own data (seen once when a SIGINT hit that moment in a subprocess).
    from activis.capturing import pipeline, session

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))
    x, y = torch.randn(160, 4), torch.randint(0, 3, (160,))
    calls = {"n": 0}

    def interrupt_third(original):
        def wrapped(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == 3:
                raise KeyboardInterrupt
            return original(*args, **kwargs)
        return wrapped

    if moment == "digest":
        monkeypatch.setattr(session, "_crc", interrupt_third(session._crc))
    else:
        monkeypatch.setattr(pipeline._Slot, "end", interrupt_third(pipeline._Slot.end))
    with pytest.raises(CaptureInterrupted):
        capture(model, x, tmp_path / "s", labels=y, batch_size=16, progress=False)
    monkeypatch.undo()
    kept = open_store(tmp_path / "s").n_instances
    assert kept in (32, 48)  # two whole batches, or the third too when it was whole and digested
    resumed = capture(model, x, tmp_path / "s", labels=y, batch_size=16, progress=False, resume=True)
    fresh = capture(model, x, tmp_path / "ref", labels=y, batch_size=16, progress=False)
    assert resumed.is_complete
    for layer in fresh.layers:
        np.testing.assert_array_equal(resumed.activations(layer), fresh.activations(layer))


def test_killing_the_capture_at_random_moments_loses_nothing(tmp_path):
    """Interrupt (SIGINT, as Ctrl-C or a kernel interrupt does), then SIGKILL, a capture process at
    random batches; each time the store opens with exactly the batches handed to the writer, equal to
    the reference, and resuming to the end gives the reference bit for bit.

    No timing: the worker's dataset stops at each batch's first row and waits for the test (``--step``),
    so the test knows which batches were computed, waits until the store shows them committed (the
    capture's own progress), and only then sends the signal, while the worker is held at that point.
    """
    rows, batch = 1500, 16
    args = ["--rows", str(rows), "--batch", str(batch)]
    path = tmp_path / "s"
    # the batch each kill stops at is drawn from a seed printed here (and in every failure): set
    # ACTIVIS_KILL_SEED to replay the same kills
    seed = int(os.environ.get("ACTIVIS_KILL_SEED", random.SystemRandom().randrange(2**32)))
    print(f"kill batches drawn with ACTIVIS_KILL_SEED={seed}")
    rng = random.Random(seed)
    seen = [0]
    for sig in [signal.SIGINT, signal.SIGKILL, signal.SIGKILL, signal.SIGKILL]:
        stop_at = seen[-1] // batch + rng.randint(1, 8)  # a batch this run has not committed yet
        proc = subprocess.Popen([sys.executable, str(WORKER), str(path), *args, "--step", "--resume"],
                                cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        while True:
            line = proc.stdout.readline()
            assert line.startswith("BATCH "), (line, proc.wait(), f"ACTIVIS_KILL_SEED={seed}")
            if int(line.split()[1]) == stop_at:
                break
            proc.stdin.write("go\n")
            proc.stdin.flush()
        # held at batch stop_at: every batch before it is with the writer, which commits it on its own
        while not ((path / "manifest.json").exists() and open_store(path).n_instances >= stop_at * batch):
            assert proc.poll() is None, f"the worker ended early (ACTIVIS_KILL_SEED={seed})"
            time.sleep(0.005)  # polling the capture's progress; the test's timeout bounds a hang
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=300)
        store = open_store(path)
        n = store.n_instances
        if sig == signal.SIGINT:  # stopped cleanly, saying what it kept
            assert proc.returncode == 130 and f"INTERRUPTED {n} Capture interrupted: {n:,} of {rows:,}" in out, \
                (out, f"ACTIVIS_KILL_SEED={seed}")
        assert n == stop_at * batch and seen[-1] < n < rows, (seen, n, stop_at, f"ACTIVIS_KILL_SEED={seed}")
        assert store.instances["row"].tolist() == list(range(n))
        seen.append(n)
    print("committed at each kill:", seen)
    reference = capture_rows(tmp_path / "ref", rows, batch)  # same threads as the killed processes
    partial = open_store(path)
    for layer in reference.layers:
        np.testing.assert_array_equal(partial.activations(layer), reference.activations(layer)[:partial.n_instances])
    assert capture_rows(path, rows, batch, resume=True).is_complete
    assert same_files(tmp_path / "ref", path) == []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torchrun_ranks_fill_one_store_that_opens_as_one_array_per_layer(tmp_path):
    rows, batch = 640, 32  # each rank's 320 rows are 10 whole batches, as in a single process
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # what torchrun gives each rank
    torchrun = pathlib.Path(sys.executable).with_name("torchrun")
    proc = subprocess.run([str(torchrun), "--nproc_per_node=2", f"--master_port={free_port()}", str(WORKER),
                           str(tmp_path / "sharded"), "--rows", str(rows), "--batch", str(batch), "--distributed"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count(f"DONE {rows}") == 2
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the ranks, so that the rows agree to the bit
    try:
        capture_rows(tmp_path / "single", rows, batch)
    finally:
        torch.set_num_threads(threads)
    sharded, reference = open_store(tmp_path / "sharded"), open_store(tmp_path / "single")
    assert sharded.is_complete and sharded.capture_info["world_size"] == 2
    assert sorted(p.name for p in (tmp_path / "sharded" / "shards").iterdir()) == ["0.json", "1.json"]
    for layer in reference.layers:
        a = sharded.activations(layer)
        assert isinstance(a, np.memmap) and a.shape[0] == rows  # one file, both ranks' rows, no copy
        np.testing.assert_array_equal(a, reference.activations(layer))
        np.testing.assert_array_equal(a[[5, 400, 639]], reference.activations(layer)[[5, 400, 639]])
    pd.testing.assert_frame_equal(sharded.instances, reference.instances)
    assert same_files(tmp_path / "single", tmp_path / "sharded") == []


def test_a_wrong_input_shape_names_the_layer_and_writes_nothing(tmp_path):
    message = r"at '0' \(_0\).*mat1 and mat2 shapes cannot be multiplied \(8x30 and 20x32\)"
    with pytest.raises(ModelInputError, match=message):
        run(zoo.mlp(), torch.randn(30, 30), tmp_path / "s")
    assert not (tmp_path / "s").exists()


def test_default_names_are_the_graphs_and_the_store_answers_to_both(tmp_path):
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 3))
    x = torch.randn(30, 20)
    store = run(model, x, tmp_path / "s")
    assert store.layers == ["0", "1", "3"]  # the Dropout repeats "1" in eval mode: stored once
    np.testing.assert_array_equal(store.activations("3"), store.activations("_3"))  # module path or graph node
    with torch.no_grad():
        np.testing.assert_allclose(store.activations("1"), model[1](model[0](x)).numpy(), rtol=1e-3, atol=1e-3)


def test_a_recurrent_block_is_not_left_out_silently(tmp_path):
    x = torch.randint(0, 50, (12, 7))
    with pytest.warns(UserWarning, match=r"\['lstm'\] return a tuple .*select=\{'lstm': 0\}"):
        store = run(zoo.LSTMClassifier(), x, tmp_path / "s")
    assert store.layers == ["embed", "head"]
    chosen = run(zoo.LSTMClassifier(), x, tmp_path / "t", select={"lstm": 0})  # select alone adds it
    assert chosen.layers == ["embed", "head", "lstm"] and chosen.layer_spec("lstm").neurons == 24


class ConvNeXtBlock(nn.Module):
    """ConvNeXt's block: a depthwise conv, then LayerNorm and Linears on (N, H, W, C), permuted back."""

    def __init__(self, c=6):
        super().__init__()
        self.dwconv = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.norm = nn.LayerNorm(c)
        self.pwconv = nn.Linear(c, 2 * c)
        self.act = nn.GELU()
        self.head = nn.Linear(2 * c, 3)

    def forward(self, x):
        h = self.dwconv(x).permute(0, 2, 3, 1)  # Swin and ConvNeXt keep their stages channels-last
        h = self.act(self.pwconv(self.norm(h)))
        return self.head(h.mean((1, 2)))


def test_channels_last_feature_maps_get_channel_neurons(tmp_path):
    torch.manual_seed(0)
    model, x = ConvNeXtBlock().eval(), torch.randn(10, 6, 5, 5)
    store = run(model, x, tmp_path / "s", layers=["dwconv", "norm", "act"], dtype="float32")
    with torch.no_grad():
        conv = model.dwconv(x)
        normed = model.norm(conv.permute(0, 2, 3, 1))
        act = model.act(model.pwconv(normed))
    assert [store.layer_spec(n).neurons for n in store.layers] == [6, 6, 12]
    assert [store.layer_spec(n).layout for n in store.layers] == [None, "channels_last", "channels_last"]
    np.testing.assert_allclose(store.activations("dwconv"), conv.mean((2, 3)).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(store.activations("norm"), normed.mean((1, 2)).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(store.activations("act"), act.mean((1, 2)).numpy(), rtol=1e-5, atol=1e-6)


class Undecidable(nn.Module):
    def forward(self, x):
        return torch.relu(x).flatten(1)[:, :3]


def test_a_feature_map_of_unknown_layout_asks_for_layout(tmp_path):
    x = torch.randn(6, 4, 3, 3)
    with pytest.raises(CaptureError, match=r"does not tell whether .*layout=\{'relu': 'channels'\}"):
        run(Undecidable(), x, tmp_path / "s", layers=["relu"])
    store = run(Undecidable(), x, tmp_path / "t", layers=["relu"], layout={"relu": "channels_last"})
    assert store.layer_spec("relu").neurons == 3 and store.layer_spec("relu").layout == "channels_last"


def test_metadata_is_checked_as_write_store_checks_it_before_any_batch_runs(tmp_path):
    """capture and write_store share the store's metadata checks, made before any batch runs: a column
    named like one the store makes is read as meta_<name>, with a warning; one named `index` (what
    df.reset_index() makes: the row number in a query), repeated or unstorable columns are refused."""
    from activis.store import StoreWarning
    model, x = zoo.mlp(), torch.randn(30, 20)
    with pytest.warns(StoreWarning, match=r"'label' \(read as 'meta_label'\)"):
        store = capture(model, x, tmp_path / "s", metadata={"label": range(30)}, progress=False)
    assert store.instances["meta_label"].tolist() == list(range(30))
    with pytest.raises(CaptureError, match=r"column named 'index'.*row number"):
        capture(model, x, tmp_path / "i", metadata=pd.DataFrame({"v": range(30)}).reset_index(), progress=False)
    assert not (tmp_path / "i").exists()
    repeated = pd.DataFrame([[1, 2]] * 30, columns=[1, "1"])
    with pytest.raises(CaptureError, match=r"more than one column named '1'"):
        capture(model, x, tmp_path / "r", metadata=repeated, progress=False)
    assert not (tmp_path / "r").exists()
    mixed = pd.DataFrame({"m": [1, "a"] * 15})
    with pytest.raises(CaptureError, match=r"metadata cannot be kept as Parquet.*one kind of value"):
        capture(model, x, tmp_path / "m", metadata=mixed, progress=False)
    assert not (tmp_path / "m").exists()
