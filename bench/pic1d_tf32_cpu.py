"""PIC1D's two dse_layouts under TF32, emulated on a CPU: how far each is from the float32 result (TF32 off), and
how far apart they are, beside the floor (channels-first against itself, the input moved by float32 rounding).
Every float32 matmul, bmm and linear rounds its operands to TF32's 10 mantissa bits (forward and backward), as a
GPU does under matmul precision 'high' (CARAML's); then channels-last with every operand truncated instead, as
Triton's tl.dot feeds the tensor cores (dse_backend=triton-fused's kernels before they rounded); relative
differences norm-wise.

    PYTHONPATH=src python3 bench/pic1d_tf32_cpu.py [--particles 100000] [--batch 2]
"""

from __future__ import annotations

import argparse
import contextlib
import math

import torch
import torch.nn.functional as F

from caraml.compare.tf32_emulation import TF32Product, emulated_tf32
from caraml.workloads.fno.model import FNO


@contextlib.contextmanager
def emulated_tf32_all(truncate: bool = False):
    """emulated_tf32 (matmul, bmm) and F.linear too (channels-last's pointwise layers)."""
    linear = F.linear

    def tf32_linear(x, w, b=None):
        out = TF32Product.apply(x, w.t(), torch.Tensor.__matmul__, truncate)
        return out if b is None else out + b

    with emulated_tf32(truncate):
        F.linear = tf32_linear
        try:
            yield
        finally:
            F.linear = linear


def results(layout: str, x, y, noise: float = 0.0) -> dict:
    torch.manual_seed(0)
    model = FNO(2, 1, 32, (16,), 4, kind="dse", dse_layout=layout)
    moved = x * (1 + noise * torch.randn(x.shape, generator=torch.Generator().manual_seed(9)))
    moved.requires_grad_(True)
    out = model(moved)
    F.l1_loss(out, y).backward()
    return {"output": out.detach(), "input_grad": moved.grad[:, 1],
            **{f"grad {n}": p.grad for n, p in model.named_parameters()}}


def diffs(a: dict, b: dict) -> str:
    rel = {k: float((a[k] - v).norm() / v.norm()) for k, v in b.items()}
    weights = max(v for k, v in rel.items() if k.startswith("grad "))
    return f"output {rel['output']:.1e}, input grad {rel['input_grad']:.1e}, weight grads (worst) {weights:.1e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--particles", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=2)
    a = parser.parse_args()
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(a.batch, 2, a.particles, generator=gen)
    x[:, 0] = 2 * math.pi * torch.rand(a.batch, a.particles, generator=gen)
    y = torch.randn(a.batch, 1, a.particles, generator=gen)
    exact = results("channels-first", x, y)
    print(f"PIC1D, batch {a.batch}, {a.particles} particles, width 32, 16 modes, 4 layers")
    print("TF32 off:      channels-last against channels-first:", diffs(results("channels-last", x, y), exact))
    with emulated_tf32_all():
        first, last = results("channels-first", x, y), results("channels-last", x, y)
        floor = results("channels-first", x, y, noise=2.0 ** -24)
    print("TF32 emulated: channels-last against channels-first:", diffs(last, first))
    print("               floor (channels-first, input moved):  ", diffs(floor, first))
    print("               channels-first against TF32 off:      ", diffs(first, exact))
    print("               channels-last against TF32 off:       ", diffs(last, exact))
    with emulated_tf32_all(truncate=True):  # every operand truncated, as Triton's tl.dot feeds the tensor cores
        truncated = results("channels-last", x, y)
    print("TF32 truncated: channels-last against channels-first:", diffs(truncated, first))
    print("               channels-last against TF32 off:       ", diffs(truncated, exact))


if __name__ == "__main__":
    main()
