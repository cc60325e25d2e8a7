"""Where an LLM-training iteration spends its device time: `caraml`'s GPTBench.step against the plain loop.

    PYTHONPATH=src python3 bench/llm_profile.py [--out DIR] [--only NAME,...] [--steps N]

Each point runs in its own process: build, warm up (compile), time `--steps` iterations by CUDA events (device
time per iteration, and host time to launch one), then profile three iterations with torch.profiler and sum the
device time of every kernel. Kernels are grouped (matrix products, attention, compiled Triton code, optimizer,
...) and the points are compared kernel by kernel, so a difference in time per iteration shows up as the kernels
that make it. Writes llm_profile.json (and a Chrome trace per point) into --out, or $OUT, or ./bench-out.
Without a GPU every point runs the smoke model on the CPU: a check of the script, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from caraml.compare.kernel_profile import kernel_table

# name: (loop, micro-batch, caraml parameters)
POINTS = {
    "plain": ("plain", 4, {}),
    "caraml": ("caraml", 4, {}),
    "caraml_big": ("caraml", 16, {}),
    "caraml_big_cudnn": ("caraml", 16, {"attention": "cudnn"}),
}
CATEGORIES = (  # first match wins
    ("attention", re.compile(r"flash|fmha|attention|cudnn|sdpa", re.I)),
    ("matmul", re.compile(r"gemm|nvjet|cutlass|xmma|sm90|sm80|cublas", re.I)),
    ("optimizer", re.compile(r"adam|multi_tensor|foreach", re.I)),
    ("compiled (triton)", re.compile(r"^triton_", re.I)),
    ("copy / fill", re.compile(r"memcpy|memset|copy|fill", re.I)),
    ("reduction", re.compile(r"reduce|norm", re.I)),
)


# the two loops --------------------------------------------------------------------------------------------------
def caraml_step(micro: int, params: dict, cpu: bool):
    from caraml.runner import RunSpec, build_bench

    preset = "smoke" if cpu else "800M"
    overrides = {"precision": "fp32" if cpu else "bf16", "compile": "none" if cpu else "inductor",
                 "recompute": "none", "micro_batch_size": micro, **params}
    bench = build_bench(RunSpec("llm_training", overrides, preset), device="cpu" if cpu else "cuda")
    compute = bench.cfg.compute
    return bench.step, {"params": {"micro_batch_size": bench.micro, "attention": compute.attention,
                                   "compile_scope": compute.compile_scope, "precision": compute.precision,
                                   "recompute": bench.cfg.parallel.recompute}}


def plain_step(micro: int, cpu: bool):
    """llm_bench's plain loop (caraml.compare.llm_plain), one step at a time."""
    from caraml.compare.llm_plain import plain_step as plain
    from caraml.compare.llm_setup import LLMSetup, caraml_schedule, on_cpu

    setup = on_cpu(LLMSetup()) if cpu else LLMSetup()
    step, count = plain(setup, micro, caraml_schedule()), iter(range(1 << 62))
    return (lambda: step(next(count))), {}


# one point, in its own process ----------------------------------------------------------------------------------
def device_times(step, sync, steps: int, cpu: bool) -> tuple[list, list]:
    """Device time per iteration (CUDA events; on a CPU the host's) and how long the host takes to issue one."""
    import torch

    events, host = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        if not cpu:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            events.append(e)
        step()
        host.append(time.perf_counter() - t0)
    if not cpu:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        events.append(e)
    sync()
    return ([a.elapsed_time(b) for a, b in zip(events, events[1:])] if not cpu else [h * 1e3 for h in host]), host


def profiled_kernels(step, sync, name: str, out: Path, cpu: bool, profiled: int = 3) -> dict:
    """torch.profiler over `profiled` iterations: each kernel's time and calls per step, by category; a Chrome
    trace into out."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([] if cpu else [ProfilerActivity.CUDA])
    with profile(activities=activities) as prof:
        for _ in range(profiled):
            step()
        sync()
    kernels = kernel_table(prof.key_averages(), profiled, cpu, categories=CATEGORIES)
    try:
        prof.export_chrome_trace(str(out / f"trace-{name}.json"))
    except Exception as exc:  # noqa: BLE001 - the trace is a convenience; the table above is the result
        print(f"llm_profile: {name}: no trace ({exc})", file=sys.stderr)
    return kernels


def run_point(name: str, steps: int, warmup: int, out: Path) -> dict:
    import torch

    cpu = not torch.cuda.is_available()
    loop, micro, params = POINTS[name]
    step, extra = caraml_step(micro, params, cpu) if loop == "caraml" else plain_step(micro, cpu)
    sync = (lambda: None) if cpu else torch.cuda.synchronize
    start = time.perf_counter()
    for _ in range(warmup):
        step()
    sync()
    warmup_s = time.perf_counter() - start
    device_ms, host = device_times(step, sync, steps, cpu)
    kernels = profiled_kernels(step, sync, name, out, cpu)
    by_category: dict[str, float] = {}
    for k in kernels.values():
        by_category[k["category"]] = by_category.get(k["category"], 0.0) + k["ms_per_step"]
    return {"name": name, "loop": loop, "micro_batch_size": micro, **extra, "warmup_s": warmup_s,
            "device_ms_median": statistics.median(device_ms), "device_ms": device_ms,
            "host_ms_median": statistics.median(host) * 1e3,
            "kernel_ms_per_step": sum(k["ms_per_step"] for k in kernels.values()),
            "by_category": dict(sorted(by_category.items(), key=lambda kv: -kv[1])), "kernels": kernels,
            "peak_memory_gib": None if cpu else torch.cuda.max_memory_allocated() / 2**30,
            "torch": torch.__version__}


# the comparison ------------------------------------------------------------------------------------------------
def compare(a: dict, b: dict, top: int = 25) -> list[str]:
    """Kernels whose time per step differs most between points a and b."""
    names = set(a["kernels"]) | set(b["kernels"])
    rows = []
    for n in names:
        ka, kb = a["kernels"].get(n, {}), b["kernels"].get(n, {})
        rows.append((kb.get("ms_per_step", 0.0) - ka.get("ms_per_step", 0.0), n, ka, kb))
    rows.sort(key=lambda r: -abs(r[0]))
    lines = [f"{b['name']} - {a['name']}: {b['device_ms_median'] - a['device_ms_median']:+.2f} ms per iteration "
             f"(kernels {b['kernel_ms_per_step'] - a['kernel_ms_per_step']:+.2f} ms)"]
    for delta, n, ka, kb in rows[:top]:
        lines.append(f"  {delta:+8.3f} ms  calls {ka.get('calls_per_step', 0):6.1f} -> "
                     f"{kb.get('calls_per_step', 0):6.1f}  {n[:110]}")
    return lines


def summary(rows: list[dict]) -> list[str]:
    lines = []
    for r in rows:
        if "device_ms_median" not in r:
            lines.append(f"{r['name']}: {r.get('status')} {str(r.get('error', ''))[-600:]}")
            continue
        lines.append(f"{r['name']}: micro {r['micro_batch_size']}, {r['device_ms_median']:.2f} ms per iteration "
                     f"(device), host issues one in {r['host_ms_median']:.2f} ms, "
                     f"kernels {r['kernel_ms_per_step']:.2f} ms, peak {r.get('peak_memory_gib') or 0:.1f} GiB")
        for c, ms in r["by_category"].items():
            lines.append(f"    {c:<20} {ms:9.2f} ms  {ms / r['kernel_ms_per_step']:6.1%}")
        top = sorted(r["kernels"].items(), key=lambda kv: -kv[1]["ms_per_step"])[:12]
        for n, k in top:
            lines.append(f"      {k['ms_per_step']:8.2f} ms {k['calls_per_step']:6.1f}x  {n[:100]}")
    return lines


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1] / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="results folder (default $OUT, else ./bench-out)")
    parser.add_argument("--only", default=",".join(POINTS), help="comma list of: " + ", ".join(POINTS))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=6)
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per point")
    parser.add_argument("--point", help=argparse.SUPPRESS)  # internal: run this one point here
    args = parser.parse_args()
    out = Path(args.out or os.environ.get("OUT") or "bench-out")
    out.mkdir(parents=True, exist_ok=True)
    if args.point:
        row = run_point(args.point, args.steps, args.warmup, out)
        (out / f"point-{args.point}.json").write_text(json.dumps(row))
        return
    only = [n for n in args.only.split(",") if n]
    unknown = [n for n in only if n not in POINTS]
    if unknown:
        print(f"llm_profile: unknown point(s) {', '.join(unknown)}; choose from: {', '.join(POINTS)}", file=sys.stderr)
        sys.exit(2)
    rows = []
    for name in only:
        print(f"llm_profile: {name}", file=sys.stderr, flush=True)
        cmd = [sys.executable, __file__, "--point", name, "--out", str(out), "--steps", str(args.steps),
               "--warmup", str(args.warmup)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=_env())
            path = out / f"point-{name}.json"
            rows.append(json.loads(path.read_text()) if proc.returncode == 0 and path.exists() else
                        {"name": name, "status": "failed", "error": proc.stderr[-3000:]})
        except subprocess.TimeoutExpired:
            rows.append({"name": name, "status": "timeout"})
        (out / "llm_profile.json").write_text(json.dumps(rows, indent=1))
    lines = summary(rows)
    done = {r["name"]: r for r in rows if "kernels" in r}
    for a, b in (("plain", "caraml"), ("caraml_big", "caraml_big_cudnn")):
        if a in done and b in done:
            lines += compare(done[a], done[b])
    print("\n".join(lines))
    (out / "llm_profile.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
