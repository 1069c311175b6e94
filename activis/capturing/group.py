"""The ranks of a ``torchrun`` capture, which each write their own shard of rows into one store."""

from __future__ import annotations

import os

import torch

from .options import CaptureError


class _Group:
    """The ranks of a torch.distributed job (or just this process), agreeing at each phase."""

    def __init__(self, rank: int = 0, world_size: int = 1):
        self.rank = rank
        self.world_size = world_size

    @classmethod
    def of(cls, distributed: bool | None) -> _Group:
        import torch.distributed as dist

        initialised = dist.is_available() and dist.is_initialized()
        if distributed and not initialised:
            raise CaptureError("distributed=True needs torch.distributed.init_process_group() first.")
        if distributed is False:
            return cls()
        if initialised:
            return cls(dist.get_rank(), dist.get_world_size())
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise CaptureError(f"This process is one of {os.environ['WORLD_SIZE']} (torchrun) but torch.distributed "
                               "is not initialised: call torch.distributed.init_process_group('gloo') (or 'nccl') "
                               "before capture, or pass distributed=False to capture everything in every process.")
        return cls()

    def agree(self, ok: bool) -> bool:
        """True when every rank is ok (a collective: every rank must call it at the same point)."""
        if self.world_size == 1:
            return ok
        import torch.distributed as dist

        device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
        flag = torch.tensor([1 if ok else 0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag.item())

    def step(self, fn):
        """Run ``fn`` on every rank, then raise on every rank if any failed."""
        error = None
        try:
            result = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised after the ranks agree
            error, result = exc, None
        if not self.agree(error is None):
            if error is not None:
                raise error
            raise CaptureError("Another rank of this distributed capture failed (see its error); every "
                               "committed batch is kept, capture(..., resume=True) continues.")
        return result

