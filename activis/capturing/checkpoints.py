"""Checkpoints during training, for any training loop: the probe instances captured into the run's store
(one checkpoint per due step), optionally the parameters, and the training loop's own per-instance
losses and logits recorded as it goes.

Training is not perturbed: a checkpoint runs the model in eval mode under inference mode (no
gradient, no running statistics updated), puts every module's train/eval mode back, and restores
the torch (and CUDA) random state, so the training that follows draws the same numbers as without
checkpoints and ends with the same weights, bit for bit. A checkpoint costs one capture of the probe
instances and nothing else.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterable

import numpy as np
import torch
from torch import nn

from ..paths import folder_path
from ..run.dynamics import DynamicsWriter
from ..run.params import params_path
from ..store import MANIFEST, ActivationStore, open_store
from . import capture
from .options import CaptureError

PROBE = "probe"
DYNAMICS = "dynamics"


def _run_folder(run) -> pathlib.Path:
    """A run is a path or an object with ``.path`` (an `activis.Run`)."""
    return folder_path(getattr(run, "path", run), "run", CaptureError)


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class Checkpoints:
    """Capture the probe instances into ``<run>/probe`` whenever a checkpoint is due.

    Call ``checkpoints(step)`` once per training step, anywhere in the loop; a checkpoint is due
    every ``every`` steps (step 0, k, 2k, ...) or at the listed ``steps``, and `on_finding` forces one
    (the doctor calls it when it finds a problem). ``layers``, ``labels``, ``metadata``,
    ``class_names`` and ``batch_size`` are `capture`'s; ``capture_options`` passes others. With
    ``params=True`` the model's parameters and buffers at each checkpoint are written to
    ``<run>/params/<step>.safetensors`` (read with `activis.load_params`, never unpickled).

    Under ``torchrun`` rank 0 captures (the ranks hold the same weights) and the others go on; a
    ``DistributedDataParallel`` model is captured through its ``module``. A run restarted after a
    kill resumes a checkpoint left unfinished and skips those already complete.
    """

    def __init__(self, model: nn.Module, probe, run, *, every: int | None = None, steps: Iterable[int] | None = None,
                 layers: Iterable[str] | None = None, labels=None, metadata=None, class_names=None,
                 params: bool = False, batch_size: int | None = None, progress: bool = False,
                 capture_options: dict | None = None):
        if not isinstance(model, nn.Module):
            raise CaptureError(f"Checkpoints needs model=, the torch.nn.Module being trained, not "
                               f"{type(model).__name__}.")
        if (every is None) == (steps is None):
            raise CaptureError("Checkpoints needs every=k (a checkpoint each k steps) or steps=[...] (at those "
                               "steps): one of the two.")
        if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
            raise CaptureError(f"every is a number of steps, a whole number of 1 or more, not {every!r}.")
        if not isinstance(params, bool):
            raise CaptureError(f"params is True (write the parameters at each checkpoint) or False, not {params!r}.")
        self.steps = None
        if steps is not None:
            steps = list(steps)
            if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 0 for s in steps):
                raise CaptureError(f"steps are training steps, whole numbers of 0 or more, not {steps!r}.")
            self.steps = {int(s) for s in steps}
        self.model = model
        self.probe = probe
        self.path = _run_folder(run)
        self.every = every
        self.params = params
        self.options = {"layers": None if layers is None else list(layers), "labels": labels, "metadata": metadata,
                        "class_names": class_names, "batch_size": batch_size, "progress": progress,
                        **(capture_options or {})}
        self.step: int | None = None  # the last step the loop reported
        self.taken: list[int] = []  # the steps checkpointed by this object

    @property
    def store_path(self) -> pathlib.Path:
        return self.path / PROBE

    @property
    def store(self) -> ActivationStore | None:
        """The run's probe store (it reads its latest complete checkpoint), or None before the first."""
        return open_store(self.store_path) if (self.store_path / MANIFEST).exists() else None

    def due(self, step: int) -> bool:
        if self.every is not None:
            return step % self.every == 0
        return step in self.steps

    def __call__(self, step: int) -> ActivationStore | None:
        """Report the training step; capture a checkpoint if one is due. Returns the store when it captured."""
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0:
            raise CaptureError(f"Checkpoints(step): step is the training step, a whole number of 0 or more, "
                               f"not {step!r}.")
        self.step = int(step)
        return self.take(self.step) if self.due(self.step) else None

    def on_finding(self, finding=None) -> ActivationStore | None:
        """Capture a checkpoint now, unless there is one at this step: the model as it is, so at the last step
        reported (a finding made later than its own step is not the model at that step); the finding's
        ``step`` only before the loop reported any."""
        step = self.step
        if step is None:
            step = finding.get("step") if isinstance(finding, dict) else getattr(finding, "step", None)
        if step is None:
            raise CaptureError("Checkpoints.on_finding: no step yet; call checkpoints(step) in the training loop.")
        return self.take(int(step))

    def take(self, step: int) -> ActivationStore | None:
        """Capture checkpoint ``step`` now (rank 0 only; a complete one already there is kept)."""
        if _rank() != 0:
            return None
        store = self.store
        resume = False
        if store is not None:
            if step in store.checkpoints:
                return None
            resume = step in store.unfinished_checkpoints
        model = self.model.module if isinstance(self.model, nn.parallel.DistributedDataParallel) else self.model
        with _kept_random_state():
            store = capture(model, self.probe, self.store_path, checkpoint=step, resume=resume, distributed=False,
                            **self.options)
        if self.params:
            save_params(model, params_path(self.path, step))
        self.taken.append(step)
        return store


class _kept_random_state:
    """Restore torch's (and CUDA's) random state on exit: a DataLoader over the probe draws a seed from it."""

    def __enter__(self):
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() \
            else None

    def __exit__(self, *exc):
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)


def save_params(model: nn.Module, path: pathlib.Path) -> None:
    """Write the model's parameters and buffers (its state dict) as safetensors, atomically."""
    from safetensors.torch import save_file

    # copies: safetensors refuses tensors that share memory (tied weights), and training goes on changing these
    tensors = {name: value.detach().to("cpu", copy=True).contiguous() for name, value in model.state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    save_file(tensors, str(tmp))
    os.replace(tmp, path)


class DynamicsRecorder:
    """Record each instance's loss and logits from the training loop's own forward pass, into ``<run>/dynamics``.

    ``recorder.record(step, indices, logits, labels, losses=None)`` with the batch's dataset indices,
    the logits the loop computed (torch tensors or arrays; detached and copied to the CPU as float32)
    and the labels; ``losses`` defaults to the cross-entropy of the logits. Under ``torchrun`` each
    rank writes its own file; `activis.read_dynamics` merges them.
    """

    def __init__(self, run, rank: int | None = None):
        self.path = _run_folder(run) / DYNAMICS
        self.writer = DynamicsWriter(self.path, rank=_rank() if rank is None else rank)

    def record(self, step: int, indices, logits, labels, losses=None) -> None:
        if isinstance(step, torch.Tensor) and step.ndim == 0 and not step.is_floating_point():
            step = int(step)  # a loop's step counter kept as a tensor
        self.writer.append(step, _numpy(indices, None), _numpy(labels, None), _numpy(logits, np.float32),
                           None if losses is None else _numpy(losses, np.float32))

    def close(self) -> None:
        self.writer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _numpy(value, dtype) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if dtype is not None:
            value = value.to(torch.float32)
        return value.cpu().numpy()
    return np.asarray(value) if dtype is None else np.asarray(value, dtype=dtype)
