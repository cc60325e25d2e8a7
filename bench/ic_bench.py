"""Image-classification benchmark on one GPU: `caraml run` against a plain training loop.

    PYTHONPATH=src python3 bench/ic_bench.py [OUT_DIR] [--only NAME,...] [--budget S]
    PYTHONPATH=src python3 bench/ic_bench.py [OUT_DIR] --group=resnet50-attempts [--only NAME,...] [--budget S]
        [--self-check]

ResNet50, batch 256, bf16, channels_last, synthetic data on the GPU. Each point is its own process; the points are
the group resnet50-vs-plain of caraml.compare.image_classification. The plain loop (bench/plain_loop.py) at the
same settings measures the harness's own overhead. Prints a table and writes ic_bench.json and ic_bench.txt into
OUT_DIR, or $OUT, or ./bench-out. The budget defaults to $IC_BENCH_BUDGET_S, else 560 s.

--group=resnet50-attempts (or its old name issue23): where the rest of the way to MLPerf's per-GPU rate goes
(bench/ic_group.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from caraml.compare import image_classification as ic
from caraml.compare.points import Point, refuse, run_points, select, table_lines, write_report
from caraml.errors import BadInput

ENV_KEYS = ("torch", "torchvision", "cuda", "cudnn", "driver", "python")


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1] / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def caraml_row(name: str, out: dict, took: float, cmd: list) -> dict:
    """The figures of a `caraml run --json` record (peak memory in GiB)."""
    m = out.get("metrics") or {}
    step, energy = m.get("step_time_s") or {}, m.get("energy") or {}
    return {"name": name, "status": out["status"], "images_per_s": (m.get("throughput") or {}).get("value"),
            "step_median_ms": (step.get("median") or 0) * 1e3, "step_p10_ms": (step.get("p10") or 0) * 1e3,
            "step_p90_ms": (step.get("p90") or 0) * 1e3, "tflops_per_device": m.get("tflops_per_device"),
            "mfu": m.get("mfu"), "compile_s": (m.get("warmup") or {}).get("compile_s"),
            "peak_memory_gib": (m.get("peak_memory_bytes") or 0) / 2**30, "energy_wh": energy.get("total_wh"),
            "images_per_wh": energy.get("units_per_wh"), "avg_power_w": energy.get("avg_power_w"),
            "wall_s": took, "error": out.get("error"), "command": "caraml " + " ".join(cmd[3:-3]),
            "env": {k: (out.get("env") or {}).get(k) for k in ENV_KEYS}}


def run(point: Point, results: Path, timeout: float) -> dict:
    plain = point.knobs.get("plain_loop")
    if plain is not None:
        cmd = [sys.executable, str(Path(__file__).with_name("plain_loop.py")), *plain]
    else:
        cmd = [sys.executable, "-m", "caraml", "run", "image_classification", *ic.VS_PLAIN_COMMON, *point.params,
               "--results", str(results), "--json"]
    print(f"ic_bench: {point.name}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env())
    except subprocess.TimeoutExpired:
        return {"name": point.name, "status": "timeout", "wall_s": timeout}
    took = time.monotonic() - start
    try:
        out = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"name": point.name, "status": "failed", "wall_s": took, "error": proc.stderr[-2000:]}
    if plain is not None:
        return {"name": point.name, "status": "ok", "images_per_s": out["images_per_s"], "wall_s": took,
                "warmup_s": out["warmup_s"], "command": " ".join(cmd[1:])}
    return caraml_row(point.name, out, took, cmd)


def parse(argv: list) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ic_bench.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", default=None, help="results folder (default $OUT, else ./bench-out)")
    parser.add_argument("--only", default=None, help="comma list of: " + ", ".join(ic.VS_PLAIN.names()))
    parser.add_argument("--budget", type=float, default=None, help="seconds for all points (default "
                        "$IC_BENCH_BUDGET_S, else 560)")
    parser.add_argument("--group", help="a group of attempts instead (bench/ic_group.py)")
    return parser.parse_args(argv)


def main(argv: list) -> int:
    if any(a.startswith("--group") for a in argv):
        import ic_group

        return ic_group.main(argv)
    args = parse(argv)
    try:
        points = select(ic.VS_PLAIN, args.only)  # without --only: the default points (not those run only when named)
    except BadInput as problem:
        return refuse("ic_bench", problem)
    out = Path(args.out or os.environ.get("OUT") or "bench-out")
    budget = args.budget if args.budget is not None else float(os.environ.get("IC_BENCH_BUDGET_S", "560"))

    def saved(rows):
        write_report(out, "ic_bench", {"date": time.strftime("%Y-%m-%d"), "rows": rows})

    rows = run_points(points, lambda p, seconds: run(p, out / "results", seconds), budget, saved)
    ic.ratios_to_plain(rows)
    lines = table_lines(rows, ic.VS_PLAIN_COLUMNS)
    write_report(out, "ic_bench", {"date": time.strftime("%Y-%m-%d"), "rows": rows}, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
