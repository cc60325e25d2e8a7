"""Precision: what autocast runs in, whether the device can run it, the gradient scaler, and the precision
in use (the peak rate MFU is taken against)."""

from __future__ import annotations

from contextlib import nullcontext

from caraml.errors import BadInput

HALF = ("fp16", "bf16")


def autocast_dtype(precision: str):
    """torch.float16 / torch.bfloat16 for the half precisions (fp8 training runs all but its float8 products in
    bf16 autocast); None: no autocast (fp32, tf32)."""
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16, "fp8": torch.bfloat16}.get(precision)


def autocast(precision: str, device):
    """A factory of autocast contexts for `precision` on `device` (a no-op context for fp32/tf32)."""
    import torch

    dtype = autocast_dtype(precision)
    if dtype is None:
        return nullcontext
    return lambda: torch.autocast(device.type, dtype=dtype)


def autocast_dtype_in_effect(device_type: str):
    """The dtype autocast computes in on `device_type` at this point of the program; None where it is off."""
    import torch

    if hasattr(torch, "get_autocast_dtype"):  # torch 2.4 and newer: one call for every device type
        on = torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type)
        return torch.get_autocast_dtype(device_type) if on else None
    if device_type == "cpu":  # torch 2.3 (NGC 24.02): per-device functions
        return torch.get_autocast_cpu_dtype() if torch.is_autocast_cpu_enabled() else None
    if device_type == "cuda":
        return torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else None
    return None


def grad_scaler(precision: str, device, caraml: bool = False):
    """PyTorch's GradScaler for fp16 (None otherwise). `caraml`: CARAML's image-classification scaler, which
    scales bf16 too, from a scale of 1, growing every 100 steps."""
    import torch

    if caraml and precision in HALF:
        return torch.amp.GradScaler(device.type, init_scale=1.0, growth_factor=2.0, backoff_factor=0.5,
                                    growth_interval=100)
    return torch.amp.GradScaler(device.type) if precision == "fp16" else None


def check_precision(precision: str, device) -> None:
    """Refuse a precision the device cannot run, with one clear line."""
    import torch

    if device.type == "cuda":
        hip = getattr(torch.version, "hip", None)
        major, minor = torch.cuda.get_device_capability(device)
        name = torch.cuda.get_device_name(device)
        if precision == "tf32" and not hip and major < 8:
            raise BadInput(f"precision=tf32 needs an NVIDIA GPU of compute capability >= 8.0; "
                           f"{name} is {major}.{minor}")
        if precision == "bf16" and not torch.cuda.is_bf16_supported():
            raise BadInput(f"precision=bf16 is not supported on {name}; use fp16 or fp32")
        if precision == "fp16" and not hip and (major, minor) < (5, 3):
            raise BadInput(f"precision=fp16 needs compute capability >= 5.3; {name} is {major}.{minor}")
        return
    if precision == "tf32":
        raise BadInput(f"precision=tf32 exists only on NVIDIA (Ampere or newer) and AMD GPUs, not on {device.type}; "
                       "use fp32, bf16 or fp16")
    dtype = autocast_dtype(precision)
    if dtype is not None:
        try:
            with torch.autocast(device.type, dtype=dtype):
                conv = torch.nn.Conv2d(1, 1, 1).to(device)
                conv(torch.ones(1, 1, 2, 2, device=device)).sum()
        except Exception as exc:  # noqa: BLE001 - the autocast backend lacks this dtype
            raise BadInput(f"precision={precision} is not supported on {device.type} by torch "
                           f"{torch.__version__} ({exc}); use fp32") from None


def tf32_capable(device) -> bool:
    """Whether fp32 math can run as TF32 here: NVIDIA of compute capability >= 8 (not AMD, not a CPU)."""
    import torch

    if device.type != "cuda" or getattr(torch.version, "hip", None):
        return False
    return torch.cuda.get_device_capability(device)[0] >= 8


def precision_in_use(precision: str, device, tf32_allowed: bool) -> str:
    """The precision MFU is taken against: an fp32 run whose dominant operations may run as TF32
    (`tf32_allowed`: cuDNN's flag for convolutions, the float32 matmul precision for matrix products) on a
    device that has TF32 runs in TF32."""
    if precision == "fp32" and tf32_allowed and tf32_capable(device):
        return "tf32"
    return precision


def matmul_tf32_allowed() -> bool:
    """torch.set_float32_matmul_precision lets fp32 matrix products run as TF32 (anything but "highest")."""
    import torch

    return torch.get_float32_matmul_precision() != "highest" or bool(torch.backends.cuda.matmul.allow_tf32)
