"""Groups of image-classification attempts, each point profiled, in one command with a hard time budget.

    PYTHONPATH=src python3 bench/ic_bench.py $OUT --group=issue23 [--only NAME,...] [--budget 330] [--self-check]

issue23: where the rest of the way from our best ResNet50 (6,963 images/s on the H200) to MLPerf's ≈ 7,950 per
H200 goes. Every point is its own process (bench/ic_point.py: caraml's Bench, built after its bench-only knobs are
set), timed over a steady window and then profiled for one step (device time by kernel category). The points, in
order of expected value; each is compared with the first (baseline):

  baseline          the best setting so far: compile=inductor compile_mode=reduce-overhead sgd_impl=fused, batch 256
  stem_pad          stem_pad_channels=8: the 7x7 stem on 8 channels (3 image channels and 5 zero ones, the same
                    math): bf16 NHWC as cuDNN's kernels take it, instead of cuDNN padding it and running an older one
  cudnn_all_algos   cuDNN tries every algorithm, not its heuristics' top 10 (torch.backends.cudnn.benchmark_limit=0;
                    cudnn.benchmark is already on by default)
  conv1x1_as_mm     inductor lowers the 1x1 convolutions (two thirds of ResNet50's) to matrix products (cuBLAS)
  stem_pad4         stem_pad_channels=4 (what MLPerf's data pipeline pads to)
  autotune_convs    inductor autotunes the convolutions and matrix products (ATen/cuDNN against Triton templates),
                    CUDA graphs kept, without max-autotune's coordinate-descent tuning of every fused kernel (what
                    made max-autotune miss 560 s); needs more time than the group leaves it: run it alone
  batch512          the same at batch 512 (measured on 2026-12-03: 7,050 images/s; runs only when --only names it)

A point that would not finish inside the budget is recorded as skipped (never started); one that overruns is
killed at the budget's end. Writes ic_group.json (rows, each with its profile) and a trace per point into OUT.
--self-check runs the same points on the CPU with a tiny ResNet18 (a check of the script, not a measurement).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPU_COMMON = ["model=resnet50", "batch_size=256", "precision=bf16", "channels_last=on", "data=synthetic-device",
              "device=cuda", "compile=inductor", "compile_mode=reduce-overhead", "sgd_impl=fused"]
CPU_COMMON = ["model=resnet18", "image_size=32", "num_classes=10", "batch_size=4", "precision=bf16",
              "channels_last=on", "data=synthetic-device", "device=cpu", "compile=none", "sgd_impl=fused"]


@dataclass(frozen=True)
class Point:
    params: tuple = ()  # caraml parameters over the common ones
    knobs: dict = field(default_factory=dict)  # bench-only: ic_point.apply_knobs
    expect_s: float = 90.0  # wall time it needs on the H200 (start, compile, warm-up, window, profile)
    by_default: bool = True  # False: runs only when --only names it (measured already)


# Wall times on the H200 (2026-12-03, docs/bench/2026-12-03-h200-ic_issue23.json): baseline 89 s, batch512 93 s, of
# which the first (compiling) step 64 and 63 s, the warm-up and the 100 steps 5 s, the process's start, build and
# profile the other 21 s. A point whose graph or inductor options differ compiles again (≈ 90 s); one with the
# baseline's graph and options finds inductor's caches warm (a cached compile took 8.6 s on 2026-12-02),
# plus cuDNN's search over all its algorithms (≈ 45 s); the stem's only change leaves most of the Triton kernels
# as they were (cached: ≈ 75 s).
GROUPS = {
    "issue23": {
        "baseline": Point(expect_s=90),
        "stem_pad": Point(("stem_pad_channels=8",), expect_s=75),
        "cudnn_all_algos": Point(knobs={"cudnn_benchmark_limit": 0}, expect_s=45),
        "conv1x1_as_mm": Point(knobs={"inductor": {"conv_1x1_as_mm": True}}, expect_s=90),
        "stem_pad4": Point(("stem_pad_channels=4",), expect_s=75),
        "autotune_convs": Point(knobs={"inductor": {
            "max_autotune_gemm": True, "max_autotune_conv_backends": "ATEN,TRITON",
            "max_autotune_gemm_backends": "ATEN,TRITON",  # Triton conv templates need TRITON here too
            "max_autotune_pointwise": False, "coordinate_descent_tuning": False}}, expect_s=180),
        "batch512": Point(("batch_size=512",), expect_s=95, by_default=False),
        # the whole train step (forward, backward, fused SGD) compiled and graphed as one: fewer graph edges
        "step_scope": Point(("compile_scope=step",), expect_s=100, by_default=False),
        # inductor tunes the launch of every fused kernel: the BatchNorm/ReLU/add kernels are 56 % of the step
        "coord_descent": Point(knobs={"inductor": {"coordinate_descent_tuning": True}}, expect_s=150,
                               by_default=False),
        # the baseline once more (its caches warm): the spread of one point between two processes
        "baseline_again": Point(expect_s=40, by_default=False),
    },
}
DEFAULT_BUDGET_S = 330.0  # baseline, stem_pad, cudnn_all_algos, conv1x1_as_mm: ≈ 300 s expected, 30 s to spare
MLPERF_IMAGES_PER_S = 7950  # ResNet50 training per H200 in MLPerf
CPU_PARAMS = {"batch_size=512": "batch_size=8"}  # self-check: the batch point doubles the tiny batch


def run(name: str, point: Point, out: Path, timeout: float, self_check: bool) -> dict:
    common = CPU_COMMON if self_check else GPU_COMMON
    overridden = {p.split("=", 1)[0] for p in point.params}
    merged = [p for p in common if p.split("=", 1)[0] not in overridden]
    merged += [CPU_PARAMS.get(p, p) if self_check else p for p in point.params]
    steps = ["--warmup", "2", "--steps", "3"] if self_check else ["--warmup", "15", "--steps", "100"]
    cmd = [sys.executable, str(ROOT / "bench" / "ic_point.py"), "--name", name, "--params", json.dumps(merged),
           "--knobs", json.dumps(point.knobs), "--out", str(out), *steps]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    print(f"ic_group: {name}: {' '.join(merged)} knobs {json.dumps(point.knobs)}", file=sys.stderr, flush=True)
    start = time.monotonic()
    base = {"name": name, "params": merged, "knobs_asked": point.knobs, "expected_s": point.expect_s}
    # its own session, so that a timeout also ends inductor's compile workers
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
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


def plan(point: Point, budget: float, elapsed: float) -> tuple:
    """Whether the next point starts: (True, seconds it may take) or (False, why it is skipped)."""
    left = budget - elapsed
    need = point.expect_s
    if left < need:
        return False, f"skipped: needs ≈ {need:.0f} s, {max(left, 0):.0f} s of the {budget:.0f} s budget left"
    return True, left


def table(rows: list) -> list:
    base = next((r for r in rows if r.get("images_per_s")), None)
    lines = [f"{'point':<17} {'status':<8} {'img/s':>7} {'x base':>6} {'step ms':>7} {'busy ms':>7} {'idle %':>6} "
             f"{'conv %':>6} {'triton %':>8} {'optim %':>7} {'W':>4} {'MHz':>5} {'1st s':>6} {'wall s':>6} "
             f"{'exp s':>5}"]
    for r in rows:
        p = r.get("profile") or {}
        cats = p.get("categories") or {}
        step = p.get("step_ms") or 0

        def share(prefix, cats=cats, step=step):
            ms = sum(c["ms"] for n, c in cats.items() if n.startswith(prefix))
            return 100 * ms / step if step else None

        def f(v, fmt):
            return format(v, fmt) if isinstance(v, (int, float)) else "-"
        ratio = r["images_per_s"] / base["images_per_s"] if base and r.get("images_per_s") else None
        r["ratio_to_baseline"] = ratio
        idle = 100 * p["idle_ms"] / step if step and p.get("idle_ms") is not None else None
        lines.append(f"{r['name']:<17} {r['status'][:8]:<8} {f(r.get('images_per_s'), '7.0f')} {f(ratio, '6.3f')} "
                     f"{f(step or None, '7.2f')} {f(p.get('kernel_busy_ms'), '7.2f')} {f(idle, '6.1f')} "
                     f"{f(share('conv'), '6.1f')} {f(share('triton'), '8.1f')} {f(share('optimizer'), '7.1f')} "
                     f"{f(r.get('avg_power_w'), '4.0f')} {f(r.get('avg_sm_mhz'), '5.0f')} "
                     f"{f(r.get('first_step_s'), '6.1f')} {f(r.get('wall_s'), '6.0f')} "
                     f"{f(r.get('expected_s'), '5.0f')}")
        if r["status"] != "ok":
            lines.append(f"    {r['status']} {str(r.get('error', ''))[-600:]}")
        if r.get("profile_note"):
            lines.append(f"    profile: {r['profile_note']}")
        if (r.get("knobs") or {}).get("missing"):
            lines.append(f"    not applied (this torch lacks them): {', '.join(r['knobs']['missing'])}")
    return lines


def to_mlperf(rows: list) -> list:
    """How far the baseline's step is from MLPerf's per-H200 rate at the same batch."""
    base = next((r for r in rows if r.get("images_per_s")), None)
    if not base:
        return []
    target_ms = base["batch_size"] / MLPERF_IMAGES_PER_S * 1e3
    return [f"MLPerf's ≈ {MLPERF_IMAGES_PER_S:,} images/s per H200 is {target_ms:.2f} ms per step of "
            f"{base['batch_size']}: {base['name']} takes {base['step_ms']:.2f} ms ({base['step_ms'] - target_ms:+.2f})"]


def breakdown_lines(row: dict, top: int = 4) -> list:
    """The profile of one point: ms per step and share by category, with each category's top kernels."""
    p = row["profile"]
    idle = "" if p["idle_ms"] is None else f", idle {p['idle_ms']:.2f} ms"
    lines = [f"{row['name']}: {p['step_ms']:.2f} ms per step, kernels {p['kernel_busy_ms']:.2f} ms{idle}"]
    for name, c in p["categories"].items():
        share = c["share_of_step"] or 0
        lines.append(f"  {name:<46} {c['ms']:8.2f} ms {share:6.1%} {c['calls']:6.0f} calls")
        for k in c["top_kernels"][:top]:
            lines.append(f"      {k['ms']:7.3f} ms {k['calls']:4.0f}x {k['name'][:110]}")
    return lines


def main(argv: list) -> int:
    parser = argparse.ArgumentParser(prog="ic_bench.py --group", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", default=os.environ.get("OUT", "bench-out"))
    parser.add_argument("--group", required=True)
    parser.add_argument("--only", default=None)
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S,
                        help=f"seconds for the whole group (default {DEFAULT_BUDGET_S:.0f})")
    parser.add_argument("--self-check", action="store_true", help="tiny ResNet18 on the CPU: checks the script")
    args = parser.parse_args(argv)
    if args.group not in GROUPS:
        print(f"ic_bench: unknown group {args.group}; choose from: {', '.join(GROUPS)}", file=sys.stderr)
        return 2
    group = GROUPS[args.group]
    names = args.only.split(",") if args.only else [n for n, p in group.items() if p.by_default]
    unknown = [n for n in names if n not in group]
    if unknown:
        print(f"ic_bench: unknown point(s) {', '.join(unknown)} in group {args.group}; choose from: "
              f"{', '.join(group)}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    rows = []
    for name in names:
        if args.self_check:  # the CPU check is not held to the GPU's time estimates
            go, value = True, 600.0
        else:
            go, value = plan(group[name], args.budget, time.monotonic() - start)
        rows.append(run(name, group[name], out, value, args.self_check) if go else
                    {"name": name, "status": value, "expected_s": group[name].expect_s})
        report = {"group": args.group, "date": time.strftime("%Y-%m-%d %H:%M"), "budget_s": args.budget,
                  "self_check": args.self_check, "rows": rows}
        (out / "ic_group.json").write_text(json.dumps(report, indent=1))
    lines = table(rows)
    if not args.self_check:
        lines += to_mlperf(rows)
    for r in rows:
        if r.get("profile"):
            lines += [""] + breakdown_lines(r)
    (out / "ic_group.json").write_text(json.dumps(report, indent=1))
    (out / "ic_group.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"ic_group: {len(rows)} points in {time.monotonic() - start:.0f} s; {out / 'ic_group.json'}")
    return 0
