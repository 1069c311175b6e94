"""Checkup-phase bugs: visible before training, each one a mistake a practitioner makes."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common_v2 import (  # noqa: E402
    AttnPoolGRU,
    BagOfEmbeddings,
    BiLSTMMean,
    DataLoader,
    F,
    Net,
    PositionalText,
    SignalCNN,
    TensorDataset,
    WideDeep,
    bug,
    circles,
    classification,
    hf_ce,
    keyword_text,
    loader,
    logits_of,
    moons,
    multilabel,
    nn,
    np,
    regression,
    seed,
    signal_amplitudes,
    signals,
    standardise,
    tabular,
    text_dataset,
    tiny_distilbert,
    tiny_gpt2,
    torch,
)

CASES = []


def adam(model, lr=1e-3, **kw):
    return torch.optim.Adam(model.parameters(), lr=lr, **kw)


# ---------------------------------------------------------------- labels and losses

@bug(CASES, "signal_labels_one_based", "label_range", "data",
     "waveform classes read from a file numbered 1..4; the head has 4 outputs", where_also=["loss"])
def _():
    seed(0)
    X, y = signals()
    return {"model": SignalCNN(classes=4), "data": (X, y + 1), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": None}


@bug(CASES, "moons_unknown_label_minus_one_kept", "label_range", "data",
     "rows an annotator skipped are labelled -1 and stay in the training set (no ignore_index)",
     where_also=["loss"])
def _():
    seed(1)
    X, y = moons()
    y = y.clone()
    y[::9] = -1
    model = Net(2, (32, 32), 2)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model)}


@bug(CASES, "gru_labels_stored_as_float", "label_dtype", "data",
     "labels came out of a pandas float column and go to cross-entropy as float class indices",
     where_also=["loss"])
def _():
    seed(2)
    ids, _, y = keyword_text()
    model = AttnPoolGRU()
    return {"model": model, "data": (ids, y.float()), "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model)}


@bug(CASES, "multilabel_targets_are_counts", "bce_targets_not_probabilities", "data",
     "multi-label targets built with a sum over annotators (0..3) instead of any()", where_also=["loss"])
def _():
    seed(3)
    X, Y = multilabel()
    counts = Y * torch.randint(1, 4, Y.shape).float()
    model = Net(20, (64,), 5)
    return {"model": model, "data": (X, counts), "loss_fn": nn.BCEWithLogitsLoss(), "optimizer": adam(model)}


@bug(CASES, "signal_segmentation_mask_0_255", "bce_targets_not_probabilities", "data",
     "per-step event masks read from 8-bit images (0 or 255) into BCE", where_also=["loss"])
def _():
    seed(4)
    X, _ = signals(n=256)
    mask = (X[:, 0] > 0.8).float() * 255.0

    class StepTagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv1d(1, 16, 5, padding=2)
            self.conv2 = nn.Conv1d(16, 1, 5, padding=2)

        def forward(self, x):
            return self.conv2(F.relu(self.conv1(x))).squeeze(1)
    model = StepTagger()
    return {"model": model, "data": (X, mask), "loss_fn": nn.BCEWithLogitsLoss(), "optimizer": adam(model)}


@bug(CASES, "multilabel_sigmoid_before_bce_with_logits", "double_softmax", "head.1",
     "the multi-label head ends in nn.Sigmoid and the loss is BCEWithLogitsLoss", where_also=["loss", "head"])
def _():
    seed(5)
    X, Y = multilabel()

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(20, 64), nn.ReLU())
            self.head = nn.Sequential(nn.Linear(64, 5), nn.Sigmoid())

        def forward(self, x):
            return self.head(self.body(x))
    model = Tagger()
    return {"model": model, "data": (X, Y), "loss_fn": nn.BCEWithLogitsLoss(), "optimizer": adam(model)}


@bug(CASES, "distilbert_softmax_inside_compute_loss", "double_softmax", "loss",
     "a custom compute_loss takes softmax of the logits and passes the probabilities to cross_entropy")
def _():
    seed(6)
    model = tiny_distilbert()

    def loss(out, y):
        return F.cross_entropy(logits_of(out).softmax(-1), y)
    return {"model": model, "data": text_dataset(), "loss_fn": loss,
            "optimizer": torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01)}


@bug(CASES, "signal_softmax_head_into_nll", "nll_without_log_softmax", "loss",
     "the model ends in nn.Softmax (for the dashboard's probabilities) and the loss is NLLLoss",
     where_also=["head.1", "head"])
def _():
    seed(7)
    X, y = signals()

    class ProbCNN(SignalCNN):
        def __init__(self):
            super().__init__()
            self.head = nn.Sequential(nn.Linear(32, 4), nn.Softmax(dim=1))
    model = ProbCNN()
    return {"model": model, "data": (X, y), "loss_fn": nn.NLLLoss(), "optimizer": adam(model)}


@bug(CASES, "circles_log_likelihood_not_negated", "loss_wrong_sign", "loss",
     "a hand-written log-likelihood: log_softmax gathered at the label, averaged, minus sign forgotten")
def _():
    seed(8)
    X, y = circles()
    model = Net(2, (32, 32), 2, act=nn.Tanh)

    def loss(out, y):
        return F.log_softmax(out, 1).gather(1, y[:, None]).mean()
    return {"model": model, "data": (X, y), "loss_fn": loss, "optimizer": adam(model)}


@bug(CASES, "amplitude_huber_output_n1_target_n", "loss_shape_broadcast", "loss",
     "a 1-unit regression head (N, 1) against targets (N,) in SmoothL1Loss broadcasts to N x N",
     where_also=["data"])
def _():
    seed(9)
    X, t = signal_amplitudes()
    model = SignalCNN(out=1)
    return {"model": model, "data": (X, t), "loss_fn": nn.SmoothL1Loss(), "optimizer": adam(model)}


@bug(CASES, "regression_three_targets_against_one_column", "loss_shape_broadcast", "loss",
     "three standardised targets (N, 3), a head with one output, MSELoss broadcasts", where_also=["data", "head"])
def _():
    seed(10)
    X, Y = regression(targets=3)
    model = Net(10, (32,), 1)
    return {"model": model, "data": (X, Y), "loss_fn": nn.MSELoss(), "optimizer": adam(model)}


@bug(CASES, "focal_loss_returns_per_sample", "loss_not_scalar", "loss",
     "a focal loss copied from a paper returns the per-sample vector; the script calls loss.backward()")
def _():
    seed(11)
    X, y = classification(weights=[0.7, 0.2, 0.1])
    model = Net(16, (64,), 3)

    def focal(out, y, gamma=2.0):
        logp = F.log_softmax(out, 1).gather(1, y[:, None]).squeeze(1)
        return -((1 - logp.exp()) ** gamma) * logp
    return {"model": model, "data": (X, y), "loss_fn": focal, "optimizer": adam(model)}


@bug(CASES, "regression_targets_in_dollars", "target_scale", "data",
     "house-price style targets left in currency units (hundreds of thousands) for MSE", where_also=["loss"])
def _():
    seed(12)
    X, y = regression(noise=5.0)
    y = 250_000 + 80_000 * y
    model = Net(10, (64, 64), 1)
    return {"model": model, "data": (X, y[:, None]), "loss_fn": nn.MSELoss(), "optimizer": adam(model)}


# ---------------------------------------------------------------- embeddings and indices

@bug(CASES, "distilbert_tokenizer_bigger_than_config", "index_out_of_range", "distilbert.embeddings.word_embeddings",
     "the config's vocab_size was copied from an older tokenizer: ids reach 119, the embedding has 80 rows",
     where_also=["data"])
def _():
    seed(13)
    ids, mask, y = keyword_text(vocab=120)
    from common_v2 import DictDataset
    model = tiny_distilbert(vocab=80)
    return {"model": model, "data": DictDataset(ids, mask, y), "loss_fn": hf_ce,
            "optimizer": torch.optim.AdamW(model.parameters(), lr=5e-4)}


@bug(CASES, "positions_table_shorter_than_texts", "index_out_of_range", "pos",
     "position embeddings sized for 16 tokens; the texts are padded to 24", where_also=["data"])
def _():
    seed(14)
    ids, _, y = keyword_text(max_len=24)
    model = PositionalText(max_len=16)
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model)}


@bug(CASES, "widedeep_category_ids_past_table", "index_out_of_range", "cat",
     "a new store id (12) appears in the data; the category embedding was sized for 10 ids", where_also=["data"])
def _():
    seed(15)
    X, y = classification(n=400, features=6, classes=2)
    cat = torch.randint(0, 13, (400, 1)).float()
    model = WideDeep(6, 10)
    return {"model": model, "data": (torch.cat([X, cat], 1), y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": adam(model)}


# ---------------------------------------------------------------- gradients and the optimizer

@bug(CASES, "signal_features_detached_for_cache", "detached_graph", "pool",
     "pooled features detached to cache them for a k-NN probe; the conv layers never get a gradient",
     where_also=["conv1", "conv2", "bn1", "bn2"])
def _():
    seed(16)
    X, y = signals()

    class Cached(SignalCNN):
        def forward(self, x):
            return self.head(self.features(x).detach())
    model = Cached()
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model)}


@bug(CASES, "bag_embeddings_under_no_grad", "no_gradient", "emb",
     "the embedding lookup sits inside torch.no_grad() (copied from the inference code)", where_also=["hidden"])
def _():
    seed(17)
    ids, _, y = keyword_text()

    class Bag(BagOfEmbeddings):
        def forward(self, ids):
            keep = (ids != 0).float().unsqueeze(-1)
            with torch.no_grad():
                e = self.emb(ids)
            mean = (e * keep).sum(1) / keep.sum(1).clamp(min=1)
            return self.head(F.relu(self.hidden(mean)))
    model = Bag()
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model)}


@bug(CASES, "gpt2_head_replaced_after_optimizer", "optimizer_missing_params", "score",
     "the classification head is swapped for a 4-class one after the optimizer was created", where_also=["optimizer"])
def _():
    seed(18)
    model = tiny_gpt2(classes=2, vocab=80)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01)
    model.score = nn.Linear(32, 4, bias=False)
    model.config.num_labels = 4
    model.num_labels = 4
    return {"model": model, "data": text_dataset(), "loss_fn": hf_ce, "optimizer": opt}


@bug(CASES, "two_tower_second_tower_not_in_optimizer", "optimizer_missing_params", "signal_tower",
     "a tabular tower and a signal tower; the optimizer lists the tabular tower and the head only",
     where_also=["optimizer"])
def _():
    seed(19)
    X, y = signals(n=320)
    tab = torch.randn(320, 6)

    class TwoTower(nn.Module):
        def __init__(self):
            super().__init__()
            self.signal_tower = nn.Sequential(nn.Conv1d(1, 8, 5, padding=2), nn.ReLU(), nn.AdaptiveAvgPool1d(1),
                                              nn.Flatten())
            self.table_tower = nn.Sequential(nn.Linear(6, 8), nn.ReLU())
            self.head = nn.Linear(16, 4)

        def forward(self, x):
            sig, tabular_part = x[:, :, :64], x[:, 0, 64:]
            return self.head(torch.cat([self.signal_tower(sig), self.table_tower(tabular_part)], 1))
    model = TwoTower()
    params = list(model.table_tower.parameters()) + list(model.head.parameters())
    data = torch.cat([X, tab[:, None, :]], 2)
    return {"model": model, "data": (data, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.Adam(params, lr=1e-3)}


@bug(CASES, "distilbert_adamw_lr_0_5", "lr_too_high", "optimizer",
     "a fine-tune with AdamW at lr 0.5 (meant 5e-5, the exponent was dropped)")
def _():
    seed(20)
    model = tiny_distilbert()
    return {"model": model, "data": text_dataset(), "loss_fn": hf_ce,
            "optimizer": torch.optim.AdamW(model.parameters(), lr=0.5, weight_decay=0.01)}


@bug(CASES, "signal_onecycle_max_lr_30", "lr_too_high", "optimizer",
     "OneCycleLR with max_lr=30 for SGD (meant 0.3)")
def _():
    seed(21)
    X, y = signals()
    model = SignalCNN()
    opt = torch.optim.SGD(model.parameters(), lr=1.2, momentum=0.9)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=30.0, total_steps=200)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": opt,
            "scheduler": sched}


@bug(CASES, "gru_adam_lr_1e-8", "lr_too_low", "optimizer",
     "Adam at lr 1e-8 (a config's 1e-3 overwritten by a sweep's lower bound)")
def _():
    seed(22)
    ids, _, y = keyword_text()
    model = AttnPoolGRU()
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model, lr=1e-8)}


@bug(CASES, "regression_sgd_lr_1e-7_warmup_target", "lr_too_low", "optimizer",
     "a linear warm-up from 0 that only ever reaches 1e-7 (peak set in the wrong unit)")
def _():
    seed(23)
    X, y = regression()
    model = Net(10, (64, 64), 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-7, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20))
    return {"model": model, "data": (X, y[:, None]), "loss_fn": nn.MSELoss(), "optimizer": opt, "scheduler": sched}


@bug(CASES, "gpt2_adamw_weight_decay_5", "weight_decay_too_high", "optimizer",
     "AdamW with weight_decay=5 (the 0.05 of the recipe read as a percentage)")
def _():
    seed(24)
    model = tiny_gpt2(classes=4, vocab=80)
    return {"model": model, "data": text_dataset(), "loss_fn": hf_ce,
            "optimizer": torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=5.0)}


@bug(CASES, "signal_sgd_weight_decay_0_5", "weight_decay_too_high", "optimizer",
     "SGD with weight_decay=0.5 (meant 5e-4)")
def _():
    seed(25)
    X, y = signals()
    model = SignalCNN()
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(),
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=0.5)}


# ---------------------------------------------------------------- the data

@bug(CASES, "raw_audio_int16_amplitudes", "input_scale", "data",
     "waveforms fed as int16 sample values (about ±30,000) without dividing by 32768")
def _():
    seed(26)
    X, y = signals()
    model = SignalCNN(batchnorm=False)
    return {"model": model, "data": (X * 20000.0, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model)}


@bug(CASES, "tabular_income_column_in_currency", "input_scale", "data",
     "a table with columns in raw units (incomes in the tens of thousands) next to standardised ones",
     where_also=["body.0"])
def _():
    seed(27)
    X, y = classification(features=8)
    X = X.clone()
    X[:, 0] = 45_000 + 15_000 * X[:, 0]
    X[:, 1] = 1_000 + 300 * X[:, 1]
    model = Net(8, (32, 32), 3)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model)}


@bug(CASES, "constant_signals_standardised_per_sample", "non_finite_inputs", "data",
     "each signal standardised by its own std; flat (disconnected sensor) signals become NaN")
def _():
    seed(28)
    X, y = signals()
    X = X.clone()
    X[::10] = 0.3
    X = (X - X.mean(2, keepdim=True)) / X.std(2, keepdim=True)
    model = SignalCNN()
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model)}


@bug(CASES, "tabular_missing_values_not_imputed", "non_finite_inputs", "data",
     "missing measurements left as NaN in the feature matrix")
def _():
    seed(29)
    X, y = tabular("wine")
    X = X.clone()
    rows = torch.randperm(len(X))[:15]
    X[rows, 4] = float("nan")
    model = Net(13, (32,), 3)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model)}


@bug(CASES, "signals_sensor_dropout_all_zero", "blank_inputs", "data",
     "a quarter of the recordings are all zeros (the sensor was off) and still carry labels")
def _():
    seed(30)
    X, y = signals()
    X = X.clone()
    X[torch.rand(len(X)) < 0.25] = 0.0
    model = SignalCNN()
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model)}


@bug(CASES, "moons_generator_cluster_id_column_kept", "label_leakage", "data",
     "the exported table kept the generator's cluster id column, which is the label")
def _():
    seed(31)
    X, y = moons()
    noise = torch.randn(len(X), 3)
    X = torch.cat([X, noise, y[:, None].float() * 2 - 1], 1)
    model = Net(6, (32, 32), 2)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model)}


@bug(CASES, "text_label_token_appended", "label_leakage", "data",
     "preprocessing appended the label's token (ids 76..79) after each text, in place of the end-of-text token")
def _():
    seed(32)
    ids, _, y = keyword_text(max_len=24, vocab=76)
    lengths = (ids != 0).sum(1)
    ids = torch.cat([ids, torch.zeros(len(ids), 1, dtype=torch.long)], 1)
    ids[torch.arange(len(ids)), lengths] = 76 + y
    model = BiLSTMMean()
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model)}


@bug(CASES, "signals_test_split_drawn_from_train", "train_test_overlap", "data",
     "the test set was sampled from the training tensor instead of the held-out one")
def _():
    seed(33)
    X, y = signals(n=640)
    idx = torch.randperm(512)[:128]
    model = SignalCNN()
    return {"model": model, "data": (X[:512], y[:512]), "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model),
            "test_data": (X[idx], y[idx])}


@bug(CASES, "augmented_copies_in_test_set", "train_test_overlap", "data",
     "augmentation (jitter 1e-3) was applied before the split: test rows are jittered copies of training rows")
def _():
    seed(34)
    X, y = classification(n=500)
    Xa = X[:100] + 1e-3 * torch.randn(100, X.shape[1])
    model = Net(16, (64,), 3)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model),
            "test_data": (Xa, y[:100])}


@bug(CASES, "merged_annotations_disagree", "conflicting_labels", "data",
     "two annotators' label files concatenated: 150 rows appear twice, with the second annotator's other label")
def _():
    seed(35)
    X, y = classification(n=450)
    Xd = torch.cat([X, X[:150]])
    yd = torch.cat([y, (y[:150] + 1) % 3])
    model = Net(16, (64,), 3)
    return {"model": model, "data": (Xd, yd), "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model)}


@bug(CASES, "loader_over_rows_sorted_by_class", "data_not_shuffled", "data",
     "rows concatenated class by class from per-class files, DataLoader(shuffle=False)")
def _():
    seed(36)
    X, y = classification(n=600)
    order = torch.argsort(y, stable=True)
    model = Net(16, (64,), 3)
    return {"model": model, "data": DataLoader(TensorDataset(X[order], y[order]), batch_size=32, shuffle=False),
            "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model)}


@bug(CASES, "bn_mlp_online_batches_of_one", "batchnorm_batch_of_one", "body.1",
     "an online-learning loop feeds one row at a time through a BatchNorm1d MLP", where_also=["data", "body"])
def _():
    seed(37)
    X, y = tabular("breast_cancer")
    model = Net(30, (32,), 2, norm="batch")
    return {"model": model, "data": DataLoader(TensorDataset(X, y), batch_size=1, shuffle=True),
            "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model)}


@bug(CASES, "signal_bn_last_batch_of_one", "batchnorm_batch_of_one", "bn1",
     "257 recordings in batches of 64 with drop_last=False: the last batch holds one", where_also=["data", "bn2"])
def _():
    seed(38)
    X, y = signals(n=257)
    model = SignalCNN()
    return {"model": model, "data": loader(X, y, batch_size=64, drop_last=False),
            "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model)}


# ---------------------------------------------------------------- the model's forward

@bug(CASES, "attention_pool_softmax_over_batch", "batch_dependence", "pool",
     "attention pooling takes the softmax over dim 0 (the batch) instead of dim 1 (the tokens)")
def _():
    seed(39)
    ids, _, y = keyword_text()

    class Pool(nn.Module):
        def __init__(self, hidden):
            super().__init__()
            self.score = nn.Linear(hidden, 1)

        def forward(self, h):
            w = torch.softmax(self.score(h), dim=0)
            return (w * h).sum(1)

    class GRUPool(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(80, 32, padding_idx=0)
            self.rnn = nn.GRU(32, 32, batch_first=True)
            self.pool = Pool(32)
            self.head = nn.Linear(32, 4)

        def forward(self, ids):
            h, _ = self.rnn(self.emb(ids))
            return self.head(self.pool(h))
    model = GRUPool()
    return {"model": model, "data": (ids, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model)}


@bug(CASES, "custom_dropout_module_ignores_eval", "dropout_left_on", "drop",
     "a hand-written dropout module calls F.dropout(h, 0.3) without training=self.training")
def _():
    seed(40)
    X, y = tabular("breast_cancer")

    class FeatureDropout(nn.Module):
        def forward(self, h):
            return F.dropout(h, 0.3)

    class Clf(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(30, 64), nn.ReLU())
            self.drop = FeatureDropout()
            self.head = nn.Linear(64, 2)

        def forward(self, x):
            return self.head(self.drop(self.body(x)))
    model = Clf()
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model)}


@bug(CASES, "relu_mlp_bias_init_minus_5", "dead_relu", "body.1",
     "an init helper meant for a sigmoid gate's bias (-5) applied to every Linear bias of a ReLU MLP",
     where_also=["body.0", "body.3", "body.2", "body"])
def _():
    seed(41)
    X, y = classification()
    model = Net(16, (64, 64), 3)
    for m in model.body:
        if isinstance(m, nn.Linear):
            nn.init.constant_(m.bias, -5.0)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model)}


@bug(CASES, "deep_tanh_init_std_1", "bad_init", "body",
     "a 6-layer tanh MLP initialised with nn.init.normal_(w, 0, 1) (no fan-in scaling)",
     where_also=[f"body.{i}" for i in range(12)])
def _():
    seed(42)
    X, y = classification()
    model = Net(16, (128,) * 6, 3, act=nn.Tanh)
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 1.0)
    return {"model": model, "data": (X, y), "loss_fn": nn.CrossEntropyLoss(), "optimizer": adam(model)}


@bug(CASES, "poisson_exp_link_on_raw_counts", "unstable_math", "link",
     "Poisson regression: rate = exp(linear output) over unstandardised count features (up to 500)",
     where_also=["data", "out"])
def _():
    seed(43)
    rng = np.random.default_rng(43)
    counts = rng.poisson(rng.uniform(5, 500, (400, 6))).astype(np.float32)
    target = rng.poisson(np.exp(counts[:, 0] / 250.0)).astype(np.float32)

    class Exp(nn.Module):
        def forward(self, z):
            return torch.exp(z)

    class Poisson(nn.Module):
        def __init__(self):
            super().__init__()
            self.hidden = nn.Sequential(nn.Linear(6, 32), nn.ReLU())
            self.out = nn.Linear(32, 1)
            self.link = Exp()

        def forward(self, x):
            return self.link(self.out(self.hidden(x))).squeeze(1)
    model = Poisson()

    def loss(rate, y):
        return F.poisson_nll_loss(rate, y, log_input=False)
    return {"model": model, "data": (torch.tensor(counts), torch.tensor(target)), "loss_fn": loss,
            "optimizer": adam(model)}


_ = (standardise, regression)
