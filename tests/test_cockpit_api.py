"""The Cockpit in a training loop: both forms, schedules, configurations, and clear refusals."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from activis.cockpit import CONFIGURATIONS, Cockpit, configuration, schedules
from activis.cockpit import quantities as Q


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))


def batches(steps, n=8, dim=6):
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(n, dim, generator=g), torch.randint(0, 3, (n,), generator=g)) for _ in range(steps)]


def train(model, cockpit, opt, data, form="context"):
    for step, (x, y) in enumerate(data):
        opt.zero_grad()
        losses = F.cross_entropy(model(x), y, reduction="none")
        if form == "context":
            loss = losses.mean()
            with cockpit(step, loss=loss, individual_losses=losses):
                loss.backward(create_graph=cockpit.create_graph(step))
        else:
            cockpit.backward(losses)
        opt.step()
    return cockpit


def test_context_and_one_call_forms_record_the_same():
    data = batches(4)
    frames = []
    for form in ("context", "call"):
        model = mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        frames.append(train(model, Cockpit(model, "full", optimizer=opt), opt, data, form).log.frame())
    assert frames[0].columns.equals(frames[1].columns)
    numeric = [c for c in frames[0].columns if c != "hess_diag_method"]
    assert (frames[0][numeric] - frames[1][numeric]).abs().max().max() < 1e-6
    assert frames[0]["Alpha"].notna().sum() == 3


def test_configurations_are_the_references():
    economy = ["Alpha", "Distance", "GradHist1d", "GradNorm", "InnerTest", "Loss", "NormTest", "OrthoTest",
               "UpdateSize"]
    assert [q.name for q in configuration("economy")] == economy
    assert [q.name for q in configuration("business")] == economy + ["TICDiag", "HessTrace"]
    assert [q.name for q in configuration("full")] == economy + ["TICDiag", "HessTrace", "HessMaxEV", "GradHist2d"]
    assert set(CONFIGURATIONS) == {"economy", "business", "full"}
    assert configuration("full", HessMaxEV={"warm_start": True})[-2].warm_start
    with pytest.raises(ValueError, match="Unknown configuration 'first'"):
        configuration("first")
    with pytest.raises(ValueError, match=r"Options for quantities not in 'economy': \['HessMaxEV'\]"):
        configuration("economy", HessMaxEV={})


def test_schedules():
    s = schedules.linear(3, offset=1)
    assert [t for t in range(12) if s(t)] == [1, 4, 7, 10]
    log = schedules.logarithmic(0, 3, steps=10)
    assert log.steps == sorted({0, *torch.logspace(0, 3, 10, dtype=torch.int64).tolist()})
    with pytest.raises(ValueError):
        schedules.linear(0)
    # quantities tracked on their own schedules; a two-step quantity is stored under its start step
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cockpit = Cockpit(model, [Q.Loss(schedules.linear(2)), Q.UpdateSize(schedules.linear(3, 1)),
                              Q.Alpha(schedules.linear(3, 1)), Q.GradNorm(schedules.linear(5))], optimizer=opt)
    frame = train(model, cockpit, opt, batches(8)).log.frame()
    assert list(frame["Loss"].dropna().index) == [0, 2, 4, 6]
    assert list(frame["UpdateSize"].dropna().index) == [1, 4]  # 7 has no step 8 to finish it
    assert list(frame["Alpha"].dropna().index) == [1, 4]
    assert list(frame["GradNorm"].dropna().index) == [0, 5]


def test_one_pass_over_the_parameters_serves_distance_update_size_and_alpha_on_any_schedule():
    # Adam: the update is not the gradient, so Alpha takes the snapshot's difference as direction
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    cockpit = Cockpit(model, [Q.Distance(schedules.linear(2)), Q.UpdateSize(schedules.linear(3, 1)),
                              Q.Alpha(schedules.linear(2, 1))], optimizer=opt)
    seen = []
    for x, y in batches(9):
        seen.append([p.detach().clone() for p in model.parameters()])
        opt.zero_grad()
        cockpit.backward(F.cross_entropy(model(x), y, reduction="none"))
        opt.step()
    frame = cockpit.log.frame()

    def norm(a, b):
        return math.sqrt(sum(float(torch.dist(p.double(), q.double())) ** 2 for p, q in zip(a, b)))

    assert list(frame["Distance"].dropna().index) == [0, 2, 4, 6, 8]
    for t in (2, 4, 6, 8):
        assert frame.loc[t, "Distance"] == pytest.approx(norm(seen[t], seen[0]), rel=1e-9)
    assert list(frame["UpdateSize"].dropna().index) == [1, 4, 7]
    for t in (1, 4, 7):
        assert frame.loc[t, "UpdateSize"] == pytest.approx(norm(seen[t + 1], seen[t]), rel=1e-9)
    assert frame["Alpha"].notna().sum() == 4  # 1, 3, 5, 7
    costs = set(cockpit.costs()["name"])
    assert "parameter_pass" in costs and not {"distances", "snapshot"} & costs


def test_quantities_that_cannot_be_had_are_skipped_with_the_reason():
    # BatchNorm in training mode mixes the samples: no per-sample quantity, the others still come
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cockpit = Cockpit(model, "economy", optimizer=opt)
    with pytest.warns(UserWarning, match="BatchNorm in training mode"):
        frame = train(model, cockpit, opt, batches(3)).log.frame()
    assert {"Loss", "GradNorm", "Distance", "UpdateSize"} <= set(frame.columns)
    assert not {"NormTest", "InnerTest", "OrthoTest", "Alpha"} & set(frame.columns)
    assert "GradHist1d" not in cockpit.log._rows or not cockpit.log._rows["GradHist1d"]
    assert "BatchNorm in training mode (1)" in cockpit.skipped["NormTest"]
    assert cockpit.log.skipped == cockpit.skipped
    # the same model with BatchNorm in eval mode: per-sample gradients are defined again
    model.eval()
    cockpit = Cockpit(model, "economy", optimizer=opt)
    assert "NormTest" in train(model, cockpit, opt, batches(2)).log.frame() and cockpit.skipped == {}


def test_plain_sgd_only_quantities_and_missing_graph():
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    cockpit = Cockpit(model, [Q.CABS(), Q.EarlyStopping(), Q.MeanGSNR(), Q.HessMaxEV()], optimizer=opt)
    with pytest.warns(UserWarning, match="skipped"):
        for step, (x, y) in enumerate(batches(2)):
            opt.zero_grad()
            losses = F.cross_entropy(model(x), y, reduction="none")
            with cockpit(step, individual_losses=losses):
                losses.mean().backward()  # no create_graph: no Hessian-vector products
            opt.step()
    assert "plain SGD only" in cockpit.skipped["CABS"] and "Adam" in cockpit.skipped["EarlyStopping"]
    assert "create_graph=cockpit.create_graph(step)" in cockpit.skipped["HessMaxEV"]
    assert set(cockpit.log.frame().columns) == {"MeanGSNR", "batch_size", "lr"}
    # plain SGD gets both, and the graph is released after the step (no grad <-> graph cycle)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cockpit = Cockpit(model, [Q.CABS(), Q.EarlyStopping(), Q.HessMaxEV()], optimizer=opt)
    frame = train(model, cockpit, opt, batches(2)).log.frame()
    assert frame[["CABS", "EarlyStopping", "HessMaxEV"]].notna().all().all()
    assert all(p.grad.grad_fn is None for p in model.parameters())


def test_bad_input_gets_a_clear_error():
    model = mlp()
    cockpit = Cockpit(model, "economy")
    x, y = batches(1)[0]
    losses = F.cross_entropy(model(x), y, reduction="none")
    with pytest.raises(ValueError, match="not the mean of individual_losses"):
        with cockpit(0, loss=losses.sum(), individual_losses=losses):
            pass
    with pytest.raises(ValueError, match="1-D tensor with one loss per sample"):
        with cockpit(0, individual_losses=losses[:, None]):
            pass
    with pytest.raises(ValueError, match="pass loss=... or individual_losses"):
        with cockpit(0):
            pass
    with pytest.raises(TypeError, match="not a quantity"):
        Cockpit(model, [Q.Loss(), 3])
    with pytest.raises(ValueError, match="unknown quantity 'GradNrom'; known quantities: Loss, GradNorm"):
        Cockpit(model, ["Loss", "GradNrom"])
    assert [q.name for q in Cockpit(model, [Q.Loss, "GradNorm"]).quantities] == ["Loss", "GradNorm"]
    with pytest.raises(ValueError, match="each quantity may appear once"):
        Cockpit(model, [Q.Loss(), Q.Loss()])
    with pytest.raises(ValueError, match="hessian_diagonal must be one of"):
        Cockpit(model, "business", hessian_diagonal="exact")
    with pytest.raises(ValueError, match="quantity names"):
        cockpit.log_metrics(0, Loss=1.0)


def test_unsupported_layers_fall_back_to_torch_func_and_dropout_stops_it():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.LayerNorm(5), nn.ReLU(), nn.Dropout(0.5), nn.Linear(5, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cockpit = Cockpit(model, [Q.NormTest(), Q.GradNorm()], optimizer=opt)
    with pytest.warns(UserWarning, match="cannot repeat the masks of dropout"):
        train(model, cockpit, opt, batches(2))
    assert "1.weight" in cockpit.skipped["NormTest"]
    # without dropout (or with it in eval mode) the LayerNorm parameters come from vmap(grad)
    model[3].eval()
    cockpit = Cockpit(model, [Q.NormTest()], optimizer=opt)
    frame = train(model, cockpit, opt, batches(2)).log.frame()
    assert frame["NormTest"].notna().all() and cockpit.skipped == {}


def test_estimators_are_named_and_close_removes_the_hooks():
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    assert Cockpit(model, "business").hess_method == "full"
    assert Cockpit(model, "business", full_hessian_max_params=10).hess_method == "hutchinson"
    note = Cockpit(model, "business", hessian_diagonal="ggn").hess_note
    assert note.startswith("Gauss-Newton approximation") and "Tanh" in note
    assert Cockpit(model, "economy").hess_method == "none"
    cockpit = Cockpit(mlp(), "economy")
    cockpit.close()
    cockpit.model(torch.randn(2, 6))
    assert cockpit.taps.args == () and all(not layer.calls for layer in cockpit.taps.layers)


def test_alpha_is_minus_one_without_a_step_and_signals_overshooting():
    # lr = 0: no step at all
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    frame = train(model, Cockpit(model, [Q.Alpha()], optimizer=opt), opt, batches(3)).log.frame()
    assert (frame["Alpha"].dropna() == -1).all()
    # a quadratic bowl: small steps stay on their side (alpha < 0), huge steps jump past the floor
    for lr, sign in ((0.05, -1), (1.9, 1)):
        w = nn.Linear(4, 1, bias=False)
        opt = torch.optim.SGD(w.parameters(), lr=lr)
        cockpit = Cockpit(w, [Q.Alpha()], optimizer=opt)
        g = torch.Generator().manual_seed(0)
        for _ in range(6):
            x = torch.randn(64, 4, generator=g)
            opt.zero_grad()
            cockpit.backward(((w(x) - x.sum(1, keepdim=True)) ** 2).squeeze(1) / 2)
            opt.step()
        alphas = cockpit.log.frame()["Alpha"].dropna()
        assert len(alphas) == 5 and all(math.copysign(1, a) == sign for a in alphas)


def test_costs_count_each_quantity_and_shared_reduction_once():
    import time

    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cockpit = Cockpit(model, [Q.Alpha(), Q.InnerTest(), Q.HessTrace(schedules.linear(2)), Q.Loss()],
                      optimizer=opt)
    start = time.perf_counter()
    train(model, cockpit, opt, batches(5), form="call")
    wall = time.perf_counter() - start
    costs = cockpit.costs().set_index("name")
    assert {"Alpha", "InnerTest", "HessTrace", "Loss", "per_sample", "dots_mean", "hess_diag"} <= set(costs.index)
    assert costs.loc["Alpha", "calls"] == 9  # started at 5 steps, finished at 4
    assert costs.loc["HessTrace", "calls"] == 3 and costs.loc["per_sample", "calls"] == 5
    assert costs.loc["per_sample", "shared"] and not costs.loc["Alpha", "shared"]
    assert (costs[["first_ms", "mean_ms", "total_s"]] >= 0).all().all()
    # nested blocks are not counted twice: the parts add up to no more than the whole loop
    assert costs["total_s"].sum() <= wall
