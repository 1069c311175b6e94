"""Synthetic training curves with known jumps, for `bench_jumps.py` (the jump rule's own test sets).

``project_curves()``: the project's own set as first described (commit d41cfe9: "900 synthetic curves: decays,
saturating accuracies, flats, cosines; Gaussian, heavy-tailed, heteroscedastic and correlated noise; steps,
spikes and 2-step ramps"; that generator was never committed, so this is a reconstruction from that sentence).

``new_kinds()``: curves of kinds the first held-out set (benchmarks/heldout/jumps) lacked: noiseless schedules
(a StepLR learning rate is a jump, a one-cycle or triangular one is not), TensorBoard-smoothed curves (a jump
smeared over tens of steps), sparse evaluations (25-40 points), values below and across zero (a reward, a
log-likelihood), small eval sets (accuracy in steps of 1/20), one-step spikes (a bad batch), a frozen metric
that moves once, a fine-tuning phase (backbone unfrozen), Adam's loss spike with a slow recovery, long curves
(20,000 steps), a fast 1/t start, a shift below the noise (no jump: it does not stand out), divergences
(slow, and linear below zero) and an exponential learning-rate ramp (no jump: a schedule).

Each curve is ``{"name", "values", "jumps"}``; a jump's index is the first value the change affects.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def _noise(rng, kind: str, n: int) -> np.ndarray:
    """Unit-scale noise of one kind."""
    if kind == "gaussian":
        return rng.standard_normal(n)
    if kind == "heavy":
        return rng.standard_t(3, n) / np.sqrt(3)
    if kind == "hetero":
        return rng.standard_normal(n) * np.linspace(0.4, 1.6, n)
    ar = np.zeros(n)
    e = rng.standard_normal(n) * np.sqrt(1 - 0.7 ** 2)
    for k in range(1, n):
        ar[k] = 0.7 * ar[k - 1] + e[k]
    return ar


def _base(kind: str, n: int, rng) -> np.ndarray:
    t = np.arange(n, dtype=float)
    if kind == "decay":
        return 0.2 + 2.0 * np.exp(-t / (n / rng.uniform(3, 8)))
    if kind == "accuracy":
        return 0.95 - 0.8 * np.exp(-t / (n / rng.uniform(3, 8)))
    if kind == "flat":
        return np.full(n, rng.uniform(0.5, 2.0))
    return 0.3 + 0.7 * 0.5 * (1 + np.cos(np.pi * t / n))  # cosine


def project_curves(count: int = 900, seed: int = 0) -> list[dict]:
    """Bases x noises x (no jump, a step, a spike, a 2-step ramp); noise 1-5 % of the base's level, a
    jump 10-40 noise units (a size anyone would call sudden)."""
    rng = np.random.default_rng(seed)
    curves = []
    bases, noises, events = ["decay", "accuracy", "flat", "cosine"], ["gaussian", "heavy", "hetero", "ar"], \
        ["none", "step", "spike", "ramp"]
    for i in range(count):
        base, noise, event = bases[i % 4], noises[(i // 4) % 4], events[(i // 16) % 4]
        n = int(rng.choice([60, 120, 300, 800]))
        level = _base(base, n, rng)
        sigma = rng.uniform(0.01, 0.05) * float(np.median(level))
        values = level + sigma * _noise(rng, noise, n)
        jumps = []
        if event != "none":
            at = int(rng.integers(max(15, n // 8), n - max(10, n // 8)))
            size = rng.choice([-1, 1]) * rng.uniform(10, 40) * sigma
            if event == "step":
                values[at:] += size
            elif event == "spike":
                values[at] += size
            else:
                values[at] += size / 2
                values[at + 1:] += size
            jumps = [at]
        curves.append({"name": f"{base}_{noise}_{event}_{i}", "values": values, "jumps": jumps})
    return curves


def _lognoise(rng, n, sigma):
    return np.exp(sigma * rng.standard_normal(n))


def _ema(values, alpha=0.9):
    return pd.Series(values).ewm(alpha=1 - alpha, adjust=False).mean().to_numpy()


def new_kinds() -> list[dict]:
    """Curves of kinds the first held-out set lacked (see the module's docstring): 18 with jumps, 17 without."""
    curves = []

    def add(name, values, jumps=()):
        curves.append({"name": name, "values": np.asarray(values, float), "jumps": list(jumps)})

    t = np.arange(300, dtype=float)
    lr = 0.1 * np.where(t >= 100, 0.1, 1.0) * np.where(t >= 200, 0.1, 1.0)
    add("steplr_learning_rate_noiseless", lr, [100, 200])
    peak = np.minimum(t / 90, 1) * 0.1
    add("one_cycle_learning_rate", np.where(t < 90, peak, 0.1 * 0.5 * (1 + np.cos(np.pi * (t - 90) / 210))))
    add("triangular_cyclic_learning_rate", 1e-3 + 9e-3 * np.abs(((t / 50) % 2) - 1))

    rng = np.random.default_rng(1)
    t = np.arange(1000, dtype=float)
    raw = (0.3 + 2 * np.exp(-t / 150) + np.where(t >= 600, 0.8, 0)) * _lognoise(rng, 1000, 0.2)
    add("tensorboard_smoothed_level_shift", _ema(raw, 0.9), [600])
    raw = (0.3 + 2 * np.exp(-t / 150)) * _lognoise(rng, 1000, 0.3)
    add("tensorboard_smoothed_noisy_decay", _ema(raw, 0.9))

    rng = np.random.default_rng(2)
    t = np.arange(30, dtype=float)
    acc = 0.9 - 0.6 * np.exp(-t / 6) - np.where(t >= 20, 0.25, 0)
    add("sparse_eval_30_points_drop", acc + 0.01 * rng.standard_normal(30), [20])
    add("sparse_eval_25_points_smooth", (0.9 - 0.6 * np.exp(-np.arange(25) / 5)) + 0.01 * rng.standard_normal(25))

    rng = np.random.default_rng(3)
    t = np.arange(800, dtype=float)
    reward = -200 + 350 * (1 - np.exp(-t / 250)) + 15 * rng.standard_normal(800)
    add("rl_reward_across_zero", reward)
    reward = reward + np.where(t >= 500, -180, 0)
    add("rl_reward_collapse_across_zero", reward, [500])
    loglik = -3.0 + 2.0 * (1 - np.exp(-t / 200)) + 0.03 * rng.standard_normal(800)
    add("log_likelihood_negative", loglik)
    add("log_likelihood_negative_drop", loglik - np.where(t >= 420, 0.6, 0), [420])

    rng = np.random.default_rng(4)
    t = np.arange(200, dtype=float)
    p = 0.85 - 0.5 * np.exp(-t / 40)
    add("accuracy_small_eval_set_20", rng.binomial(20, p) / 20)
    add("accuracy_small_eval_set_100_collapse", rng.binomial(100, np.where(t >= 140, p - 0.45, p)) / 100, [140])

    rng = np.random.default_rng(5)
    t = np.arange(600, dtype=float)
    loss = (0.2 + 2 * np.exp(-t / 100)) * _lognoise(rng, 600, 0.05)
    bad = loss.copy()
    bad[[230, 470]] *= 4.0
    add("one_step_bad_batches", bad, [230, 470])
    add("decay_lognormal_0.05", loss)

    frozen = np.full(400, 0.731)
    frozen[250:] = 0.802
    add("frozen_metric_moves_once", frozen, [250])
    add("constant_metric", np.full(400, 0.5))

    rng = np.random.default_rng(6)
    t = np.arange(900, dtype=float)
    head = 1.2 * np.exp(-t / 80) + 0.6
    tuned = np.where(t >= 450, 0.6 - 0.35 * (1 - np.exp(-(t - 450) / 3)), head)
    add("fine_tuning_backbone_unfrozen", tuned * _lognoise(rng, 900, 0.04), [450])

    rng = np.random.default_rng(7)
    t = np.arange(1200, dtype=float)
    base = 0.25 + 2 * np.exp(-t / 200)
    spike = np.where(t >= 700, 2.5 * np.exp(-(t - 700) / 60), 0)
    add("adam_spike_slow_recovery", (base + spike) * _lognoise(rng, 1200, 0.04), [700])

    rng = np.random.default_rng(8)
    t = np.arange(20000, dtype=float)
    long = (0.1 + 2 * np.exp(-t / 3000)) * _lognoise(rng, 20000, 0.1)
    add("long_20000_smooth", long)
    add("long_20000_shift", long * np.where(t >= 14000, 1.8, 1.0), [14000])

    rng = np.random.default_rng(9)
    t = np.arange(500, dtype=float)
    add("fast_one_over_t_start", (0.2 + 3.0 / (1 + t / 2)) * _lognoise(rng, 500, 0.03))
    add("shift_below_the_noise", (0.5 + 0.01 * rng.standard_normal(500)) + np.where(t >= 250, 0.01, 0))

    rng = np.random.default_rng(10)
    t = np.arange(700, dtype=float)
    add("grad_norm_clipped_at_1", np.minimum(1.0, 3 * np.exp(-t / 200) + 0.2 * _lognoise(rng, 700, 0.3)))
    add("loss_nan_guard_restart", np.where(t >= 350, 2.3 * np.exp(-(t - 350) / 60) + 0.3,
                                           2.3 * np.exp(-t / 60) + 0.3) * _lognoise(rng, 700, 0.05), [350])

    rng = np.random.default_rng(11)
    t = np.arange(400, dtype=float)
    add("weight_norm_slow_growth", 10 + 0.02 * t + 0.05 * rng.standard_normal(400))
    add("weight_norm_reset", 10 + 0.02 * t - np.where(t >= 300, 5, 0) + 0.05 * rng.standard_normal(400), [300])
    add("perplexity_in_hundreds", (40 + 900 * np.exp(-t / 60)) * _lognoise(rng, 400, 0.04))
    add("perplexity_jumps_up", (40 + 900 * np.exp(-t / 60) + np.where(t >= 260, 60, 0)) * _lognoise(rng, 400, 0.04),
        [260])

    rng = np.random.default_rng(12)
    t = np.arange(500, dtype=float)
    add("tiny_1e-5_gaussian_warmup", 1e-5 * (np.minimum(t / 50, 1) + 0.02 * rng.standard_normal(500)))
    add("tiny_1e-5_drop", 1e-5 * (1 + 0.02 * rng.standard_normal(500) - np.where(t >= 333, 0.5, 0)), [333])

    rng = np.random.default_rng(13)
    t = np.arange(900, dtype=float)
    slow = np.minimum((0.3 + 2 * np.exp(-t / 150)) * np.exp(0.08 * np.clip(t - 600, 0, None)), 50.0)
    add("divergence_slow_rate_0.08", slow * _lognoise(rng, 900, 0.1), [600])
    t = np.arange(500, dtype=float)
    reward = 100 - 20 * np.clip(t - 320, 0, 30) + 5 * rng.standard_normal(500)
    add("reward_collapses_linearly_below_zero", reward, [320])
    t = np.arange(300, dtype=float)
    add("lr_exponential_ramp_then_constant", 1e-6 * 1.05 ** np.clip(t - 50, 0, 140))
    return curves
