"""Checkup-phase bugs in CNNs with BatchNorm, padded GRU/LSTM text models and small transformers."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from heldout_common import (  # noqa: E402
    DataLoader,
    DictDataset,
    F,
    RNNText,
    SmallCNN,
    TensorDataset,
    TinyTransformer,
    digit_images,
    nn,
    seed,
    tabular,
    text_data,
    tiny_bert,
    tiny_gpt2,
    torch,
)

CASES = []


def bug(name, cause, where, note, where_also=None):
    def register(build):
        CASES.append({"name": name, "kind": "bug", "phase": "checkup", "cause": cause, "where": where,
                      "where_also": where_also or [], "onset": None, "build": build, "note": note})
        return build
    return register


def _setup(model, data, loss_fn, lr=1e-3, opt=None, **extra):
    opt = opt or torch.optim.Adam(model.parameters(), lr=lr)
    return {"model": model, "data": data, "loss_fn": loss_fn, "optimizer": opt, **extra}


@bug("gru_vocab_counted_without_specials", "index_out_of_range", "emb",
     "vocabulary of 50 words plus <unk>/<bos> specials numbered 50, 51: nn.Embedding(50, ...)")
def _():
    seed(100)
    ids, _, mask, y = text_data(n=256, vocab=50)
    ids = ids.clone()
    special = torch.rand(ids.shape, generator=torch.Generator().manual_seed(100)) < 0.05
    ids[special & mask.bool()] = 51
    ids[:, 0] = 50  # <bos>
    return _setup(RNNText(vocab=50, cell="gru"), (ids, y), nn.CrossEntropyLoss())


@bug("transformer_ids_from_bigger_tokenizer", "index_out_of_range", "emb",
     "token ids from a 120-word tokenizer into an embedding with 100 rows")
def _():
    seed(101)
    ids, _, _, y = text_data(n=256, vocab=120, max_len=16)
    return _setup(TinyTransformer(vocab=100), (ids, y), nn.CrossEntropyLoss())


@bug("gpt2_num_labels_two_for_three_classes", "label_range", "data",
     "GPT2ForSequenceClassification left at num_labels=2 for a 3-class task", where_also=["score", "loss"])
def _():
    seed(102)
    ids, _, mask, y = text_data(n=128, vocab=50, max_len=16)
    return _setup(tiny_gpt2(classes=2), DictDataset(ids, mask, y), nn.CrossEntropyLoss(), lr=5e-4)


@bug("bert_adamw_lr_1", "lr_too_high", "optimizer", "AdamW lr=1.0 on a BERT fine-tune (meant 1e-4)")
def _():
    seed(103)
    ids, _, mask, y = text_data(n=128, vocab=50, max_len=16)
    model = tiny_bert()
    opt = torch.optim.AdamW(model.parameters(), lr=1.0, weight_decay=0.01)
    return _setup(model, DictDataset(ids, mask, y), nn.CrossEntropyLoss(), opt=opt)


@bug("bert_head_only_optimizer_while_encoder_trainable", "optimizer_missing_params", "optimizer",
     "AdamW over model.classifier.parameters() only; nothing is frozen", where_also=["bert"])
def _():
    seed(104)
    ids, _, mask, y = text_data(n=128, vocab=50, max_len=16)
    model = tiny_bert()
    opt = torch.optim.AdamW(model.classifier.parameters(), lr=5e-4)
    return _setup(model, DictDataset(ids, mask, y), nn.CrossEntropyLoss(), opt=opt)


@bug("lstm_nll_on_logits", "nll_without_log_softmax", "loss", "an LSTM classifier's logits into NLLLoss",
     where_also=["head"])
def _():
    seed(105)
    ids, _, _, y = text_data(n=256)
    return _setup(RNNText(cell="lstm"), (ids, y), nn.NLLLoss())


@bug("gru_text_sorted_by_label", "data_not_shuffled", "data",
     "reviews grouped by class in the file, DataLoader(shuffle=False)")
def _():
    seed(106)
    ids, _, _, y = text_data(n=384)
    order = torch.argsort(y, stable=True)
    loader = DataLoader(TensorDataset(ids[order], y[order]), batch_size=32, shuffle=False)
    return _setup(RNNText(cell="gru"), loader, nn.CrossEntropyLoss())


@bug("gru_empty_texts_after_tokenisation", "blank_inputs", "data",
     "a third of the texts came out of a broken tokenizer as all padding, labels kept")
def _():
    seed(107)
    ids, _, _, y = text_data(n=300)
    ids = ids.clone()
    ids[torch.arange(300) % 3 == 0] = 0
    return _setup(RNNText(cell="gru"), (ids, y), nn.CrossEntropyLoss())


class TimeMixer(nn.Module):
    """Reshapes (B, T, F) to a time-major GRU's (T, B, F) with .view instead of .transpose."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.gru = nn.GRU(dim, hidden)

    def forward(self, x):
        b, t, f = x.shape
        out, _ = self.gru(x.reshape(t, b, f))
        return out[-1]


@bug("gru_view_instead_of_transpose", "batch_dependence", "mixer",
     "(B, T, F) -> (T, B, F) by reshape: samples of the batch are mixed into each other's sequences")
def _():
    seed(108)
    ids, _, _, y = text_data(n=256)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 32, padding_idx=0)
            self.mixer = TimeMixer(32, 48)
            self.head = nn.Linear(48, 3)

        def forward(self, ids):
            return self.head(self.mixer(self.emb(ids)))
    return _setup(Net(), (ids, y), nn.CrossEntropyLoss())


@bug("cnn_softmax_module_then_cross_entropy", "double_softmax", "probs",
     "the CNN ends in nn.Softmax (for the demo page) and trains with CrossEntropyLoss", where_also=["loss"])
def _():
    seed(109)
    X, y = digit_images()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.cnn = SmallCNN()
            self.probs = nn.Softmax(dim=1)

        def forward(self, x):
            return self.probs(self.cnn(x))
    return _setup(Net(), (X, y), nn.CrossEntropyLoss())


@bug("cnn_batch_size_one", "batchnorm_batch_of_one", "cnn.bn1",
     "per-image training loop (batch_size=1) through BatchNorm2d", where_also=["data", "cnn.bn2"])
def _():
    seed(110)
    X, y = digit_images(n=400)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.cnn = SmallCNN()

        def forward(self, x):
            return self.cnn(x)
    loader = DataLoader(TensorDataset(X, y), batch_size=1, shuffle=True)
    return _setup(Net(), loader, nn.CrossEntropyLoss())


@bug("cnn_raw_pixels_0_255", "input_scale", "data", "8-bit pixels 0..255 straight into the first conv")
def _():
    seed(111)
    X, y = tabular("digits")
    X = (X * 255).round().reshape(-1, 1, 8, 8)
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    return _setup(model, (X, y), nn.CrossEntropyLoss())


@bug("cnn_blank_images", "blank_inputs", "data", "a quarter of the images failed to decode and are all zero",
     where_also=[])
def _():
    seed(112)
    X, y = tabular("digits")
    X = X.reshape(-1, 1, 8, 8).clone()
    X[torch.arange(len(X)) % 4 == 1] = 0.0
    return _setup(SmallCNN(), (X, y), nn.CrossEntropyLoss())


@bug("cnn_head_detached_features", "detached_graph", "features",
     "features = self.features(x).detach() left from linear probing; the convs are meant to train")
def _():
    seed(113)
    X, y = digit_images()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                          nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU())
            self.head = nn.Linear(32, 10)

        def forward(self, x):
            return self.head(self.features(x).detach().mean((2, 3)))
    return _setup(Net(), (X, y), nn.CrossEntropyLoss())


class ExpGate(nn.Module):
    """A 'soft attention' over time written with exp and a manual normalisation (no max subtraction)."""

    def __init__(self, hidden):
        super().__init__()
        self.score = nn.Linear(hidden, 1)

    def forward(self, h):
        w = torch.exp(self.score(h))
        return (w * h).sum(1) / w.sum(1)


@bug("gru_attention_exp_without_max", "unstable_math", "pool",
     "attention weights as exp(score) / sum without subtracting the max; scores reach the hundreds")
def _():
    seed(114)
    ids, _, _, y = text_data(n=256)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 32, padding_idx=0)
            self.gru = nn.GRU(32, 48, batch_first=True)
            self.pool = ExpGate(48)
            nn.init.normal_(self.pool.score.weight, std=40.0)
            self.head = nn.Linear(48, 3)

        def forward(self, ids):
            h, _ = self.gru(self.emb(ids))
            return self.head(self.pool(h))
    return _setup(Net(), (ids, y), nn.CrossEntropyLoss())


@bug("lstm_dropout_functional_in_head", "dropout_left_on", "head",
     "head applies F.dropout(x, 0.5, training=True) copied from a Monte-Carlo dropout snippet")
def _():
    seed(115)
    ids, _, _, y = text_data(n=256)

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(48, 3)

        def forward(self, h):
            return self.fc(F.dropout(h, 0.5, training=True))
    model = RNNText(cell="lstm")
    model.head = Head()
    return _setup(model, (ids, y), nn.CrossEntropyLoss())


@bug("transformer_loss_per_token_not_reduced", "loss_not_scalar", "loss",
     "F.cross_entropy(..., reduction='none') as the loss function, mean forgotten")
def _():
    seed(116)
    ids, _, _, y = text_data(n=256, max_len=16)
    return _setup(TinyTransformer(), (ids, y), lambda out, y: F.cross_entropy(out, y, reduction="none"))


@bug("cnn_sgd_lr_1e-6", "lr_too_low", "optimizer", "SGD lr=1e-6 on a BatchNorm CNN")
def _():
    seed(117)
    X, y = digit_images()
    model = SmallCNN()
    return _setup(model, (X, y), nn.CrossEntropyLoss(), opt=torch.optim.SGD(model.parameters(), lr=1e-6))


@bug("bert_test_set_is_train_subset", "train_test_overlap", "data",
     "the validation split was sampled from the training list after de-duplication failed",
     where_also=[])
def _():
    seed(118)
    ids, _, mask, y = text_data(n=160, max_len=16)
    train = DictDataset(ids[:128], mask[:128], y[:128])
    test = DictDataset(torch.cat([ids[128:], ids[:48]]), torch.cat([mask[128:], mask[:48]]),
                       torch.cat([y[128:], y[:48]]))
    return _setup(tiny_bert(), train, nn.CrossEntropyLoss(), lr=5e-4, test_data=test)


assert len({c["name"] for c in CASES}) == len(CASES)
