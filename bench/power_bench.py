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

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from caraml.compare.power_check import analyse, render

ROOT = Path(__file__).resolve().parents[1]
COMMON = ["model=resnet50", "batch_size=256", "precision=bf16", "channels_last=on", "data=synthetic-device",
          "device=cuda"]
POINTS = {  # name -> (extra parameters, timeout in s)
    "eager_monitor_off": (["power=off", "warmup_steps=30", "measure_seconds=35"], 150),
    "eager_monitor_on": (["power=nvml", "power_interval_ms=100", "warmup_steps=30", "measure_seconds=35"], 150),
    "compiled": (["power=nvml", "compile=inductor", "warmup_steps=15", "measure_seconds=20"], 240),
}
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


def parse(argv: list[str] | None) -> Path:
    parser = argparse.ArgumentParser(prog="power_bench.py", description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=None, help="results folder (default $OUT, else ./bench-out)")
    return Path(parser.parse_args(argv).out or os.environ.get("OUT") or "bench-out")


def main(argv: list[str] | None = None) -> int:
    out = parse(argv)
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
