"""Losses that are right but unlike cross-entropy stay silent, and their broken twins are still found: a loss
that lays the output out as the target itself, cumulative (ordinal) logits, a metric loss on embeddings, a
mixture density's parameters, an autoencoder's targets that are its inputs."""

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from doctor_cases import MLP, digits
from torch import nn

from activis.doctor import SetupError, checkup

warnings.filterwarnings("ignore", category=UserWarning)


def _errors(report, check):
    return [(f.where or f.place) for f in report.findings if f.check == check and f.severity != "note"]


def _run(model, data, loss, checks):
    torch.manual_seed(0)
    return checkup(model, data, loss, torch.optim.Adam(model.parameters(), lr=1e-3), checks=checks)


def _regression():
    X, y = digits()
    return X, (X[:, 20:30].sum(1) - X[:, 20:30].sum(1).mean()).astype("float32")


def test_a_loss_that_reshapes_the_output_itself_is_not_a_broadcast():
    reshaped = lambda out, y: F.huber_loss(out.reshape(y.shape), y)  # noqa: E731
    broadcast = lambda out, y: F.huber_loss(out, y)  # noqa: E731 - (N, 1) against (N,): every pair compared
    assert _errors(_run(MLP(64, 1), _regression(), reshaped, ["loss_shapes"]), "loss_shapes") == []
    assert _errors(_run(MLP(64, 1), _regression(), broadcast, ["loss_shapes"]), "loss_shapes") == ["loss"]


def _coral(sign):
    def loss(logits, grade):  # K-1 cumulative logits: logit k says grade > k; grades reach K-1
        targets = (grade[:, None] > torch.arange(logits.shape[1])[None, :]).float()
        return sign * F.binary_cross_entropy_with_logits(logits, targets, reduction="none").sum(1).mean()
    return loss


def test_cumulative_logits_are_not_read_as_one_hot_classes_and_a_wrong_sign_still_is():
    X, y = digits()
    grades = torch.tensor(y.clip(0, 4))  # 5 grades, 4 cumulative logits
    assert _errors(_run(MLP(64, 4), (X, grades), _coral(1), ["loss_sign"]), "loss_sign") == []
    flipped = lambda out, y: -F.cross_entropy(out, y)  # noqa: E731
    assert _errors(_run(MLP(64, 10), digits(), flipped, ["loss_sign"]), "loss_sign") == ["loss"]


class Embedder(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 16))

    def forward(self, x):
        return F.normalize(self.body(x), dim=1)


def _triplet(sign=1):
    def loss(emb, y, margin=0.2):  # batch-hard triplet: farthest same-class against nearest other-class row
        dist = torch.cdist(emb, emb)
        same = y[:, None] == y[None, :]
        hardest_pos = (dist * same.float()).max(1).values
        hardest_neg = dist.masked_fill(same, float("inf")).min(1).values
        return sign * F.relu(hardest_pos - hardest_neg + margin).mean()
    return loss


def test_a_metric_loss_is_judged_as_one_and_its_wrong_sign_is_found():
    assert _errors(_run(Embedder(), digits(), _triplet(), ["loss_sign"]), "loss_sign") == []
    assert _errors(_run(Embedder(), digits(), _triplet(-1), ["loss_sign"]), "loss_sign") == ["loss"]


def test_a_metric_loss_learning_real_labels_is_coupled_and_shuffled_labels_are_not():
    X, y = digits()
    assert _errors(_run(Embedder(), (X, y), _triplet(), ["label_coupling"]), "label_coupling") == []
    shuffled = y[torch.randperm(len(y), generator=torch.Generator().manual_seed(1)).numpy()]
    assert _errors(_run(Embedder(), (X, shuffled), _triplet(), ["label_coupling"]), "label_coupling") == ["labels"]


class Mixture(nn.Module):
    """Three Gaussians' weights (logits), means and softplus sigmas side by side: (N, 9) for one target."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 9))

    def forward(self, x):
        h = self.body(x)
        return torch.cat([h[:, :6], F.softplus(h[:, 6:]) + 1e-3], 1)


def _mdn(out, t):
    log_pi, mu, sigma = F.log_softmax(out[:, :3], 1), out[:, 3:6], out[:, 6:]
    log_prob = -0.5 * ((t[:, None] - mu) / sigma) ** 2 - torch.log(sigma)
    return -torch.logsumexp(log_pi + log_prob, 1).mean()


def _pinball(sign):
    def loss(out, y):  # three quantiles of one target
        q = torch.tensor([0.1, 0.5, 0.9])
        err = y[:, None] - out
        return sign * torch.maximum(q * err, (q - 1) * err).mean()
    return loss


def test_a_distributions_parameters_are_no_values_of_the_target_and_a_wrong_quantile_sign_is_found():
    X, t = _regression()
    t = t - t.mean()  # negative targets: no legal sigma
    assert _errors(_run(Mixture(), (X, t), _mdn, ["loss_sign"]), "loss_sign") == []
    assert _errors(_run(MLP(64, 3), (X, t), _pinball(-1), ["loss_sign"]), "loss_sign") == ["loss"]
    assert _errors(_run(MLP(64, 3), (X, t), _pinball(1), ["loss_sign"]), "loss_sign") == []


def test_an_autoencoders_targets_are_its_inputs_and_cannot_be_decoupled():
    X, _ = digits()
    model = nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 64), nn.Sigmoid())
    report = _run(model, (X, X.copy()), nn.BCELoss(), ["label_coupling"])
    assert _errors(report, "label_coupling") == [] and "autoencoder" in report.skipped["label_coupling"]
    others = X[np.random.default_rng(1).permutation(len(X))]  # targets: other samples' pixels
    assert _errors(_run(model, (X, others), nn.BCELoss(), ["label_coupling"]), "label_coupling") == ["labels"]


class AutoEncoder(nn.Module):
    """64 -> 32 -> 8 -> 32 -> 64: the decoder's first ReLU is fed an 8-wide code of small values."""

    def __init__(self, code_bias=None):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 8))
        self.decoder = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 64), nn.Sigmoid())
        if code_bias is not None:
            nn.init.constant_(self.decoder[0].bias, code_bias)

    def forward(self, x):
        return self.decoder(self.encoder(x))


def test_units_dead_as_under_default_initialisation_are_not_the_models_doing_but_a_bias_that_kills_is():
    X, _ = digits()
    torch.manual_seed(19)
    healthy = _run(AutoEncoder(), (X, X.copy()), nn.BCELoss(), ["dead_relu"])
    assert _errors(healthy, "dead_relu") == []
    torch.manual_seed(19)
    assert _errors(_run(AutoEncoder(-3.0), (X, X.copy()), nn.BCELoss(), ["dead_relu"]), "dead_relu") == ["decoder.1"]


class CausalMix(nn.Module):
    """Each of 16 features attends to those before it through an additive mask made inside forward."""

    def __init__(self, fill):
        super().__init__()
        self.fill = fill
        self.fc, self.head = nn.Linear(64, 16), nn.Linear(16, 10)

    def forward(self, x):
        h = self.fc(x)
        mask = torch.triu(torch.full((16, 16), self.fill), 1)
        att = torch.softmax(h[:, :, None] * h[:, None, :] + mask, -1)
        return self.head((att @ h[:, :, None]).squeeze(-1))


def test_a_causal_masks_minus_infinity_is_no_numerical_fault_but_a_nan_constant_reaching_the_output_is():
    assert _errors(_run(CausalMix(float("-inf")), digits(), nn.CrossEntropyLoss(), ["non_finite"]), "non_finite") == []
    found = _errors(_run(CausalMix(float("nan")), digits(), nn.CrossEntropyLoss(), ["non_finite"]), "non_finite")
    assert len(found) == 1  # the constant (traced as a tensor constant: its value is known when traced)


class Tagger(nn.Module):
    """(N, L, 4) tag scores, tags last, for (N, L) ids."""

    def __init__(self):
        super().__init__()
        self.emb, self.head = nn.Embedding(20, 8), nn.Linear(8, 4)

    def forward(self, ids):
        return self.head(self.emb(ids))


def test_a_label_out_of_bounds_in_a_loss_that_transposes_itself_is_the_labels_fault_not_the_layout():
    ids = torch.randint(1, 20, (120, 10), generator=torch.Generator().manual_seed(0))
    tags = ids % 4
    tags[:, 8:] = -1  # padding labelled -1, not the ignore_index -100
    loss = lambda out, y: F.cross_entropy(out.transpose(1, 2), y)  # noqa: E731
    with pytest.raises(SetupError, match="labels reach -1 but the output has 4 classes") as caught:
        checkup(Tagger(), (ids, tags), loss)
    assert caught.value.finding.cause == "labels_for_loss"
    tags[:, 8:] = -100
    assert checkup(Tagger(), (ids, tags), loss, checks=["loss_sign"]).ran == ["loss_sign"]


def test_nll_written_as_a_function_on_raw_scores_is_found_and_on_log_probabilities_is_not():
    raw = lambda out, y: F.nll_loss(out, y)  # noqa: E731
    logged = lambda out, y: F.nll_loss(F.log_softmax(out, 1), y)  # noqa: E731
    assert _errors(_run(MLP(64, 10), digits(), raw, ["labels_fit_loss"]), "labels_fit_loss") == ["loss"]
    assert _errors(_run(MLP(64, 10), digits(), logged, ["labels_fit_loss"]), "labels_fit_loss") == []
    smoothed = nn.CrossEntropyLoss(label_smoothing=0.1)
    assert _errors(_run(MLP(64, 10), digits(), smoothed, ["labels_fit_loss"]), "labels_fit_loss") == []


class PairDistance(nn.Module):
    """The distance between the embeddings of a pair's two halves (32 pixels each)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 8))

    def forward(self, x):
        return (self.embed(x[:, :32]) - self.embed(x[:, 32:])).norm(dim=1)


def test_a_contrastive_loss_without_its_margin_falls_without_bound_and_with_it_is_silent():
    X, y = digits()
    same = (y % 2 == 0).astype("float32")  # a 0/1 "same" flag per pair
    unbounded = lambda d, s: (s * d ** 2 - (1 - s) * d ** 2).mean()  # noqa: E731
    margin = lambda d, s: (s * d ** 2 + (1 - s) * F.relu(1 - d) ** 2).mean()  # noqa: E731
    assert _errors(_run(PairDistance(), (X, same), unbounded, ["loss_sign"]), "loss_sign") == ["loss"]
    assert _errors(_run(PairDistance(), (X, same), margin, ["loss_sign"]), "loss_sign") == []
    assert _errors(_run(MLP(64, 10), digits(), nn.CrossEntropyLoss(label_smoothing=0.1), ["loss_sign"]),
                   "loss_sign") == []


class SqueezedHead(nn.Module):
    def __init__(self, squash):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 16), nn.ReLU())
        self.head = nn.Sequential(nn.Linear(16, 1), *([nn.Sigmoid()] if squash else []))

    def forward(self, x):
        return self.head(self.body(x)).squeeze(1)


def test_a_sigmoid_before_a_squeeze_into_bce_with_logits_is_found_and_raw_logits_are_not():
    X, y = digits()
    data = (X, (y % 2).astype("float32"))
    loss = nn.BCEWithLogitsLoss()
    assert _errors(_run(SqueezedHead(True), data, loss, ["double_softmax"]), "double_softmax") == ["head.1"]
    assert _errors(_run(SqueezedHead(False), data, loss, ["double_softmax"]), "double_softmax") == []


class OffsetPositions(nn.Module):
    """Positions counted from 1 (0 kept for padding, as RoBERTa does), read from a buffer sized like the table."""

    def __init__(self, rows):
        super().__init__()
        self.tokens, self.positions, self.head = nn.Embedding(20, 8), nn.Embedding(rows, 8), nn.Linear(8, 2)
        self.register_buffer("segments", torch.zeros(1, rows, dtype=torch.long))

    def forward(self, ids):
        where = (torch.arange(ids.shape[1]) + 1).expand(len(ids), -1)
        segment = self.segments.expand(len(ids), -1).gather(1, where)
        return self.head((self.tokens(ids) + self.positions(where) + segment[..., None]).mean(1))


def test_an_index_past_an_embeddings_rows_computed_inside_a_module_names_that_embedding():
    ids = torch.randint(0, 20, (120, 10), generator=torch.Generator().manual_seed(0))
    with pytest.raises(SetupError, match="indices reach 10 but positions has 10 rows") as caught:
        checkup(OffsetPositions(10), (ids, ids[:, 0] % 2), nn.CrossEntropyLoss())
    assert caught.value.finding.where == "positions"
    report = checkup(OffsetPositions(11), (ids, ids[:, 0] % 2), nn.CrossEntropyLoss(), checks=["loss_sign"])
    assert report.ran == ["loss_sign"]


def test_every_parameter_frozen_names_the_output_layer_and_a_frozen_backbone_runs():
    frozen = MLP(64, 10)
    for p in frozen.parameters():
        p.requires_grad_(False)
    with pytest.raises(SetupError, match="Every parameter is frozen") as caught:
        checkup(frozen, digits(), nn.CrossEntropyLoss())
    assert caught.value.finding.where == "fc3"
    backbone = MLP(64, 10)
    for p in backbone.fc1.parameters():
        p.requires_grad_(False)
    assert checkup(backbone, digits(), nn.CrossEntropyLoss(), checks=["loss_sign"]).ran == ["loss_sign"]


class SequenceFirstEncoder(nn.Module):
    """A position table looked up with arange(L), then an encoder layer fed (N, L, D) as batch_first or not."""

    def __init__(self, batch_first):
        super().__init__()
        self.emb, self.pos = nn.Embedding(20, 16), nn.Embedding(16, 16)
        self.encoder = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=batch_first)
        self.head = nn.Linear(16, 2)

    def forward(self, ids):
        return self.head(self.encoder(self.emb(ids) + self.pos(torch.arange(ids.shape[1]))).mean(1))


def test_samples_mixing_in_an_encoder_is_placed_there_not_at_a_position_table_as_long_as_the_batch():
    ids = torch.randint(0, 20, (120, 16), generator=torch.Generator().manual_seed(0))  # length 16 = a batch of 16
    data = (ids, ids[:, 0] % 2)
    mixed = _run(SequenceFirstEncoder(False), data, nn.CrossEntropyLoss(), ["batch_dependence"])
    assert _errors(mixed, "batch_dependence") == ["encoder"]
    assert _errors(_run(SequenceFirstEncoder(True), data, nn.CrossEntropyLoss(), ["batch_dependence"]),
                   "batch_dependence") == []


def test_log_probabilities_into_nll_are_bounded_by_what_the_model_can_make():
    model = nn.Sequential(MLP(64, 10), nn.LogSoftmax(dim=1))
    assert _errors(_run(model, digits(), nn.NLLLoss(), ["loss_sign"]), "loss_sign") == []
