"""Bad calls against the run record, checkpoints, dynamics and the views over a run, as a user makes them.

Each refusal is the concept's one error class (RunError, CaptureError, DynamicsError, StoreError,
ParamsError, ViewError) naming the argument and what is valid, and changes no file of the run. The
calls that are accepted on purpose (a finding without a step, a chart bound of 5.0) are tested as such.
"""

from __future__ import annotations

import math
import pathlib
import shutil

import numpy as np
import pytest
import torch
from timeline_run import make_run

import activis
from activis import CockpitError, CockpitLog, RunError
from activis.capturing import CaptureError
from activis.dynamics import DynamicsError, aligned_projection, cka, forgotten, prediction_changed
from activis.run.params import ParamsError
from activis.store import StoreError
from activis.widgets.errors import ViewError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("fuzz_runs") / "run", steps=11)


@pytest.fixture
def run_path(pristine, tmp_path):
    return pathlib.Path(shutil.copytree(pristine, tmp_path / "run"))


def _a_file(tmp_path):
    path = tmp_path / "a_file"
    path.write_text("x")
    return path


def _logits(checkpoints=4, n=30, classes=3):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, classes, n)
    learning = np.linspace(0, 4, checkpoints)[:, None, None] * np.eye(classes)[labels]
    return learning + rng.normal(size=(checkpoints, n, classes)), labels


def _record(tmp_path, step, close_first=False):
    recorder = activis.DynamicsRecorder(tmp_path / "dyn")
    if close_first:
        recorder.record(0, [0, 1], torch.zeros(2, 3), [0, 1])
        recorder.close()
    recorder.record(step, [0, 1], torch.zeros(2, 3), [0, 1])


def _log(tmp_path, closed=False):
    log = CockpitLog({"run": "r", "params": [], "quantities": {"Loss": {}}}, tmp_path / "log")
    log.append(0, {"Loss": 1.0})
    if closed:
        log.close()
    return log


def _checkpoints(run, **kwargs):
    model = torch.nn.Linear(8, 4)
    return activis.Checkpoints(model, (torch.randn(6, 8), torch.arange(6) % 4), run, **kwargs)


CASES = {
    # the run record: paths, findings, charts
    "open_run of a number": (lambda r, t: activis.open_run(42), RunError, r"run is a folder's path.*not int 42"),
    "open_run of empty text": (lambda r, t: activis.open_run(""), RunError, r"folder's path"),
    "open_run of a file": (lambda r, t: activis.open_run(_a_file(t)), RunError, r"is a file"),
    "Run.create over a file": (lambda r, t: activis.Run.create(_a_file(t)), RunError, r"is a file"),
    "Run.create overwrite as text": (lambda r, t: activis.Run.create(t / "new", overwrite="yes"), RunError,
                                     r"overwrite is True or False"),
    "a finding's unknown severity": (
        lambda r, t: activis.open_run(r).add_finding({"step": 3, "check": "plateau", "severity": "catastrophic"}),
        RunError, r"'severity' is one of 'error', 'warning', 'note', not 'catastrophic'"),
    "a finding's NaN step": (lambda r, t: activis.open_run(r).add_finding({"step": math.nan}), RunError, r"'step'"),
    "compare a file": (lambda r, t: activis.compare([_a_file(t)]), RunError, r"is a file"),
    "compare a missing folder": (lambda r, t: activis.compare([t / "nope"]), RunError, r"no such folder"),
    "chart of an unknown series": (lambda r, t: activis.compare([r]).chart(["NoSuch"], width=200), RunError,
                                   r"'NoSuch'.*the series: Loss"),
    "chart of text, not a list": (lambda r, t: activis.compare([r]).chart("Loss"), RunError, r"\['Loss'\]"),
    "chart start after stop": (lambda r, t: activis.compare([r]).chart(["Loss"], start=10, stop=2), RunError,
                               r"start=10 is after stop=2"),
    "chart start NaN": (lambda r, t: activis.compare([r]).chart(["Loss"], start=math.nan), RunError,
                        r"start is a step.*nan"),
    "chart stop as text": (lambda r, t: activis.compare([r]).chart(["Loss"], stop="9"), RunError, r"stop is a step"),
    "means of an unknown series": (lambda r, t: activis.compare([r]).means(["NoSuch"]), RunError, r"'NoSuch'"),
    # other folders: the store, the parameters, the dynamics
    "open_store of a number": (lambda r, t: activis.open_store(42), StoreError, r"store is a folder's path"),
    "load_params of a number": (lambda r, t: activis.load_params(42, 5), ParamsError, r"run is a folder's path"),
    "read_dynamics of a number": (lambda r, t: activis.read_dynamics(42), DynamicsError, r"folder's path"),
    "read_dynamics of a file": (lambda r, t: activis.read_dynamics(_a_file(t)), DynamicsError, r"is a file"),
    # checkpoints and the dynamics recorder
    "Checkpoints of a model given as text": (
        lambda r, t: activis.Checkpoints("mlp", (torch.zeros(2, 8), torch.zeros(2)), t / "r", every=5),
        CaptureError, r"model=.*not str"),
    "Checkpoints with params as text": (lambda r, t: _checkpoints(t / "r", every=5, params="yes"), CaptureError,
                                        r"params is True .* or False, not 'yes'"),
    "Checkpoints into a file": (lambda r, t: _checkpoints(_a_file(t), every=5), CaptureError, r"is a file"),
    "DynamicsRecorder into a file": (lambda r, t: activis.DynamicsRecorder(_a_file(t)), CaptureError, r"is a file"),
    "record at step -1": (lambda r, t: _record(t, -1), DynamicsError, r"step .*0 or more, not -1"),
    "record at step 2.5": (lambda r, t: _record(t, 2.5), DynamicsError, r"step .*whole number.*2.5"),
    "record after close": (lambda r, t: _record(t, 1, close_first=True), DynamicsError, r"closed"),
    "record a negative index": (
        lambda r, t: activis.DynamicsRecorder(t / "d").record(0, [-2, 1], torch.zeros(2, 3), [0, 1]),
        DynamicsError, r"index -2"),
    # the step log
    "log a step as text": (lambda r, t: _log(t).append("1", {"Loss": 1.0}), CockpitError, r"step .*not '1'"),
    "log a NaN step": (lambda r, t: _log(t).append(math.nan, {"Loss": 1.0}), CockpitError, r"step .*not nan"),
    "log a step after close": (lambda r, t: _log(t, closed=True).append(2, {"Loss": 1.0}), CockpitError,
                               r"is closed"),
    # computed dynamics: thresholds, counts, positions
    "data_map ambiguous_above below 0": (lambda r, t: activis.data_map(*_logits(), ambiguous_above=-0.1),
                                         DynamicsError, r"ambiguous_above.*between 0 and 0.5"),
    "data_map easy_above NaN": (lambda r, t: activis.data_map(*_logits(), easy_above=math.nan), DynamicsError,
                                r"easy_above.*between 0 and 1"),
    "data_map easy_above as text": (lambda r, t: activis.data_map(*_logits(), easy_above="0.5"), DynamicsError,
                                    r"easy_above"),
    "forgotten k=1.5": (lambda r, t: forgotten(activis.data_map(*_logits()), 1.5), DynamicsError,
                        r"k must be at least 1 \(a whole number\), not 1.5"),
    "prediction_changed at position 1.5": (lambda r, t: prediction_changed(_logits()[0], 1.5, 2), DynamicsError,
                                           r"a \(a checkpoint\) must be a whole number"),
    "cka max_rows NaN": (lambda r, t: cka(_logits()[0][0], _logits()[0][1], max_rows=math.nan), DynamicsError,
                         r"max_rows"),
    "cka debiased as text": (lambda r, t: cka(_logits()[0][0], _logits()[0][1], debiased="yes"), DynamicsError,
                             r"debiased is True or False"),
    "aligned_projection n_neighbors 0": (lambda r, t: aligned_projection(list(_logits()[0][:2]), n_neighbors=0),
                                         DynamicsError, r"n_neighbors must be at least 2"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_bad_call_is_refused_by_its_concepts_error_and_changes_no_file(name, run_path, tmp_path):
    call, error, message = CASES[name]
    before = {p: p.read_bytes() for p in run_path.rglob("*") if p.is_file()}
    with pytest.raises(error, match=message):
        call(run_path, tmp_path)
    assert {p: p.read_bytes() for p in run_path.rglob("*") if p.is_file()} == before


def test_what_is_accepted_on_purpose(run_path, tmp_path):
    run = activis.open_run(run_path)
    run.add_finding({"check": "no step"})  # a checkup's findings (before training) have no step
    assert run.findings["step"].isna().all()
    chart = activis.compare([run]).chart(["Loss"], start=2.0, stop=8, width=100)  # a brush's whole floats
    assert chart.steps.min() >= 2 and chart.steps.max() <= 8
    with activis.DynamicsRecorder(tmp_path) as recorder:
        recorder.record(torch.tensor(3), [0, 1], torch.zeros(2, 3), [0, 1])  # a step counter kept as a tensor
    assert activis.read_dynamics(tmp_path / "dynamics").rows["step"].tolist() == [3, 3]


@pytest.fixture(scope="module")
def explorer(pristine):
    run = activis.open_run(pristine)
    return activis.Explorer(run.store, run=run, method="pca", projection_params={"n_epochs": 30})


def test_a_trait_of_the_wrong_type_is_a_view_error_naming_the_trait_and_the_valid_values(explorer):
    shown = explorer.checkpoint
    with pytest.raises(ViewError, match=r"'checkpoint' trait.*not the str '5'.*Valid values: 0, 5, 10"):
        explorer.checkpoint = "5"
    with pytest.raises(ViewError, match=r"checkpoint=7 is not a checkpoint.*0, 5, 10"):
        explorer.checkpoint = 7
    assert explorer.checkpoint == shown
    with pytest.raises(ViewError, match=r"'layer' trait.*Valid values: "):
        explorer.cockpit.layer = 5
    with pytest.raises(ViewError, match=r"'step' trait.*Valid values: 0, 5, 10"):
        explorer.timeline.view.step = "10"


@pytest.mark.parametrize("bad", [[math.nan, 5], [0, math.inf], [5]])
def test_a_step_range_that_is_not_two_finite_steps_is_refused_by_every_panel(explorer, pristine, bad):
    panels = [explorer.cockpit, activis.RunsPanel([pristine])]
    for panel in panels:
        panel.step_range = [2, 8]
        with pytest.raises(ViewError, match=r"step_range is \[first, last\] \(two finite steps"):
            panel.step_range = bad
        assert list(panel.step_range) == [2.0, 8.0]
