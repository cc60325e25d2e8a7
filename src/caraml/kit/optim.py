"""Optimizer kernel choices, named the same for every workload."""

from __future__ import annotations

KERNELS = ("foreach", "fused", "for-loop")


def kernel_flags(impl: str) -> dict:
    """torch.optim keyword arguments of a kernel choice: foreach (PyTorch's default), fused (one kernel per
    step), for-loop (one per parameter)."""
    return {"foreach": {"foreach": True}, "fused": {"fused": True}, "for-loop": {"foreach": False}}[impl]
