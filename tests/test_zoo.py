"""Real architectures, end to end: graph, default layers, capture, stored values, the explorer.

Hugging Face models come from small configs with random weights (no download); the others are the
shapes real models have that toy ones lack: a branching block, recurrent layers. For each, the
stored activations must equal a direct forward hook on the same module, reduced as the layer spec
says.
"""

import warnings

import numpy as np
import pytest
import torch
from torch import nn

import model_zoo as zoo
from activis import Explorer, capture, extract_graph
from activis.graph import GraphTraceWarning

transformers = pytest.importorskip("transformers")

N, T, VOCAB = 12, 7, 60


def bert():
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16, num_labels=3)
    return transformers.BertForSequenceClassification(config)


def distilbert():
    config = transformers.DistilBertConfig(vocab_size=VOCAB, dim=16, n_layers=2, n_heads=2, hidden_dim=32,
                                           max_position_embeddings=16, num_labels=3)
    return transformers.DistilBertForSequenceClassification(config)


def gpt2():
    config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=16, n_layer=2, n_head=2, n_positions=16, num_labels=3,
                                     pad_token_id=0, use_cache=False)  # a classifier keeps no cache
    return transformers.GPT2ForSequenceClassification(config)


class Branching(nn.Module):
    """Two paths that meet (an inception-style block) and a skip connection."""

    def __init__(self):
        super().__init__()
        self.left = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU())
        self.right = nn.Sequential(nn.Conv2d(1, 4, 1), nn.Tanh())
        self.merge = nn.Conv2d(8, 8, 1)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        h = torch.cat([self.left(x), self.right(x)], dim=1)
        h = torch.relu(self.merge(h) + h)
        return self.head(h.mean((2, 3)))


class EarlyExit(nn.Module):
    """BranchyNet-style early exit: a batch the first head is confident about leaves there, the others
    go on through the body. Data-dependent control flow: torch.fx and torch.export cannot trace it."""

    def __init__(self, threshold=0.9):
        super().__init__()
        self.threshold = threshold
        self.stem = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU())
        self.early = nn.Linear(4, 3)
        self.body = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        h = self.stem(x)
        early = self.early(h.mean((2, 3)))
        if early.softmax(-1).amax(-1).mean() > self.threshold:
            return early
        return self.head(self.body(h).mean((2, 3)))


class GRUClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 8)
        self.gru = nn.GRU(8, 12, batch_first=True)
        self.head = nn.Linear(12, 3)

    def forward(self, tokens):
        out, _ = self.gru(self.embed(tokens))
        return self.head(out[:, -1])


def token_items(n=N):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, VOCAB, (n, T), generator=g)
    mask = torch.ones(n, T, dtype=torch.long)
    mask[::2, -2:] = 0
    return [{"input_ids": ids[i], "attention_mask": mask[i], "label": i % 3} for i in range(n)]


def stacked(items):
    return {k: torch.stack([torch.as_tensor(it[k]) for it in items]) for k in items[0] if k != "label"}


CASES = {
    "bert": (bert, "transformers", {}),
    "distilbert": (distilbert, "transformers", {}),
    "gpt2": (gpt2, "transformers", {}),
    "branching": (Branching, "images", {}),
    "lstm": (zoo.LSTMClassifier, "tokens", {"select": {"lstm": 0}}),
    "gru": (GRUClassifier, "tokens", {"select": {"gru": 0}}),
}


def data_for(kind):
    g = torch.Generator().manual_seed(1)
    if kind == "transformers":
        return token_items()
    if kind == "images":
        return torch.randn(N, 1, 6, 6, generator=g)
    return torch.randint(1, 50, (N, T), generator=g)


def forward_inputs(kind, data):
    if kind == "transformers":
        return (), stacked(data)
    return (data,), {}


def reduce_like(spec, value: torch.Tensor, real: torch.Tensor | None = None) -> np.ndarray:
    """What the store must hold for one module output, computed here from the layer spec, a sequence's over
    the ``real`` steps of its padding mask (N, T) alone, row by row."""
    value = value.float()
    if spec.reduction == "none" or value.dim() <= 2:
        return value.reshape(len(value), -1).numpy()
    if spec.neuron_kind == "channel":
        return (value.flatten(2).amax(-1) if spec.reduction == "max" else value.flatten(2).mean(-1)).numpy()
    if real is not None and value.shape[1] == real.shape[1]:
        return np.concatenate([reduce_like(spec, v[r.bool()][None]) for v, r in zip(value, real, strict=True)])
    return {"mean": value.mean(1), "max": value.amax(1), "first": value[:, 0], "last": value[:, -1]}[
        spec.reduction].numpy()


@pytest.mark.parametrize("name", CASES)
def test_a_real_architecture_end_to_end(name, tmp_path):
    make, kind, options = CASES[name]
    torch.manual_seed(0)
    model = make().eval()
    data = data_for(kind)
    args, kwargs = forward_inputs(kind, data)
    example = stacked(data[:4]) if kind == "transformers" else args[0][:4]
    with warnings.catch_warnings():
        warnings.simplefilter("error", GraphTraceWarning)  # every one gets a real graph
        graph = extract_graph(model, example)
    assert graph.method in ("fx", "export") and graph.default_layers()
    store = capture(model, data, tmp_path / "s", batch_size=5, dtype="float32", progress=False, **options)
    assert store.n_instances == N and set(graph.default_layers()) <= set(store.layers)
    for layer in store.layers:  # each stored layer equals a hook on its module, reduced as declared
        spec = store.layer_spec(layer)
        node = store.graph.node(spec.node)  # the module whose call made the stored value
        module = model.get_submodule(node.target if node.op == "call_module" else node.module_path)
        seen = []
        handle = module.register_forward_hook(lambda _m, _i, out, seen=seen: seen.append(out))
        with torch.no_grad():
            out = model(*args, **kwargs)
        handle.remove()
        value = seen[-1]
        for key in spec.element or []:
            value = value[key]
        if not isinstance(value, torch.Tensor):  # a ModelOutput or a tuple: its first tensor
            value = value[0]
        expected = reduce_like(spec, value, kwargs.get("attention_mask"))  # padding left out
        np.testing.assert_allclose(store.activations(layer), expected, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{name}: layer {layer}")
    logits = out.logits if hasattr(out, "logits") else out
    np.testing.assert_allclose(store.outputs, logits.float().numpy(), rtol=1e-4, atol=1e-5)
    explorer = Explorer(store, method="pca")
    assert explorer.store is store


def test_a_model_with_data_dependent_branches_end_to_end(tmp_path):
    torch.manual_seed(0)
    model = EarlyExit().eval()
    g = torch.Generator().manual_seed(2)
    x = torch.randn(20, 1, 6, 6, generator=g) * torch.tensor([0.1] * 10 + [30.0] * 10)[:, None, None, None]
    batches = x.split(5)
    ran_head, taken = [], []
    handle = model.head.register_forward_hook(lambda *_: ran_head.append(True))
    with torch.no_grad():
        for batch in batches:
            ran_head.clear()
            model(batch)
            taken.append(bool(ran_head))
    handle.remove()
    assert taken == [True, True, False, False]  # the faint batches go the long way, the bright ones exit early
    with pytest.warns(GraphTraceWarning), pytest.warns(UserWarning, match=r"\['body', 'head'\] are left out"):
        store = capture(model, x, tmp_path / "s", batch_size=5, dtype="float32", progress=False)
    assert store.graph.method == "hooks" and store.layers == ["stem", "early"]  # the modules every batch runs
    for layer in store.layers:
        seen = []
        handle = model.get_submodule(layer).register_forward_hook(lambda _m, _i, out, seen=seen: seen.append(out))
        with torch.no_grad():
            outputs = torch.cat([model(b) for b in batches])
        handle.remove()
        np.testing.assert_allclose(store.activations(layer), reduce_like(store.layer_spec(layer), torch.cat(seen)),
                                   rtol=1e-4, atol=1e-5, err_msg=f"layer {layer}")
    np.testing.assert_allclose(store.outputs, outputs.numpy(), rtol=1e-4, atol=1e-5)
    assert Explorer(store, method="pca").store is store


# ---------------------------------------------------------------- padded batches
PADDED_LAYERS = {  # a sequence layer for each reduction, outside the blocks and inside them
    "bert": {"bert.embeddings": "mean", "bert.encoder.layer.0.intermediate": "max", "bert.encoder.layer.0": "first",
             "bert.encoder.layer.1": "last"},
    "gpt2": {"transformer.h.0.mlp": "mean", "transformer.h.0": "max", "transformer.h.1.ln_2": "first",
             "transformer": "last"},
}


def padded_items(side: str):
    """Sequences of 2..T real tokens, padded to T on ``side`` with their positions counted from their first
    real token (what a tokenizer and the model's own position ids give unpadded), and each alone."""
    g = torch.Generator().manual_seed(4)
    lengths = [T, 2, 5, T - 1, 3, 6, 4, T - 2]
    items, alone = [], []
    for i, length in enumerate(lengths):
        ids = torch.randint(1, VOCAB, (length,), generator=g)
        real = slice(0, length) if side == "right" else slice(T - length, T)
        item = {"input_ids": torch.zeros(T, dtype=torch.long), "attention_mask": torch.zeros(T, dtype=torch.long),
                "position_ids": torch.zeros(T, dtype=torch.long), "label": i % 3}
        item["input_ids"][real], item["attention_mask"][real], item["position_ids"][real] = ids, 1, torch.arange(length)
        items.append(item)
        alone.append({"input_ids": ids[None], "attention_mask": torch.ones(1, length, dtype=torch.long),
                      "position_ids": torch.arange(length)[None], "label": torch.tensor([i % 3])})
    return items, alone


@pytest.mark.filterwarnings("ignore::activis.NonFiniteWarning")  # a few float16 underflows in GPT-2's MLP
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("name", PADDED_LAYERS)
def test_a_padded_batch_stores_what_each_sequence_alone_would(name, side, tmp_path):
    """The pads are left out of every reduction, of layers inside the blocks and out, on either side (float16
    storage: two roundings apart at most)."""
    torch.manual_seed(0)
    model = CASES[name][0]().eval()
    items, alone = padded_items(side)
    layers = PADDED_LAYERS[name]
    options = {"layers": list(layers), "reduce": layers, "progress": False}
    store = capture(model, items, tmp_path / "padded", batch_size=4, **options)
    single = capture(model, zoo.Batches(alone), tmp_path / "alone", **options)
    assert store.capture_info["sequence_mask"] == {"from": "attention_mask", "layers": list(layers)}
    for layer, how in layers.items():
        assert store.layer_spec(layer).reduction == how
        np.testing.assert_allclose(store.activations(layer).astype(np.float32),
                                   single.activations(layer).astype(np.float32), rtol=2e-3, atol=2e-3,
                                   err_msg=f"{name}, {side} padding: layer {layer} ({how})")
