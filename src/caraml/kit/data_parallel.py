"""Data parallelism for the workloads whose every process is one replica (image classification, FNO)."""

from __future__ import annotations


def wrap_ddp(model, device, world_size: int, **options):
    """The model under DistributedDataParallel when there are several processes; the model itself otherwise."""
    if world_size <= 1:
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None, **options)
