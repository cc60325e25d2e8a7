"""Until-steady against a fixed window on one GPU: for each workload's CARAML configuration, the figure each window
stops at, its 95 % interval and the GPU time of the whole `caraml run`.

    PYTHONPATH=src python3 bench/steady_bench.py [OUT_DIR] [--only NAME,...] [--repeats N] [--budget S] [--cpu]

Points: ic_fixed, ic_steady, gpt_fixed, gpt_steady, fno_fixed, fno_steady, and (named only) ic_steady_long,
fno_steady_long: a 180 s cap; icdev_fixed, icdev_steady: image classification fed from the device
(caraml.compare.steady_window). Each is its own `caraml run` process, timed from its
start to its record. --repeats N runs the selection N rounds over and adds a table of each point's spread.
--cpu checks the script with the smoke presets.
Writes steady_bench.json and steady_bench.txt into OUT_DIR, or $OUT, or ./bench-out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from caraml.compare import steady_window as sw
from caraml.compare.points import refuse, run_points, select, table_lines, write_report
from caraml.errors import BadInput


def run(point, results: Path, timeout: float) -> dict:
    cmd = [sys.executable, "-m", "caraml", "run", *point.params, "--results", str(results), "--json"]
    print(f"steady_bench: {point.name}: {' '.join(cmd[3:])}", file=sys.stderr, flush=True)
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"name": point.name, "status": "timeout", "wall_s": timeout}
    took = time.monotonic() - start
    try:
        record = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"name": point.name, "status": "failed", "wall_s": took, "error": proc.stderr[-2000:]}
    return {**sw.row(point.name, record, took), "command": "caraml run " + " ".join(point.params)}


def main(argv: list) -> int:
    parser = argparse.ArgumentParser(prog="steady_bench.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", default=None, help="results folder (default $OUT, else ./bench-out)")
    parser.add_argument("--only", default=None, help="comma list of points (default: all)")
    parser.add_argument("--budget", type=float, default=None, help="seconds for all points (default 540)")
    parser.add_argument("--repeats", type=int, default=1, help="rounds over the selection (default 1)")
    parser.add_argument("--cpu", action="store_true", help="a check of the script: smoke presets on the CPU")
    args = parser.parse_args(argv)
    group = sw.group(cpu=args.cpu)
    try:
        points = sw.repeated(select(group, args.only), args.repeats)
        if args.repeats < 1:
            raise BadInput(f"--repeats {args.repeats}: give 1 or more")
    except BadInput as problem:
        return refuse("steady_bench", problem)
    out = Path(args.out or os.environ.get("OUT") or "bench-out")

    def saved(rows):
        write_report(out, "steady_bench", {"date": time.strftime("%Y-%m-%d"), "rows": rows})

    budget = args.budget if args.budget is not None else group.budget_s
    rows = run_points(points, lambda p, s: run(p, out / "results", s), budget, saved)
    sw.agreement(rows)
    lines = table_lines(rows, sw.COLUMNS)
    if args.repeats > 1:
        lines += ["", *table_lines(sw.spread(rows), sw.SPREAD_COLUMNS)]
    write_report(out, "steady_bench", {"date": time.strftime("%Y-%m-%d"), "rows": rows, "spread": sw.spread(rows)},
                 lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
