"""The training doctor before training: each check finds its planted bug at the right place and stays
silent on the healthy twin; the report renders escaped, converts to a DataFrame, and leaves the model alone."""

import warnings

import numpy as np
import pytest
import torch
from doctor_cases import CASES, MLP, digits
from torch import nn

import activis
from activis.doctor import CHECKS, DoctorError, Finding, Report, checkup

warnings.filterwarnings("ignore", category=UserWarning)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_planted_bug_is_found_at_its_place_and_twin_is_silent(case):
    report = checkup(**case.build(bug=True), checks=[case.check])
    assert case.check in report.ran, report.skipped
    assert case.found(report), report
    twin = checkup(**case.build(bug=False), checks=[case.check])
    assert case.check in twin.ran, twin.skipped
    assert not twin.findings, twin


def test_every_check_has_a_planted_bug():
    assert {c.check for c in CASES} == set(CHECKS)


def test_full_checkup_of_a_healthy_model_is_clean_and_leaves_it_untouched():
    model = MLP(64, 10)
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    rng = torch.get_rng_state()
    report = checkup(model, digits(), nn.CrossEntropyLoss(), opt)
    assert report.clean, report
    assert model.training and all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    assert torch.equal(rng, torch.get_rng_state())
    # a check that cannot run is listed with its reason, never as passed
    assert "train_test_overlap" in report.skipped and "train_test_overlap" not in report.ran
    assert "test_data" in report.skipped["train_test_overlap"]
    assert set(report.ran) | set(report.skipped) == set(CHECKS)


def test_a_check_that_breaks_is_failed_and_the_report_is_never_clean(monkeypatch):
    from activis.doctor.checks import LossSign

    def boom(self, ctx):
        raise RuntimeError("boom")
    monkeypatch.setattr(LossSign, "run", boom)
    report = checkup(MLP(64, 10), digits(), nn.CrossEntropyLoss(), checks=["loss_sign", "loss_shapes"])
    assert "boom" in report.failed["loss_sign"] and "loss_shapes" in report.ran
    assert not report.findings and not report.clean
    assert "1 of 2 checks ran" in report.summary() and "COULD NOT RUN" in report.summary()


def test_report_html_escapes_text_from_the_model_and_converts_to_a_dataframe():
    evil = "<img src=x onerror=alert(1)>"
    f = Finding(check="dead_relu", severity="warning", title="Dead ReLUs", message=f"units of {evil} dead",
                evidence={"dead_fraction": 0.5}, place="node", where=evil, node=evil, change="use <b>GELU</b>")
    report = Report([f], skipped={"x": evil})
    html = report._repr_html_()
    assert evil not in html and "&lt;img src=x" in html and "<b>GELU" not in html
    frame = report.to_dataframe()
    assert list(frame["check"]) == ["dead_relu"] and frame.loc[0, "evidence"] == "dead_fraction = 0.5"
    assert report.markers() == {evil: {"severity": "warning", "count": 1, "title": "Dead ReLUs"}}
    assert report.at(evil) == [f] and not report.clean


def test_bad_input_gets_a_clear_error():
    with pytest.raises(DoctorError, match="data must be one of"):
        checkup(MLP(64, 10), "not data", nn.CrossEntropyLoss())
    with pytest.raises(DoctorError, match="unknown checks"):
        checkup(MLP(64, 10), digits(), nn.CrossEntropyLoss(), checks=["nope"])
    X, y = digits()
    with pytest.raises(DoctorError, match="rows"):
        checkup(MLP(64, 10), (X, y[:10]), nn.CrossEntropyLoss())
    with pytest.raises(DoctorError, match="severity"):
        Finding(check="c", severity="fatal", title="t", message="m")


def test_exported_from_the_package():
    assert activis.checkup is checkup and activis.DoctorError is DoctorError


def test_dataset_and_loader_forms():
    X, y = digits()
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(X), torch.from_numpy(y))
    for data in (dataset, torch.utils.data.DataLoader(dataset, batch_size=32, shuffle=True)):
        report = checkup(MLP(64, 10), data, nn.CrossEntropyLoss(), checks=["input_scale", "batch_labels"])
        assert report.clean, report


def test_transformer_classifier_checks_run():
    from model_zoo import TransformerClassifier

    model = TransformerClassifier()
    tokens = torch.randint(0, 50, (200, 6))
    labels = (tokens[:, 0] % 4)
    report = checkup(model, (tokens, labels), nn.CrossEntropyLoss(), checks=[
        "input_dependence", "gradient_coverage", "non_finite", "input_scale", "dead_relu"])
    assert "input_scale" in report.skipped  # token ids are not a scale question
    assert not report.of("input_dependence") and not report.of("non_finite"), report
    assert np.isfinite(sum(report.seconds.values()))


def test_a_training_run_out_of_time_skips_the_check_instead_of_judging_it():
    report = checkup(MLP(64, 10), digits(), nn.CrossEntropyLoss(), checks=["overfit_batch"], train_seconds=1e-9)
    assert "overfit_batch" in report.skipped and "train_seconds" in report.skipped["overfit_batch"]


class Untraceable(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10)

    def forward(self, x):
        h = self.act(self.fc1(x))
        if h.sum() >= 0:  # data-dependent control flow: torch.fx cannot trace it, the graph comes from hooks
            h = h * 1.0
        return self.fc2(h)


def test_a_model_fx_cannot_trace_is_checked_on_its_module_nodes():
    torch.manual_seed(0)
    model = Untraceable()
    with torch.no_grad():
        model.fc1.bias.fill_(-10.0)
    report = checkup(model, digits(), nn.CrossEntropyLoss(),
                     checks=["input_dependence", "dead_relu", "gradient_coverage"])
    assert {f.node for f in report.of("dead_relu")} == {"act"}
    assert [f.node for f in report.of("input_dependence")] == ["act"]
    assert {f.where for f in report.of("gradient_coverage")} == {"fc1.weight", "fc2.weight"}  # no input reaches fc2


def test_gradients_vanishing_through_a_deep_sigmoid_stack_are_found_at_the_first_layer():
    torch.manual_seed(0)
    layers = [nn.Linear(64, 32), nn.Sigmoid()]
    for _ in range(9):
        layers += [nn.Linear(32, 32), nn.Sigmoid()]
    deep = nn.Sequential(*layers, nn.Linear(32, 10))
    report = checkup(deep, digits(), nn.CrossEntropyLoss(), checks=["init_scale"])
    assert [(f.node, "vanish" in f.message) for f in report.of("init_scale")] == [("_0", True)], report
    shallow = checkup(MLP(64, 10, act=nn.Sigmoid), digits(), nn.CrossEntropyLoss(), checks=["init_scale"])
    assert not shallow.findings, shallow


def test_a_small_bert_from_transformers_is_healthy():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=16, num_labels=3)
    model = transformers.BertForSequenceClassification(config)
    ids = torch.randint(0, 60, (200, 8))
    report = checkup(model, (ids, ids[:, 0] % 3), nn.CrossEntropyLoss(), torch.optim.Adam(model.parameters()),
                     checks=["input_dependence", "gradient_coverage", "non_finite", "randomness", "optimizer",
                             "loss_shapes", "loss_sign", "init_scale", "dead_relu", "input_scale"])
    assert report.clean and set(report.ran) >= {"input_dependence", "gradient_coverage", "init_scale"}, report
