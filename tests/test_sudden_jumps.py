"""The jump rule (`activis.run.volatility.sudden_jumps`): planted jumps of every kind are found where they
start, and each curve's jump-free twin (the same curve, noise and scale without the jump) marks nothing."""

import numpy as np
import pandas as pd
import pytest

from activis.evaluation.training import jump_scores, sudden_jumps


def _decay(n, start=2.3, floor=0.1, tau=150.0):
    return floor + (start - floor) * np.exp(-np.arange(n) / tau)


def _lognoise(seed, n, sigma):
    return np.exp(sigma * np.random.default_rng(seed).standard_normal(n))


def _ema(values, alpha=0.9):
    """TensorBoard's smoothing (an exponential moving average): a jump smeared over tens of steps."""
    return pd.Series(values).ewm(alpha=1 - alpha, adjust=False).mean().to_numpy()


def _settling(n, at, size, steps=3.0):
    """A change of ``size`` from step ``at`` that settles over a few steps (a learning-rate drop's loss)."""
    t = np.arange(n, dtype=float)
    return np.where(t >= at, size * (1 - np.exp(-(t - at + 1) / steps)), 0.0)


N = 800
T = np.arange(N, dtype=float)
# (name, jump-free twin, the same with its jump, where the jump starts)
PLANTED = {
    "lr drop, loss settles over 3 steps": (
        (_decay(N) + 0.6) * _lognoise(1, N, 0.08), (_decay(N) + 0.6 - _settling(N, 500, 0.54)) * _lognoise(1, N, 0.08),
        500),
    "lr drop at 1e-5": (
        1e-5 * (_decay(N) + 0.6) * _lognoise(2, N, 0.08),
        1e-5 * (_decay(N) + 0.6 - _settling(N, 420, 0.54)) * _lognoise(2, N, 0.08), 420),
    "level shift up in the thousands": (
        1e3 * _decay(N) * _lognoise(3, N, 0.06),
        1e3 * (_decay(N) + _settling(N, 300, 0.8, 2.0)) * _lognoise(3, N, 0.06), 300),
    "one bad batch": (_decay(N) * _lognoise(4, N, 0.05), _decay(N) * _lognoise(4, N, 0.05) * np.where(T == 610, 4, 1),
                      610),
    "gradient norm explodes 20x": (
        1.2 * _lognoise(5, N, 0.25), 1.2 * np.where(T >= 380, 20.0, 1.0) * _lognoise(5, N, 0.25), 380),
    "divergence onset": (
        _decay(N) * _lognoise(6, N, 0.05), np.minimum(_decay(N) * np.exp(0.3 * np.clip(T - 450, 0, None)), 1e4)
        * _lognoise(6, N, 0.05), 450),
    "accuracy collapse, small eval batch": (
        np.random.default_rng(7).binomial(64, 0.9 - 0.7 * np.exp(-T / 80)) / 64,
        np.random.default_rng(7).binomial(64, 0.9 - 0.7 * np.exp(-T / 80) - np.where(T >= 520, 0.4, 0)) / 64, 520),
    "reward collapses across zero": (
        -150 + 300 * (1 - np.exp(-T / 200)) + 12 * np.random.default_rng(8).standard_normal(N),
        -150 + 300 * (1 - np.exp(-T / 200)) - np.where(T >= 600, 200, 0)
        + 12 * np.random.default_rng(8).standard_normal(N), 600),
    "shift seen through TensorBoard smoothing": (
        _ema(_decay(N) * _lognoise(9, N, 0.2)), _ema((_decay(N) + np.where(T >= 550, 0.8, 0)) * _lognoise(9, N, 0.2)),
        550),
}


@pytest.mark.parametrize("name", list(PLANTED))
def test_a_planted_jump_is_found_where_it_starts_and_its_twin_stays_unmarked(name):
    twin, jumped, at = PLANTED[name]
    assert not sudden_jumps(twin).any(), name
    marked = np.flatnonzero(sudden_jumps(jumped))
    assert len(marked) == 1 and abs(marked[0] - at) <= 5, (name, marked)


WARMUP = np.minimum(T / 80, 1.0) * 0.5 * (1 + np.cos(np.pi * np.clip(T - 80, 0, None) / (N - 80)))
JUMP_FREE = {
    "loss under warm-up from lr 0 then cosine": (0.05 + 2.25 * np.exp(-np.cumsum(WARMUP) / 60))
    * _lognoise(10, N, 0.08),
    "the warm-up + cosine learning rate itself": 3e-4 * WARMUP,
    "one-cycle learning rate": np.where(T < 240, 0.1 * T / 240, 0.1 * 0.5 * (1 + np.cos(np.pi * (T - 240) / 560))),
    "triangular cyclic learning rate": 1e-3 + 9e-3 * np.abs(((T / 100) % 2) - 1),
    "noisy small-batch accuracy (batch 16)": np.random.default_rng(11).binomial(16, 0.9 - 0.7 * np.exp(-T / 90)) / 16,
    "heavy-tailed noise (t, 4 dof)": _decay(N) * np.exp(0.06 * np.random.default_rng(12).standard_t(4, N)),
    "autocorrelated noise": _decay(N) * np.exp(_ema(0.3 * np.random.default_rng(13).standard_normal(N), 0.8)),
    "smoothed noisy loss": _ema(_decay(N) * _lognoise(14, N, 0.3)),
    "slow overfitting": (0.45 + 0.8 * np.exp(-T / 60) + 0.25 * np.clip((T - 200) / 600, 0, None) ** 1.5)
    * _lognoise(15, N, 0.03),
    "fast 1/t start": (0.2 + 3.0 / (1 + T / 2)) * _lognoise(16, N, 0.03),
    "linear growth with noise": 10 + 0.02 * T + 0.05 * np.random.default_rng(17).standard_normal(N),
    "constant": np.full(N, 0.5),
}


@pytest.mark.parametrize("name", list(JUMP_FREE))
def test_schedules_warm_up_noise_and_trends_mark_nothing(name):
    assert not sudden_jumps(JUMP_FREE[name]).any(), (name, np.flatnonzero(sudden_jumps(JUMP_FREE[name])))


def test_one_mark_per_event_and_the_first_of_equal_events():
    lr = 0.1 * np.where(np.arange(300) >= 100, 0.1, 1.0) * np.where(np.arange(300) >= 200, 0.1, 1.0)
    assert np.flatnonzero(sudden_jumps(lr)).tolist() == [100, 200]  # a noiseless StepLR: each drop once
    frozen = np.where(np.arange(400) >= 250, 0.802, 0.731)
    assert np.flatnonzero(sudden_jumps(frozen)).tolist() == [250]


def test_scores_threshold_window_and_odd_input():
    twin, jumped, at = PLANTED["level shift up in the thousands"]
    score, spread = jump_scores(jumped)
    assert score.shape == spread.shape == (N,) and np.isnan(spread[0]) and score.argmax() in range(at - 5, at + 6)
    assert not sudden_jumps(jumped, threshold=score.max() + 1).any()
    assert sudden_jumps(jumped, window=30)[at - 5:at + 6].any()
    with_nan = jumped.copy()
    with_nan[[10, 400]] = np.nan  # left out, never marked
    marked = np.flatnonzero(sudden_jumps(with_nan))
    assert len(marked) == 1 and abs(marked[0] - at) <= 5
    assert not sudden_jumps([1.0, 2.0, 1.0]).any() and not sudden_jumps([]).any()
    short = np.r_[0.85 + 0.01 * np.sin(np.arange(20)), 0.6 + 0.01 * np.sin(np.arange(10))]  # 30 evaluations
    assert np.flatnonzero(sudden_jumps(short)).tolist() == [20]
