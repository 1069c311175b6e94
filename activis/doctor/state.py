"""Everything a check may disturb in the user's model, saved once and put back after every check.

Parameters and buffers (BatchNorm's running statistics and batch counter: a training-mode pass
moves them), gradients, ``requires_grad`` flags, train/eval modes, the modules' hooks and torch's
random state: a checkup hands back a model whose ``state_dict`` and eval-mode outputs are identical.
Tensors keep their identity (values are copied back in place), so an optimizer built on them still
holds them.
"""

from __future__ import annotations

import torch
from torch import nn

_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
               "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called")


class ModelState:
    def __init__(self, model: nn.Module):
        self.model = model
        self.tensors = [(t, t.detach().clone()) for t in [*model.parameters(), *model.buffers()]]
        self.grads = [(p, p.grad, None if p.grad is None else p.grad.detach().clone()) for p in model.parameters()]
        self.flags = [(p, p.requires_grad) for p in model.parameters()]
        self.modes = [(m, m.training) for m in model.modules()]
        self.hooks = [(m, {k: dict(getattr(m, k)) for k in _HOOK_DICTS if hasattr(m, k)}) for m in model.modules()]
        self.rng = torch.get_rng_state()
        self.cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None

    def restore(self) -> None:
        with torch.no_grad():
            for t, saved in self.tensors:
                if t.shape != saved.shape or t.dtype != saved.dtype:
                    t.data = saved.clone()
                elif not torch.equal(t, saved) or (t.is_floating_point() and t.isnan().any()):
                    t.copy_(saved)
            for p, grad, saved in self.grads:
                if grad is not None:
                    grad.copy_(saved)
                p.grad = grad
        for p, flag in self.flags:
            p.requires_grad_(flag)
        for m, mode in self.modes:
            m.training = mode
        for m, hooks in self.hooks:
            for name, saved in hooks.items():
                current = getattr(m, name)
                if current.keys() != saved.keys():
                    current.clear()
                    current.update(saved)
        torch.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
