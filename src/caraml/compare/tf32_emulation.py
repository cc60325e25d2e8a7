"""TF32 emulated on a CPU and PIC2D's operator and model compared across NUFFT backends (bench/pic_tf32_cpu.py,
bench/pic1d_tf32_cpu.py): a CPU has no TF32; CARAML's matmul precision 'high' gives it on NVIDIA GPUs, where tensor
cores read float32 operands with 10 mantissa bits. Emulated here: every float32 torch.matmul/bmm operand rounded to
nearest at 10 bits, in the forward and the backward products (float64 ones untouched, as on a GPU)."""

from __future__ import annotations

import contextlib

import torch

MODEL_LAYERS = 4  # PIC2D's
TOLERANCE = 1e-4  # equal to torchkbnufft's within this, relative


def tf32_round(t: torch.Tensor, truncate: bool = False) -> torch.Tensor:
    """float32 rounded to TF32's 10 mantissa bits (to nearest, ties away; truncate: the low 13 bits dropped, as the
    tensor cores take the float32 bits Triton's tl.dot hands them); other dtypes unchanged."""
    if t.dtype != torch.float32:
        return t
    bits = t.contiguous().view(torch.int32)
    return ((bits if truncate else bits + 0x1000) & ~0x1FFF).view(torch.float32)


class TF32Product(torch.autograd.Function):
    """A matmul/bmm with TF32 operands (rounded, or truncated) in the forward and both backward products."""

    @staticmethod
    def forward(ctx, a, b, product, truncate):
        ctx.save_for_backward(a, b)
        ctx.product, ctx.truncate = product, truncate
        return product(tf32_round(a, truncate), tf32_round(b, truncate))

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        g = tf32_round(grad, ctx.truncate)
        ga = ctx.product(g, tf32_round(b, ctx.truncate).transpose(-1, -2)).sum_to_size(a.shape)
        gb = ctx.product(tf32_round(a, ctx.truncate).transpose(-1, -2), g).sum_to_size(b.shape)
        return ga, gb, None, None


@contextlib.contextmanager
def emulated_tf32(truncate: bool = False):
    """torch.matmul and torch.bmm as a GPU runs them under matmul precision 'high' (TF32), for the duration;
    truncate: as Triton's TF32 products feed the tensor cores."""
    matmul, bmm = torch.matmul, torch.bmm
    torch.matmul = lambda a, b: TF32Product.apply(a, b, matmul, truncate)
    torch.bmm = lambda a, b: TF32Product.apply(a, b, bmm, truncate)
    try:
        yield
    finally:
        torch.matmul, torch.bmm = matmul, bmm


def backend_results(backend: str, particles: int, batch: int, width: int, modes: int,
                    matrix_dtype: torch.dtype | None = None, layers: int = MODEL_LAYERS,
                    input_noise: float = 0.0) -> dict:
    """CARAML's PIC2D operator alone (spectrum, inverse of the spectrum times a fixed factor, gradient w.r.t. its
    input from a fixed cotangent) and the FNO on it (output; L1 loss gradients w.r.t. the input and every weight),
    from fixed seeds: the same weights and data for every backend. matrix_dtype: the matrix backend's products;
    input_noise: the model's input times 1 + input_noise * N(0, 1) (the TF32 floor: 2^-24, float32 rounding)."""
    from caraml.workloads.fno.model import FNO, ParticleIndexNUFFT

    torch.manual_seed(3)
    op = ParticleIndexNUFFT((modes, modes), particles, backend)
    model = FNO(3, 2, width, (modes, modes), layers, kind="kbnufft", particles=particles, nufft_backend=backend)
    if backend == "matrix" and matrix_dtype is not None:
        op.matrix, model.transform.matrix = op.matrix.to(matrix_dtype), model.transform.matrix.to(matrix_dtype)
    torch.manual_seed(2)
    x = torch.randn(batch, width, particles, requires_grad=True)
    spec = op(x, None, False)
    back = op.inverse(spec * torch.randn(spec.shape), None, (particles,))
    (back * torch.randn(back.shape)).sum().backward()
    xm = torch.randn(batch, 3, particles)
    xm[:, :2] = 2 * torch.pi * torch.rand(batch, 2, particles)  # positions, as CARAML's data
    noise = torch.randn(xm.shape, generator=torch.Generator().manual_seed(9))  # beside the seeded sequence
    xm = (xm * (1 + input_noise * noise)).requires_grad_(True)
    out = model(xm)
    (out - torch.randn(out.shape)).abs().mean().backward()  # CARAML's L1 loss
    return {"spectrum": spec.detach(), "inverse": back.detach(), "operator input grad": x.grad,
            "output": out.detach(), "model input grad": xm.grad,
            **{f"grad {name}": q.grad for name, q in model.named_parameters()}}


def rel_diffs(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """(norm-wise, elementwise) relative difference of a to b."""
    a, b = a.double(), b.double()
    return (float((a - b).norm() / b.norm().clamp_min(1e-300)),
            float((a - b).abs().max() / b.abs().max().clamp_min(1e-300)))


def compare(results: dict, reference: dict) -> dict:
    """name -> (norm-wise, elementwise); the weights' gradients as their worst parameter, 'weight grads'."""
    diffs = {name: rel_diffs(results[name], ref) for name, ref in reference.items()}
    out = {k: v for k, v in diffs.items() if not k.startswith("grad ")}
    weights = [v for k, v in diffs.items() if k.startswith("grad ")]
    out["weight grads"] = (max(w[0] for w in weights), max(w[1] for w in weights))
    return out
