"""Healthy recipes people use, as `activis.checkup` keyword arguments: a checkup of any of them must raise no
error or warning. ``RECIPES[name](seed)`` builds one (data generated or from scikit-learn's bundled sets,
transformers from small configs: nothing downloaded). Shared by tests/test_doctor*.py and
benchmarks/bench_doctor.py, beside the planted bugs' twins of tests/doctor_cases.py.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from doctor_cases import CNN, MLP, RNN, digit_images, digits, sequences, tabular
from doctor_runs import ResBlock, token_texts
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset, WeightedRandomSampler


def _t(X, y):
    return torch.as_tensor(X), torch.as_tensor(y)


def _kw(model, data, loss=None, opt=None, **extra):
    return {"model": model, "data": data, "loss_fn": loss or nn.CrossEntropyLoss(),
            "optimizer": opt or torch.optim.Adam(model.parameters(), lr=1e-3), **extra}


def _loader(X, y, batch, **kw):
    return DataLoader(TensorDataset(*_t(X, y)), batch_size=batch, generator=torch.Generator().manual_seed(0), **kw)


def warmup_linear_decay(opt, warmup=10, total=200):
    """Linear warm-up from 0 then linear decay to 0, with plain torch (transformers' get_linear_schedule...)."""
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: step / warmup if step < warmup else max(0.0, (total - step) / (total - warmup)))


def _no_decay_groups(model, decay):
    groups = ([], [])
    for name, p in model.named_parameters():
        groups[name.endswith("bias") or "LayerNorm" in name or ".ln_" in name].append(p)
    return [{"params": groups[0], "weight_decay": decay}, {"params": groups[1], "weight_decay": 0.0}]


# ------------------------------------------------------------------ tabular


def _sgd_nesterov(seed):
    model = MLP(64, 10)
    return _kw(model, digits(seed=seed), opt=torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9,
                                                              nesterov=True, weight_decay=5e-4))


def _adamw_warmup(seed):
    model = MLP(64, 10)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    return _kw(model, digits(seed=seed), opt=opt, scheduler=warmup_linear_decay(opt))


def _label_smoothing(seed):
    return _kw(MLP(64, 10), digits(seed=seed), nn.CrossEntropyLoss(label_smoothing=0.1))


def _imbalanced(seed):
    X, y = digits(n=1000, seed=seed)
    keep = (y != 0) | (np.arange(len(y)) % 8 == 0)  # class 0 at an eighth of its share
    X, y = X[keep], y[keep]
    weight = torch.tensor(len(y) / (10 * np.bincount(y, minlength=10)), dtype=torch.float32)
    return _kw(MLP(64, 10), (X, y), nn.CrossEntropyLoss(weight=weight))


def _pos_weight(seed):
    X, y = tabular("breast_cancer", seed=seed)
    pos = float(y.mean())
    model = MLP(30, 1)
    loss = nn.BCEWithLogitsLoss(pos_weight=torch.tensor((1 - pos) / pos))
    return _kw(model, (X, y.astype(np.float32)[:, None]), loss)


def _regression(loss):
    def make(seed):
        X, y = tabular("diabetes", n=442, seed=seed)
        y = ((y - y.mean()) / y.std()).astype(np.float32)
        return _kw(MLP(10, 1, regression=True), (X, y), loss)
    return make


def _zero_head(seed):
    model = MLP(64, 10)
    nn.init.zeros_(model.fc3.weight)
    nn.init.zeros_(model.fc3.bias)
    return _kw(model, digits(seed=seed))


def _frozen_backbone(seed):
    model = MLP(64, 10)
    for p in [*model.fc1.parameters(), *model.fc2.parameters()]:
        p.requires_grad_(False)
    return _kw(model, digits(seed=seed), opt=torch.optim.Adam(model.fc3.parameters(), lr=1e-3))


def _small_batches(seed):
    return _kw(MLP(64, 10), _loader(*digits(seed=seed), 8, shuffle=True))


class BNMLP(nn.Module):
    def __init__(self, n_in, n_out, first_norm=False):
        super().__init__()
        self.net = nn.Sequential(*([nn.BatchNorm1d(n_in)] if first_norm else []), nn.Linear(n_in, 64),
                                 nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, n_out))

    def forward(self, x):
        return self.net(x)


def _bn_drop_last(seed):
    return _kw(BNMLP(64, 10), _loader(*digits(n=601, seed=seed), 50, shuffle=True, drop_last=True))


def _bn_on_raw_features(seed):
    X, y = tabular("breast_cancer", seed=seed, scaled=False)
    return _kw(BNMLP(30, 2, first_norm=True), (X, y))


def _dropout(seed):
    model = nn.Sequential(nn.Linear(13, 64), nn.ReLU(), nn.Dropout(0.5), nn.Linear(64, 64), nn.ReLU(),
                          nn.Dropout(0.5), nn.Linear(64, 3))
    return _kw(model, tabular("wine", seed=seed))


class PreNormBlock(nn.Module):
    """A transformer's MLP block: LayerNorm, GELU, residual."""

    def __init__(self, d=64):
        super().__init__()
        self.inp, self.norm = nn.Linear(64, d), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        h = self.inp(x)
        return self.head(h + self.mlp(self.norm(h)))


def _schedule(make_scheduler, sgd=False):
    def make(seed):
        model = MLP(64, 10)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9) if sgd else \
            torch.optim.AdamW(model.parameters(), lr=1e-3)
        return _kw(model, digits(seed=seed), opt=opt, scheduler=make_scheduler(opt))
    return make


def _weighted_sampler(seed):
    X, y = digits(n=1000, seed=seed)
    keep = (y != 3) | (np.arange(len(y)) % 10 == 0)
    X, y = X[keep], y[keep]
    weights = torch.as_tensor(1.0 / np.bincount(y)[y])
    sampler = WeightedRandomSampler(weights, len(y), generator=torch.Generator().manual_seed(0))
    return _kw(MLP(64, 10), _loader(X, y, 32, sampler=sampler))


def _sample_weights(seed):
    X, y = digits(seed=seed)
    w = np.random.default_rng(seed).uniform(0.5, 2.0, len(y)).astype(np.float32)
    return _kw(MLP(64, 10), (X, y, w))


def _multi_label(seed):
    X, y = digits(seed=seed)
    targets = np.stack([y % 2 == 0, y > 5, np.isin(y, [2, 3, 5, 7]), y == 0], 1).astype(np.float32)
    return _kw(MLP(64, 4), (X, targets), nn.BCEWithLogitsLoss())


def _soft_targets(seed):
    X, y = digits(seed=seed)
    soft = np.full((len(y), 10), 0.02, dtype=np.float32)
    soft[np.arange(len(y)), y] = 0.82  # a teacher's probabilities (distillation)
    return _kw(MLP(64, 10), (X, soft))


class LogSoftmaxMLP(MLP):
    def forward(self, x):
        return F.log_softmax(super().forward(x), 1)


def _nll(seed):
    return _kw(LogSoftmaxMLP(64, 10), digits(seed=seed), nn.NLLLoss())


def _deep_kaiming(seed):
    layers = []
    for _ in range(5):
        linear = nn.Linear(64, 64)
        nn.init.kaiming_normal_(linear.weight, nonlinearity="relu")
        nn.init.zeros_(linear.bias)
        layers += [linear, nn.ReLU()]
    return _kw(nn.Sequential(*layers, nn.Linear(64, 10)), digits(seed=seed))


def _tanh_xavier(seed):
    model = MLP(13, 3, act=nn.Tanh)
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
    return _kw(model, tabular("wine", seed=seed), opt=torch.optim.SGD(model.parameters(), lr=0.1))


# ------------------------------------------------------------------ images


def _resnet(seed):
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), ResBlock(16),
                          ResBlock(16), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
    return _kw(model, digit_images(seed=seed), opt=opt,
               scheduler=torch.optim.lr_scheduler.CosineAnnealingLR(opt, 200))


def _linear_probe(seed):
    model = CNN(batchnorm=True)
    model.features.requires_grad_(False)
    return _kw(model, digit_images(seed=seed), opt=torch.optim.SGD(model.fc.parameters(), lr=0.1, momentum=0.9))


def _groupnorm_batches_of_4(seed):
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(8 * 16, 10))
    return _kw(model, _loader(*digit_images(seed=seed), 4, shuffle=True))


def _dropout2d(seed):
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Dropout2d(0.2), nn.MaxPool2d(2),
                          nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(16, 10))
    return _kw(model, digit_images(seed=seed))


# ------------------------------------------------------------------ sequences and text


class PackedRNN(nn.Module):
    """Embedded padded ids, packed by length so the pads never enter the recurrence."""

    def __init__(self, cell=nn.GRU, bidirectional=False, vocab=50):
        super().__init__()
        self.emb = nn.Embedding(vocab, 16, padding_idx=0)
        self.rnn = cell(16, 32, batch_first=True, bidirectional=bidirectional)
        self.fc = nn.Linear(64 if bidirectional else 32, 2)

    def forward(self, ids):
        lengths = (ids != 0).sum(1).clamp(min=1)
        packed = nn.utils.rnn.pack_padded_sequence(self.emb(ids), lengths, batch_first=True, enforce_sorted=False)
        _, h = self.rnn(packed)
        h = h[0] if isinstance(h, tuple) else h  # an LSTM's (h, c)
        return self.fc(torch.cat(list(h[-2:] if self.rnn.bidirectional else h[-1:]), 1))


class TextCNN(nn.Module):
    def __init__(self, vocab=50):
        super().__init__()
        self.emb = nn.Embedding(vocab, 16, padding_idx=0)
        self.conv = nn.Conv1d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32, 2)

    def forward(self, ids):
        h = torch.relu(self.conv(self.emb(ids).transpose(1, 2)))
        return self.fc(h.masked_fill((ids == 0)[:, None], -1e4).max(2).values)


class MaskedEncoder(nn.Module):
    def __init__(self, vocab=50, d=32):
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, d, padding_idx=0), nn.Parameter(torch.zeros(16, d))
        layer = nn.TransformerEncoderLayer(d, 2, 64, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, 2)

    def forward(self, ids):
        pad = ids == 0
        h = self.encoder(self.emb(ids) + self.pos[: ids.shape[1]], src_key_padding_mask=pad)
        keep = (~pad).float().unsqueeze(2)
        return self.head((h * keep).sum(1) / keep.sum(1).clamp(min=1))


def _text(model_class, lr=1e-3):
    def make(seed):
        model = model_class()
        return _kw(model, token_texts(seed), opt=torch.optim.AdamW(model.parameters(), lr=lr))
    return make


def _lstm_rmsprop(seed):
    model = RNN(cell=nn.LSTM)
    return _kw(model, sequences(seed=seed), opt=torch.optim.RMSprop(model.parameters(), lr=1e-3))


# ------------------------------------------------------------------ Hugging Face fine-tunes (small configs)


class DictItems(Dataset):
    """A tokenizer's output with labels, one dict a sample (what a Hugging Face fine-tune feeds)."""

    def __init__(self, ids, labels, left=False):
        mask = (ids != 0).long()
        if left:  # decoder models are fed left-padded
            order = torch.sort(mask, dim=1, stable=True).indices
            ids, mask = ids.gather(1, order), mask.gather(1, order)
        self.ids, self.mask, self.labels = ids, mask, labels

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": self.mask[i], "labels": self.labels[i]}


def _bert(classes=2, **kw):
    import transformers

    config = transformers.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=32, num_labels=classes, **kw)
    return transformers.BertForSequenceClassification(config)


def _gpt2():
    import transformers

    config = transformers.GPT2Config(vocab_size=50, n_embd=32, n_layer=2, n_head=2, n_positions=32, num_labels=2,
                                     pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                     use_cache=False)
    return transformers.GPT2ForSequenceClassification(config)  # its own scaled residual initialisation


def _bert_warmup(seed):
    model = _bert()
    opt = torch.optim.AdamW(_no_decay_groups(model, 0.01), lr=5e-4)
    return _kw(model, DictItems(*token_texts(seed, n=300)), opt=opt, scheduler=warmup_linear_decay(opt, 20, 300))


def _gpt2_left_padded(seed):
    model = _gpt2()
    opt = torch.optim.AdamW(_no_decay_groups(model, 0.1), lr=6e-4, betas=(0.9, 0.95))
    cosine = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 15) * 0.5 *
                                               (1 + math.cos(math.pi * min(s, 300) / 300)))
    data = DataLoader(DictItems(*token_texts(seed, n=300), left=True), batch_size=16, shuffle=True,
                      generator=torch.Generator().manual_seed(0))
    return _kw(model, data, opt=opt, scheduler=cosine)


def _bert_frozen_backbone(seed):
    model = _bert()
    model.bert.requires_grad_(False)
    return _kw(model, DictItems(*token_texts(seed, n=300)),
               opt=torch.optim.AdamW(model.classifier.parameters(), lr=1e-3))


def _bert_smoothing_class_weights(seed):
    model = _bert(classes=2, hidden_dropout_prob=0.1)
    ids, labels = token_texts(seed, n=300)
    keep = (labels == 1) | (torch.arange(len(labels)) % 3 == 0)
    ids, labels = ids[keep], labels[keep]
    weight = len(labels) / (2 * torch.bincount(labels).float())
    return _kw(model, [{"input_ids": i, "attention_mask": (i != 0).long(), "labels": int(c)}
                       for i, c in zip(ids, labels)], nn.CrossEntropyLoss(weight=weight, label_smoothing=0.1),
               opt=torch.optim.AdamW(model.parameters(), lr=5e-4))


RECIPES = {
    "SGD Nesterov momentum, weight decay": _sgd_nesterov,
    "AdamW, linear warm-up from 0 then decay (LambdaLR)": _adamw_warmup,
    "label smoothing 0.1": _label_smoothing,
    "class weights on imbalanced classes": _imbalanced,
    "BCEWithLogitsLoss(pos_weight) on a single logit": _pos_weight,
    "regression, MSE on standardised targets": _regression(nn.MSELoss()),
    "regression, Huber loss": _regression(nn.SmoothL1Loss()),
    "zero-initialised head": _zero_head,
    "frozen backbone on purpose, head-only optimizer": _frozen_backbone,
    "small shuffled batches of 8 (DataLoader)": _small_batches,
    "BatchNorm MLP, drop_last=True": _bn_drop_last,
    "BatchNorm first on raw features": _bn_on_raw_features,
    "dropout 0.5": _dropout,
    "pre-norm residual MLP block, LayerNorm and GELU": lambda seed: _kw(PreNormBlock(), digits(seed=seed)),
    "cosine annealing": _schedule(lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, 200)),
    "one-cycle, SGD": _schedule(lambda opt: torch.optim.lr_scheduler.OneCycleLR(opt, 0.1, total_steps=500), True),
    "ReduceLROnPlateau": _schedule(lambda opt: torch.optim.lr_scheduler.ReduceLROnPlateau(opt)),
    "StepLR per epoch, SGD": _schedule(lambda opt: torch.optim.lr_scheduler.StepLR(opt, 30, 0.1), True),
    "WeightedRandomSampler for a rare class": _weighted_sampler,
    "per-sample weights": _sample_weights,
    "multi-label BCEWithLogitsLoss": _multi_label,
    "soft targets (distillation)": _soft_targets,
    "log_softmax + NLLLoss": _nll,
    "deep ReLU MLP, Kaiming init": _deep_kaiming,
    "tanh MLP, Xavier init, SGD": _tanh_xavier,
    "residual CNN, BatchNorm, zero-init residual scale, cosine": _resnet,
    "CNN linear probe, frozen BatchNorm features": _linear_probe,
    "CNN, GroupNorm, batches of 4": _groupnorm_batches_of_4,
    "CNN with Dropout2d": _dropout2d,
    "padded GRU text, packed sequences": _text(PackedRNN),
    "padded bidirectional LSTM text, packed sequences": _text(lambda: PackedRNN(nn.LSTM, bidirectional=True)),
    "text CNN over padded embeddings": _text(TextCNN),
    "transformer encoder with a padding mask": _text(MaskedEncoder),
    "LSTM on sequences, RMSprop": _lstm_rmsprop,
    "BERT (small config), AdamW, warm-up + linear decay, dict items": _bert_warmup,
    "GPT-2 (small config), scaled init, left padding, warm-up + cosine, DataLoader of dicts": _gpt2_left_padded,
    "BERT (small config), frozen encoder on purpose": _bert_frozen_backbone,
    "BERT (small config), label smoothing + class weights, list of dicts": _bert_smoothing_class_weights,
}
