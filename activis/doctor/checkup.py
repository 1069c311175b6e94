"""`checkup`: the before-training checks on a sample, in seconds on a CPU, leaving the model as it was."""

from __future__ import annotations

import dataclasses
import math
import time

import torch
from torch import nn

from . import inputs
from .checks import BEFORE_TRAINING, CHECKS, LEARNING, Skip
from .context import CheckContext, Data, first_tensor
from .findings import DoctorError, Report
from .preflight import loss_on_prediction, preflight
from .state import ModelState


def _int_arg(name: str, value, lowest: int, why: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise DoctorError(f"{name} must be an integer >= {lowest} ({why}), not {value!r}")
    return value


def _check_arguments(model, loss_fn, optimizer, scheduler, batch_size, max_samples, steps, seed, threads,
                     train_seconds) -> None:
    if not isinstance(model, nn.Module):
        raise DoctorError(f"checkup needs a torch.nn.Module, got {type(model).__name__}")
    if not callable(loss_fn):
        raise DoctorError("loss_fn must be callable as loss_fn(output, target) -> scalar tensor")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise DoctorError(f"optimizer must be a torch.optim.Optimizer (e.g. torch.optim.SGD(model.parameters(), "
                          f"lr=0.1)) or None, not {optimizer!r}")
    if scheduler is not None and (optimizer is None or getattr(scheduler, "optimizer", None) is not optimizer):
        raise DoctorError("scheduler must be a torch.optim.lr_scheduler built on the optimizer passed as optimizer=")
    _int_arg("batch_size", batch_size, 2, "the checks compare samples within a batch")
    _int_arg("max_samples", max_samples, 2, "the checks need at least two samples")
    _int_arg("steps", steps, 1, "the one-batch overfitting run's steps")
    _int_arg("seed", seed, 0, "torch's seed for the checks' runs")
    if threads is not None:
        _int_arg("threads", threads, 1, "torch's intra-op threads, or None to keep torch's setting")
    if isinstance(train_seconds, bool) or not isinstance(train_seconds, int | float) or not (
            math.isfinite(train_seconds) and train_seconds > 0):
        raise DoctorError(f"train_seconds must be a positive number of seconds, not {train_seconds!r}")


def checkup(model: nn.Module, data, loss_fn, optimizer=None, *, scheduler=None, test_data=None, checks=None,
            batch_size: int = 100, max_samples: int = 512, steps: int = 300, seed: int = 0,
            threads: int | None = 1, train_seconds: float = 10.0) -> Report:
    """Run the before-training checks and return their `Report`.

    ``data``: ``(X, y)``, ``(X, y, sample_weight)``, a Dataset or a DataLoader (the training data as
    training will see it); ``loss_fn(output, target)`` returns the mean loss (``output``: the model's
    tensor, or the ``logits`` of a dict/ModelOutput it returns); ``optimizer`` the one training will use
    and ``scheduler`` its learning-rate schedule (both run on copies for a few steps); ``test_data``
    (same forms) enables the overlap check. ``checks`` names a subset (ids of `CHECKS`). ``steps``
    bounds the one-batch overfitting run and ``train_seconds`` the wall time of each training run on a
    copy. First one forward, loss and backward run on a batch: if that fails, `SetupError` names the
    module and the fact about the data, and no report is made. The model's parameters, buffers
    (BatchNorm's running statistics), gradients, train/eval modes, hooks and torch's random state are
    left as they were. ``threads``: torch's intra-op threads while checking (one: the sample's small
    passes gain nothing from more); None keeps torch's setting.
    """
    _check_arguments(model, loss_fn, optimizer, scheduler, batch_size, max_samples, steps, seed, threads,
                     train_seconds)
    chosen = _chosen(checks)
    sample = Data(data, max_samples, seed)
    test = Data(test_data, max_samples, seed) if test_data is not None else None
    if test is not None and not inputs.same_form(test.X, sample.X):
        raise DoctorError(f"test_data's inputs have shape {inputs.describe(test.X)} per sample but data's have "
                          f"{inputs.describe(sample.X)}: give test_data from the same features as data")
    ctx = CheckContext(model, sample, loss_fn, optimizer, test, batch_size=batch_size, seed=seed, steps=steps,
                       train_seconds=train_seconds, scheduler=scheduler)
    findings, skipped, failed, ran, seconds = [], {}, {}, [], {}
    state = ModelState(model)
    saved_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        torch.manual_seed(seed)
        ctx.loss_fn = loss_fn = loss_on_prediction(model, ctx.x, ctx.y, loss_fn, first_tensor)
        state.restore()
        preflight(model, ctx.x, ctx.y, loss_fn, first_tensor)
        state.restore()
        for check_class in chosen:
            check = check_class()
            start = time.perf_counter()
            structural = [f for f in findings if f.severity == "error"]
            try:
                if check_class in LEARNING and structural:
                    raise Skip(f"not judged while {structural[0].title.lower()} stands: fix that first")
                found = check.run(ctx)
            except Skip as e:
                skipped[check.id] = str(e)
            except Exception as e:  # noqa: BLE001 - a check that breaks is reported as failed, never as passed
                failed[check.id] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}" if str(e) else \
                    type(e).__name__
            else:
                ran.append(check.id)
                findings.extend(found)
            finally:
                state.restore()
            seconds[check.id] = time.perf_counter() - start
    finally:
        state.restore()
        torch.set_num_threads(saved_threads)
    return Report([_in_module(ctx, f) for f in findings], skipped, ran, seconds, failed)


def _in_module(ctx, finding):
    """A finding on a functional node inside a module names that module as its place (``where``); ``node``
    keeps the node, so the graph still shows it where it is."""
    graph = ctx._cache.get("graph")
    if finding.place != "node" or graph is None or finding.node not in graph:
        return finding
    node = graph.node(finding.node)
    path = node.target if node.op == "call_module" else node.module_path
    return dataclasses.replace(finding, where=path) if path else finding


def _chosen(checks):
    if checks is None:
        return BEFORE_TRAINING
    names = [checks] if isinstance(checks, str) else list(checks)
    unknown = [c for c in names if c not in CHECKS]
    if unknown or not names:
        raise DoctorError(f"unknown checks {unknown or names}; the checks are: {', '.join(CHECKS)}")
    return [CHECKS[c] for c in names]
