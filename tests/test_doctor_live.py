"""The doctor watching real training loops: each fault switched on mid-run is named by its cause, at its place,
dated within 10 steps of its onset; the healthy twins of the same loop stay silent; findings are kept with the run
(findings.jsonl) and handed to on_finding; the cockpit does not import the doctor."""

import json
import pathlib
import warnings

import pytest
import torch
from doctor_runs import FAULTS, RECIPES, base_loop, train
from torch import nn

import activis

warnings.filterwarnings("ignore")
ONSET = 25


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_a_fault_is_named_by_its_cause_at_its_place_and_step(fault):
    loop = base_loop("MLP", 0, steps=ONSET + 20, **fault.options)
    report = train(loop, fault.fault, ONSET if fault.fault is not None else None)
    found = [d for d in report.diagnoses if d.cause == fault.cause]
    assert found, report
    onset = ONSET if fault.mid_run else 0
    assert found[0].step is not None and onset - 1 <= found[0].step <= onset + 10, report
    assert any(fault.where in (f.where, f.node, f.place) for f in found[0].findings), report
    assert report.diagnoses[0].cause == fault.cause, report  # the cause leads; its symptoms are merged into it
    assert not [d for d in report.diagnoses if d.cause.startswith("learning_rate_too_low")
                and fault.cause == "learning_rate_too_high"]  # never opposite advice


@pytest.mark.parametrize("recipe", ["linear warm-up from 0, then decay", "gradient accumulation over 4",
                                    "zero-initialised head", "clip_grad_norm_ at 1.0"])
def test_healthy_recipes_of_the_same_loop_stay_silent(recipe):
    loop = base_loop("MLP", 0, steps=60)
    RECIPES[recipe](loop)
    report = train(loop)
    assert report.clean, report


def test_findings_are_kept_with_the_run_and_handed_to_on_finding(tmp_path):
    from doctor_cases import MLP, digits

    X, y = (torch.from_numpy(a) for a in digits(300))
    model = MLP(64, 10)
    opt = torch.optim.SGD(model.parameters(), 0.05)
    seen = []
    cockpit = activis.Cockpit(model, ["Loss", "GradNorm"], optimizer=opt, log_dir=tmp_path / "run")
    doctor = activis.watch(cockpit, on_finding=seen.append)
    assert cockpit.doctor is doctor
    with pytest.raises(activis.DoctorError, match="already watched"):
        activis.watch(cockpit)
    for step in range(30):
        if step < 10:
            opt.zero_grad()  # then forgotten
        cockpit.backward(nn.functional.cross_entropy(model(X[:64]), y[:64], reduction="none"))
        opt.step()
    cockpit.close()
    rows = [json.loads(line) for line in (tmp_path / "run" / "findings.jsonl").read_text().splitlines()]
    assert [r["check"] for r in rows] == [f.check for f in doctor.findings] == [f.check for f in seen]
    first = rows[0]
    assert first["cause"] == "missing_zero_grad" and first["step"] == 10 and first["advice"]
    assert set(first) >= {"step", "check", "severity", "title", "cause", "place", "node", "message", "evidence"}


def test_watch_refuses_what_is_not_a_cockpit():
    with pytest.raises(activis.DoctorError, match="watch needs an activis.Cockpit"):
        activis.watch(nn.Linear(2, 2))


def test_the_cockpit_does_not_import_the_doctor():
    cockpit_dir = pathlib.Path(activis.__file__).parent / "cockpit"
    for path in cockpit_dir.glob("*.py"):
        text = path.read_text()
        assert "from ..doctor" not in text and "activis.doctor" not in text, path
