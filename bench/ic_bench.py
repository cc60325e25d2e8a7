"""Image-classification benchmark on one GPU: `caraml run` against a plain training loop.

    PYTHONPATH=src python3 bench/ic_bench.py [OUT_DIR] [--only NAME,...]
    PYTHONPATH=src python3 bench/ic_bench.py [OUT_DIR] --group=issue23 [--only NAME,...] [--budget S] [--self-check]

ResNet50, batch 256, bf16, channels_last, synthetic data on the GPU. Each point is its own process.
The plain loop (bench/plain_loop.py) at the same settings measures the harness's own overhead.
Prints a table and writes ic_bench.json into OUT_DIR, or $OUT, or ./bench-out.

--group=issue23: where the rest of the way to MLPerf's per-GPU rate goes (ic_group.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMON = ["model=resnet50", "batch_size=256", "precision=bf16", "channels_last=on", "data=synthetic-device",
          "device=cuda", "warmup_steps=15", "measure_steps=150"]
POINTS = {  # name -> caraml parameters, or ("plain", plain_loop arguments)
    "plain_eager": ("plain", ["--steps", "150"]),
    "caraml_eager": ["compile=none"],
    "plain_compiled": ("plain", ["--compile", "--steps", "150"]),
    "caraml_compiled": ["compile=inductor"],
    "caraml_compiled_step": ["compile=inductor", "compile_scope=step"],
    "caraml_reduce_overhead": ["compile=inductor", "compile_mode=reduce-overhead"],
    "caraml_max_autotune_nocg": ["compile=inductor", "compile_mode=max-autotune-no-cudagraphs"],
    "caraml_max_autotune": ["compile=inductor", "compile_mode=max-autotune"],
    "caraml_eager_power_off": ["compile=none", "power=off"],
    "caraml_eager_fused": ["compile=none", "sgd_impl=fused"],
    "caraml_compiled_fused": ["compile=inductor", "sgd_impl=fused"],
    "caraml_reduce_overhead_fused": ["compile=inductor", "compile_mode=reduce-overhead", "sgd_impl=fused"],
    "caraml_max_autotune_fused": ["compile=inductor", "compile_mode=max-autotune", "sgd_impl=fused"],
    "caraml_max_autotune_nocg_fused": ["compile=inductor", "compile_mode=max-autotune-no-cudagraphs",
                                       "sgd_impl=fused"],
}


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run(name: str, spec, results: Path, timeout: float) -> dict:
    if isinstance(spec, tuple):
        cmd = [sys.executable, str(ROOT / "bench" / "plain_loop.py"), *spec[1]]
    else:
        cmd = [sys.executable, "-m", "caraml", "run", "image_classification", *COMMON, *spec,
               "--results", str(results), "--json"]
    print(f"ic_bench: {name}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env())
    except subprocess.TimeoutExpired:
        return {"name": name, "status": "timeout", "wall_s": timeout}
    took = time.monotonic() - start
    try:
        out = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"name": name, "status": "failed", "wall_s": took, "error": proc.stderr[-2000:]}
    if isinstance(spec, tuple):
        return {"name": name, "status": "ok", "images_per_s": out["images_per_s"], "wall_s": took,
                "warmup_s": out["warmup_s"], "command": " ".join(cmd[1:])}
    m = out.get("metrics") or {}
    return {"name": name, "status": out["status"], "images_per_s": (m.get("throughput") or {}).get("value"),
            "step_median_ms": ((m.get("step_time_s") or {}).get("median") or 0) * 1e3,
            "step_p10_ms": ((m.get("step_time_s") or {}).get("p10") or 0) * 1e3,
            "step_p90_ms": ((m.get("step_time_s") or {}).get("p90") or 0) * 1e3,
            "tflops_per_device": m.get("tflops_per_device"), "mfu": m.get("mfu"),
            "compile_s": (m.get("warmup") or {}).get("compile_s"),
            "peak_memory_gb": (m.get("peak_memory_bytes") or 0) / 1e9,
            "energy_wh": (m.get("energy") or {}).get("total_wh"),
            "images_per_wh": (m.get("energy") or {}).get("units_per_wh"),
            "avg_power_w": (m.get("energy") or {}).get("avg_power_w"),
            "wall_s": took, "error": out.get("error"), "command": "caraml " + " ".join(cmd[3:-3]),
            "env": {k: out["env"].get(k) for k in ("torch", "torchvision", "cuda", "cudnn", "driver", "python")}}


def main() -> None:
    if any(a.startswith("--group") for a in sys.argv[1:]):
        import ic_group

        sys.exit(ic_group.main(sys.argv[1:]))
    args = [a for a in sys.argv[1:] if not a.startswith("--only")]
    only = next((a.split("=", 1)[1].split(",") for a in sys.argv[1:] if a.startswith("--only=")), list(POINTS))
    unknown = [name for name in only if name not in POINTS]
    if unknown:
        sys.exit(f"ic_bench: unknown point(s) {', '.join(unknown)}; choose from: {', '.join(POINTS)}")
    out = Path(args[0] if args else os.environ.get("OUT", "bench-out"))
    out.mkdir(parents=True, exist_ok=True)
    budget = float(os.environ.get("IC_BENCH_BUDGET_S", "560"))
    start = time.monotonic()
    rows = []
    for name in only:
        left = budget - (time.monotonic() - start)
        if left < 30:
            rows.append({"name": name, "status": "skipped (time budget)"})
            continue
        rows.append(run(name, POINTS[name], out / "results", timeout=left))
        (out / "ic_bench.json").write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=1))
    by = {r["name"]: r for r in rows}
    for a, b in (("caraml_eager", "plain_eager"), ("caraml_compiled", "plain_compiled")):
        if by.get(a, {}).get("images_per_s") and by.get(b, {}).get("images_per_s"):
            by[a]["ratio_to_plain"] = by[a]["images_per_s"] / by[b]["images_per_s"]
    (out / "ic_bench.json").write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=1))
    print(f"{'point':<26} {'status':<8} {'img/s':>8} {'ratio':>6} {'med ms':>7} {'p90 ms':>7} {'MFU':>6} "
          f"{'compile s':>9} {'img/Wh':>8} {'W':>5} {'wall s':>6}")
    for r in rows:
        def f(key, fmt, r=r):
            v = r.get(key)
            return format(v, fmt) if isinstance(v, (int, float)) else "-"
        print(f"{r['name']:<26} {r['status'][:8]:<8} {f('images_per_s', '8.0f')} {f('ratio_to_plain', '6.3f')} "
              f"{f('step_median_ms', '7.2f')} {f('step_p90_ms', '7.2f')} {f('mfu', '6.3f')} {f('compile_s', '9.1f')} "
              f"{f('images_per_wh', '8.0f')} {f('avg_power_w', '5.0f')} {f('wall_s', '6.0f')}")
        if r.get("error") and r["status"] != "ok":
            print("   ", str(r["error"])[-600:])


if __name__ == "__main__":
    main()
