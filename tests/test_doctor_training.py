"""The training doctor during training: each watcher finds its problem (with the step where it began)
from the cockpit's readings and stays silent on a healthy run; watching never breaks training."""

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from doctor_cases import MLP, digits
from torch import nn

from activis import Cockpit
from activis.doctor import TrainingDoctor
from activis.doctor.watchers import READINGS

warnings.filterwarnings("ignore", category=UserWarning)


def doctor_for(model=None):
    model = model or MLP(8, 2, hidden=4)
    return TrainingDoctor(model, [(n, p) for n, p in model.named_parameters()], READINGS)


def healthy(step):
    """Readings of a run that learns: a falling noisy loss, steady gradients and updates."""
    noise = 0.02 * math.sin(step * 1.7)
    return {"Loss": 2.0 * math.exp(-step / 40) + 0.1 + noise, "GradNorm": [0.5, 0.1, 0.3, 0.1, 0.4, 0.1],
            "UpdateSize": [1e-2, 1e-3, 1e-2, 1e-3, 1e-2, 1e-3], "Alpha": 0.1 * math.sin(step),
            "accuracy": min(0.95, 0.3 + step / 100)}


PROBLEMS = {
    "loss_not_finite": (lambda s: {**healthy(s), "Loss": math.nan} if s == 30 else healthy(s), 30, "loss"),
    "divergence": (lambda s: {**healthy(s), "Loss": 50.0 * s} if s >= 40 else healthy(s), 40, "optimizer"),
    "plateau": (lambda s: {**healthy(s), "Loss": 2.0 + 0.01 * math.sin(s)}, 25, "optimizer"),
    "oscillation": (lambda s: {**healthy(s), "Loss": 1.0 + (0.5 if s % 2 else 0.0)}, 0, "optimizer"),
    "accuracy_flat": (lambda s: {**healthy(s), "accuracy": 0.1 + 0.02 * math.sin(s)}, 0, "model"),
    "exploding_gradients": (
        lambda s: {**healthy(s), "GradNorm": [0.5, 0.1, 0.3 * (1e4 if s >= 50 else 1), 0.1, 0.4, 0.1]}, 50, "fc2"),
    "vanishing_gradients": (lambda s: {**healthy(s), "GradNorm": [1e-7, 1e-8, 0.3, 0.1, 0.4, 0.1]}, 0, "fc1"),
    "update_size": (lambda s: {**healthy(s), "UpdateSize": [1e-2, 1e-3, 0.0, 0.0, 1e-2, 1e-3]}, 0, "fc2"),
    "step_size": (lambda s: {**healthy(s), "Alpha": 1.8 + 0.1 * math.sin(s)}, 0, "optimizer"),
}


@pytest.mark.parametrize("check", PROBLEMS)
def test_watcher_finds_its_problem_with_the_step_it_began(check):
    readings, began, where = PROBLEMS[check]
    doctor = doctor_for()
    for step in range(200):
        doctor.observe(step, readings(step))
    found = [f for f in doctor.findings if f.check == check]
    assert found, doctor.report()
    assert where in (found[0].where, found[0].place) and found[0].step == began, found[0]
    assert len(found) == len({f.where for f in found})  # each problem reported once per place


def test_healthy_readings_raise_nothing():
    doctor = doctor_for()
    for step in range(200):
        doctor.observe(step, healthy(step))
    assert not doctor.findings, doctor.report()
    assert not doctor.failed


def test_a_failing_watcher_is_skipped_and_never_breaks_training():
    doctor = doctor_for()
    doctor.observe(0, {"Loss": 1.0, "GradNorm": ["not a number"] * 6})
    assert "exploding_gradients" in doctor.failed and "could not run" in doctor.failed["exploding_gradients"]
    assert not doctor.report().clean


def train(model, opt, steps, X, y, batch=64, at_step=None, quantities=("Loss", "GradNorm", "UpdateSize")):
    cockpit = Cockpit(model, quantities, optimizer=opt, doctor=True)
    seen = []
    cockpit.doctor.subscribe(seen.append)
    torch.manual_seed(0)
    for step in range(steps):
        if at_step is not None:
            at_step(step, model)
        idx = torch.randint(0, len(X), (batch,))
        opt.zero_grad()
        out = model(X[idx])
        cockpit.backward(F.cross_entropy(out, y[idx], reduction="none"))
        opt.step()
        cockpit.log_metrics(step, accuracy=float((out.argmax(1) == y[idx]).float().mean()))
    cockpit.close()
    return cockpit, seen


def test_cockpit_with_doctor_finds_a_rebuilt_model_and_stays_silent_on_a_healthy_run():
    X, y = (torch.from_numpy(a) for a in digits(300))
    torch.manual_seed(0)
    model = MLP(64, 10)
    cockpit, seen = train(model, torch.optim.Adam(model.parameters(), 1e-3), 60, X, y)
    assert not cockpit.doctor.findings, cockpit.doctor.report()
    stale = MLP(64, 10)  # the optimizer still holds the old model's parameters
    cockpit, seen = train(MLP(64, 10), torch.optim.Adam(stale.parameters(), 1e-3), 60, X, y)
    report = cockpit.doctor.report()
    assert report.diagnoses[0].cause == "missing_optimizer_step" and report.diagnoses[0].step <= 10, report
    assert seen == cockpit.doctor.findings  # live: each finding reached the subscriber as it appeared


def test_dying_relus_are_found_and_the_hooks_removed_on_close():
    X, y = (torch.from_numpy(a) for a in digits(300))
    torch.manual_seed(0)
    model = MLP(64, 10)

    def knock_out(step, model):  # a bad update at step 45 pushes most of fc1's units below zero
        if step == 45:
            with torch.no_grad():
                model.fc1.bias[:48] -= 50

    cockpit, _ = train(model, torch.optim.SGD(model.parameters(), 0.05), 80, X, y, at_step=knock_out)
    dying = [f for f in cockpit.doctor.findings if f.check == "dying_relus"]
    assert [f.where for f in dying] == ["act1"] and 40 <= dying[0].step <= 60, cockpit.doctor.report()
    assert not model.act1._forward_hooks and not model.act2._forward_hooks


class WideDeep(nn.Module):
    """Dense features plus a categorical id column through an embedding: the embedding's per-sample
    gradients need the cockpit's torch.func re-run of the model, which passes through the ReLUs."""

    def __init__(self):
        super().__init__()
        self.cat = nn.Embedding(10, 8)
        self.deep = nn.Sequential(nn.Linear(6 + 8, 32), nn.ReLU(), nn.Linear(32, 2))

    def forward(self, x):
        return self.deep(torch.cat([x[:, :-1], self.cat(x[:, -1].long())], 1))


def test_a_per_sample_rerun_of_an_embedding_model_is_invisible_to_the_doctor():
    torch.manual_seed(0)
    X = torch.randn(400, 6)
    y = (X[:, 0] > 0).long()
    X = torch.cat([X, (y * 5 + torch.randint(0, 5, (400,)))[:, None].float()], 1)
    model = WideDeep()
    cockpit, _ = train(model, torch.optim.Adam(model.parameters(), 2e-3), 40, X, y, quantities="economy")
    assert not [f for f in cockpit.doctor.findings if f.severity != "note"], cockpit.doctor.report()


def test_doctor_is_off_by_default():
    model = nn.Linear(3, 2)
    cockpit = Cockpit(model, ["Loss"])
    assert cockpit.doctor is None
    cockpit.close()


def test_a_nan_loss_in_a_real_run_is_found_at_its_step():
    X, y = (torch.from_numpy(a) for a in digits(300))
    model = MLP(64, 10)
    opt = torch.optim.SGD(model.parameters(), 0.05)
    cockpit = Cockpit(model, ["Loss", "GradNorm"], optimizer=opt, doctor=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step in range(8):
            x = X[:64].clone()
            if step == 5:
                x[0, 0] = float("nan")  # one bad sample
            opt.zero_grad()
            cockpit.backward(F.cross_entropy(model(x), y[:64], reduction="none"))
    cockpit.close()
    found = [f for f in cockpit.doctor.findings if f.check == "loss_not_finite"]
    assert [f.step for f in found] == [5] and found[0].place == "loss"
