"""Padded sequences reduced over their real steps only: a padded batch stores what each sequence alone would.

The padding mask comes from a dict input's ``attention_mask``, from the input key ``sequence_mask=``
names, or from an (N, T) array; ``mean``, ``max``, ``first`` and ``last`` then leave the pad positions
out, whichever side the padding is on. The real architectures (BERT, GPT-2 from small configs) are
checked against per-sequence unpadded captures, to float16 storage tolerance.
"""

import warnings

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import model_zoo as zoo
from activis import CaptureError, CaptureInterrupted, capture, open_store

REDUCTIONS = {"embed": "mean", "proj": "max", "act": "first", "gate": "last"}
VOCAB, PAD = 30, 0


class TokenModel(nn.Module):
    """Per-token layers (a pad changes no real step's value), a classifier over the real steps."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 6)
        self.proj = nn.Linear(6, 8)
        self.act = nn.Tanh()
        self.gate = nn.Linear(8, 5)
        self.head = nn.Linear(5, 3)

    def forward(self, input_ids, attention_mask):
        h = self.gate(self.act(self.proj(self.embed(input_ids))))
        real = attention_mask.unsqueeze(-1).to(h.dtype)
        return self.head((h * real).sum(1) / real.sum(1))


def run(model, data, path, **kw):
    kw.setdefault("progress", False)
    kw.setdefault("dtype", "float32")
    return capture(model, data, path, overwrite=True, **kw)


def sequences(n=10, longest=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = [1 + int(i) for i in torch.randint(0, longest, (n,), generator=g)]
    lengths[0] = longest
    return [torch.randint(1, VOCAB, (length,), generator=g) for length in lengths]


def padded(seqs, side: str):
    """(ids, mask) of the sequences padded to the longest, on the ``side`` given."""
    longest = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), longest), PAD, dtype=torch.long)
    mask = torch.zeros(len(seqs), longest, dtype=torch.long)
    for i, s in enumerate(seqs):
        where = slice(0, len(s)) if side == "right" else slice(longest - len(s), longest)
        ids[i, where], mask[i, where] = s, 1
    return ids, mask


def one_by_one(seqs):
    """Each sequence alone, unpadded: batches of one."""
    return zoo.Batches([{"input_ids": s[None], "attention_mask": torch.ones(1, len(s), dtype=torch.long)}
                        for s in seqs])


@pytest.mark.parametrize("side", ["right", "left"])
def test_a_padded_batch_stores_what_each_sequence_alone_would(side, tmp_path):
    torch.manual_seed(0)
    model = TokenModel().eval()
    seqs = sequences()
    ids, mask = padded(seqs, side)
    items = [{"input_ids": ids[i], "attention_mask": mask[i]} for i in range(len(seqs))]
    store = run(model, items, tmp_path / "padded", layers=list(REDUCTIONS), reduce=REDUCTIONS, batch_size=4)
    alone = run(model, one_by_one(seqs), tmp_path / "alone", layers=list(REDUCTIONS), reduce=REDUCTIONS)
    assert store.capture_info["sequence_mask"] == {"from": "attention_mask", "layers": list(REDUCTIONS)}
    for layer, how in REDUCTIONS.items():
        assert store.layer_spec(layer).reduction == how
        np.testing.assert_allclose(store.activations(layer), alone.activations(layer), rtol=1e-6, atol=1e-6,
                                   err_msg=f"{layer} ({how})")
    np.testing.assert_allclose(store.outputs, alone.outputs, rtol=1e-6, atol=1e-6)
    # the same batch with the padding reduced in differs: the mask is what made them equal
    unmasked = run(model, items, tmp_path / "unmasked", layers=["embed"], sequence_mask=False)
    assert unmasked.capture_info["sequence_mask"] is None
    assert not np.allclose(unmasked.activations("embed"), alone.activations("embed"), atol=1e-3)
    with torch.no_grad():
        np.testing.assert_allclose(unmasked.activations("embed"), model.embed(ids).mean(1).numpy(), rtol=1e-6)


def pad_batch(items):
    """A tokenizer's dynamic padding: each batch padded on the right to its own longest sequence."""
    ids, mask = padded([item["input_ids"] for item in items], "right")
    return {"input_ids": ids, "attention_mask": mask}


def test_batches_padded_each_to_its_own_length(tmp_path):
    torch.manual_seed(0)
    model = TokenModel().eval()
    seqs = sequences(n=14, seed=1)
    loader = DataLoader([{"input_ids": s} for s in seqs], batch_size=4, collate_fn=pad_batch)
    assert len({batch["input_ids"].shape[1] for batch in loader}) > 1
    store = run(model, loader, tmp_path / "padded", layers=list(REDUCTIONS), reduce=REDUCTIONS)
    alone = run(model, one_by_one(seqs), tmp_path / "alone", layers=list(REDUCTIONS), reduce=REDUCTIONS)
    for layer in REDUCTIONS:
        np.testing.assert_allclose(store.activations(layer), alone.activations(layer), rtol=1e-6, atol=1e-6,
                                   err_msg=layer)


class FixedSteps(TokenModel):
    """A sequence layer of 7 steps whatever the inputs' length (a learned table of queries)."""

    def __init__(self):
        super().__init__()
        self.queries = nn.Embedding(7, 5)

    def forward(self, input_ids, attention_mask):
        h = self.gate(self.act(self.proj(self.embed(input_ids))))
        steps = self.queries.weight + h.mean(1, keepdim=True)  # (N, 7, 5)
        return self.head(steps.mean(1))


def test_a_layer_whose_steps_stop_matching_the_mask_is_an_error_not_a_mix(tmp_path):
    model = FixedSteps().eval()
    seqs = sequences(n=12, longest=7, seed=1)
    seqs[8:] = [s[:3] for s in seqs[8:]]  # the last batch is padded to 3 steps only
    loader = DataLoader([{"input_ids": s} for s in seqs], batch_size=4, collate_fn=pad_batch)
    with pytest.raises(CaptureError, match=r"Layer 'add' had as many steps as the padding mask on the first "
                                           r"instances, but has 7 for a mask of 3 on the batch from row 8"):
        run(model, loader, tmp_path / "s", layers=["gate", "add"])


def test_a_layer_tapped_by_a_hook_is_reduced_over_the_real_steps(tmp_path):
    """Inside nn.TransformerEncoder (an fx leaf), layers are captured with forward hooks: masked all the same."""
    torch.manual_seed(0)
    model = zoo.TransformerClassifier(vocab=VOCAB).eval()
    ids, mask = padded(sequences(n=10, seed=7), "left")
    store = run(model, ids, tmp_path / "s", layers=["encoder.layers.0", "encoder.layers.1"], sequence_mask=mask,
                reduce={"encoder.layers.1": "first"}, batch_size=4)
    seen = []
    handle = model.encoder.layers[0].register_forward_hook(lambda _m, _i, out: seen.append(out))
    with torch.no_grad():
        out = model.encoder(model.embed(ids))
    handle.remove()
    real = np.stack([v[m.bool()].mean(0).numpy() for v, m in zip(seen[0], mask, strict=True)])
    first = np.stack([v[m.bool()][0].numpy() for v, m in zip(out, mask, strict=True)])  # left padding: not step 0
    np.testing.assert_allclose(store.activations("encoder.layers.0"), real, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(store.activations("encoder.layers.1"), first, rtol=1e-5, atol=1e-5)
    assert store.capture_info["sequence_mask"] == {"from": "array", "layers": ["encoder.layers.0", "encoder.layers.1"]}


class TextCNN(nn.Module):
    """A 1-d convolution over the tokens: feature maps (N, C, T) whose channels are reduced over the real steps.
    The pad token embeds as zeros, like the convolution's own padding, so a real step sees the same either way."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 6, padding_idx=PAD)
        self.conv = nn.Conv1d(6, 8, 3, padding=1)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool1d(2, ceil_mode=True)
        self.head = nn.Linear(8, 3)

    def forward(self, input_ids, attention_mask):
        h = self.relu(self.conv(self.embed(input_ids).transpose(1, 2)))
        return self.head(self.pool(h).amax(-1))


@pytest.mark.parametrize("side", ["right", "left"])
def test_a_padded_feature_map_of_a_1d_convolution_is_reduced_over_the_real_steps(side, tmp_path):
    torch.manual_seed(0)
    model = TextCNN().eval()
    seqs = sequences(n=9, seed=2)
    ids, mask = padded(seqs, side)
    items = [{"input_ids": ids[i], "attention_mask": mask[i]} for i in range(len(seqs))]
    layers = {"conv": "mean", "relu": "max"}
    with pytest.warns(UserWarning, match=r"Layers \['pool'\] have another number of steps"):
        store = run(model, items, tmp_path / "padded", layers=[*layers, "pool"], reduce=layers, batch_size=4)
    alone = run(model, one_by_one(seqs), tmp_path / "alone", layers=list(layers), reduce=layers)
    assert store.layer_spec("conv").neuron_kind == "channel"
    assert store.capture_info["sequence_mask"]["layers"] == ["conv", "relu"]
    for layer in layers:
        np.testing.assert_allclose(store.activations(layer), alone.activations(layer), rtol=1e-5, atol=1e-6,
                                   err_msg=layer)


class TokensOnly(nn.Module):
    """A model that takes the tokens alone and knows its pad id: its mask comes as an array."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 6, padding_idx=PAD)
        self.proj = nn.Linear(6, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, tokens):
        return self.head(self.proj(self.embed(tokens)).amax(1))


class NamedMask(TokensOnly):
    """Takes its mask under another name than ``attention_mask``."""

    def forward(self, tokens, real):
        return self.head((self.proj(self.embed(tokens)) * real.unsqueeze(-1)).sum(1))


@pytest.mark.parametrize("how", ["mean", "max", "first", "last"])
def test_a_mask_given_as_an_array_or_named_by_key(how, tmp_path):
    torch.manual_seed(0)
    seqs = sequences(n=9, seed=3)
    ids, mask = padded(seqs, "left")
    model = TokensOnly().eval()
    with torch.no_grad():
        value = model.proj(model.embed(ids))
    expected = np.stack([{"mean": v[m.bool()].mean(0), "max": v[m.bool()].amax(0), "first": v[m.bool()][0],
                          "last": v[m.bool()][-1]}[how].numpy() for v, m in zip(value, mask, strict=True)])
    for given in (mask.numpy(), mask.bool(), mask.tolist()):
        store = run(model, ids, tmp_path / "array", layers=["proj"], sequence_reduction=how, sequence_mask=given,
                    batch_size=4)
        np.testing.assert_allclose(store.activations("proj"), expected, rtol=1e-6, atol=1e-6)
        assert store.capture_info["sequence_mask"] == {"from": "array", "layers": ["proj"]}
    with pytest.raises(CaptureError, match=r"sequence_mask has 9 rows, but the data goes on past them \(rows 8-11\)"):
        run(model, zoo.Batches(list(torch.cat([ids, ids[:3]]).split(4))), tmp_path / "long", layers=["proj"],
            sequence_mask=mask, batch_size=4)
    beside = [{"tokens": ids[i], "attention_mask": mask[i], "label": i % 2} for i in range(len(seqs))]
    store = run(model, beside, tmp_path / "beside", layers=["proj"], sequence_reduction=how, input_key="tokens",
                batch_size=4)  # the model takes the tokens alone: its mask is found beside them
    np.testing.assert_allclose(store.activations("proj"), expected, rtol=1e-6, atol=1e-6)
    assert store.capture_info["sequence_mask"] == {"from": "attention_mask", "layers": ["proj"]}
    named = NamedMask().eval()
    named.load_state_dict(model.state_dict())
    items = [{"tokens": ids[i], "real": mask[i], "label": i % 2} for i in range(len(seqs))]
    store = run(named, items, tmp_path / "key", layers=["proj"], sequence_reduction=how, sequence_mask="real",
                batch_size=4)
    np.testing.assert_allclose(store.activations("proj"), expected, rtol=1e-6, atol=1e-6)
    assert store.capture_info["sequence_mask"] == {"from": "real", "layers": ["proj"]}


class Strided(TokenModel):
    """A sequence layer with half the steps (a strided view): the mask does not fit it."""

    def forward(self, input_ids, attention_mask):
        h = self.proj(self.embed(input_ids))
        halves = h[:, ::2] * 2
        return self.head(self.gate(halves.mean(1)))


def test_a_layer_with_other_steps_is_reduced_as_before_with_one_warning(tmp_path):
    torch.manual_seed(0)
    model = Strided().eval()
    ids, mask = padded(sequences(n=8, longest=6), "right")
    items = [{"input_ids": ids[i], "attention_mask": mask[i]} for i in range(8)]
    with pytest.warns(UserWarning, match=r"Layers \['mul'\] have another number of steps than the padding mask "
                                         r"\(6\).*padding included") as seen:
        store = run(model, items, tmp_path / "s", layers=["proj", "mul"], batch_size=3)
    assert sum("number of steps" in str(w.message) for w in seen) == 1  # once, not per batch
    assert store.capture_info["sequence_mask"]["layers"] == ["proj"]
    with torch.no_grad():
        h = model.proj(model.embed(ids))
    np.testing.assert_allclose(store.activations("mul"), (h[:, ::2] * 2).mean(1).numpy(), rtol=1e-5, atol=1e-6)
    real = np.stack([v[m.bool()].mean(0).numpy() for v, m in zip(h, mask, strict=True)])
    np.testing.assert_allclose(store.activations("proj"), real, rtol=1e-5, atol=1e-6)


def test_a_row_without_a_real_step_is_an_error_naming_it(tmp_path):
    model = TokenModel().eval()
    ids, mask = padded(sequences(n=12), "right")
    mask[[9, 11]] = 0
    items = [{"input_ids": ids[i], "attention_mask": mask[i]} for i in range(12)]
    with pytest.raises(CaptureError, match=r"Rows 9, 11 have no real step .*sequence_mask=False"):
        run(model, items, tmp_path / "s", layers=["proj"], batch_size=4)
    assert open_store(tmp_path / "s").n_instances == 8  # the batches before it are committed
    mask[2] = 0  # among the first instances, which capture runs before it writes anything
    items = [{"input_ids": ids[i], "attention_mask": mask[i]} for i in range(12)]
    with pytest.raises(CaptureError, match=r"Row 2 has no real step"):
        run(model, items, tmp_path / "t", layers=["proj"], batch_size=4)
    assert not (tmp_path / "t").exists()





class Interrupting(Dataset):
    """Presses Ctrl-C when the loader reaches row ``at``."""

    def __init__(self, x, at=None):
        self.x, self.at = x, at

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if i == self.at:
            raise KeyboardInterrupt
        return self.x[i]


def test_resume_sees_the_same_mask(tmp_path):
    torch.manual_seed(0)
    model = TokensOnly().eval()
    ids, mask = padded(sequences(n=40, seed=5), "right")
    reference = run(model, ids, tmp_path / "ref", layers=["proj"], sequence_mask=mask, batch_size=8)
    with pytest.raises(CaptureInterrupted):
        run(model, Interrupting(ids, at=20), tmp_path / "s", layers=["proj"], sequence_mask=mask, batch_size=8)
    other = mask.clone()
    other[3, 0] = 1 - other[3, 0]  # a row already written
    with pytest.raises(CaptureError, match="the 16 instances already written differ from the data given now"):
        capture(model, Interrupting(ids), tmp_path / "s", layers=["proj"], sequence_mask=other, resume=True,
                progress=False, dtype="float32")
    with pytest.raises(CaptureError, match=r"real steps of a padding mask: \['proj'\] then, \[\] now"):
        capture(model, Interrupting(ids), tmp_path / "s", layers=["proj"], sequence_mask=False, resume=True,
                progress=False, dtype="float32")
    resumed = capture(model, Interrupting(ids), tmp_path / "s", layers=["proj"], sequence_mask=mask, resume=True,
                      progress=False, dtype="float32")
    assert resumed.is_complete
    np.testing.assert_array_equal(resumed.activations("proj"), reference.activations("proj"))


def test_resume_sees_the_same_mask_beside_the_input(tmp_path):
    """A mask that is not one of the model's inputs (input_key= chose another) is in the data digest too."""
    model = TokensOnly().eval()
    ids, mask = padded(sequences(n=24, seed=6), "left")
    other = mask.clone()
    other[2, -1] = 0

    def items(masks, at=None):
        return Interrupting([{"tokens": ids[i], "attention_mask": masks[i]} for i in range(24)], at=at)

    with pytest.raises(CaptureInterrupted):
        run(model, items(mask, at=18), tmp_path / "s", layers=["proj"], input_key="tokens", batch_size=8)
    with pytest.raises(CaptureError, match="the 16 instances already written differ from the data given now"):
        capture(model, items(other), tmp_path / "s", layers=["proj"], input_key="tokens", resume=True,
                progress=False, dtype="float32")
    assert capture(model, items(mask), tmp_path / "s", layers=["proj"], input_key="tokens", resume=True,
                   progress=False, dtype="float32").is_complete


def test_a_store_begun_without_a_mask_resumes_only_without_one(tmp_path):
    model = TokenModel().eval()
    ids, mask = padded(sequences(n=20), "right")
    items = Interrupting([{"input_ids": ids[i], "attention_mask": mask[i]} for i in range(20)], at=12)
    with pytest.raises(CaptureInterrupted):
        run(model, items, tmp_path / "s", layers=["proj"], sequence_mask=False, batch_size=4)
    items.at = None
    with pytest.raises(CaptureError, match=r"\[\] then, \['proj'\] now .*sequence_mask=False"):
        capture(model, items, tmp_path / "s", layers=["proj"], resume=True, progress=False, dtype="float32")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert capture(model, items, tmp_path / "s", layers=["proj"], sequence_mask=False, resume=True,
                       progress=False, dtype="float32").is_complete


BAD = [
    ({"sequence_mask": np.ones((10, 7, 1))}, r"shape \(10, 7, 1\); a padding mask is \(10, T\)"),
    ({"sequence_mask": np.ones((9, 7))}, r"shape \(9, 7\); a padding mask is \(10, T\): one row per instance"),
    ({"sequence_mask": np.full((10, 7), 2)}, r"values other than 0 and 1"),
    ({"sequence_mask": "padding"}, r"sequence_mask='padding' is not among the inputs' keys: input_ids, "
                                   r"attention_mask"),
    ({"sequence_mask": True}, r"sequence_mask must be an \(N, T\) array .* not bool"),
    ({"sequence_mask": ""}, r"must name an input key"),
]


@pytest.mark.parametrize("options, message", BAD, ids=[m[:24] for _, m in BAD])
def test_a_bad_mask_is_a_clear_error_before_anything_is_written(options, message, tmp_path):
    model = TokenModel().eval()
    ids, mask = padded(sequences(n=10), "right")
    items = [{"input_ids": ids[i], "attention_mask": mask[i]} for i in range(10)]
    with pytest.raises(CaptureError, match=message):
        run(model, items, tmp_path / "s", layers=["proj"], **options)
    assert not (tmp_path / "s").exists()


def test_an_attention_mask_that_is_not_one_row_of_steps_is_refused(tmp_path):
    class FourD(TokenModel):
        def forward(self, input_ids, attention_mask):
            return self.head(self.gate(self.proj(self.embed(input_ids))).mean(1) + attention_mask.sum())

    ids, _ = padded(sequences(n=6), "right")
    items = [{"input_ids": ids[i], "attention_mask": torch.ones(1, 7, 7)} for i in range(6)]
    with pytest.raises(CaptureError, match=r"'attention_mask' has shape \(6, 1, 7, 7\).*sequence_mask=False"):
        run(FourD().eval(), items, tmp_path / "s", layers=["proj"])
    assert run(FourD().eval(), items, tmp_path / "s", layers=["proj"], sequence_mask=False).n_instances == 6
