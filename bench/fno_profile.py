"""Where an FNO training step spends its device time: caraml's FNOBench.step, built in this process for one preset and
its parameters, timed step by step and then profiled; the kernels by category and the busiest ones. Each
`--variant` (a name and parameters) runs in its own process with its own inductor cache, so compiled code and
memory do not carry over (inductor's cache would hand a variant the code compiled under another's constants); a
parameter named dse_triton.CONSTANT sets that module constant of the DSE kernels (BLOCK_P, FUSED_WARPS, ...).

    PYTHONPATH=src python3 bench/fno_profile.py --out $OUT [--preset PIC1D]
        [--variant NAME=KEY=VALUE,... ...]   (default: PIC1D compiled with each dse_backend)

Writes fno_profile.json into --out. Without a GPU the smoke preset runs on the CPU: a check of the script only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from caraml.compare.kernel_profile import breakdown, kernel_table

CATEGORIES = (  # first match wins
    ("dse kernels (triton op)", re.compile(r"^_(spectrum|synthesis|layer|head)\w*_kernel", re.I)),
    ("matmul (cuBLAS)", re.compile(r"gemm|nvjet|cublas|cutlass|splitk|xmma|sm90", re.I)),
    ("triton template", re.compile(r"^triton_tem", re.I)),
    ("triton reduction", re.compile(r"^triton_(red|per)", re.I)),
    ("triton pointwise", re.compile(r"^triton_", re.I)),
    ("optimizer", re.compile(r"adam|multi_tensor|foreach", re.I)),
    ("copy / fill", re.compile(r"memcpy|memset|copy|fill", re.I)),
    ("reduction", re.compile(r"reduce", re.I)),
)
DEFAULT_VARIANTS = ("matmul=compile=inductor", "triton=compile=inductor,dse_backend=triton",
                    "fused=compile=inductor,dse_backend=triton-fused")


def parse_variant(text: str) -> tuple[str, dict]:
    """'name=key=value,key=value' -> (name, {key: value})."""
    name, _, rest = text.partition("=")
    params = dict(kv.split("=", 1) for kv in rest.split(",") if kv)
    return name, params


def run_variant(preset: str, params: dict, steps: int, warmup: int, profiled: int) -> dict:
    """Build, warm up, time `steps` steps by CUDA events, profile `profiled` more."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from caraml.runner import RunSpec, build_bench

    cpu = not torch.cuda.is_available()
    tiles = {k: params.pop(k) for k in list(params) if k.startswith("dse_triton.")}  # the kernels' module constants
    if tiles:
        from caraml.workloads.fno import dse_triton

        for key, value in tiles.items():
            dse_triton.set_constant(key.split(".", 1)[1], value)
    bench = build_bench(RunSpec("fno", {"epochs": 0, "data": "synthetic", **params},
                                preset=f"smoke-{preset}" if cpu else preset), device="cpu" if cpu else "cuda")
    sync = bench._sync
    started = time.perf_counter()
    for _ in range(warmup):
        bench.step()
    sync()
    warmup_s = time.perf_counter() - started
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        bench.step()
        sync()  # one step at a time: the step's own time, host included
        times.append((time.perf_counter() - t0) * 1e3)
    activities = [ProfilerActivity.CPU] + ([] if cpu else [ProfilerActivity.CUDA])
    with profile(activities=activities) as prof:
        for _ in range(profiled):
            bench.step()
        sync()
    step_ms = statistics.median(times)
    kernels = kernel_table(prof.key_averages(), profiled, cpu, categories=CATEGORIES)
    return {"params": {**params, **tiles}, "warmup_s": warmup_s, "step_ms_median": step_ms, "step_ms_min": min(times),
            "step_ms_max": max(times), "steps": steps, "samples_per_s": bench.data.batch / step_ms * 1e3,
            "peak_memory_gib": None if cpu else torch.cuda.max_memory_allocated() / 2**30,
            "breakdown": breakdown(kernels, step_ms, cpu, top=10), "torch": torch.__version__,
            "device": "cpu" if cpu else torch.cuda.get_device_name(),
            "inductor_cache": os.environ.get("TORCHINDUCTOR_CACHE_DIR")}


def report(name: str, row: dict) -> list[str]:
    if "breakdown" not in row:
        last = (row.get("error") or "").strip().splitlines()[-1:]  # the error itself; the json keeps its traceback
        return [f"{name}: {row.get('status')} {' '.join(last)}"]
    b = row["breakdown"]
    lines = [f"{name} {row['params']}: {row['samples_per_s']:.1f} samples/s, step {row['step_ms_median']:.2f} ms "
             f"({row['step_ms_min']:.2f}-{row['step_ms_max']:.2f}, {row['steps']} steps), kernels busy "
             f"{b['kernel_busy_ms']:.2f} ms, peak {row.get('peak_memory_gib') or 0:.1f} GiB"]
    for cat, c in b["categories"].items():
        lines.append(f"  {cat:<26} {c['ms']:7.3f} ms {c['share_of_step'] or 0:6.1%} {c['calls']:6.1f} calls")
        for k in c["top_kernels"][:8]:
            lines.append(f"      {k['ms']:7.3f} ms {k['calls']:5.1f}x  {k['name'][:110]}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    ap.add_argument("--preset", default="PIC1D")
    ap.add_argument("--variant", action="append", help="name=key=value,... (repeatable); default: "
                    + " ".join(DEFAULT_VARIANTS))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--profiled", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=200.0, help="seconds per variant")
    ap.add_argument("--point", help=argparse.SUPPRESS)  # internal: this one variant, here
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.point:
        name, params = parse_variant(args.point)
        row = run_variant(args.preset, params, args.steps, args.warmup, args.profiled)
        (out / f"fno_profile-{name}.json").write_text(json.dumps(row))
        return
    rows = {}
    for text in args.variant or DEFAULT_VARIANTS:
        name, _ = parse_variant(text)
        cmd = [sys.executable, __file__, "--out", str(out), "--preset", args.preset, "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--profiled", str(args.profiled), "--point", text]
        try:
            cache = tempfile.mkdtemp(prefix="fno_profile-inductor-")  # its own: inductor's graph cache keys on the
            try:  # graph, not on the kernels' module constants
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                                      env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache})
            finally:  # compile workers of a killed variant may still write there
                shutil.rmtree(cache, ignore_errors=True)
            part = out / f"fno_profile-{name}.json"
            rows[name] = (json.loads(part.read_text()) if proc.returncode == 0 and part.exists() else
                          {"status": f"failed (rc {proc.returncode})", "error": proc.stderr})
            part.unlink(missing_ok=True)
        except subprocess.TimeoutExpired:
            rows[name] = {"status": f"timed out after {args.timeout:.0f} s"}
        print("\n".join(report(name, rows[name])), flush=True)
    (out / "fno_profile.json").write_text(json.dumps({"preset": args.preset, "variants": rows}, indent=1))


if __name__ == "__main__":
    main()
