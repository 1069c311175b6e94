"""The generic rules added from the first held-out set, each with a planted bug it finds and a healthy twin
that stays silent: input scale judged where the first weight meets it, a leak that separates classes of
unequal sizes, an adaptive optimizer's crawl, a slow-but-learning overfit, large updates while the loss
falls, a batch statistic that is NaN on one sample."""

import math
import warnings

import numpy as np
import torch
from doctor_cases import MLP, digits, tabular
from test_doctor_training import doctor_for, healthy
from torch import nn

from activis.doctor import checkup

warnings.filterwarnings("ignore", category=UserWarning)


def _found(report, check):
    return [(f.where or f.place) for f in report.findings if f.check == check and f.severity != "note"]


def _setup(model, data, lr=1e-3, loss=None, opt=torch.optim.Adam):
    torch.manual_seed(0)
    return {"model": model, "data": data, "loss_fn": loss or nn.CrossEntropyLoss(),
            "optimizer": opt(model.parameters(), lr=lr)}


def _raw_cancer():
    return tabular("breast_cancer", scaled=False)


def test_raw_features_into_a_linear_are_unscaled_but_a_batchnorm_first_takes_them():
    torch.manual_seed(0)
    bug = checkup(**_setup(MLP(30, 2), _raw_cancer()), checks=["input_scale"])
    assert _found(bug, "input_scale") == ["inputs"]
    twin = nn.Sequential(nn.BatchNorm1d(30), nn.Linear(30, 32), nn.ReLU(), nn.Linear(32, 2))
    assert _found(checkup(**_setup(twin, _raw_cancer()), checks=["input_scale"]), "input_scale") == []


class BatchStandardise(nn.Module):
    """Standardises with the batch's own statistics, in eval mode too: a sample alone is NaN."""

    def forward(self, x):
        return (x - x.mean(0, keepdim=True)) / (x.std(0, keepdim=True) + 1e-5)


class EvalAware(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.norm = nn.BatchNorm1d(n)

    def forward(self, x):
        return self.norm(x)


def test_a_batch_statistic_in_eval_mode_is_batch_dependence_even_when_one_sample_gives_nan():
    bug = nn.Sequential(BatchStandardise(), MLP(30, 2))
    report = checkup(**_setup(bug, _raw_cancer()), checks=["input_scale", "batch_dependence"])
    assert _found(report, "batch_dependence") and not _found(report, "input_scale")
    twin = nn.Sequential(EvalAware(30), MLP(30, 2))
    report = checkup(**_setup(twin, _raw_cancer()), checks=["input_scale", "batch_dependence"])
    assert report.findings == [] and set(report.ran) == {"input_scale", "batch_dependence"}


def _with_feature(X, y, values):
    return np.concatenate([X, values[:, None].astype(np.float32)], 1), y


def test_a_target_encoded_feature_leaks_though_its_classes_differ_in_size():
    X, y = tabular("wine", n=178)
    rng = np.random.default_rng(0)
    encoded = np.array([0.8, -1.1, 0.3])[y] + 0.01 * rng.normal(size=len(y))  # each class's mean, 59/71/48 rows
    bug = checkup(**_setup(MLP(14, 3), _with_feature(X, y, encoded)), checks=["leakage"])
    assert _found(bug, "leakage") == ["feature 13"]
    honest = X[:, 12] + 0.5 * rng.normal(size=len(y))  # a strong but honest feature (proline, with noise)
    assert _found(checkup(**_setup(MLP(14, 3), _with_feature(X, y, honest)), checks=["leakage"]), "leakage") == []


def test_adam_at_a_rate_that_barely_moves_the_weights_is_too_low_and_a_warm_up_from_zero_is_not():
    data = digits()
    bug = checkup(**_setup(MLP(64, 10), data, lr=1e-7), checks=["optimizer_settings"])
    assert [(f.cause, f.place) for f in bug.findings] == [("learning_rate_too_low", "optimizer")]
    for lr in (1e-3, 2e-5):  # from scratch; a fine-tune's rate
        twin = checkup(**_setup(MLP(64, 10), data, lr=lr), checks=["optimizer_settings"])
        assert twin.findings == [], lr
    setup = _setup(MLP(64, 10), data, lr=1e-3)
    warm = torch.optim.lr_scheduler.LambdaLR(setup["optimizer"], lambda step: min(1.0, step / 100))
    assert checkup(**setup, scheduler=warm, checks=["optimizer_settings"]).findings == []


class FinalReLU(nn.Module):
    """A regression whose output passes a ReLU: negative targets are out of reach, the loss stalls."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 1), nn.ReLU())

    def forward(self, x):
        return self.net(x).squeeze(-1)


def test_a_model_that_stalls_cannot_overfit_but_one_still_learning_at_the_end_is_not_judged():
    X, y = tabular("diabetes", n=442)
    y = ((y - y.mean()) / y.std()).astype(np.float32)
    bug = checkup(**_setup(FinalReLU(), (X, y), loss=nn.MSELoss()), checks=["overfit_batch"])
    assert _found(bug, "overfit_batch") == ["model"]
    iris = tabular("iris", n=150)  # near-duplicates of two classes: memorised slowly
    twin = checkup(**_setup(nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3)), iris),
                   checks=["overfit_batch"])
    assert _found(twin, "overfit_batch") == []


def test_large_updates_are_a_rate_too_high_only_while_the_loss_has_stopped_falling():
    def large(step):
        return [0.2, 0.02, 0.2, 0.02, 0.2, 0.02]  # about a fifth of each layer's size per step

    stalled, falling = doctor_for(), doctor_for()
    for step in range(200):
        stalled.observe(step, {**healthy(step), "UpdateSize": large(step), "Loss": 1.0 + 0.01 * math.sin(step)})
        falling.observe(step, {**healthy(step), "UpdateSize": large(step)})
    assert any(f.check == "update_size" and f.cause == "learning_rate_too_high" for f in stalled.findings)
    assert not [f for f in falling.findings if f.check == "update_size"]


def test_dead_relus_are_judged_as_training_meets_them_so_an_untrained_batchnorm_on_raw_features_is_not_dead():
    class BNFirst(nn.Module):
        def __init__(self, bias=0.0):
            super().__init__()
            self.net = nn.Sequential(nn.BatchNorm1d(30), nn.Linear(30, 64), nn.BatchNorm1d(64), nn.ReLU(),
                                     nn.Linear(64, 2))
            nn.init.constant_(self.net[2].bias, bias)  # BatchNorm's shift: negative sends every unit below 0

        def forward(self, x):
            return self.net(x)

    torch.manual_seed(0)
    twin = checkup(**_setup(BNFirst(), _raw_cancer()), checks=["dead_relu"])
    assert twin.findings == [] and twin.ran == ["dead_relu"]
    bug = checkup(**_setup(BNFirst(bias=-10.0), _raw_cancer()), checks=["dead_relu"])
    assert _found(bug, "dead_relu") == ["net.3"]


def _first_layer_gradient(grad):
    return lambda step: {**healthy(step), "GradNorm": [grad(step), 0.0, 0.3, 0.1, 0.4, 0.1]}


def test_a_first_layer_gradient_that_stays_tiny_vanishes_but_one_growing_from_near_zero_wakes_up():
    for grad, vanishes in ((lambda s: 1e-7, True), (lambda s: 1e-7 * 1.15 ** s, False)):
        doctor = doctor_for()
        for step in range(120):
            doctor.observe(step, _first_layer_gradient(grad)(step))
        assert any(f.check == "vanishing_gradients" for f in doctor.findings) == vanishes


def test_a_gradient_that_jumps_explodes_but_one_growing_gradually_while_the_loss_falls_does_not():
    def sudden(step):
        return 0.5 * (1e4 if step >= 60 else 1)

    def gradual(step):  # a thousandfold over 100 steps, as attention learns to attend
        return 5e-3 * 1.08 ** min(step, 100)

    for grad, explodes in ((sudden, True), (gradual, False)):
        doctor = doctor_for()
        for step in range(150):
            doctor.observe(step, _first_layer_gradient(grad)(step))
        assert any(f.check == "exploding_gradients" for f in doctor.findings) == explodes
    stalled = doctor_for()
    for step in range(150):
        stalled.observe(step, {**_first_layer_gradient(gradual)(step), "Loss": 1.0 + 0.01 * math.sin(step)})
    assert any(f.check == "exploding_gradients" for f in stalled.findings)


def test_the_optimizer_trial_runs_with_a_metric_driven_schedule_and_with_an_optimizer_of_another_model():
    setup = _setup(MLP(64, 10), digits())
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(setup["optimizer"])
    report = checkup(**setup, scheduler=plateau, checks=["optimizer_settings"])
    assert report.failed == {} and report.ran == ["optimizer_settings"] and report.findings == []
    other = MLP(64, 10)
    report = checkup(MLP(64, 10), digits(), nn.CrossEntropyLoss(), torch.optim.Adam(other.parameters()),
                     checks=["optimizer", "optimizer_settings"])
    assert report.failed == {} and [f.check for f in report.findings] == ["optimizer"]


def test_label_smoothing_with_class_weights_sets_the_overfit_floor_from_the_loss_itself():
    X, y = digits(n=1000)
    keep = y >= 3  # rare classes 0..2: one sample in eight kept, weighted up by inverse frequency
    keep |= np.arange(len(y)) % 8 == 0
    X, y = X[keep], y[keep]
    weight = torch.tensor(len(y) / (10 * np.bincount(y, minlength=10)), dtype=torch.float32)
    twin = checkup(**_setup(MLP(64, 10), (X, y), loss=nn.CrossEntropyLoss(weight=weight, label_smoothing=0.1)),
                   checks=["overfit_batch"])
    assert twin.ran == ["overfit_batch"] and twin.findings == []
    bug = checkup(**_setup(MLP(64, 10, bug="times_zero"), (X, y),
                           loss=nn.CrossEntropyLoss(weight=weight, label_smoothing=0.1)), checks=["overfit_batch"])
    assert _found(bug, "overfit_batch") == ["model"]


def test_label_coupling_compares_held_out_losses_above_label_smoothings_floor():
    X, y = digits()
    loss = nn.CrossEntropyLoss(label_smoothing=0.3)
    twin = checkup(**_setup(MLP(64, 10), (X, y), loss=loss), checks=["label_coupling"])
    assert twin.ran == ["label_coupling"] and twin.findings == []
    shuffled = np.random.default_rng(0).permutation(y)
    bug = checkup(**_setup(MLP(64, 10), (X, shuffled), loss=loss), checks=["label_coupling"])
    assert _found(bug, "label_coupling") == ["labels"]


def _imbalanced_weighted():
    """80/15/5 classes with inverse-frequency class weights in the loss."""
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=900, n_features=16, n_informative=8, n_classes=3,
                               weights=[0.8, 0.15, 0.05], random_state=0)
    weight = torch.tensor(len(y) / (3.0 * np.bincount(y, minlength=3)), dtype=torch.float32)
    return X.astype(np.float32), y, nn.CrossEntropyLoss(weight=weight)


def test_label_coupling_judges_class_weighted_imbalanced_labels_by_balanced_accuracy():
    X, y, loss = _imbalanced_weighted()
    twin = checkup(**_setup(MLP(16, 3), (X, y), loss=loss), checks=["label_coupling"])
    assert twin.ran == ["label_coupling"] and twin.findings == [], twin
    shuffled = np.random.default_rng(0).permutation(y)
    bug = checkup(**_setup(MLP(16, 3), (X, shuffled), loss=loss), checks=["label_coupling"])
    assert _found(bug, "label_coupling") == ["labels"], bug


def test_loss_shapes_catches_one_output_column_stretched_over_several_target_columns():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 10)).astype(np.float32)
    Y = (X[:, :3] @ rng.normal(size=(3, 3))).astype(np.float32)  # three targets per sample
    bug = checkup(**_setup(MLP(10, 1), (X, Y), loss=nn.MSELoss()), checks=["loss_shapes"])
    assert _found(bug, "loss_shapes") == ["loss"] and "repeated" in bug.findings[0].message, bug
    twin = checkup(**_setup(MLP(10, 3), (X, Y), loss=nn.MSELoss()), checks=["loss_shapes"])
    assert twin.ran == ["loss_shapes"] and twin.findings == []


def test_double_softmax_finds_a_softmax_inside_a_custom_loss_before_cross_entropy():
    X, y = digits()

    def squashed(out, target):
        return nn.functional.cross_entropy(out.softmax(-1), target)

    def smoothed(out, target):  # stays above zero too, but falls then rises with confidence: healthy
        return nn.functional.cross_entropy(out, target, label_smoothing=0.1)

    bug = checkup(**_setup(MLP(64, 10), (X, y), loss=squashed), checks=["double_softmax"])
    assert _found(bug, "double_softmax") == ["loss"] and bug.findings[0].cause == "output_activation"
    twin = checkup(**_setup(MLP(64, 10), (X, y), loss=smoothed), checks=["double_softmax"])
    assert twin.ran == ["double_softmax"] and twin.findings == []


class _BagOfTokens(nn.Module):
    def __init__(self, vocab=64, classes=4):
        super().__init__()
        self.emb, self.fc = nn.EmbeddingBag(vocab, 16), nn.Linear(16, classes)

    def forward(self, ids):
        return self.fc(self.emb(ids))


def _keyword_texts(n=400, classes=4, length=12, vocab=60, seed=0):
    """Class c's texts hold its keyword (ids 1 + c) among filler words, and a third of them another class's."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    ids = rng.integers(1 + classes, vocab, (n, length))
    spots = rng.permuted(np.tile(np.arange(length), (n, 1)), axis=1)[:, :2]  # two places anywhere in the text
    rows = np.arange(n)
    ids[rows, spots[:, 0]] = 1 + y
    other = rng.random(n) < 0.33
    ids[rows[other], spots[other, 1]] = 1 + (y[other] + rng.integers(1, classes, int(other.sum()))) % classes
    return torch.tensor(ids), torch.tensor(y)


def test_leakage_finds_a_label_token_in_token_ids_but_not_keywords_shared_across_classes():
    ids, y = _keyword_texts()
    twin = checkup(**_setup(_BagOfTokens(), (ids, y)), checks=["leakage"])
    assert twin.ran == ["leakage"] and twin.findings == [], twin
    ends = torch.randint(6, 13, (len(y),), generator=torch.Generator().manual_seed(0))  # texts of 6..12 tokens
    leaked = torch.cat([ids, torch.zeros(len(y), 1, dtype=ids.dtype)], 1)
    leaked[torch.arange(13) >= ends[:, None]] = 0  # right-padded with 0
    leaked[torch.arange(len(y)), ends] = 60 + y  # preprocessing wrote the label's own token after each text
    bug = checkup(**_setup(_BagOfTokens(), (leaked, y)), checks=["leakage"])
    assert _found(bug, "leakage") == ["token 60"], bug
