"""PIC1D's DSE alone at CARAML's shapes, one layer's two transforms forward and backward: the matmul backend (V
built from the positions, then batched products) against dse_backend=triton's kernels (V made in registers) with
the GPU's approximate cosine (their default), with libdevice's, and at other tile sizes. CUDA events, median and
min-max over the repeats; matmul precision high (TF32), as the FNO runs it. Also each variant's output and h's
gradient against the matmul backend's (relative, norm-wise).

    PYTHONPATH=src python3 bench/dse_kernels_bench.py --out $OUT [--batch 20 --particles 100000 --width 32 --modes 16]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--particles", type=int, default=100_000)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--modes", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()

    import torch

    from caraml.workloads.fno import dse_triton
    from caraml.workloads.fno.model import DSE

    torch.set_float32_matmul_precision("high")
    gen = torch.Generator(device="cuda").manual_seed(0)
    b, p, c, m = args.batch, args.particles, args.width, args.modes
    x = torch.zeros(b, 2, p, device="cuda")
    x[:, 0] = 2 * math.pi * torch.rand(b, p, device="cuda", generator=gen)
    h = torch.randn(b, p, c, device="cuda", generator=gen, requires_grad=True)
    weight = torch.randn(c, m, 2, device="cuda", generator=gen)  # a per-channel, per-mode factor, as a layer's

    def layer(dse):
        basis = dse.prepare(x)
        return dse.inverse(dse.forward(h, basis, complex_out=False) * weight, basis, None)

    def timed(fn) -> list[float]:
        for _ in range(5):
            fn()
        times = []
        for _ in range(args.repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        return times

    block = dse_triton.BLOCK_P
    variants = {"matmul": ("matmul", None, block), "triton, fast cosine": ("triton", True, block),
                "triton, libdevice cosine": ("triton", False, block),
                **{f"triton, fast cosine, {n} particles a tile": ("triton", True, n) for n in (64, 256)}}
    rows, reference = [], None
    for name, (backend, fast, tile) in variants.items():
        if fast is not None:
            dse_triton.FAST_COSINE, dse_triton.BLOCK_P = fast, tile
        dse = DSE((m,), channels_last=True, backend=backend)
        out = layer(dse)
        (grad,) = torch.autograd.grad(out.square().sum(), h)
        result = {"out": out.detach(), "grad_h": grad}
        reference = reference or result
        rel = {k: ((v - reference[k]).norm() / reference[k].norm()).item() for k, v in result.items()}

        def forward(dse=dse):
            with torch.no_grad():
                layer(dse)

        def both(dse=dse):
            torch.autograd.grad(layer(dse).sum(), h)

        row = {"variant": name, "rel_vs_matmul": rel}
        for part, fn in (("forward", forward), ("forward_backward", both)):
            t = timed(fn)
            row[part] = {"median_ms": statistics.median(t), "min_ms": min(t), "max_ms": max(t), "n": len(t)}
        rows.append(row)
        print(f"{name:42s} forward {row['forward']['median_ms']:7.3f} ms ({row['forward']['min_ms']:.3f}-"
              f"{row['forward']['max_ms']:.3f})  forward+backward {row['forward_backward']['median_ms']:7.3f} ms "
              f"({row['forward_backward']['min_ms']:.3f}-{row['forward_backward']['max_ms']:.3f})  "
              f"rel out {rel['out']:.1e} grad {rel['grad_h']:.1e}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "dse_kernels_bench.json"), "w") as f:
        json.dump({"shape": {"batch": b, "particles": p, "width": c, "modes": m}, "device":
                   torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
