"""Groups of image-classification attempts, each point profiled, in one command with a hard time budget.

    PYTHONPATH=src python3 bench/ic_bench.py $OUT --group=resnet50-attempts [--only NAME,...] [--budget 330]
        [--self-check]

The groups and their points are data (caraml.compare.image_classification; the group issue23 is the old name of
resnet50-attempts). Every point is its own process (bench/ic_point.py), timed over a steady window and then
profiled for one step. A point that would not finish inside the budget is recorded as skipped (never started); one
that overruns is killed at the budget's end. Writes ic_group.json (rows, each with its profile), ic_group.txt (the
table) and a trace per point into OUT. --self-check runs the same points on the CPU with a tiny ResNet18 (a check
of the script, not a measurement).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from caraml.compare import image_classification as ic
from caraml.compare.points import Point, find_group, refuse, run_points, select, write_report
from caraml.errors import BadInput


def _env() -> dict:
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run(point: Point, out: Path, timeout: float, self_check: bool) -> dict:
    """One point in its own process (its own session, so that a timeout also ends inductor's compile workers)."""
    merged = ic.point_params(point, self_check)
    steps = ["--warmup", "2", "--steps", "3"] if self_check else ["--warmup", "15", "--steps", "100"]
    cmd = [sys.executable, str(Path(__file__).with_name("ic_point.py")), "--name", point.name, "--params",
           json.dumps(merged), "--knobs", json.dumps(point.knobs), "--out", str(out), *steps]
    print(f"ic_group: {point.name}: {' '.join(merged)} knobs {json.dumps(point.knobs)}", file=sys.stderr, flush=True)
    start = time.monotonic()
    base = {"name": point.name, "params": merged, "knobs_asked": point.knobs, "expected_s": point.expect_s}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {**base, "status": f"timeout after {timeout:.0f} s (the group's budget)", "wall_s": timeout}
    took = time.monotonic() - start
    try:
        row = json.loads(stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {**base, "status": "failed", "wall_s": took, "error": stderr[-2000:]}
    return {**base, **row, "wall_s": took}


def parse(argv: list) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ic_bench.py --group", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", default=None, help="results folder (default $OUT, else ./bench-out)")
    parser.add_argument("--group", required=True, help="one of: " + ", ".join(
        n for g in ic.GROUPS for n in (g.name, *g.aliases)))
    parser.add_argument("--only", default=None, help="comma list of the group's points (default: its default ones)")
    parser.add_argument("--budget", type=float, default=None, help="seconds for the whole group (default: the "
                        "group's, e.g. 330)")
    parser.add_argument("--self-check", action="store_true", help="tiny ResNet18 on the CPU: checks the script")
    return parser.parse_args(argv)


def main(argv: list) -> int:
    args = parse(argv)
    try:
        group = find_group(ic.GROUPS, args.group)
        points = select(group, args.only)
    except BadInput as problem:
        return refuse("ic_bench", problem)
    out = Path(args.out or os.environ.get("OUT") or "bench-out")
    budget = group.budget_s if args.budget is None else args.budget
    start = time.monotonic()
    report = {"group": group.name, "date": time.strftime("%Y-%m-%d %H:%M"), "budget_s": budget,
              "self_check": args.self_check, "rows": []}

    def saved(rows):
        write_report(out, "ic_group", {**report, "rows": rows})

    rows = run_points(points, lambda p, seconds: run(p, out, seconds, args.self_check),
                      None if args.self_check else budget, saved)  # the CPU check is not held to GPU estimates
    lines = ic.table(rows) + ([] if args.self_check else ic.to_mlperf(rows))
    for r in rows:
        lines += [""] + ic.breakdown_lines(r) if r.get("profile") else []
    write_report(out, "ic_group", {**report, "rows": rows}, lines)
    print("\n".join(lines))
    print(f"ic_group: {len(rows)} points in {time.monotonic() - start:.0f} s; {out / 'ic_group.json'}")
    return 0
