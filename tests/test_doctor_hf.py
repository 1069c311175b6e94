"""checkup on Hugging Face-style data: dict items (input_ids, attention_mask, labels) in a Dataset, a list, a
DataLoader with a padding collate, a dict of columns or (dict, y); the model called by name and returning an
output object with its logits. Every check runs on them as on tensors, planted bugs are found through them,
and a healthy set-up stays silent."""

import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from activis.doctor import SetupError, checkup
from activis.doctor.inputs import concat

warnings.filterwarnings("ignore", category=UserWarning)
VOCAB, LONGEST = 30, 12


class TinyText(nn.Module):
    """Mean of the real tokens' embeddings -> classes; returns a dict with its logits, as HF models do."""

    def __init__(self, classes=3, vocab=VOCAB):
        super().__init__()
        self.emb, self.fc = nn.Embedding(vocab, 16), nn.Linear(16, classes)

    def forward(self, input_ids, attention_mask):
        mask = attention_mask.unsqueeze(-1).float()
        return {"logits": self.fc((self.emb(input_ids) * mask).sum(1) / mask.sum(1).clamp(min=1))}


def texts(n=240, seed=0, classes=3):
    """Token ids padded on the right with 0, a label word (1 + label) somewhere in each text."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, LONGEST + 1, (n,), generator=g)
    mask = (torch.arange(LONGEST) < lengths[:, None]).long()
    ids = torch.randint(classes + 1, VOCAB, (n, LONGEST), generator=g) * mask
    labels = torch.randint(0, classes, (n,), generator=g)
    where = (torch.rand(n, generator=g) * lengths).long()
    ids[torch.arange(n), where] = labels + 1
    return ids, mask, labels


class Items(Dataset):
    def __init__(self, ids, mask, labels):
        self.ids, self.mask, self.labels = ids, mask, labels

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        length = int(self.mask[i].sum())  # unpadded, as a tokenizer gives them: the collate pads
        return {"input_ids": self.ids[i, :length], "attention_mask": self.mask[i, :length],
                "labels": int(self.labels[i])}


def pad_collate(items):
    """Pads each batch to its own longest text (DataCollatorWithPadding's way)."""
    longest = max(len(it["input_ids"]) for it in items)

    def pad(t):
        return torch.cat([t, t.new_zeros(longest - len(t))])
    return {"input_ids": torch.stack([pad(it["input_ids"]) for it in items]),
            "attention_mask": torch.stack([pad(it["attention_mask"]) for it in items]),
            "labels": torch.tensor([it["labels"] for it in items])}


def forms(ids, mask, labels):
    """The same data in every form checkup takes."""
    padded = [{"input_ids": ids[i], "attention_mask": mask[i], "labels": labels[i]} for i in range(len(ids))]
    return {
        "Dataset of padded dict items": _Padded(padded),
        "list of dict items": padded,
        "DataLoader with a padding collate": DataLoader(Items(ids, mask, labels), batch_size=16, shuffle=True,
                                                        collate_fn=pad_collate,
                                                        generator=torch.Generator().manual_seed(0)),
        "dict of columns": {"input_ids": ids, "attention_mask": mask, "labels": labels},
        "(dict of inputs, y)": ({"input_ids": ids, "attention_mask": mask}, labels),
    }


class _Padded(Dataset):
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def _setup(model=None, lr=1e-2, **kw):
    model = model or TinyText()
    torch.manual_seed(0)
    return model, nn.CrossEntropyLoss(), torch.optim.Adam(model.parameters(), lr=lr)


def _loud(report):
    return [(f.check, f.where or f.place) for f in report.findings if f.severity != "note"]


@pytest.mark.parametrize("form", list(forms(*texts())))
def test_every_form_of_dict_data_runs_every_check_and_a_healthy_set_up_stays_silent(form):
    torch.manual_seed(0)
    model, loss, opt = _setup()
    report = checkup(model, forms(*texts())[form], loss, opt)
    assert report.failed == {}, report.failed
    assert _loud(report) == []
    for check in ("non_finite", "leakage", "blank_inputs", "conflicting_duplicates", "input_dependence",
                  "batch_dependence", "gradient_coverage", "optimizer_settings", "loss_sign",
                  "label_coupling"):
        assert check in report.ran, (check, report.skipped.get(check))


def test_planted_bugs_are_found_through_dict_data():
    ids, mask, labels = texts()
    data = forms(ids, mask, labels)["list of dict items"]
    with pytest.raises(SetupError, match="labels reach 2 but the output has 2 classes"):
        checkup(TinyText(classes=2), data, nn.CrossEntropyLoss())
    beyond = ids.clone()
    beyond[:, 0] = VOCAB
    with pytest.raises(SetupError, match=f"ids reach {VOCAB} but emb has {VOCAB} rows"):
        checkup(TinyText(), {"input_ids": beyond, "attention_mask": mask, "labels": labels}, nn.CrossEntropyLoss())
    model, loss, _ = _setup()
    test = {"input_ids": ids[:60], "attention_mask": mask[:60], "labels": labels[:60]}
    report = checkup(model, data, loss, torch.optim.Adam(model.fc.parameters(), lr=1.0), test_data=test)
    found = {(f.check, f.place) for f in report.findings if f.severity != "note"}
    assert ("train_test_overlap", "data") in found
    assert ("optimizer", "optimizer") in found
    assert ("optimizer_settings", "optimizer") in found


def test_batches_padded_to_their_own_length_join_on_the_masks_side():
    right = {"input_ids": torch.tensor([[5, 6, 0]]), "attention_mask": torch.tensor([[1, 1, 0]])}
    longer = {"input_ids": torch.tensor([[5, 6, 7, 8]]), "attention_mask": torch.tensor([[1, 1, 1, 1]])}
    joined = concat([right, longer])
    assert joined["input_ids"].tolist() == [[5, 6, 0, 0], [5, 6, 7, 8]]
    left = {"input_ids": torch.tensor([[0, 5, 6]]), "attention_mask": torch.tensor([[0, 1, 1]])}
    assert concat([left, longer])["attention_mask"].tolist() == [[0, 0, 1, 1], [1, 1, 1, 1]]


def test_a_dict_item_without_labels_is_refused_by_name():
    ids, mask, _ = texts(20)
    with pytest.raises(Exception, match="labels"):
        checkup(TinyText(), [{"input_ids": ids[i], "attention_mask": mask[i]} for i in range(20)],
                nn.CrossEntropyLoss())


def test_a_tiny_bert_fine_tune_on_dict_items_is_silent_and_its_bugs_are_named():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16, num_labels=3)
    torch.manual_seed(0)
    bert = transformers.BertForSequenceClassification(config)
    ids, mask, labels = texts(120)
    items = _Padded([{"input_ids": ids[i], "attention_mask": mask[i], "labels": labels[i]} for i in range(120)])
    checks = ["non_finite", "gradient_coverage", "batch_dependence", "optimizer", "optimizer_settings", "loss_sign",
              "labels_fit_loss", "input_dependence"]
    report = checkup(bert, items, nn.CrossEntropyLoss(), torch.optim.AdamW(bert.parameters(), lr=1e-3),
                     checks=checks)
    assert report.failed == {} and _loud(report) == [] and set(report.ran) == set(checks)
    report = checkup(bert, items, nn.CrossEntropyLoss(), torch.optim.AdamW(bert.classifier.parameters(), lr=1e-3),
                     checks=["optimizer"])
    assert [(f.check, f.place) for f in report.findings] == [("optimizer", "optimizer")]
