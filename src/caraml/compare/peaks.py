"""The peak rate a comparison's MFU is taken against: the system profile's, for the device the script runs on
(caraml.systems), not a number written into the script."""

from __future__ import annotations

from caraml import systems


def device_tag(device=None) -> str:
    """The system profile's tag of the device (the first GPU when none is given; CPU without one)."""
    return systems.detect(device)


def peak_tflops(precision: str = "bf16", tag: str | None = None) -> float | None:
    """The dense peak TFLOP/s of `precision` on the system `tag` (the detected device's when None); None when its
    profile gives none (the CPU's, a precision it lacks)."""
    return (systems.get(tag or device_tag()).get("peak_tflops") or {}).get(precision)


def mfu(flops_per_s: float | None, precision: str = "bf16", tag: str | None = None) -> float | None:
    """flops_per_s as a share of the peak; None where either is unknown."""
    peak = peak_tflops(precision, tag)
    return flops_per_s / (peak * 1e12) if flops_per_s and peak else None
