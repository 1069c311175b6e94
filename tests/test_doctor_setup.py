"""checkup runs the set-up before judging it, refuses nonsense arguments, judges a dict's logits, leaves the
model exactly as it found it (buffers, modes, hooks, random state), and merges findings into diagnoses."""

import warnings

import pytest
import torch
from doctor_cases import BNMLP, MLP, digits
from torch import nn

from activis.doctor import DoctorError, Finding, Report, SetupError, checkup

warnings.filterwarnings("ignore", category=UserWarning)


class Tokens(nn.Module):
    def __init__(self, rows):
        super().__init__()
        self.emb, self.fc = nn.Embedding(rows, 16), nn.Linear(16, 2)

    def forward(self, ids):
        return self.fc(self.emb(ids).mean(1))


def token_data(n=200, vocab=100):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (n, 12), generator=g)
    ids[0, 0] = vocab - 1
    return ids, (ids[:, 0] % 2)


@pytest.mark.parametrize("setup, place, fact", [
    (lambda: (Tokens(99), token_data(), nn.CrossEntropyLoss()), "emb", "ids reach 99 but emb has 99 rows"),
    (lambda: (MLP(64, 9), digits(), nn.CrossEntropyLoss()), "loss", "labels reach 9 but the output has 9 classes"),
    (lambda: (MLP(63, 10), digits(), nn.CrossEntropyLoss()), "fc1", "fc1 expects 63 features but gets 64"),
    (lambda: (MLP(64, 10), digits(), nn.CrossEntropyLoss(reduction="none")), "loss", "one value per element"),
])
def test_a_set_up_that_cannot_run_is_an_error_naming_the_module_and_the_data(setup, place, fact):
    model, data, loss = setup()
    with pytest.raises(SetupError, match=fact) as caught:
        checkup(model, data, loss)
    assert place in (caught.value.finding.where, caught.value.finding.place)


def test_healthy_twins_of_the_set_up_errors_run():
    assert checkup(Tokens(100), token_data(), nn.CrossEntropyLoss(), checks=["loss_sign"]).ran == ["loss_sign"]
    assert checkup(MLP(64, 10), digits(), nn.CrossEntropyLoss(), checks=["loss_sign"]).ran == ["loss_sign"]


@pytest.mark.parametrize("kwargs, match", [
    ({"batch_size": 0}, "batch_size"), ({"steps": -5}, "steps"), ({"max_samples": 1}, "max_samples"),
    ({"optimizer": "sgd"}, "optimizer must be a torch.optim.Optimizer"), ({"train_seconds": float("nan")},
                                                                          "train_seconds"),
    ({"batch_size": True}, "batch_size"), ({"checks": []}, "unknown checks"),
])
def test_nonsense_arguments_are_clear_doctor_errors(kwargs, match):
    with pytest.raises(DoctorError, match=match):
        checkup(MLP(64, 10), digits(), nn.CrossEntropyLoss(), **kwargs)


class DictOut(nn.Module):
    """Returns a loss first and the logits second, as Hugging Face models do with labels."""

    def __init__(self):
        super().__init__()
        self.net = MLP(64, 10)

    def forward(self, x):
        logits = self.net(x)
        return {"loss": logits.sum() * 0, "logits": logits}


def test_a_model_returning_a_dict_is_judged_on_its_logits():
    report = checkup(DictOut(), digits(), nn.CrossEntropyLoss(), checks=["loss_sign", "input_dependence"])
    assert report.clean and report.ran == ["loss_sign", "input_dependence"], report


def test_checkup_leaves_the_model_exactly_as_it_found_it():
    torch.manual_seed(0)
    model = BNMLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    X, y = digits()
    X, y = torch.from_numpy(X), torch.from_numpy(y)
    for _ in range(3):  # trained a little: running statistics and momentum that a checkup must not move
        opt.zero_grad()
        nn.functional.cross_entropy(model(X[:64]), y[:64]).backward()
        opt.step()
    model.eval()
    handle = model.net[0].register_forward_hook(lambda *a: None)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    opt_state = {k: v["momentum_buffer"].clone() for k, v in enumerate(opt.state.values())}
    grads = [p.grad.clone() for p in model.parameters()]
    with torch.no_grad():
        before = model(X[:50])
    rng = torch.get_rng_state()
    checkup(model, (X, y), nn.CrossEntropyLoss(), opt)
    after_state = model.state_dict()
    assert state.keys() == after_state.keys()
    assert all(torch.equal(state[k], after_state[k]) for k in state), "parameters or buffers changed"
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, model.parameters()))
    assert all(torch.equal(opt_state[k], v["momentum_buffer"]) for k, v in enumerate(opt.state.values()))
    assert not model.training and not any(m.training for m in model.modules())
    assert list(model.net[0]._forward_hooks) == [handle.id] and not model._forward_pre_hooks
    assert torch.equal(rng, torch.get_rng_state())
    with torch.no_grad():
        assert torch.equal(before, model(X[:50]))


def _finding(check, cause, severity="warning", step=None, change=""):
    return Finding(check=check, severity=severity, title=check, message=check, cause=cause, step=step,
                   change=change, place="optimizer")


def test_findings_sharing_a_cause_merge_and_opposite_advice_never_survives():
    report = Report([
        _finding("divergence", "learning_rate_too_high", "error", 40, "lower the learning rate"),
        _finding("oscillation", "learning_rate_too_high", step=35, change="lower the learning rate"),
        _finding("plateau", "learning_rate_too_low", step=10, change="raise the learning rate"),
        _finding("overfit_batch", "capacity", "error"),
    ], ran=["divergence", "oscillation", "plateau", "overfit_batch"])
    assert len(report.diagnoses) == 1
    d = report.diagnoses[0]
    assert d.title == "Learning rate too high" and d.severity == "error" and d.step == 35
    assert {f.check for f in d.symptoms} == {"oscillation", "plateau", "overfit_batch"}
    assert "raise the learning rate" not in d.lead.change
    assert "1 error" in report.summary() and "4 of 4 checks ran" in report.summary()


def test_a_structural_error_keeps_the_learning_checks_from_blaming_the_data():
    from doctor_cases import CASES

    case = next(c for c in CASES if c.name == "negated loss")
    report = checkup(**case.build(bug=True), checks=["loss_sign", "overfit_batch", "label_coupling"])
    assert [d.cause for d in report.diagnoses] == ["loss_function"]
    assert "fix that first" in report.skipped["label_coupling"]


class WithAux(nn.Module):
    """Returns its logits beside something else, as many real models do."""

    def __init__(self, as_dict: bool):
        super().__init__()
        self.net, self.as_dict = MLP(64, 10), as_dict

    def forward(self, x):
        logits = self.net(x)
        return {"logits": logits, "aux": x.sum(1)} if self.as_dict else (logits, x.sum(1))


@pytest.mark.parametrize("as_dict", [True, False])
def test_a_loss_written_for_the_whole_output_still_runs_and_the_logits_are_judged(as_dict):
    model = WithAux(as_dict)
    key = "logits" if as_dict else 0
    report = checkup(model, digits(), lambda out, y: nn.functional.cross_entropy(out[key], y),
                     torch.optim.Adam(model.parameters(), 1e-3), checks=["loss_sign", "overfit_batch"])
    assert not report.failed and report.ran


def test_test_data_of_other_features_is_refused():
    X, y = digits()
    with pytest.raises(DoctorError, match=r"test_data's inputs have shape \[5\]"):
        checkup(MLP(64, 10), (X, y), nn.CrossEntropyLoss(), test_data=(X[:, :5], y))


def test_a_loss_reading_a_model_outputs_logits_attribute_still_runs():
    from transformers.modeling_outputs import SequenceClassifierOutput

    class HF(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = MLP(64, 10)

        def forward(self, x):
            return SequenceClassifierOutput(logits=self.net(x))

    model = HF()
    report = checkup(model, digits(), lambda out, y: nn.functional.cross_entropy(out.logits, y),
                     torch.optim.Adam(model.parameters(), 1e-3), checks=["loss_sign"])
    assert report.ran == ["loss_sign"] and not report.failed
