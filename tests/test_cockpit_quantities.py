"""Every cockpit quantity against an exact float64 reference computed here, by other means.

The references take per-sample gradients from a Python loop of single-sample backward passes and
the Hessian from ``torch.autograd.functional.hessian``, then apply each definition of
``shared/cockpit-quantities.md`` literally on the materialised B x D matrix; the cockpit uses
closed forms from layer hooks, ``torch.func`` and Gauss-Newton backpropagation instead.
"""

import copy
import functools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from activis.cockpit import Cockpit
from activis.cockpit import quantities as Q

B = 7
LR = 0.05


# ------------------------------------------------------------------ small models, float64
class SeqModel(nn.Module):
    """A Linear layer over a sequence (per-sample gradients sum over positions)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 5)
        self.head = nn.Linear(5, 3)

    def forward(self, x):
        return self.head(torch.relu(self.proj(x)).mean(1))


class Shared(nn.Module):
    """One Linear layer called twice: its weights enter quadratically (not piecewise linear)."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(6, 4)
        self.mid = nn.Linear(4, 4)
        self.out = nn.Linear(4, 3)

    def forward(self, x):
        return self.out(torch.relu(self.mid(torch.relu(self.mid(torch.relu(self.inp(x)))))))


MODELS = {
    "mlp": (lambda: nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3)),
            (6,)),
    "cnn": (lambda: nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                                  nn.Linear(12, 3)), (2, 4, 4)),
    "conv1d": (lambda: nn.Sequential(nn.Conv1d(4, 4, 3, stride=2, groups=2, padding="valid"), nn.ReLU(),
                                     nn.Flatten(), nn.Linear(12, 3)), (4, 7)),
    "seq": (SeqModel, (4, 3)),
    "tanh_layernorm": (lambda: nn.Sequential(nn.Linear(6, 5), nn.LayerNorm(5), nn.Tanh(), nn.Linear(5, 3)),
                       (6,)),
    "shared": (Shared, (6,)),
}


def ce(out, y):
    return F.cross_entropy(out, y, reduction="none")


def mse(out, y):
    return (out - F.one_hot(y, 3).to(out)).square().sum(1)


def all_quantities(maxev="lanczos"):
    return [Q.Loss(), Q.GradNorm(), Q.Distance(), Q.UpdateSize(), Q.NormTest(), Q.InnerTest(), Q.OrthoTest(),
            Q.HessMaxEV(method=maxev), Q.HessTrace(), Q.TICDiag(), Q.TICTrace(), Q.MeanGSNR(), Q.CABS(),
            Q.EarlyStopping(), Q.GradHist1d(), Q.GradHist2d(), Q.Alpha()]


def batch(shape, t, scale=1.0):
    g = torch.Generator().manual_seed(100 + t)
    x = torch.randn(B, *shape, generator=g, dtype=torch.float64) * scale
    return x, torch.randint(0, 3, (B,), generator=g)


def train(name, quantities, steps=3, loss_fn=ce, scale=1.0, optimizer=None, clip=None, **cockpit_args):
    factory, shape = MODELS[name]
    torch.manual_seed(0)
    model = factory().double()
    opt = (optimizer or (lambda ps: torch.optim.SGD(ps, lr=LR)))(model.parameters())
    cockpit = Cockpit(model, quantities, optimizer=opt, **cockpit_args)
    snapshots = []
    for t in range(steps):
        x, y = batch(shape, t, scale)
        snapshots.append(([p.detach().clone() for p in model.parameters()], x, y))
        opt.zero_grad()
        losses = loss_fn(model(x), y)
        loss = losses.mean()
        with cockpit(t, loss=loss, individual_losses=losses):
            loss.backward(create_graph=cockpit.create_graph(t))
        if clip is not None:  # elementwise: the step leaves the gradient's direction
            torch.nn.utils.clip_grad_value_(model.parameters(), clip)
        opt.step()
    snapshots.append(([p.detach().clone() for p in model.parameters()], None, None))
    return model, cockpit, snapshots


# ------------------------------------------------------------------ the references
class Reference:
    """Exact quantities of one step from materialised per-sample gradients and the full Hessian."""

    def __init__(self, model, params, x, y, loss_fn):
        self.model = copy.deepcopy(model)
        with torch.no_grad():
            for p, v in zip(self.model.parameters(), params):
                p.copy_(v)
        self.names = [n for n, _ in self.model.named_parameters()]
        self.shapes = [p.shape for p in self.model.parameters()]
        self.sizes = [p.numel() for p in self.model.parameters()]
        self.theta = torch.cat([v.reshape(-1) for v in params])
        rows, losses = [], []
        for i in range(len(x)):  # one backward pass per sample
            self.model.zero_grad()
            loss = loss_fn(self.model(x[i:i + 1]), y[i:i + 1]).sum()
            loss.backward()
            losses.append(loss.item())
            rows.append(torch.cat([p.grad.reshape(-1) for p in self.model.parameters()]))
        self.G = torch.stack(rows)
        self.losses = torch.tensor(losses, dtype=torch.float64)
        self.g = self.G.mean(0)

        def mean_loss(flat):
            chunks = [c.reshape(s) for c, s in zip(flat.split(self.sizes), self.shapes)]
            out = functional_call(self.model, dict(zip(self.names, chunks)), (x,))
            return loss_fn(out, y).mean()

        self._mean_loss = mean_loss

    @functools.cached_property
    def H(self):
        # torch.autograd's reverse-over-reverse: torch.func.hessian (and jacrev(jacrev)) get the
        # second derivatives through LayerNorm wrong in torch 2.13 (checked against finite differences)
        return torch.autograd.functional.hessian(self._mean_loss, self.theta)

    def blocks(self, vec):
        return list(vec.split(self.sizes, dim=-1))

    def values(self):
        G, g, H, Bn = self.G, self.g, self.H, self.G.shape[0]
        L = float(self.losses.mean())
        g2 = float(g @ g)
        M = (G ** 2).mean(0)
        diag = torch.diagonal(H)
        centred = ((G - g) ** 2).sum(1)
        inner = (G @ g - g2) ** 2
        ortho = ((G - (G @ g / g2)[:, None] * g) ** 2).sum(1)
        var = G.var(0)  # unbiased
        out = {
            "Loss": L,
            "GradNorm": [float(b.norm()) for b in self.blocks(g)],
            "NormTest": math.sqrt(float(centred.sum()) / (Bn * (Bn - 1) * g2)),
            "InnerTest": math.sqrt(float(inner.sum()) / (Bn * (Bn - 1) * g2 ** 2)),
            "OrthoTest": math.sqrt(float(ortho.sum()) / (Bn * (Bn - 1) * g2)),
            "HessMaxEV": float(torch.linalg.eigvalsh(H).max()),
            "HessTrace": [float(b.sum()) for b in self.blocks(diag)],
            "TICDiag": float((M / (diag + 1e-7)).sum()),
            "TICTrace": float(M.sum() / (diag.sum() + 1e-7)),
            "MeanGSNR": float((g ** 2 / (M - g ** 2 + 1e-5)).mean()),
            "CABS": LR * float(centred.sum()) / (Bn * L),
            "EarlyStopping": float(1 - Bn * (g ** 2 / (var + 1e-5)).mean()),
        }
        out["GradHist1d"] = np.stack([hist1d(b.reshape(-1), 100, -2, 2) for b in self.blocks(G)])
        out["GradHist2d"] = np.stack([hist2d(b, th, (40, -1, 1), (50, -2, 2))
                                      for b, th in zip(self.blocks(G), self.blocks(self.theta))])
        return out


def hist1d(values, bins, lo, hi):
    width = (hi - lo) / bins
    idx = np.clip(np.floor((values.numpy() - lo) / width), 0, bins - 1).astype(int)
    return np.bincount(idx, minlength=bins)


def hist2d(grads, theta, gspec, pspec):
    """The reference's clamp to the centres of the edge bins, then uniform bins."""
    (gb, glo, ghi), (pb, plo, phi) = gspec, pspec
    gw, pw = (ghi - glo) / gb, (phi - plo) / pb
    gv = np.clip(grads.numpy(), glo + gw / 2, ghi - gw / 2)
    pv = np.broadcast_to(np.clip(theta.numpy(), plo + pw / 2, phi - pw / 2), gv.shape)
    gi = np.floor((gv - glo) / gw).astype(int)
    pi = np.floor((pv - plo) / pw).astype(int)
    return np.bincount((gi * pb + pi).reshape(-1), minlength=gb * pb).reshape(gb, pb)


def reference_alpha(ref0, ref1, theta0, theta1):
    """Alpha by its definition: WLS quadratic fit with an explicit inverse, as in the spec."""
    d = theta1 - theta0
    tau = float(d.norm())
    s0, s1 = ref0.G @ d / tau, ref1.G @ d / tau
    f = [float(ref0.losses.mean()), float(ref1.losses.mean())]
    variances = [float(ref0.losses.var()), float(ref1.losses.var()), float(s0.var()), float(s1.var())]
    phi = np.array([[1, 0, 0], [1, tau, tau ** 2], [0, 1, 0], [0, 1, 2 * tau]], dtype=float)
    lam_inv = np.linalg.inv(np.diag([v if v != 0 else 1e-10 for v in variances]))
    y = np.array([f[0], f[1], float(s0.mean()), float(s1.mean())])
    mu = np.linalg.inv(phi.T @ lam_inv @ phi) @ phi.T @ lam_inv @ y
    if mu[2] < 0:
        return -1.0
    return tau / (-mu[1] / (2 * mu[2])) - 1


def assert_close(name, got, want, rtol=1e-7, atol=1e-10):
    got_arr, want_arr = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    assert got_arr.shape == want_arr.shape, f"{name}: shape {got_arr.shape} != {want_arr.shape}"
    np.testing.assert_allclose(got_arr, want_arr, rtol=rtol, atol=atol, err_msg=name)


# ------------------------------------------------------------------ the comparisons
@pytest.mark.parametrize("name", list(MODELS))
def test_every_quantity_matches_the_exact_reference(name):
    model, cockpit, snaps = train(name, all_quantities())
    frame = cockpit.log.frame()
    assert cockpit.skipped == {}
    expected_method = "ggn" if name in ("mlp", "cnn", "conv1d", "seq") else "full"
    assert cockpit.hess_method == expected_method
    refs = [Reference(model, params, x, y, ce) for params, x, y in snaps[:-1]]
    for t, ref in enumerate(refs):
        record = cockpit.log.record(t)
        for key, want in ref.values().items():
            if key.startswith("GradHist"):
                total, steps = cockpit.log.histogram(key, t, t)
                assert steps == 1
                np.testing.assert_array_equal(total, want.sum(0), err_msg=f"{name} step {t} {key}")
                np.testing.assert_array_equal(cockpit.log._rows[key][t], want, err_msg=f"{name} {t} {key}")
            else:
                assert_close(f"{name} step {t} {key}", record[key], want)
        distance = [float((a - b).norm()) for a, b in zip(snaps[t][0], snaps[0][0])]
        assert_close(f"{name} Distance {t}", record["Distance"], distance)
        if t + 1 < len(refs):
            update = [float((a - b).norm()) for a, b in zip(snaps[t + 1][0], snaps[t][0])]
            assert_close(f"{name} UpdateSize {t}", record["UpdateSize"], update)
            alpha = reference_alpha(ref, refs[t + 1], refs[t].theta, refs[t + 1].theta)
            assert_close(f"{name} Alpha {t}", record["Alpha"], alpha, rtol=1e-6)
    # the last step has no successor: no UpdateSize or Alpha for it, and no fake value either
    assert math.isnan(frame.loc[len(refs) - 1, "Alpha"])


@pytest.mark.parametrize("variant", ["sgd", "clipped", "momentum", "adam"])
def test_alpha_follows_the_actual_step_whatever_the_optimizer(variant):
    # plain SGD takes the shortcut through Gram matrices; clipping between backward() and step(),
    # momentum or Adam move along another direction, which Alpha must then project on
    optimizers = {"momentum": lambda ps: torch.optim.SGD(ps, lr=LR, momentum=0.9),
                  "adam": lambda ps: torch.optim.Adam(ps, lr=0.01)}
    model, cockpit, snaps = train("cnn", [Q.Alpha()], steps=4, optimizer=optimizers.get(variant),
                                  clip=0.01 if variant == "clipped" else None)
    refs = [Reference(model, params, x, y, ce) for params, x, y in snaps[:-1]]
    for t in range(3):
        want = reference_alpha(refs[t], refs[t + 1], refs[t].theta, refs[t + 1].theta)
        assert_close(f"Alpha {variant} {t}", cockpit.log.record(t)["Alpha"], want, rtol=1e-6)


def test_gauss_newton_diagonal_is_the_hessian_diagonal_for_mse_too():
    model, cockpit, snaps = train("mlp", [Q.HessTrace(), Q.TICDiag()], loss_fn=mse, steps=2)
    assert cockpit.hess_method == "ggn"
    for t, (params, x, y) in enumerate(snaps[:-1]):
        ref = Reference(model, params, x, y, mse).values()
        assert_close("HessTrace mse", cockpit.log.record(t)["HessTrace"], ref["HessTrace"])
        assert_close("TICDiag mse", cockpit.log.record(t)["TICDiag"], ref["TICDiag"])


def test_power_iteration_is_the_reference_one_and_lanczos_is_accurate():
    # a two-sided spectrum (cross-entropy at a random init): power finds |lambda|max, loosely
    model, cockpit, snaps = train("tanh_layernorm", [Q.HessMaxEV(method="power")], steps=2)
    _, lanczos_cp, _ = train("tanh_layernorm", [Q.HessMaxEV(method="lanczos")], steps=2)
    _, warm_cp, _ = train("tanh_layernorm", [Q.HessMaxEV(method="power", warm_start=True)], steps=2)
    for t, (params, x, y) in enumerate(snaps[:-1]):
        eig = torch.linalg.eigvalsh(Reference(model, params, x, y, ce).H)
        largest_magnitude = float(eig[eig.abs().argmax()])
        assert abs(cockpit.log.record(t)["HessMaxEV"] - largest_magnitude) <= 0.05 * abs(largest_magnitude)
        assert abs(warm_cp.log.record(t)["HessMaxEV"] - largest_magnitude) <= 0.05 * abs(largest_magnitude)
        assert_close("lanczos", lanczos_cp.log.record(t)["HessMaxEV"], float(eig.max()), rtol=1e-6)


def test_hutchinson_estimate_is_labelled_and_unbiased():
    samples = 1000
    model, cockpit, snaps = train("tanh_layernorm", [Q.HessTrace()], steps=1,
                                  hessian_diagonal="hutchinson", hutchinson_samples=samples)
    assert cockpit.hess_method == "hutchinson"
    assert cockpit.log.meta["hess_diag_note"].startswith("ESTIMATE")
    assert cockpit.log.record(0)["hess_diag_method"] == "hutchinson"
    params, x, y = snaps[0]
    ref = Reference(model, params, x, y, ce)
    want = ref.values()["HessTrace"]
    got = cockpit.log.record(0)["HessTrace"]
    # z'Hz over Rademacher z has variance 2 sum_{i != j} H_ij^2: the mean of the samples is within 4 sigma
    off = ref.H - torch.diag(torch.diagonal(ref.H))
    sigma = math.sqrt(2 * float((off ** 2).sum()) / samples)
    assert abs(sum(got) - sum(want)) < 4 * sigma < 0.5 * abs(sum(want))


def test_histograms_count_clipped_values_in_the_edge_bins():
    # large inputs: many per-sample gradient elements beyond the ranges, all still counted
    model, cockpit, snaps = train("mlp", [Q.GradHist1d(), Q.GradHist2d()], steps=1, scale=300.0)
    params, x, y = snaps[0]
    ref = Reference(model, params, x, y, ce).values()
    h1 = cockpit.log._rows["GradHist1d"][0]
    np.testing.assert_array_equal(h1, ref["GradHist1d"])
    assert h1[:, [0, -1]].sum() > 0.05 * h1.sum()
    np.testing.assert_array_equal(cockpit.log._rows["GradHist2d"][0], ref["GradHist2d"])


def test_monte_carlo_gauss_newton_is_labelled_and_unbiased():
    model, cockpit, snaps = train("mlp", [Q.HessTrace()], steps=1, hessian_diagonal="ggn-mc", mc_samples=1500)
    assert cockpit.log.meta["hess_diag_note"].startswith("ESTIMATE")
    assert cockpit.log.record(0)["hess_diag_method"] == "ggn-mc"
    params, x, y = snaps[0]
    want = Reference(model, params, x, y, ce).values()["HessTrace"]
    np.testing.assert_allclose(cockpit.log.record(0)["HessTrace"], want, rtol=0.1)


def test_power_iteration_stops_on_a_zero_product():
    from activis.cockpit.hessian import power_iteration

    class ZeroHessian:
        params = [torch.zeros(3, 2), torch.zeros(4)]

        def matvec(self, vecs):
            return [torch.zeros_like(v) for v in vecs]

    start = [torch.ones(3, 2), torch.ones(4)]
    value, vec = power_iteration(ZeroHessian(), start)
    assert value == 0.0 and [v.shape for v in vec] == [(3, 2), (4,)]
    assert torch.equal(start[0], torch.ones(3, 2))  # the caller's start vector is left alone
