"""The instruments' quantities: one class per quantity, each tracked on its own schedule.

Definitions and conventions are the reference implementation's (cockpit-for-pytorch 1.0.2), so
numbers agree: B is the batch size, g_i the unscaled per-sample gradient, g their mean (the
gradient of the mean loss L), M_d = (1/B) sum_i g_id**2. A value tracked at step t describes the
parameters and mini-batch of step t, before ``optimizer.step()``. Per-parameter lists follow
``model.parameters()``. Quantities read shared, lazily computed reductions from the step context
(`activis.cockpit.step.StepContext`) so that two quantities never compute the same thing twice.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..run.log import CockpitError
from .fused import ratio_sum
from .persample import Bins
from .schedules import Schedule, linear
from .taps import Unavailable


class Quantity:
    """One reading of the cockpit, computed at the steps its schedule names."""

    per_sample = False  # needs reductions of per-sample gradients
    curvature = False  # needs the Hessian diagonal
    hvp = False  # needs Hessian-vector products (the gradient's graph)
    aggregate: str | None = None  # how a per-parameter list becomes one number: "norm" or "sum"
    reads_initial = False  # compares the parameters with the first step's (planned into one pass)

    def __init__(self, schedule: Schedule | None = None):
        self.schedule = schedule if schedule is not None else linear(1)

    @property
    def name(self) -> str:
        return type(self).__name__

    def tracks(self, step: int) -> bool:
        return self.schedule(step)

    def compute(self, ctx):
        raise NotImplementedError

    def describe(self) -> dict:
        return {"schedule": self.schedule.describe()}


class TwoStepQuantity(Quantity):
    """Needs the next step too: started at step t, finished at step t+1, stored under t."""

    end_per_sample = False  # the finishing step needs per-sample reductions as well
    snapshots = False  # starts from a snapshot of the parameters and finishes with a distance to it

    def start(self, ctx):
        raise NotImplementedError

    def finish(self, state, ctx):
        raise NotImplementedError


class _Damped(Quantity):
    """A quantity with ``epsilon`` added to a denominator (the reference's default per quantity)."""

    default_epsilon = 1e-5

    def __init__(self, schedule: Schedule | None = None, epsilon: float | None = None):
        super().__init__(schedule)
        self.epsilon = self.default_epsilon if epsilon is None else epsilon


def _total(values) -> float:
    return float(sum(float(v) for v in values))


# ------------------------------------------------------------------ first order
class Loss(Quantity):
    """The mean mini-batch loss L."""

    def compute(self, ctx):
        return ctx.loss


class GradNorm(Quantity):
    """||g_p|| for every parameter tensor."""

    aggregate = "norm"

    def compute(self, ctx):
        return ctx.grad_norms()


class Distance(Quantity):
    """||theta_p(t) - theta_p(0)|| for every parameter tensor (theta(0): the first step seen)."""

    aggregate = "norm"
    reads_initial = True

    def compute(self, ctx):
        return ctx.distances(ctx.initial_params)


class UpdateSize(TwoStepQuantity):
    """||theta_p(t+1) - theta_p(t)|| for every parameter tensor."""

    aggregate = "norm"
    snapshots = True

    def start(self, ctx):
        return ctx.snapshot()

    def finish(self, state, ctx):
        return ctx.distances(state)


def _noise(ctx):
    """(B, sum_i ||g_i||**2, g_i . g for every i, ||g||**2), all float64."""
    g2 = ctx.grad_sq_norm
    if not g2:  # the tests divide by ||g||: a zero mean gradient (every unit dead) has no noise ratio
        raise Unavailable("the mean gradient is zero at this step")
    sq = sum(ctx.sq_norms())
    return ctx.batch_size, sq, sum(ctx.dots_mean()), g2


class NormTest(Quantity):
    """sqrt( sum_i ||g_i - g||**2 / (B (B-1) ||g||**2) )."""

    per_sample = True

    def compute(self, ctx):
        B, sq, _, g2 = _noise(ctx)
        return math.sqrt(max(float(sq.sum()) - B * g2, 0.0) / (B * (B - 1) * g2))


class InnerTest(Quantity):
    """sqrt( sum_i (g_i . g - ||g||**2)**2 / (B (B-1) ||g||**4) )."""

    per_sample = True

    def compute(self, ctx):
        B, _, dots, g2 = _noise(ctx)
        return math.sqrt(float((dots - g2).square().sum()) / (B * (B - 1) * g2 ** 2))


class OrthoTest(Quantity):
    """sqrt( sum_i ||g_i - (g_i . g / ||g||**2) g||**2 / (B (B-1) ||g||**2) )."""

    per_sample = True

    def compute(self, ctx):
        B, sq, dots, g2 = _noise(ctx)
        return math.sqrt(max(float((sq - dots.square() / g2).sum()), 0.0) / (B * (B - 1) * g2))


class CABS(Quantity):
    """lr * sum_i ||g_i - g||**2 / (B L): the CABS batch-size suggestion. Plain SGD only."""

    per_sample = True

    def compute(self, ctx):
        lr = ctx.plain_sgd_lr(self.name)
        B, sq, _, g2 = _noise(ctx)
        return lr * (float(sq.sum()) - B * g2) / (B * ctx.loss)


class EarlyStopping(_Damped):
    """1 - B (1/D) sum_d g_d**2 / (s_d**2 + eps), s_d**2 the unbiased per-element variance. Plain SGD only."""

    per_sample = True

    default_epsilon = 1e-5

    def compute(self, ctx):
        ctx.plain_sgd_lr(self.name)
        B = ctx.batch_size
        total = 0.0
        for g, second in zip(ctx.grads, ctx.sum_sq()):
            g2 = g.square()
            variance = (second - B * g2) / (B - 1)
            total += float((g2 / (variance + self.epsilon)).sum(dtype=torch.float64))
        return 1 - B * total / ctx.dim


class MeanGSNR(_Damped):
    """(1/D) sum_d g_d**2 / (M_d - g_d**2 + eps): the mean gradient signal-to-noise ratio."""

    per_sample = True

    default_epsilon = 1e-5

    def compute(self, ctx):
        total = 0.0
        for g, second in zip(ctx.grads, ctx.sum_sq()):
            g2 = g.square()
            total += float((g2 / (second / ctx.batch_size - g2 + self.epsilon)).sum(dtype=torch.float64))
        return total / ctx.dim


class GradHist1d(Quantity):
    """Histogram of all B x D per-sample gradient elements, per parameter tensor (layer-wise)."""

    per_sample = True

    def __init__(self, schedule=None, bins: int = 100, range: tuple[float, float] = (-2.0, 2.0)):  # noqa: A002
        super().__init__(schedule)
        self.bins = Bins(int(bins), float(range[0]), float(range[1]))

    def compute(self, ctx):
        return np.stack([ps.hist1d(self.bins).cpu().numpy() for ps in ctx.per_sample()]).astype(np.int64)

    def describe(self) -> dict:
        return {**super().describe(), "bins": self.bins.bins, "range": [self.bins.lo, self.bins.hi]}


class GradHist2d(Quantity):
    """2D histogram of (per-sample gradient element, parameter value) pairs, per parameter tensor."""

    per_sample = True

    def __init__(self, schedule=None, bins: tuple[int, int] = (40, 50),
                 range: tuple = ((-1.0, 1.0), (-2.0, 2.0))):  # noqa: A002
        super().__init__(schedule)
        self.grad_bins = Bins(int(bins[0]), float(range[0][0]), float(range[0][1]))
        self.param_bins = Bins(int(bins[1]), float(range[1][0]), float(range[1][1]))

    def compute(self, ctx):
        hists = [ps.hist2d(p, self.grad_bins, self.param_bins).cpu().numpy()
                 for ps, p in zip(ctx.per_sample(), ctx.params)]
        return np.stack(hists).astype(np.int64)

    def describe(self) -> dict:
        g, p = self.grad_bins, self.param_bins
        return {**super().describe(), "bins": [g.bins, p.bins], "range": [[g.lo, g.hi], [p.lo, p.hi]]}


class Alpha(TwoStepQuantity):
    """The normalised step length alpha: where on a noisy 1D quadratic fit the step landed.

    -1: no step; 0: the valley floor; +1: the opposite wall at equal height. The fit uses the loss
    and the projected gradient at both ends, each weighted by its sample variance (1/(B-1)).
    """

    per_sample = True
    end_per_sample = True
    snapshots = True

    def start(self, ctx):
        state = {**_alpha_end(ctx), "params": ctx.snapshot()}
        if isinstance(ctx.optimizer, torch.optim.SGD):  # for the shortcut of a plain SGD step, see finish()
            ctx.cockpit.watch_step(ctx.optimizer)
            state["grad_norm"] = math.sqrt(ctx.grad_sq_norm)
            state["dots_mean"] = sum(ctx.dots_mean())
        return state

    def finish(self, state, ctx):
        end = _alpha_end(ctx)
        tau = math.sqrt(sum(n * n for n in ctx.distances(state["params"])))
        if tau == 0.0:
            return -1.0
        start_ps, end_ps = state["per_sample"], end["per_sample"]
        if "dots_mean" in state and ctx.cockpit.sgd_step_lr() is not None and state["grad_norm"] > 0:
            # the optimizer's hooks saw theta_{t+1} = theta_t - lr g_t: the direction is -g_t, so
            # project on -g_t / ||g_t||, through the Gram matrices of the two batches
            gnorm = state["grad_norm"]
            s0 = -state["dots_mean"] / gnorm
            s1 = -sum(ps.dot_mean(of=old).double() for ps, old in zip(end_ps, start_ps)) / gnorm
        else:
            direction = ctx.difference(state["params"])
            s0 = sum(ps.dot(d).double() for ps, d in zip(start_ps, direction)) / tau
            s1 = sum(ps.dot(d).double() for ps, d in zip(end_ps, direction)) / tau
        return fit_alpha(tau, (state["loss"], end["loss"]), (state["loss_var"], end["loss_var"]),
                         [float(s0.mean()), float(s1.mean())], [float(s0.var()), float(s1.var())])


def _alpha_end(ctx) -> dict:
    if ctx.losses is None:
        raise Unavailable("needs individual_losses (their variance weighs the fit)")
    return {"loss": ctx.loss, "loss_var": float(ctx.losses.double().var()), "per_sample": ctx.per_sample()}


def fit_alpha(tau: float, f: tuple, f_var: tuple, df: list, df_var: list) -> float:
    """alpha from the weighted least-squares quadratic through two values and two slopes."""
    phi = np.array([[1.0, 0.0, 0.0], [1.0, tau, tau ** 2], [0.0, 1.0, 0.0], [0.0, 1.0, 2 * tau]])
    y = np.array([f[0], f[1], df[0], df[1]], dtype=np.float64)
    variances = np.array([*f_var, *df_var], dtype=np.float64)
    weights = 1.0 / np.where(variances == 0.0, 1e-10, variances)
    try:
        mu = np.linalg.solve(phi.T @ (weights[:, None] * phi), phi.T @ (weights * y))
    except np.linalg.LinAlgError:
        return float("nan")
    if mu[2] < 0:
        return -1.0
    if mu[1] == 0.0:
        return float("inf") if mu[2] > 0 else -1.0
    return float(2 * tau * mu[2] / -mu[1] - 1)


# ------------------------------------------------------------------ curvature
class HessTrace(Quantity):
    """Sum of the exact Hessian diagonal per parameter tensor (estimator named in the log)."""

    curvature = True
    aggregate = "sum"

    def compute(self, ctx):
        return [float(d.sum()) for d in ctx.hess_diag()]


class TICDiag(_Damped):
    """sum_d M_d / (diag(H)_d + eps): the Takeuchi information criterion, diagonal form."""

    per_sample = True
    curvature = True

    default_epsilon = 1e-7

    def compute(self, ctx):
        return sum(ratio_sum(s, d, self.epsilon) for s, d in zip(ctx.sum_sq(), ctx.hess_diag())) / ctx.batch_size


class TICTrace(_Damped):
    """(sum_d M_d) / (sum_d diag(H)_d + eps): the Takeuchi information criterion, trace form."""

    per_sample = True
    curvature = True

    default_epsilon = 1e-7

    def compute(self, ctx):
        moment = _total(s.sum(dtype=torch.float64) for s in ctx.sum_sq()) / ctx.batch_size
        return moment / (_total(d.sum(dtype=torch.float64) for d in ctx.hess_diag()) + self.epsilon)


class HessMaxEV(Quantity):
    """Largest Hessian eigenvalue.

    ``method="power"`` is the reference's power iteration (random start, uniform in [0, 1), loose
    stopping rule; it finds the eigenvalue of largest magnitude). ``method="lanczos"`` is accurate.
    ``warm_start=True`` starts from the previous tracked step's eigenvector, which usually needs a
    few products instead of dozens; the random start draws from a private generator (``seed``)
    so the training's own random stream is left alone.
    """

    hvp = True

    def __init__(self, schedule=None, method: str = "power", warm_start: bool = False, maxiter: int = 100,
                 rtol: float = 1e-3, atol: float = 1e-6, seed: int = 0):
        super().__init__(schedule)
        if method not in ("power", "lanczos"):
            raise CockpitError(f"HessMaxEV method must be 'power' or 'lanczos', not {method!r}")
        self.method, self.warm_start = method, warm_start
        self.maxiter, self.rtol, self.atol = maxiter, rtol, atol
        self.generator = torch.Generator().manual_seed(seed)
        self.products = 0  # Hessian-vector products of the last computation
        self._previous = None

    def compute(self, ctx):
        from .hessian import lanczos, power_iteration

        op = ctx.hessian_operator()
        start = self._previous if self.warm_start else None
        before = op.products
        if self.method == "lanczos":
            value, vec = lanczos(op, start)
        else:
            value, vec = power_iteration(op, start, maxiter=self.maxiter, rtol=self.rtol, atol=self.atol,
                                         generator=self.generator)
        self.products = op.products - before
        self._previous = [v.detach() for v in vec] if self.warm_start else None
        return value

    def describe(self) -> dict:
        return {**super().describe(), "method": self.method, "warm_start": self.warm_start}


QUANTITIES = {q.__name__: q for q in (
    Loss, GradNorm, Distance, UpdateSize, NormTest, InnerTest, OrthoTest, HessMaxEV, HessTrace,
    TICDiag, TICTrace, MeanGSNR, CABS, EarlyStopping, GradHist1d, GradHist2d, Alpha)}

_ECONOMY = ["Alpha", "Distance", "GradHist1d", "GradNorm", "InnerTest", "Loss", "NormTest", "OrthoTest",
            "UpdateSize"]
CONFIGURATIONS = {
    "economy": _ECONOMY,
    "business": _ECONOMY + ["TICDiag", "HessTrace"],
    "full": _ECONOMY + ["TICDiag", "HessTrace", "HessMaxEV", "GradHist2d"],
}


def configuration(label: str, schedule: Schedule | None = None, **options) -> list[Quantity]:
    """The reference's quantity sets: ``"economy"``, ``"business"`` or ``"full"``.

    ``options`` maps a quantity name to keyword arguments for it, e.g.
    ``configuration("full", HessMaxEV={"warm_start": True})``.
    """
    if label not in CONFIGURATIONS:
        raise CockpitError(f"Unknown configuration {label!r}; choose one of {sorted(CONFIGURATIONS)}")
    unknown = set(options) - set(CONFIGURATIONS[label])
    if unknown:
        raise CockpitError(f"Options for quantities not in {label!r}: {sorted(unknown)}")
    return [QUANTITIES[name](schedule, **options.get(name, {})) for name in CONFIGURATIONS[label]]
