"""PIC1D's DSE alone at CARAML's shapes, one layer's two transforms forward and backward: the matmul backend (V
built from the positions, then batched products) against dse_backend=triton's kernels (V made in registers) at
their default tile of particles and at others. CUDA events, median and min-max over the repeats; matmul precision
high (TF32), as the FNO runs it. Also each variant's output and h's gradient against the matmul backend's
(relative, norm-wise).

    PYTHONPATH=src python3 bench/dse_kernels_bench.py --out $OUT [--batch 20 --particles 100000 --width 32 --modes 16]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys


def timed(fn, repeats: int) -> dict:
    """fn's GPU time over `repeats` calls after 5 unmeasured ones (ms: median, min, max)."""
    import torch

    for _ in range(5):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times), "n": len(times)}


def measure(args) -> list[dict]:
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

    variants = {"matmul": ("matmul", dse_triton.BLOCK_P),
                **{f"triton, {n} particles a tile": ("triton", n) for n in (dse_triton.BLOCK_P, 64, 256)}}
    rows, reference = [], None
    for name, (backend, tile) in variants.items():
        dse_triton.BLOCK_P = tile  # read at each launch
        dse = DSE((m,), channels_last=True, backend=backend)
        out = layer(dse)
        (grad,) = torch.autograd.grad(out.square().sum(), h)
        result = {"out": out.detach(), "grad_h": grad}
        reference = reference or result
        rel = {k: ((v - reference[k]).norm() / reference[k].norm()).item() for k, v in result.items()}
        with torch.no_grad():
            forward = timed(lambda dse=dse: layer(dse), args.repeats)
        both = timed(lambda dse=dse: torch.autograd.grad(layer(dse).sum(), h), args.repeats)
        rows.append({"variant": name, "rel_vs_matmul": rel, "forward": forward, "forward_backward": both})
        print(f"{name:42s} forward {forward['median_ms']:7.3f} ms ({forward['min_ms']:.3f}-{forward['max_ms']:.3f})"
              f"  forward+backward {both['median_ms']:7.3f} ms ({both['min_ms']:.3f}-{both['max_ms']:.3f})  "
              f"rel out {rel['out']:.1e} grad {rel['grad_h']:.1e}", flush=True)
    return rows


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

    why = "needs a CUDA GPU" if not torch.cuda.is_available() else dse_triton.unavailable(args.modes, args.width)
    if why:
        print(f"dse_kernels_bench: dse_backend=triton {why}; run it on the GPU machine", file=sys.stderr)
        sys.exit(2)
    rows = measure(args)

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "dse_kernels_bench.json"), "w") as f:
        json.dump({"shape": {"batch": args.batch, "particles": args.particles, "width": args.width,
                             "modes": args.modes}, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
