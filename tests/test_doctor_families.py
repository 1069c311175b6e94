"""Rules from the doctor's own cases on families the held-out sets lack (benchmarks/doctor_own): each a planted bug
it finds and a healthy twin that stays silent. A sequence's class scores on the last axis, a one-target loss over
several outputs (quantiles), a log link (Poisson), a distance for a pair's flag (contrastive), placeholder
targets (triplets), zero-initialised scales (ReZero), a freeze left on mid-stack, near-duplicates with noise,
autocast's rounding, noisy accuracy readings, per-sample gradients under autocast."""

import warnings

import pytest
import torch
import torch.nn.functional as F
from test_doctor_training import doctor_for, healthy
from torch import nn

from activis.cockpit.persample import Dense, Outer
from activis.cockpit.quantities import InnerTest
from activis.cockpit.taps import Unavailable
from activis.doctor import SetupError, checkup

warnings.filterwarnings("ignore", category=UserWarning)


def _loud(report, check=None):
    return [(f.check, f.where or f.place) for f in report.findings
            if f.severity != "note" and (check is None or f.check == check)]


def _adam(model, lr=1e-3):
    return torch.optim.Adam([p for p in model.parameters()], lr=lr)


class Tagger(nn.Module):
    """Token embeddings, a GRU, one score per tag per token: (N, L, tags), classes last."""

    def __init__(self, vocab=30, tags=5):
        super().__init__()
        self.emb = nn.Embedding(vocab, 16)
        self.rnn = nn.GRU(16, 16, batch_first=True)
        self.head = nn.Linear(16, tags)

    def forward(self, ids):
        return self.head(self.rnn(self.emb(ids))[0])


def _tags(length, n=200):
    torch.manual_seed(0)
    ids = torch.randint(1, 30, (n, length))
    tags = ids % 5
    tags[:, -1] = -100  # padding, ignored by the loss
    return ids, tags


def test_a_sequences_class_scores_given_untransposed_to_cross_entropy_are_named_when_they_run_or_fail():
    checks = ["loss_shapes", "loss_sign"]
    bug = checkup(Tagger(), _tags(5), nn.CrossEntropyLoss(), _adam(Tagger()), checks=checks)
    assert _loud(bug) == [("loss_shapes", "loss")]
    assert "last axis" in bug.findings[0].message
    twin = checkup(Tagger(), _tags(5), lambda o, t: F.cross_entropy(o.transpose(1, 2), t), checks=checks)
    assert _loud(twin) == []
    flat = checkup(Tagger(), _tags(7), lambda o, t: F.cross_entropy(o.reshape(-1, 5), t.reshape(-1)), checks=checks)
    assert _loud(flat) == []
    with pytest.raises(SetupError) as e:  # L != C: the loss raises; the padding's -100 is not the problem
        checkup(Tagger(), _tags(7), nn.CrossEntropyLoss(), checks=checks)
    assert e.value.finding.cause == "loss_function" and "-100" not in e.value.finding.message


def _regression(n=300, outputs=3):
    torch.manual_seed(0)
    X = torch.randn(n, 6)
    y = X[:, 0] - 0.5 * X[:, 1] + 0.1 * torch.randn(n)
    return nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, outputs)), (X, y)


def _pinball(sign):
    q = torch.tensor([0.1, 0.5, 0.9])

    def loss(out, t):
        e = t.reshape(-1, 1) - out
        return sign * torch.maximum(q * e, (q - 1) * e).mean()
    return loss


def test_a_quantile_loss_with_its_sign_flipped_is_a_loss_bug_and_not_a_learning_rate_one():
    model, data = _regression()
    bug = checkup(model, data, _pinball(-1), _adam(model), checks=["loss_sign", "optimizer_settings"])
    assert _loud(bug) == [("loss_sign", "loss")]
    model, data = _regression()
    twin = checkup(model, data, _pinball(1), _adam(model), checks=["loss_sign", "optimizer_settings"])
    assert _loud(twin) == []


def test_poisson_regression_with_a_log_link_is_minimal_at_the_log_of_the_counts():
    model, (X, _) = _regression(outputs=1)
    counts = torch.poisson(torch.exp(0.5 * X[:, :1] + 1))
    report = checkup(model, (X, counts * 10), nn.PoissonNLLLoss(log_input=True), checks=["loss_sign"])
    assert _loud(report) == []


class Siamese(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, pair):
        return (self.encoder(pair[:, 0]) - self.encoder(pair[:, 1])).pow(2).sum(1).add(1e-9).sqrt()


def _pairs(n=200):
    torch.manual_seed(0)
    a = torch.randn(n, 8)
    same = torch.rand(n) < 0.5
    b = torch.where(same[:, None], a + 0.05 * torch.randn(n, 8), torch.randn(n, 8))
    return torch.stack([a, b], 1), same.float()


def test_a_contrastive_distance_and_its_cancelled_bias_are_healthy_but_a_per_pair_loss_is_not():
    def contrastive(d, t):
        return t * d.pow(2) + (1 - t) * F.relu(1 - d).pow(2)
    checks = ["loss_sign", "gradient_coverage"]
    report = checkup(Siamese(), _pairs(), lambda d, t: contrastive(d, t).mean(), checks=checks)
    assert _loud(report) == []
    with pytest.raises(SetupError) as e:
        checkup(Siamese(), _pairs(), contrastive, checks=checks)
    assert e.value.finding.cause == "loss_function"


def test_placeholder_targets_of_a_triplet_loss_are_not_labels_to_couple():
    torch.manual_seed(0)
    X = torch.randn(200, 3, 8)
    net = nn.Linear(8, 4)

    class Tower(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, t):
            return torch.stack([self.net(t[:, k]) for k in range(3)], 1)

    report = checkup(Tower(), (X, torch.zeros(200)),
                     lambda o, _: F.triplet_margin_loss(o[:, 0], o[:, 1], o[:, 2]), checks=["label_coupling"])
    assert "label_coupling" in report.skipped and _loud(report) == []


class ReZero(nn.Module):
    def __init__(self, zero=True):
        super().__init__()
        self.inp = nn.Linear(6, 16)
        self.block = nn.Sequential(nn.Linear(16, 16), nn.GELU(), nn.Linear(16, 16))
        self.alpha = nn.Parameter(torch.zeros(1) if zero else torch.ones(1))
        self.out = nn.Linear(16, 1)

    def forward(self, x):
        h = self.inp(x)
        return self.out(h + self.alpha * self.block(h)).squeeze(1)


def test_a_residual_gate_initialised_to_zero_is_design_not_a_cut_gradient():
    _, data = _regression()
    report = checkup(ReZero(), data, nn.MSELoss(), checks=["gradient_coverage"])
    assert _loud(report) == []


def _cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4))


def _images(n=120):
    torch.manual_seed(0)
    return torch.rand(n, 1, 6, 6), torch.randint(0, 4, (n,))


def test_a_layer_left_frozen_between_trained_ones_is_found_but_deliberate_freezes_are_not():
    bug = _cnn()
    bug[2].requires_grad_(False)
    report = checkup(bug, _images(), nn.CrossEntropyLoss(), _adam(bug), checks=["gradient_coverage"])
    assert _loud(report) == [("gradient_coverage", "2.weight")]
    backbone = _cnn()  # the input side frozen: a backbone
    backbone[0].requires_grad_(False)
    backbone[2].requires_grad_(False)
    kept_out = _cnn()  # frozen and kept out of the optimizer: on purpose
    kept_out[2].requires_grad_(False)
    opt = torch.optim.Adam([p for p in kept_out.parameters() if p.requires_grad])
    for model, optimizer in ((backbone, _adam(backbone)), (kept_out, opt)):
        report = checkup(model, _images(), nn.CrossEntropyLoss(), optimizer, checks=["gradient_coverage"])
        assert _loud(report) == []


class LoRA(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.base = nn.Linear(d, d).requires_grad_(False)
        self.down, self.up = nn.Linear(d, 2, bias=False), nn.Linear(2, d, bias=False)
        nn.init.zeros_(self.up.weight)

    def forward(self, x):
        return self.base(x) + self.up(self.down(x))


def test_frozen_base_layers_beside_trainable_adapters_are_lora_not_a_mistake():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), LoRA(), nn.ReLU(), LoRA(), nn.ReLU(), nn.Linear(16, 3))
    X = torch.randn(200, 6)
    report = checkup(model, (X, (X[:, 0] > 0).long()), nn.CrossEntropyLoss(), _adam(model),
                     checks=["gradient_coverage"])
    assert _loud(report) == []


def test_test_images_that_are_training_images_with_slight_noise_overlap_but_fresh_ones_do_not():
    torch.manual_seed(0)
    X = torch.rand(600, 64) * (torch.rand(64) > 0.2)  # image-like: some near-constant border pixels
    X[:, :8] *= 0.02
    y = torch.randint(0, 3, (600,))
    model = nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 3))
    train, fresh = (X[:400], y[:400]), (X[400:], y[400:])
    copies = (X[:150] + 0.01 * torch.randn(150, 64), y[:150])
    found = checkup(model, train, nn.CrossEntropyLoss(), test_data=copies, checks=["train_test_overlap"])
    assert _loud(found) == [("train_test_overlap", "test_data")]
    silent = checkup(model, train, nn.CrossEntropyLoss(), test_data=fresh, checks=["train_test_overlap"])
    assert _loud(silent) == []


class Autocast(nn.Module):
    def __init__(self, mix=False):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
        self.mix = mix

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = self.net(x).float()
        return out - out.mean(0) if self.mix else out


def test_bfloat16_autocast_rounding_is_not_batch_dependence_but_a_batch_mean_still_is():
    torch.manual_seed(0)
    data = (torch.randn(100, 16), torch.randint(0, 4, (100,)))
    assert _loud(checkup(Autocast(), data, nn.CrossEntropyLoss(), checks=["batch_dependence"])) == []
    mixed = checkup(Autocast(mix=True), data, nn.CrossEntropyLoss(), checks=["batch_dependence"])
    assert [c for c, _ in _loud(mixed)] == ["batch_dependence"]


def test_noisy_accuracy_of_small_batches_that_improves_is_not_flat_but_a_flat_one_is():
    def run(accuracy):
        doctor = doctor_for()
        for step in range(150):
            doctor.observe(step, {**healthy(step), "accuracy": accuracy(step)})
        return [f.check for f in doctor.findings if f.severity != "note"]
    g = torch.Generator().manual_seed(0)  # batches of 4: each reading is 0, 0.25, ... 1
    improving = [float((torch.rand(4, generator=g) < 0.55 + s / 600).float().mean()) for s in range(150)]
    flat = [float((torch.rand(4, generator=g) < 0.3).float().mean()) for _ in range(150)]
    assert "accuracy_flat" not in run(lambda s: improving[s])
    assert "accuracy_flat" in run(lambda s: flat[s])


def test_per_sample_gradients_under_autocast_mix_bfloat16_inputs_with_float_gradients():
    u, v = torch.randn(4, 3), torch.randn(4, 5).bfloat16()
    outer = Outer(u, v)
    assert outer.dot_mean().dtype == torch.float32
    assert Outer(u.bfloat16(), v).dot(torch.randn(3, 5)).dtype == torch.float32
    assert Dense(torch.randn(4, 3, 5).bfloat16()).dot(torch.randn(3, 5)).dtype == torch.float32


def test_the_gradient_noise_tests_are_unavailable_when_the_mean_gradient_is_zero():
    class Dead:
        batch_size, grad_sq_norm = 8, 0.0

    with pytest.raises(Unavailable):
        InnerTest().compute(Dead())
