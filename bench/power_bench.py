"""Power-measurement benchmark on one GPU: monitor overhead, counter vs integrated energy, images/Wh.

    PYTHONPATH=src python3 bench/power_bench.py [OUT_DIR]

Three `caraml run` points of ResNet50 training (batch 256, bf16, channels_last, synthetic data on the GPU):
  1. eager, power=off                      -> throughput without the monitor
  2. eager, power=nvml, >= 30 s measured    -> throughput with the monitor (ratio to 1), and over the
                                              measured window the NVML energy counter vs the trapezoidal
                                              integral of the sampled power (difference in %)
  3. torch.compile, power=nvml             -> images/Wh of a compiled configuration
Prints a short table and writes power_bench.json (and the records) into OUT_DIR, or $OUT, or ./bench-out.
Budget: about 4-5 minutes on an H200 (the compiled run's first step takes ~1 minute).
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
          "device=cuda"]
POINTS = {  # name -> (extra parameters, timeout in s)
    "eager_monitor_off": (["power=off", "warmup_steps=30", "measure_seconds=35"], 150),
    "eager_monitor_on": (["power=nvml", "power_interval_ms=100", "warmup_steps=30", "measure_seconds=35"], 150),
    "compiled": (["power=nvml", "compile=inductor", "warmup_steps=15", "measure_seconds=20"], 240),
}
STEADY_WINDOW_MIN_S = 30.0
BUDGET_S = 340.0  # the whole benchmark stays under 6 minutes, even when a point hangs


def run_point(name: str, extra: list[str], timeout: int, results: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "caraml", "run", "image_classification", *COMMON, *extra,
           "--results", str(results), "--json"]
    print(f"power_bench: {name}: {' '.join(cmd[3:])}", file=sys.stderr, flush=True)
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"name": name, "status": "timeout", "error": f"no result within {timeout} s"}
    took = time.monotonic() - start
    try:
        record = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"name": name, "status": "failed", "error": f"exit {proc.returncode}: {proc.stderr[-1500:]}",
                "wall_s": took}
    record["_name"], record["_wall_s"] = name, took
    return record


def analyse(points: dict[str, dict]) -> dict:
    """The figures of interest from the three records (pure: testable on CPU with made-up records)."""
    def throughput(r):
        return ((r.get("metrics") or {}).get("throughput") or {}).get("value") if r.get("status") == "ok" else None

    off, on, comp = points.get("eager_monitor_off", {}), points.get("eager_monitor_on", {}), points.get("compiled", {})
    out: dict = {"throughput_off": throughput(off), "throughput_on": throughput(on)}
    out["monitor_throughput_ratio"] = (out["throughput_on"] / out["throughput_off"]
                                       if out["throughput_on"] and out["throughput_off"] else None)
    energy = (on.get("metrics") or {}).get("energy") or {}
    out["measured_window_s"] = (on.get("metrics") or {}).get("measured_time_s")
    out["window_long_enough"] = bool(out["measured_window_s"] and out["measured_window_s"] >= STEADY_WINDOW_MIN_S)
    gpus = [d for d in energy.get("devices", []) if d.get("backend") == "nvml" and d.get("in_total")]
    rows = []
    for d in gpus:
        c, i = d.get("counter_wh"), d.get("integrated_wh")
        rows.append({"device": d.get("name"), "uuid": d.get("uuid"), "counter_wh": c, "integrated_wh": i,
                     "difference_pct": (i - c) / c * 100 if c and i is not None else None,
                     "avg_power_w": d.get("avg_power_w"), "peak_power_w": d.get("peak_power_w"),
                     "power_reading": (d.get("info") or {}).get("power_reading")})
    out["counter_vs_integrated"] = rows
    out["energy_eager"] = {k: energy.get(k) for k in ("available", "total_wh", "source", "units_per_wh",
                                                      "avg_power_w", "reason")}
    cenergy = (comp.get("metrics") or {}).get("energy") or {}
    out["throughput_compiled"] = throughput(comp)
    out["images_per_wh_compiled"] = cenergy.get("units_per_wh")
    out["images_per_wh_eager"] = energy.get("units_per_wh")
    out["energy_compiled"] = {k: cenergy.get(k) for k in ("available", "total_wh", "source", "units_per_wh",
                                                          "avg_power_w", "reason")}
    out["status"] = {name: r.get("status") for name, r in points.items()}
    out["errors"] = {name: r.get("error") for name, r in points.items() if r.get("error")}
    return out


def render(a: dict) -> str:
    f = lambda v, spec=".1f": format(v, spec) if isinstance(v, (int, float)) else "-"  # noqa: E731
    lines = [
        f"{'figure':<44} value",
        f"{'images/s, monitor off (eager)':<44} {f(a['throughput_off'])}",
        f"{'images/s, monitor on (eager)':<44} {f(a['throughput_on'])}",
        f"{'throughput ratio on/off':<44} {f(a['monitor_throughput_ratio'], '.4f')}",
        f"{'measured window (s)':<44} {f(a['measured_window_s'])}" + ("" if a["window_long_enough"] else "  (< 30 s!)"),
    ]
    for r in a["counter_vs_integrated"]:
        lines.append(f"{('counter Wh, ' + str(r['device']))[:44]:<44} {f(r['counter_wh'], '.4f')}")
        lines.append(f"{'integrated Wh (' + str(r['power_reading']) + ')':<44} {f(r['integrated_wh'], '.4f')}")
        lines.append(f"{'integrated vs counter (%)':<44} {f(r['difference_pct'], '+.2f')}")
        lines.append(f"{'avg / peak power (W)':<44} {f(r['avg_power_w'])} / {f(r['peak_power_w'])}")
    lines += [
        f"{'images/Wh, eager':<44} {f(a['images_per_wh_eager'])}",
        f"{'images/s, compiled':<44} {f(a['throughput_compiled'])}",
        f"{'images/Wh, compiled':<44} {f(a['images_per_wh_compiled'])}",
    ]
    for name, err in a["errors"].items():
        lines.append(f"{name}: {str(err)[:300]}")
    for key in ("energy_eager", "energy_compiled"):
        if a[key].get("reason"):
            lines.append(f"{key}: {a[key]['reason']}")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else os.environ.get("OUT") or "bench-out")
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results"
    deadline = time.monotonic() + BUDGET_S
    points = {}
    for name, (extra, timeout) in POINTS.items():
        left = int(deadline - time.monotonic())
        points[name] = (run_point(name, extra, min(timeout, left), results) if left > 20
                        else {"name": name, "status": "skipped", "error": "time budget spent"})
    analysis = analyse(points)
    text = render(analysis)
    sys.stdout.write(text)
    (out / "power_bench.json").write_text(json.dumps({"analysis": analysis, "records": points}, indent=1,
                                                     default=str))
    (out / "power_bench.txt").write_text(text)
    return 0 if all(r.get("status") == "ok" for r in points.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
