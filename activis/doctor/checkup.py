"""`checkup`: the before-training checks on a sample, in seconds on a CPU, leaving the model as it was."""

from __future__ import annotations

import time

import torch
from torch import nn

from .checks import BEFORE_TRAINING, CHECKS, Skip
from .context import CheckContext, Data
from .findings import DoctorError, Report


def checkup(model: nn.Module, data, loss_fn, optimizer=None, *, test_data=None, checks=None,
            batch_size: int = 100, max_samples: int = 512, steps: int = 300, seed: int = 0,
            threads: int | None = 1, train_seconds: float = 20.0) -> Report:
    """Run the before-training checks and return their `Report`.

    ``data``: ``(X, y)``, ``(X, y, sample_weight)``, a Dataset or a DataLoader (the training data as
    training will see it); ``loss_fn(output, target)`` returns the mean loss; ``optimizer`` the one
    training will use; ``test_data`` (same forms) enables the overlap check. ``checks`` names a subset
    (ids of `activis.doctor.checks.CHECKS`). ``steps`` bounds the one-batch overfitting run and
    ``train_seconds`` the wall time of each training run on a copy (a check whose run ran out of time
    is skipped, saying so, rather than judged on a short run). The model's
    parameters, gradients, train/eval modes and torch's random state are left as they were.
    ``threads``: torch's intra-op threads while checking (one: the sample's small passes gain nothing
    from more, and lose much when the CPU is shared); None keeps torch's setting.
    """
    if not isinstance(model, nn.Module):
        raise DoctorError(f"checkup needs a torch.nn.Module, got {type(model).__name__}")
    if not callable(loss_fn):
        raise DoctorError("loss_fn must be callable as loss_fn(output, target) -> scalar tensor")
    chosen = _chosen(checks)
    sample = Data(data, max_samples, seed)
    test = Data(test_data, max_samples, seed) if test_data is not None else None
    ctx = CheckContext(model, sample, loss_fn, optimizer, test, batch_size=batch_size, seed=seed, steps=steps,
                       train_seconds=train_seconds)
    findings, skipped, ran, seconds = [], {}, [], {}
    rng, saved_threads = torch.get_rng_state(), torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    params = [p.detach().clone() for p in model.parameters()]
    try:
        for check_class in chosen:
            check = check_class()
            start = time.perf_counter()
            try:
                found = check.run(ctx)
            except Skip as e:
                skipped[check.id] = str(e)
            except Exception as e:  # noqa: BLE001 - a check that breaks is reported as skipped, never as passed
                skipped[check.id] = f"could not run: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
            else:
                ran.append(check.id)
                findings.extend(found)
            seconds[check.id] = time.perf_counter() - start
    finally:
        torch.set_rng_state(rng)
        torch.set_num_threads(saved_threads)
        with torch.no_grad():
            for p, saved in zip(model.parameters(), params):
                if not torch.equal(p, saved):
                    p.copy_(saved)
    return Report(findings, skipped, ran, seconds)


def _chosen(checks):
    if checks is None:
        return BEFORE_TRAINING
    names = [checks] if isinstance(checks, str) else list(checks)
    unknown = [c for c in names if c not in CHECKS]
    if unknown:
        raise DoctorError(f"unknown checks {unknown}; the checks are: {', '.join(CHECKS)}")
    return [CHECKS[c] for c in names]
