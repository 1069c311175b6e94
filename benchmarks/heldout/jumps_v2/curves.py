"""40 held-out training curves for jump detection, second set: `CURVES`, dicts {"name", "values", "jumps"}.

20 have no real jump, 20 have 1-3. A jump's index is the first step the change affects. Fixed numpy seeds."""

import numpy as np


def _rng(i):
    return np.random.default_rng(2000 + i)


def _decay(n, start=2.3, end=0.2, rate=4.0):
    t = np.arange(n) / n
    return end + (start - end) * np.exp(-rate * t)


def _lognoise(rng, n, sigma):
    return np.exp(sigma * rng.normal(size=n) - sigma ** 2 / 2)


def _cosine_lr(n, peak=1e-3, warm=0, floor=0.0):
    lr = np.empty(n)
    for s in range(n):
        if s < warm:
            lr[s] = peak * s / warm
        else:
            p = (s - warm) / max(1, n - warm)
            lr[s] = floor + (peak - floor) * 0.5 * (1 + np.cos(np.pi * p))
    return lr


def _loss_under_lr(lr, start=2.3, floor=0.15, k=None, noise=0.15, rng=None):
    """A loss that falls in proportion to the learning rate spent: L = floor + (start - floor) exp(-k sum(lr))."""
    spent = np.cumsum(lr)
    k = k if k is not None else 4.0 / spent[-1]
    clean = floor + (start - floor) * np.exp(-k * spent)
    return clean * (_lognoise(rng, len(lr), noise) if rng is not None else 1.0)


CURVES = []


def curve(name, jumps=()):
    def register(make):
        values = np.asarray(make(), dtype=np.float64)
        assert np.all(np.isfinite(values)), name
        CURVES.append({"name": name, "values": [float(v) for v in values], "jumps": list(jumps)})
        return make
    return register


# ---------------------------------------------------------------- no real jump (20)

@curve("adam_loss_lognormal_batch_noise")
def _():
    r = _rng(0)
    return _decay(600) * _lognoise(r, 600, 0.25)


@curve("sgd_loss_student_t_noise_df8")
def _():
    r = _rng(1)
    return _decay(800, 1.6, 0.35, 3) + 0.06 * r.standard_t(8, 800)


@curve("loss_flat_through_warmup_from_zero_then_falls")
def _():
    r = _rng(2)
    lr = np.minimum(1.0, np.arange(500) / 100) * 1e-3
    return _loss_under_lr(lr, rng=r, noise=0.12)


@curve("lr_linear_warmup_then_cosine")
def _():
    return _cosine_lr(1000, peak=5e-4, warm=60)


@curve("lr_onecycle")
def _():
    n, peak = 900, 0.1
    up = int(0.3 * n)
    a = peak / 25 + (peak - peak / 25) * 0.5 * (1 - np.cos(np.pi * np.arange(up) / up))
    down_t = np.arange(n - up) / (n - up)
    b = peak / 1e4 + (peak - peak / 1e4) * 0.5 * (1 + np.cos(np.pi * down_t))
    return np.concatenate([a, b])


@curve("loss_under_cosine_schedule")
def _():
    r = _rng(5)
    return _loss_under_lr(_cosine_lr(700, 3e-3), rng=r, noise=0.18)


@curve("accuracy_batch_of_32_binomial")
def _():
    r = _rng(6)
    p = 0.95 - 0.7 * np.exp(-np.arange(500) / 80)
    return r.binomial(32, p) / 32.0


@curve("gradient_norm_lognormal_slow_growth")
def _():
    r = _rng(7)
    return 0.8 * (1 + np.arange(700) / 350) * _lognoise(r, 700, 0.35)


@curve("validation_loss_u_shaped_overfitting")
def _():
    r = _rng(8)
    t = np.arange(400) / 400
    return 0.9 - 0.6 * t + 0.9 * t ** 2 + 0.015 * r.normal(size=400)


@curve("stuck_loss_plateau_at_log_ten")
def _():
    r = _rng(9)
    return np.log(10) + 0.02 * r.normal(size=500)


@curve("converged_regression_loss_1e-4_scale")
def _():
    r = _rng(10)
    return 1e-4 * (1 + 2 * np.exp(-np.arange(600) / 150)) * _lognoise(r, 600, 0.3)


@curve("unnormalised_mse_1e4_scale")
def _():
    r = _rng(11)
    return 4e4 * np.exp(-np.arange(500) / 120) + 2e3 + 600 * r.normal(size=500)


@curve("epoch_ripple_under_noise")
def _():
    r = _rng(12)
    n = 800
    ripple = 0.04 * np.sin(2 * np.pi * np.arange(n) / 50)
    return _decay(n, 1.2, 0.3, 3) + ripple + 0.08 * r.normal(size=n)


@curve("language_model_power_law_2000_steps")
def _():
    r = _rng(13)
    t = np.arange(1, 2001)
    return (2.0 + 8.0 * t ** -0.45) * _lognoise(r, 2000, 0.04)


@curve("mixed_batch_sizes_noise_varies_per_step")
def _():
    r = _rng(14)
    sizes = r.choice([8, 16, 32, 64], 600)
    sigma = 0.5 / np.sqrt(sizes / 8)
    return _decay(600, 1.4, 0.25, 3.5) * np.exp(sigma * r.normal(size=600) - sigma ** 2 / 2)


@curve("lr_per_batch_cosine_with_long_warmup")
def _():
    return _cosine_lr(1200, peak=2e-3, warm=300, floor=1e-5)


@curve("distance_from_init_sqrt_growth")
def _():
    r = _rng(16)
    return 0.5 * np.sqrt(np.arange(800) + 1) + 0.05 * r.normal(size=800)


@curve("slow_upward_drift_train_loss")
def _():
    r = _rng(17)
    t = np.arange(600)
    return 0.4 + 0.25 * t / 600 + 0.05 * r.normal(size=600)


@curve("ar1_autocorrelated_noise_on_decay")
def _():
    r = _rng(18)
    n, phi = 800, 0.9
    e = np.zeros(n)
    for i in range(1, n):
        e[i] = phi * e[i - 1] + 0.03 * r.normal()
    return _decay(n, 1.5, 0.4, 3) + e


@curve("short_60_step_noisy_decrease")
def _():
    r = _rng(19)
    return _decay(60, 2.2, 0.8, 2) + 0.1 * r.normal(size=60)


# ---------------------------------------------------------------- 1-3 real jumps (20)

@curve("loss_drops_at_lr_step_300", jumps=[300])
def _():
    r = _rng(20)
    clean = _decay(600, 2.0, 0.8, 3)
    clean[300:] -= 0.45  # the rate falls tenfold at 300: the loss drops to a lower floor at once
    return clean * _lognoise(r, 600, 0.1)


@curve("loss_two_multistep_drops_200_400", jumps=[200, 400])
def _():
    r = _rng(21)
    clean = _decay(600, 2.0, 1.0, 2)
    clean[200:] -= 0.4
    clean[400:] -= 0.2
    return clean + 0.03 * r.normal(size=600)


@curve("lr_steplr_three_drops", jumps=[150, 300, 450])
def _():
    return 0.1 * 0.3 ** (np.arange(600) // 150)


@curve("one_bad_batch_spike_250", jumps=[250])
def _():
    r = _rng(23)
    v = _decay(500) * _lognoise(r, 500, 0.15)
    v[250] *= 8
    return v


@curve("three_step_spike_420", jumps=[420])
def _():
    r = _rng(24)
    v = _decay(700, 1.8, 0.3, 3) + 0.04 * r.normal(size=700)
    v[420:423] += [2.0, 3.0, 1.5]
    return v


@curve("divergence_from_350", jumps=[350])
def _():
    r = _rng(25)
    v = _decay(500, 2.0, 0.4, 4) * _lognoise(r, 500, 0.1)
    k = np.arange(150)
    v[350:] = v[350:] * np.exp(0.08 * k) + 0.6
    return v


@curve("labels_corrupted_level_up_200", jumps=[200])
def _():
    r = _rng(26)
    v = _decay(450, 1.5, 0.3, 5)
    v[200:] = 1.1 + 0.05 * np.exp(-np.arange(250) / 100)
    return v + 0.04 * r.normal(size=450)


@curve("bug_fixed_level_down_180", jumps=[180])
def _():
    r = _rng(27)
    v = np.full(400, 1.3)
    v[180:] = _decay(220, 0.7, 0.2, 3)
    return v + 0.05 * r.normal(size=400)


@curve("sgdr_restarts_100_300", jumps=[100, 300])
def _():
    r = _rng(28)
    lr = np.concatenate([_cosine_lr(100, 0.1), _cosine_lr(200, 0.1), _cosine_lr(300, 0.1)])
    v = np.empty(600)
    level = 1.6
    for start, length in ((0, 100), (100, 200), (300, 300)):
        seg = level * np.exp(-3 * np.cumsum(lr[start:start + length]) / lr[start:start + length].sum())
        v[start:start + length] = 0.3 + seg
        level *= 0.7
    return v * _lognoise(r, 600, 0.05)


@curve("accuracy_collapse_260", jumps=[260])
def _():
    r = _rng(29)
    p = 0.92 - 0.6 * np.exp(-np.arange(500) / 60)
    p[260:] = 0.25
    return r.binomial(128, p) / 128.0


@curve("gradient_norm_burst_150", jumps=[150])
def _():
    r = _rng(30)
    v = 1.0 * _lognoise(r, 400, 0.2)
    v[150:155] *= 50
    return v


@curve("dead_network_loss_to_log_c_330", jumps=[330])
def _():
    r = _rng(31)
    v = _decay(600, 2.3, 0.35, 4) + 0.03 * r.normal(size=600)
    v[330:] = np.log(10) + 0.002 * r.normal(size=270)
    return v


@curve("tiny_scale_shift_x3_400", jumps=[400])
def _():
    r = _rng(32)
    v = 2e-4 * _lognoise(r, 700, 0.1)
    v[400:] *= 3
    return v


@curve("large_scale_spike_100_shift_500", jumps=[100, 500])
def _():
    r = _rng(33)
    v = 3e3 * np.exp(-np.arange(800) / 400) + 500 + 40 * r.normal(size=800)
    v[100] += 4000
    v[500:] += 1500
    return v


@curve("spike_at_end_of_warmup_80", jumps=[80])
def _():
    r = _rng(34)
    lr = np.minimum(1.0, np.arange(300) / 80) * 1e-3
    v = _loss_under_lr(lr, rng=r, noise=0.08)
    v[80:82] += 3.0
    return v


@curve("noisy_minibatches_shift_of_four_sd_300", jumps=[300])
def _():
    r = _rng(35)
    v = 1.0 + 0.1 * r.normal(size=600)
    v[300:] += 0.4
    return v


@curve("accuracy_drop_200_then_recovers", jumps=[200])
def _():
    r = _rng(36)
    p = 0.9 - 0.5 * np.exp(-np.arange(450) / 50)
    k = np.arange(250)
    p[200:] = 0.9 - 0.55 * np.exp(-k / 40)
    return r.binomial(256, p) / 256.0


@curve("power_law_3000_steps_spikes_900_2100", jumps=[900, 2100])
def _():
    r = _rng(37)
    t = np.arange(1, 3001)
    v = (2.0 + 8.0 * t ** -0.45) * _lognoise(r, 3000, 0.03)
    v[900] *= 2.5
    v[2100:2103] *= 2.0
    return v


@curve("lr_overwritten_x100_from_250", jumps=[250])
def _():
    lr = _cosine_lr(500, 1e-3, warm=50)
    lr[250:] = 0.1
    return lr


@curve("short_120_steps_shifts_30_and_90", jumps=[30, 90])
def _():
    r = _rng(39)
    v = np.full(120, 2.0)
    v[30:] = 1.2
    v[90:] = 1.9
    return v + 0.05 * r.normal(size=120)
