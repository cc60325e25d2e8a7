"""After a refactor: every workload's main GPU path once through `caraml run`, beside the figure it gave before.

    PYTHONPATH=src python3 bench/refactor_check.py [OUT_DIR]

One process per point (records in OUT_DIR/results), a table on stdout, refactor_check.json in OUT_DIR (or $OUT,
or ./bench-out). `before` is the same command's figure from docs/performance.md (H200, earlier runs); a
point that ends other than ok, or below 0.95 x before, is named at the end and makes the exit code 1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from caraml.compare.points import Column, table_lines, write_report

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = (Column("point", 36, "s", "name"), Column("status", 10, "s", "status", cut=True),
           Column("units/s", 12, ",.1f", "throughput"), Column("before", 10, ",.0f", "before"),
           Column("ratio", 7, ".3f", "ratio"), Column("MFU", 6, ".3f", "mfu"), Column("Wh", 8, ".3f", "energy_wh"),
           Column("wall s", 7, ".0f", "wall_s"))
POINTS = [  # name, workload, parameters, figure before (units/s) or None
    ("ic_resnet50_bf16_eager", "image_classification",
     ["--preset", "default", "batch_size=256", "precision=bf16", "channels_last=on", "data=synthetic-device",
      "warmup_steps=15", "measure_steps=100"], 4692.0),
    ("ic_caraml_epochs", "image_classification",
     ["--preset", "caraml", "epochs=2", "warmup_epochs=1", "dataset_size=2048", "warmup_steps=5",
      "measure_steps=20"], None),
    ("llm_800M_compiled", "llm_training",
     ["--preset", "800M", "compile=inductor", "precision=bf16", "micro_batch_size=16", "grad_accumulation=8",
      "recompute=none", "warmup_steps=4", "measure_steps=10"], 92100.0),
    ("fno_RBC2D_reduce_overhead_epochs", "fno",
     ["--preset", "RBC2D", "compile=inductor", "epochs=2", "warmup_steps=20", "measure_steps=300"], 9158.0),
    ("fno_RBC3D_eager", "fno", ["--preset", "RBC3D", "epochs=0", "warmup_steps=10", "measure_steps=100"], 646.0),
]


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run(name: str, workload: str, params: list[str], results: Path) -> dict:
    cmd = [sys.executable, "-m", "caraml", "run", workload, *params, "device=cuda", "--results", str(results),
           "--json"]
    print(f"refactor_check: {name}: {' '.join(cmd[3:])}", file=sys.stderr, flush=True)
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env())
    took = time.monotonic() - start
    try:
        record = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"name": name, "status": f"no record (exit {proc.returncode})", "wall_s": took,
                "stderr": proc.stderr[-3000:]}
    m = record["metrics"]
    return {"name": name, "status": record["status"], "wall_s": took, "error": record.get("error"),
            "throughput": (m.get("throughput") or {}).get("value"), "unit": (m.get("throughput") or {}).get("unit"),
            "mfu": m.get("mfu"), "energy_wh": (m.get("energy") or {}).get("total_wh"),
            "caraml_epochs": m.get("caraml_images_per_s") or (m.get("epochs") or {}).get("caraml_timesteps_per_s"),
            "precision_in_use": m.get("precision_in_use"),
            "phases": sorted((m.get("energy") or {}).get("phases") or {})}


def parse(argv: list[str] | None) -> Path:
    parser = argparse.ArgumentParser(prog="refactor_check.py", description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=None, help="results folder (default $OUT, else ./bench-out)")
    return Path(parser.parse_args(argv).out or os.environ.get("OUT") or "bench-out")


def main(argv: list[str] | None = None) -> int:
    out = parse(argv)
    out.mkdir(parents=True, exist_ok=True)
    rows, bad = [], []
    for name, workload, params, before in POINTS:
        row = run(name, workload, params, out / "results")
        row["before"] = before
        row["ratio"] = row["throughput"] / before if before and row.get("throughput") else None
        rows.append(row)
        if row["status"] != "ok" or (row["ratio"] is not None and row["ratio"] < 0.95):
            bad.append(name)
        write_report(out, "refactor_check", {"rows": rows})
    lines = table_lines(rows, COLUMNS)
    write_report(out, "refactor_check", {"rows": rows}, lines)
    print("\n".join(lines))
    if bad:
        print("refactor_check: not as before: " + ", ".join(bad), file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
