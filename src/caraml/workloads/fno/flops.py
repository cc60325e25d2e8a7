"""FLOPs per sample of an FNO: torch.utils.flop_counter plus the FFTs, which it does not count.

FFTs are counted by the usual convention: 5 N log2 N per complex FFT of N points, 2.5 N log2 N per
real-to-complex or complex-to-real FFT of N real points, per transformed vector (N = the product of
the transformed sizes). They are counted on the ops torch actually runs, so the backward pass's FFTs
(a full complex FFT for the gradient of an rfft) are counted as run.
"""

from __future__ import annotations

import math

FLOPS_CONVENTION = (
    "torch.utils.flop_counter on one {passes} at fp32, counted on the meta device (2 FLOPs per multiply-add "
    "of matrix products; a complex product as 4 real multiply-adds, i.e. the real batched matmul the model "
    "runs) plus FFTs by the convention 5 N log2 N per complex FFT of N points and 2.5 N log2 N per real FFT "
    "(rfft/irfft), forward and backward FFTs as torch runs them; gathers, scatters (NUFFT gridding), "
    "elementwise ops, the Vandermonde/Kaiser-Bessel setup and the optimizer not counted"
)


def _n_log_n(shape, dims) -> tuple[float, float]:
    """(transformed vectors, N log2 N) of an FFT over `dims` of a tensor of `shape`."""
    n = math.prod(shape[d] for d in dims)
    batch = math.prod(shape) / n if n else 0
    return batch, (n * math.log2(n) if n > 1 else 0.0)


def _r2c(x_shape, dim, *args, out_shape=None, **kwargs) -> int:
    batch, nlogn = _n_log_n(x_shape, dim)
    return int(2.5 * batch * nlogn)


def _c2r(x_shape, dim, *args, out_shape=None, **kwargs) -> int:
    batch, nlogn = _n_log_n(out_shape, dim)  # N is the real output's size
    return int(2.5 * batch * nlogn)


def _c2c(x_shape, dim, *args, out_shape=None, **kwargs) -> int:
    batch, nlogn = _n_log_n(x_shape, dim)
    return int(5 * batch * nlogn)


def fft_formulas() -> dict:
    import torch

    aten = torch.ops.aten
    return {aten._fft_r2c: _r2c, aten._fft_c2r: _c2r, aten._fft_c2c: _c2c}  # keyed by overload packet


def count(make_model, make_inputs, train: bool, loss=None) -> dict:
    """FLOPs of one pass of `make_model()` over `make_inputs()` (a batch), both made on the meta device:
    {'total', 'fft'}; train: forward + backward of `loss(output)`. The kit counts, with the FFT formulas above."""
    from caraml.kit.flops import count_flops_by_op

    formulas = fft_formulas()
    counted = count_flops_by_op(make_model, make_inputs, train=train,
                                loss=loss or (lambda out: out.float().square().mean()), custom_mapping=formulas)
    return {"total": counted["total"], "fft": sum(v for op, v in counted["by_op"].items() if op in formulas)}
