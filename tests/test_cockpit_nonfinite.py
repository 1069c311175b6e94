"""A NaN or infinite loss is recorded at its step with a warning; the instruments go on where they can."""

import math
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from activis.cockpit import Cockpit, read_log

NAN_STEP, INF_STEP, STEPS = 2, 4, 7


def diverging_run(folder, quantities, form):
    """Seven steps; step 2 has one NaN individual loss, step 4 one infinite one; no optimizer step there."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cockpit = Cockpit(model, quantities, optimizer=opt, log_dir=folder)
    g = torch.Generator().manual_seed(3)
    caught = []
    for step in range(STEPS):
        x, y = torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
        opt.zero_grad()
        losses = F.cross_entropy(model(x), y, reduction="none")
        if step == NAN_STEP:
            losses = losses * torch.tensor([math.nan] + [1.0] * 7)
        if step == INF_STEP:
            losses = losses + torch.tensor([math.inf] + [0.0] * 7)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            if form == "context":
                loss = losses.mean()
                with cockpit(step, loss=loss, individual_losses=losses):
                    loss.backward(create_graph=cockpit.create_graph(step))
            else:
                cockpit.backward(losses)
        caught += [(step, str(w.message)) for w in seen]
        if step not in (NAN_STEP, INF_STEP):
            opt.step()
    cockpit.close()
    return cockpit, caught


@pytest.mark.parametrize("quantities, form", [("economy", "context"), ("economy", "call"), ("full", "call")])
def test_a_nan_or_infinite_loss_is_recorded_with_a_warning(tmp_path, quantities, form):
    cockpit, caught = diverging_run(tmp_path / "run", quantities, form)
    frame = cockpit.log.frame()
    assert list(frame.index) == list(range(STEPS))  # every step at its own step, none shifted
    assert math.isnan(frame.loc[NAN_STEP, "Loss"]) and frame.loc[INF_STEP, "Loss"] == math.inf
    warned = [(s, m) for s, m in caught if "the loss at step" in m]
    assert [s for s, _ in warned] == [NAN_STEP, INF_STEP]
    assert "is nan (1 of 8 individual losses are not finite); it is recorded" in warned[0][1]
    # the instruments keep working at the finite steps around the bad ones
    finite = [s for s in range(STEPS) if s not in (NAN_STEP, INF_STEP)]
    names = ["GradNorm", "InnerTest", "NormTest", "OrthoTest"] + (["TICDiag", "HessTrace", "HessMaxEV"]
                                                                  if quantities == "full" else [])
    assert np.isfinite(frame.loc[finite, names].to_numpy(dtype=float)).all()
    assert frame.loc[NAN_STEP, "GradNorm"] != frame.loc[NAN_STEP, "GradNorm"]  # NaN: a NaN gradient's norm
    counts, n_steps = cockpit.log.histogram("GradHist1d")
    assert n_steps == STEPS - 1 and counts.sum() > 0  # the NaN step's histogram is skipped, the others kept
    # the log on disk reads back the same, NaN and infinity included
    again = read_log(tmp_path / "run").frame()
    pd.testing.assert_frame_equal(again, frame)


def test_a_loss_that_is_not_the_mean_is_still_refused():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 3))
    cockpit = Cockpit(model, "economy")
    losses = F.cross_entropy(model(torch.randn(4, 6)), torch.tensor([0, 1, 2, 0]), reduction="none")
    for loss in (losses.mean() * 2, torch.tensor(math.nan)):
        with pytest.raises(ValueError, match=r"is not the mean of individual_losses"):
            with cockpit(0, loss=loss, individual_losses=losses):
                pass
    cockpit.close()
