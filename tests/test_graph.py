"""Graph extraction: structure (node/edge counts, hierarchy, shapes), fallback and JSON."""

import json
import warnings

import pytest
import torch

import model_zoo as zoo
from activis.graph import (
    ComputationGraph,
    GraphFormatError,
    GraphTraceWarning,
    ModelInputError,
    UnknownLayerError,
    extract_graph,
)


def ops(graph):
    return [n.op for n in graph.nodes]


def test_mlp_is_a_chain_with_shapes_and_params():
    model = zoo.mlp()
    g = extract_graph(model, torch.randn(4, 20))
    assert g.method == "fx"
    assert [n.name for n in g.nodes] == ["input_1", "_0", "_1", "_2", "_3", "_4", "output"]
    assert len(g.edges) == 6
    linear = [n for n in g.nodes if n.kind == "Linear"]
    assert [n.shape for n in linear] == [[4, 32], [4, 16], [4, 3]]
    assert [n.num_params for n in linear] == [20 * 32 + 32, 32 * 16 + 16, 16 * 3 + 3]
    assert all(n.dtype == "float32" for n in linear)
    assert g.output_node.name == linear[-1].name
    assert sum(n.num_params for n in g.nodes) == sum(p.numel() for p in model.parameters())


def test_cnn_with_batchnorm_and_pooling():
    g = extract_graph(zoo.SmallCNN(), torch.randn(2, 1, 8, 8))
    kinds = [n.kind for n in g.nodes if n.op == "call_module"]
    assert kinds == ["Conv2d", "BatchNorm2d", "ReLU", "MaxPool2d", "Conv2d", "BatchNorm2d", "ReLU",
                     "AdaptiveAvgPool2d", "Flatten", "Linear", "ReLU", "Linear"]
    assert g.node("features_3").shape == [2, 8, 4, 4]  # after MaxPool2d(2)
    assert g.node("features_7").shape == [2, 16, 2, 2]
    assert g.node("classifier_3").shape == [2, 10]
    # hierarchy: every features.* node belongs to the features module, recursively
    assert {n.name for n in g.nodes_of_module("features")} == {f"features_{i}" for i in range(8)}
    assert g.modules["features"].children == [f"features.{i}" for i in range(8)]
    assert g.modules["features.1"].type == "BatchNorm2d"
    assert g.modules[""].num_params == sum(p.numel() for p in zoo.SmallCNN().parameters())


def test_residual_blocks_have_adds_and_a_reused_module():
    g = extract_graph(zoo.ResNet(blocks=2), torch.randn(2, 3, 8, 8))
    adds = [n for n in g.nodes if n.kind == "add"]
    assert len(adds) == 2
    # the skip connection: each add has two inputs, one from before the block
    assert adds[0].inputs == ["layer1_0_bn2", "stem"]
    assert adds[0].module_path == "layer1.0"  # functional op recorded inside its block
    # one relu module called twice = two graph nodes with the same target
    relu_calls = [n.name for n in g.nodes if n.target == "layer1.0.relu"]
    assert relu_calls == ["layer1_0_relu", "layer1_0_relu_1"]
    assert g.resolve_layer("layer1.0.relu").name == "layer1_0_relu_1"  # module path -> its last call
    assert g.resolve_layer("layer1.0").name == "layer1_0_relu_1"  # a block -> its output
    assert len(g.nodes) == 20 and len(g.edges) == 21


def test_transformer_encoder_is_a_leaf_with_its_submodules_in_the_hierarchy():
    g = extract_graph(zoo.TransformerClassifier(), torch.randint(0, 50, (3, 7)))
    enc = [n for n in g.nodes if n.kind == "TransformerEncoder"]
    assert len(enc) == 1 and enc[0].shape == [3, 7, 16]
    assert g.node("mean").shape == [3, 16]
    assert "encoder.layers.1.self_attn" in g.modules
    assert g.modules["encoder"].num_params == enc[0].num_params > 0
    assert g.nodes[0].dtype == "int64" and not g.nodes[0].capturable


def test_lstm_tuple_outputs_and_batch_dimension():
    g = extract_graph(zoo.LSTMClassifier(), torch.randint(0, 50, (2, 7)))
    lstm = g.node("lstm")
    assert lstm.kind == "LSTM" and not lstm.capturable  # a tuple: pick an element downstream
    getitems = [n for n in g.nodes if n.kind == "getitem"]
    assert len(getitems) == 5
    assert g.node("getitem").shape == [2, 7, 24] and g.node("getitem").capturable
    assert g.node("getitem_2").shape == [1, 2, 24] and not g.node("getitem_2").capturable  # layers first
    assert g.node("head").shape == [2, 3]


def test_functional_calls_and_tensor_methods():
    g = extract_graph(zoo.Functional(), torch.randn(5, 10))
    by_op = {n.name: (n.op, n.kind) for n in g.nodes}
    assert by_op["relu"] == ("call_function", "relu")
    assert ("call_method", "view") in by_op.values() and ("call_method", "tanh") in by_op.values()
    assert ("call_function", "cat") in by_op.values()
    assert g.node("log_softmax").shape == [5, 5]
    assert g.output_node.name == "log_softmax"
    assert g.node("cat").shape == [5, 40]


def test_untraceable_model_falls_back_to_hooks_with_a_reason():
    model = zoo.DataDependent()
    with pytest.warns(GraphTraceWarning, match="symbolically traced variables cannot be used"):
        g = extract_graph(model, torch.randn(4, 6))
    assert g.method == "hooks" and "DataDependent" in g.note
    assert [n.name for n in g.nodes if n.op == "call_module"] in (["fc1", "fc2", "out"], ["fc1", "out"])
    assert g.node("fc1").inputs == ["x"] and g.node("out").shape == [4, 2]
    assert g.output_node.name == "out"
    # functional relu between fc1 and fc2 produced an unseen tensor: still linked in order
    assert all(n.inputs for n in g.nodes if n.op != "placeholder")


def test_extraction_keeps_training_mode():
    model = zoo.SmallCNN().train()
    extract_graph(model, torch.randn(2, 1, 8, 8))
    assert model.training


def test_json_round_trip_never_pickles():
    g = extract_graph(zoo.ResNet(blocks=1), torch.randn(2, 3, 8, 8))
    text = g.to_json()
    data = json.loads(text)
    assert data["format"] == "activis.graph" and data["version"] == 1
    back = ComputationGraph.from_json(text)
    assert back.nodes == g.nodes and back.modules == g.modules and back.edges == g.edges
    assert back.graph_module is None
    with pytest.raises(ValueError, match="newer"):
        ComputationGraph.from_dict({**data, "version": 99})
    with pytest.raises(ValueError, match="format tag"):
        ComputationGraph.from_dict({"nodes": []})
    with pytest.raises(GraphFormatError, match="not JSON"):
        ComputationGraph.from_json("{not json")
    with pytest.raises(GraphFormatError, match="'nodes', 'modules' and 'method'"):
        ComputationGraph.from_dict({"format": "activis.graph", "version": 1, "nodes": [{"bogus": 1}]})


def test_unknown_layer_lists_valid_names_and_close_matches():
    g = extract_graph(zoo.SmallCNN(), torch.randn(2, 1, 8, 8))
    with pytest.raises(UnknownLayerError) as err:
        g.resolve_layer("classifer.3")
    msg = str(err.value)
    assert "Closest: classifier.3" in msg and "Valid layer names:" in msg and "features_0" in msg


def test_default_layers_are_block_outputs_and_logits():
    g = extract_graph(zoo.SmallCNN(), torch.randn(2, 1, 8, 8))
    assert g.default_layers() == ["features", "classifier"]  # module paths, as the graph view shows them
    sequential = extract_graph(zoo.mlp(), torch.randn(2, 20))
    assert sequential.default_layers() == ["0", "1", "2", "3", "4"]


def test_default_layers_leave_out_no_op_copies_and_say_which_tuples_they_skip():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Dropout(0.5), torch.nn.Identity(),
                                torch.nn.Linear(8, 2))
    assert extract_graph(model, torch.randn(3, 4)).default_layers() == ["0", "1", "4"]
    lstm = extract_graph(zoo.LSTMClassifier(), torch.randint(0, 50, (3, 7)))
    assert lstm.default_layers() == ["embed", "head"] and lstm.tuple_blocks() == ["lstm"]


def test_deep_resnet_traces_exactly_to_about_500_nodes():
    """The exact torch.fx graph (no fallback, no warning) of a deep model; tests time nothing."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = extract_graph(zoo.deep_resnet(), torch.randn(2, 3, 8, 8))
    assert g.note is None
    assert 480 <= len(g.nodes) <= 540


class TwoLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 32)
        self.fc2 = torch.nn.Linear(32, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


@pytest.mark.parametrize("model", [TwoLayers(), zoo.DataDependent()], ids=["fx", "hooks"])
def test_a_wrong_input_shape_names_the_layer_and_torchs_cause(model):
    width = 64 if isinstance(model, TwoLayers) else 6
    first = "fc1"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GraphTraceWarning)
        with pytest.raises(ModelInputError) as err:
            extract_graph(model, torch.randn(8, 30))
    message = str(err.value)
    assert f"at '{first}'" in message
    assert f"mat1 and mat2 shapes cannot be multiplied (8x30 and {width}x" in message
    assert "shape (8, 30) float32" in message and "Original traceback" not in message
    with pytest.raises(ModelInputError, match=r"at 'fc1'.*dtype"):  # a wrong dtype too
        extract_graph(TwoLayers(), torch.randn(8, 64, dtype=torch.float64))
