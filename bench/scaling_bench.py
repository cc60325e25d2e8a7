"""Multi-GPU weak scaling of image classification on one node.

    PYTHONPATH=src python3 bench/scaling_bench.py [OUT_DIR] [--settings "compile=inductor ..."]

ResNet50, bf16, channels_last, synthetic data on the GPUs, batch 256 per GPU, under torchrun with NCCL
on 1, 2, 4 and 8 GPUs (as many as the machine has). NVLink multicast stays off (NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1). One power monitor per node covers all
GPUs (local rank 0 samples). Then the project's own commands make the results table, the scaling
comparison (parallel efficiency against 1 GPU) and the scaling plot, all under OUT_DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from caraml.compare.points import Column, table_lines

ROOT = Path(__file__).resolve().parents[1]
BASE = ["model=resnet50", "batch_size=256", "precision=bf16", "channels_last=on", "data=synthetic-device",
        "device=cuda", "warmup_steps=20", "measure_steps=150", "sgd_impl=fused"]
DEFAULT_SETTINGS = "compile=inductor compile_mode=reduce-overhead"  # the best single-GPU setting found
COLUMNS = (Column("GPUs", 4, "d", "gpus"), Column("status", 11, "s", "status", cut=True),
           Column("img/s", 9, ".0f", "images_per_s"), Column("img/s/GPU", 9, ".0f", "images_per_s_per_gpu"),
           Column("weak eff", 8, ".3f", "weak_scaling_efficiency"), Column("Wh", 7, ".3f", "energy_wh"),
           Column("img/Wh", 8, ".0f", "images_per_wh"), Column("devs", 4, "d", "energy_devices"))
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def env() -> dict:
    e = dict(os.environ, **MULTICAST_OFF)
    e["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + e.get("PYTHONPATH", "")
    return e


def caraml(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "caraml", *args], capture_output=True, text=True, env=env(),
                          timeout=timeout)


def parse(argv: list[str] | None) -> tuple[Path, str]:
    """(the results folder, the caraml settings of every point)."""
    parser = argparse.ArgumentParser(prog="scaling_bench.py", description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=None, help="results folder (default $OUT, else ./bench-out)")
    parser.add_argument("--settings", default=DEFAULT_SETTINGS, help=f"caraml settings (default: {DEFAULT_SETTINGS})")
    args = parser.parse_args(argv)
    return Path(args.out or os.environ.get("OUT") or "bench-out"), args.settings


def main(argv: list[str] | None = None) -> None:
    import torch

    out, settings = parse(argv)
    results = out / "results"
    gpus = torch.cuda.device_count()
    counts = [n for n in (1, 2, 4, 8) if n <= gpus]
    base_params = BASE
    if not gpus:  # a self-check of the whole pipeline on the CPU: 1 and 2 processes (gloo), smoke-sized
        counts, settings = [1, 2], ""
        base_params = ["--preset", "smoke", "image_size=32", "measure_steps=4", "device=cpu"]
    rows = []
    for n in counts:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n), "-m",
               "caraml", "run", "image_classification", *base_params, *shlex.split(settings), "--results", str(results),
               "--json"]
        print(f"scaling_bench: {n} GPU(s): {' '.join(cmd[3:])}", file=sys.stderr, flush=True)
        start = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=900)
        try:
            record = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            rows.append({"gpus": n, "status": "failed", "error": proc.stderr[-1500:]})
            continue
        m = record["metrics"]
        rows.append({"gpus": n, "status": record["status"], "images_per_s": m["throughput"]["value"],
                     "images_per_s_per_gpu": (m["throughput"]["value"] or 0) / n,
                     "energy_wh": m["energy"].get("total_wh"), "images_per_wh": m["energy"].get("units_per_wh"),
                     "energy_devices": len(m["energy"].get("devices", [])), "wall_s": time.monotonic() - start})
    base = next((r["images_per_s_per_gpu"] for r in rows if r.get("gpus") == 1 and r.get("images_per_s")), None)
    for r in rows:
        if base and r.get("images_per_s"):
            r["weak_scaling_efficiency"] = r["images_per_s_per_gpu"] / base
    out.mkdir(parents=True, exist_ok=True)
    (out / "scaling_bench.json").write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "settings": settings,
                                                        "rows": rows}, indent=1))
    (out / "table.md").write_text(caraml("result", "--results", str(results), "--format", "markdown").stdout)
    (out / "scaling.md").write_text(caraml("compare", "--by", "devices", "--results", str(results),
                                           "--format", "markdown").stdout)
    caraml("plot", "scaling", "--results", str(results), "--out", str(out))
    print("\n".join(table_lines(rows, COLUMNS)))


if __name__ == "__main__":
    main()
