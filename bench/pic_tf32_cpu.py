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
import time
from pathlib import Path

import torch

from caraml.compare.tf32_emulation import TOLERANCE, backend_results, compare, emulated_tf32


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
