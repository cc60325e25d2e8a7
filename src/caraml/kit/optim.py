"""Optimizer kernel choices, named the same for every workload."""

from __future__ import annotations

from caraml.errors import BadInput

KERNELS = ("foreach", "fused", "for-loop")


def kernel_flags(impl: str) -> dict:
    """torch.optim keyword arguments of a kernel choice: foreach (PyTorch's default), fused (one kernel per
    step), for-loop (one per parameter)."""
    return {"foreach": {"foreach": True}, "fused": {"fused": True}, "for-loop": {"foreach": False}}[impl]


def check_kernels(param: str, impl: str, optimizer: str, device) -> None:
    """Refuse, in one line, fused kernels this torch lacks on the run's device: torch 2.3 (NGC 24.02's) has fused
    SGD and Adam for CUDA only, CPU kernels came in 2.4; without this the first optimizer step fails deep inside
    torch.optim. Probed in the dispatcher (aten::_fused_sgd_ / _fused_adam_), not read from the version."""
    if impl != "fused":
        return
    import torch

    try:  # dispatch keys are the device types in capitals: CPU, CUDA (ROCm's too), XPU, MPS
        present = torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::_fused_{optimizer}_", device.type.upper())
    except (AttributeError, RuntimeError):  # no such probe or no such key: leave it to torch.optim
        return
    if not present:
        since = " (CPU kernels came in torch 2.4)" if device.type == "cpu" else ""
        raise BadInput(f"{param}=fused: this torch ({torch.__version__}) has no fused {optimizer.upper()} kernel for "
                       f"{device.type}{since}: use {param}=foreach")
