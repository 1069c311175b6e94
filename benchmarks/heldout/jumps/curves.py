"""Held-out training curves for jump detection in a runs panel, written without reading activis's code.

CURVES: 40 dicts {"name", "values": list of floats, "jumps": [step indices]}. A jump's index is the first step of
the new regime (the first value the change affects). Half the curves (20) have no real jump: mini-batch noise
(Gaussian, heavy-tailed, autocorrelated, heteroscedastic), warm-up from lr 0, cosine and linear schedules,
plateaus, slow overfitting, epoch-boundary ripples. The other 20 have 1-3: learning-rate step drops (a schedule
drop IS a sudden change a person wants marked), spikes, divergence onsets, level shifts (labels corrupted, a
fixed loader), SGDR warm restarts, a collapse in accuracy, an explosion in a gradient norm.

Suggested scoring: a mark within 5 steps (or 1 % of the curve's length, whichever is larger) of a listed jump
finds it; any other mark is a false alarm; a curve with no jump must get no mark at all.
"""

import numpy as np

CURVES = []


def _add(name, values, jumps=()):
    values = np.asarray(values, dtype=float)
    assert np.all(np.isfinite(values)), name
    CURVES.append({"name": name, "values": [float(f"{v:.6g}") for v in values], "jumps": sorted(int(j) for j in jumps)})


def _decay(n, start, floor, tau, progress=None):
    """Loss along training: floor + (start - floor) * exp(-progress / tau); progress defaults to the step
    (pass the cumulative learning rate to model warm-up or schedules)."""
    t = np.arange(n, dtype=float) if progress is None else progress
    return floor + (start - floor) * np.exp(-t / tau)


def _lognoise(rng, n, sigma):
    return np.exp(sigma * rng.standard_normal(n) - sigma ** 2 / 2)


def _warmup_cosine(n, warmup, peak=1.0):
    t = np.arange(n, dtype=float)
    lr = np.where(t < warmup, peak * t / warmup, peak * 0.5 * (1 + np.cos(np.pi * (t - warmup) / (n - warmup))))
    return lr


def _step_lr(n, drops, gamma=0.1):
    lr = np.ones(n)
    for d in drops:
        lr[d:] *= gamma
    return lr


def _loss_with_lr(rng, lr, start=2.3, floor=0.05, tau=60.0, noise_floor=0.4, sigma=0.08, settle=3.0):
    """Loss of SGD at learning rate lr(t): progress is the cumulative lr; the noise floor is proportional to the
    lr and follows it within `settle` steps (so a 10x lr drop lowers the loss within a few steps)."""
    n = len(lr)
    progress = np.cumsum(lr)
    level = np.zeros(n)
    for t in range(n):
        target = noise_floor * lr[t]
        level[t] = target if t == 0 else level[t - 1] + (target - level[t - 1]) / settle
    return (_decay(n, start, floor, tau, progress) + level) * _lognoise(rng, n, sigma)


# ---- 20 curves without a real jump --------------------------------------------------------------------------

for i, (n, sigma) in enumerate([(200, 0.03), (500, 0.1), (1000, 0.2), (80, 0.35)]):
    rng = np.random.default_rng(100 + i)
    _add(f"smooth_decay_noise_{sigma}", _decay(n, 2.3, 0.1, n / 5) * _lognoise(rng, n, sigma))

rng = np.random.default_rng(110)
_add("warmup_from_zero_then_cosine", _loss_with_lr(rng, _warmup_cosine(600, 60), tau=80))

rng = np.random.default_rng(111)
t = np.arange(400)
bump = 1 + 0.15 * np.sin(np.pi * np.clip(t / 40, 0, 1))  # loss rises a little while the lr warms up
_add("warmup_bump_then_decay", _decay(400, 1.1, 0.2, 70) * bump * _lognoise(rng, 400, 0.08))

rng = np.random.default_rng(112)
t = np.arange(700, dtype=float)
level = 0.3 + 1.8 / (1 + np.exp((t - 350) / 40))  # a plateau left gradually over ~150 steps
_add("plateau_then_gradual_descent", level * _lognoise(rng, 700, 0.06))

rng = np.random.default_rng(113)
p = 0.95 - 0.85 * np.exp(-np.arange(500) / 90)
_add("accuracy_rising_batch_32", rng.binomial(32, p) / 32)

rng = np.random.default_rng(114)
t = np.arange(800, dtype=float)
trend = 0.5 + 1.5 * np.exp(-((t - 150) / 200) ** 2)
_add("gradient_norm_lognormal_noise", trend * _lognoise(rng, 800, 0.4))

rng = np.random.default_rng(115)
_add("decay_heavy_tailed_noise_t4", _decay(600, 2.0, 0.15, 100) * np.exp(0.06 * rng.standard_t(4, 600)))

rng = np.random.default_rng(116)
ar = np.zeros(900)
for k in range(1, 900):
    ar[k] = 0.8 * ar[k - 1] + 0.06 * rng.standard_normal()
_add("decay_autocorrelated_noise", _decay(900, 1.5, 0.2, 200) * np.exp(ar))

rng = np.random.default_rng(117)
_add("tiny_scale_loss_1e-4", _decay(300, 4e-4, 2e-5, 60) * _lognoise(rng, 300, 0.15))

rng = np.random.default_rng(118)
_add("regression_mse_in_thousands", _decay(500, 2.5e3, 1.2e2, 90) * _lognoise(rng, 500, 0.15))

rng = np.random.default_rng(119)
lr = np.linspace(1.0, 0.0, 500)
_add("linear_decay_schedule", _loss_with_lr(rng, lr, tau=70, sigma=0.1))

rng = np.random.default_rng(120)
_add("short_noisy_40_steps", _decay(40, 1.1, 0.5, 15) * _lognoise(rng, 40, 0.12))

rng = np.random.default_rng(121)
t = np.arange(600, dtype=float)
u_shape = 0.45 + 0.8 * np.exp(-t / 60) + 0.25 * np.clip((t - 200) / 400, 0, None) ** 1.5
_add("validation_loss_slow_overfitting", u_shape * _lognoise(rng, 600, 0.03))

rng = np.random.default_rng(122)
t = np.arange(720)
ripple = 1 + 0.04 * ((t % 48) / 48 - 0.5)  # an epoch-boundary sawtooth, smaller than the noise
_add("epoch_ripple_below_noise", _decay(720, 1.8, 0.3, 150) * ripple * _lognoise(rng, 720, 0.1))

rng = np.random.default_rng(123)
_add("flat_not_learning", 2.302 * _lognoise(rng, 300, 0.02))

_add("lr_curve_warmup_cosine", 3e-4 * _warmup_cosine(1000, 100))

rng = np.random.default_rng(124)
t = np.arange(800, dtype=float)
base = _decay(800, 1.0, 0.01, 120)
_add("heteroscedastic_relative_noise_grows", base * np.exp((0.05 + 0.45 * t / 800) * rng.standard_normal(800)))

# ---- 20 curves with 1-3 real jumps --------------------------------------------------------------------------

rng = np.random.default_rng(200)
_add("step_lr_one_drop", _loss_with_lr(rng, _step_lr(600, [300]), noise_floor=0.8, tau=50), [300])

rng = np.random.default_rng(201)
_add("step_lr_two_drops", _loss_with_lr(rng, _step_lr(500, [200, 400]), noise_floor=1.0, tau=40), [200, 400])

rng = np.random.default_rng(202)
_add("multistep_lr_three_drops_noisy",
     _loss_with_lr(rng, _step_lr(900, [300, 600, 800], gamma=0.2), noise_floor=1.2, tau=60, sigma=0.12),
     [300, 600, 800])


def _spike(n, at, height, width):
    t = np.arange(n, dtype=float)
    return 1 + np.where(t >= at, height * np.exp(-(t - at) / width), 0.0)


rng = np.random.default_rng(203)
_add("single_loss_spike", _decay(500, 2.0, 0.2, 80) * _spike(500, 260, 6.0, 4) * _lognoise(rng, 500, 0.06), [260])

rng = np.random.default_rng(204)
_add("two_spikes", _decay(800, 2.0, 0.15, 120) * _spike(800, 300, 4.0, 6) * _spike(800, 610, 8.0, 3)
     * _lognoise(rng, 800, 0.08), [300, 610])

rng = np.random.default_rng(205)
_add("spike_in_heavy_tailed_noise", _decay(600, 1.5, 0.2, 100) * _spike(600, 420, 12.0, 5)
     * np.exp(0.08 * rng.standard_t(4, 600)), [420])


def _diverge(n, at, rate):
    t = np.arange(n, dtype=float)
    return np.exp(np.clip(t - at, 0, None) * rate)


rng = np.random.default_rng(206)
_add("divergence_onset", np.minimum(_decay(400, 2.3, 0.3, 60) * _diverge(400, 250, 0.3), 1e4)
     * _lognoise(rng, 400, 0.05), [250])

rng = np.random.default_rng(207)
_add("divergence_after_lr_raised", np.minimum(_decay(300, 1.2, 0.1, 40) * _diverge(300, 180, 0.35), 5e3)
     * _lognoise(rng, 300, 0.1), [180])


def _shift(n, at, delta, settle=2.0):
    t = np.arange(n, dtype=float)
    return np.where(t >= at, delta * (1 - np.exp(-(t - at + 1) / settle)), 0.0)


rng = np.random.default_rng(208)
_add("labels_corrupted_level_up", (_decay(600, 2.0, 0.2, 70) + _shift(600, 350, 1.3)) * _lognoise(rng, 600, 0.07),
     [350])

rng = np.random.default_rng(209)
_add("level_up_then_slow_relearning",
     (_decay(700, 2.3, 0.1, 60) + _shift(700, 300, 1.5) * np.exp(-np.clip(np.arange(700) - 300, 0, None) / 250))
     * _lognoise(rng, 700, 0.08), [300])

rng = np.random.default_rng(210)
_add("loader_fixed_level_down", (_decay(500, 2.0, 0.9, 40) + _shift(500, 240, -0.7)) * _lognoise(rng, 500, 0.05),
     [240])

rng = np.random.default_rng(211)
t = np.arange(500, dtype=float)
acc = 0.92 - 0.8 * np.exp(-t / 60) - np.where(t >= 320, 0.35 * np.exp(-(t - 320) / 120), 0)
_add("accuracy_collapse_and_partial_recovery", rng.binomial(64, np.clip(acc, 0.01, 0.99)) / 64, [320])

rng = np.random.default_rng(212)
_add("gradient_norm_explodes", (0.8 + 0.5 * np.exp(-np.arange(600) / 100)) * np.where(np.arange(600) >= 380, 20.0, 1)
     * _lognoise(rng, 600, 0.25), [380])

rng = np.random.default_rng(213)
lr = _warmup_cosine(700, 50) * np.where(np.arange(700) >= 450, 0.1, 1.0)
_add("warmup_then_step_drop", _loss_with_lr(rng, lr, noise_floor=1.0, tau=50), [450])


def _sgdr(n, period):
    t = np.arange(n)
    return 0.5 * (1 + np.cos(np.pi * (t % period) / period))


rng = np.random.default_rng(214)
_add("sgdr_warm_restarts", _loss_with_lr(rng, _sgdr(600, 200) + 0.01, noise_floor=1.5, tau=40, settle=1.5),
     [200, 400])

rng = np.random.default_rng(215)
_add("level_shift_then_spike", (_decay(800, 1.8, 0.25, 100) + _shift(800, 300, 0.8)) * _spike(800, 600, 7.0, 4)
     * _lognoise(rng, 800, 0.07), [300, 600])

rng = np.random.default_rng(216)
_add("spike_then_divergence", np.minimum(_decay(500, 2.0, 0.2, 60) * _spike(500, 200, 5.0, 3)
                                         * _diverge(500, 380, 0.3), 1e4) * _lognoise(rng, 500, 0.06), [200, 380])

rng = np.random.default_rng(217)
_add("tiny_scale_step_drop", _loss_with_lr(rng, _step_lr(400, [250]), start=3e-3, floor=1e-4, noise_floor=2e-3,
                                           tau=40), [250])

rng = np.random.default_rng(218)
_add("regression_thousands_level_shift", (_decay(500, 3e3, 150, 60) + _shift(500, 330, 900)) *
     _lognoise(rng, 500, 0.08), [330])

rng = np.random.default_rng(219)
_add("short_curve_spike", _decay(60, 1.0, 0.4, 20) * _spike(60, 38, 3.0, 2) * _lognoise(rng, 60, 0.05), [38])

assert len(CURVES) == 40 and len({c["name"] for c in CURVES}) == 40
assert sum(1 for c in CURVES if not c["jumps"]) == 20
