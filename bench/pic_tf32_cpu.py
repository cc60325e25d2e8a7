"""PIC2D's nufft_backend=matrix against torchkbnufft on a CPU, with and without TF32 emulated.

    PYTHONPATH=src python3 bench/pic_tf32_cpu.py [--particles 100000] [--batch 2] [--width 32] [--out DIR]

A CPU has no TF32; CARAML's matmul precision 'high' gives it on NVIDIA GPUs, where tensor cores read float32
operands with 10 mantissa bits. Emulated here: every float32 torch.matmul/bmm operand rounded to nearest at 10 bits,
in the forward and the backward products (float64 ones untouched, as on a GPU). For the matrix products in float32
(the backend before) and float64 (now), each with TF32 off and emulated: the relative difference to torchkbnufft of
CARAML's operator alone (spectrum, inverse, gradient w.r.t. its input) and of the FNO on one batch from the same
weights (output, gradients w.r.t. the input and every weight), norm-wise and elementwise (largest difference over
largest value). Beside them the floor that TF32 sets for the model: torchkbnufft against itself with the model's
input moved by float32 rounding (relative 2^-24 noise). Writes pic_tf32_cpu.json into --out when given. The full
PIC2D size takes about 2 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

MODEL_LAYERS = 4  # PIC2D's
TOLERANCE = 1e-4  # equal to torchkbnufft's within this, relative


def tf32_round(t: torch.Tensor) -> torch.Tensor:
    """float32 rounded to TF32's 10 mantissa bits (to nearest, ties away); other dtypes unchanged."""
    if t.dtype != torch.float32:
        return t
    return ((t.contiguous().view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


class _TF32Product(torch.autograd.Function):
    """A matmul/bmm with TF32-rounded operands in the forward and both backward products."""

    @staticmethod
    def forward(ctx, a, b, product):
        ctx.save_for_backward(a, b)
        ctx.product = product
        return product(tf32_round(a), tf32_round(b))

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        g = tf32_round(grad)
        ga = ctx.product(g, tf32_round(b).transpose(-1, -2)).sum_to_size(a.shape)
        gb = ctx.product(tf32_round(a).transpose(-1, -2), g).sum_to_size(b.shape)
        return ga, gb, None


@contextlib.contextmanager
def emulated_tf32():
    """torch.matmul and torch.bmm as a GPU runs them under matmul precision 'high' (TF32), for the duration."""
    matmul, bmm = torch.matmul, torch.bmm
    torch.matmul = lambda a, b: _TF32Product.apply(a, b, matmul)
    torch.bmm = lambda a, b: _TF32Product.apply(a, b, bmm)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--particles", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--modes", type=int, default=16)
    parser.add_argument("--out", help="folder for pic_tf32_cpu.json")
    args = parser.parse_args()
    size = {"particles": args.particles, "batch": args.batch, "width": args.width, "modes": args.modes}
    rows = []
    for tf32 in (False, True):
        with emulated_tf32() if tf32 else contextlib.nullcontext():
            start = time.monotonic()
            reference = backend_results("torchkbnufft", **size)
            for what in ("float32", "float64", "floor"):
                results = (backend_results("torchkbnufft", input_noise=2.0 ** -24, **size) if what == "floor" else
                           backend_results("matrix", matrix_dtype=getattr(torch, what), **size))
                diffs = compare(results, reference)
                worst = max(d[0] for d in diffs.values())
                rows.append({"tf32": "emulated" if tf32 else "off", "compared": what,
                             "rel_diff": diffs, "max_norm_wise": worst, "pass": worst < TOLERANCE})
                print(f"TF32 {rows[-1]['tf32']:<8} " + (
                      "floor: torchkbnufft, the model's input moved by 2^-24" if what == "floor" else
                      f"matrix products {what}: {'pass' if worst < TOLERANCE else 'FAIL'} (norm-wise < {TOLERANCE:g})")
                      + f" ({time.monotonic() - start:.0f} s)")
                for name, (norm, elem) in diffs.items():
                    print(f"    {name:<22} norm-wise {norm:.1e}  elementwise {elem:.1e}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "pic_tf32_cpu.json").write_text(json.dumps({"size": size, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
