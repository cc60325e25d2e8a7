"""FNO training benchmark on one GPU: a plain loop (this process) against `caraml run fno` (subprocesses).

    PYTHONPATH=src python3 bench/fno_bench.py --out DIR [--only NAME,... | --group GROUP] [--budget SECONDS] [--smoke]

RBC2D and RBC3D at CARAML's settings (widths 16/25, modes 12x12 / 12x12x6, 2 layers, batch 20,
256x64 / 64x64x32 grids, Adam, relative L2 loss), synthetic data on the GPU (two batches alternated).
The plain loop uses the same model code (caraml.workloads.fno.model) with no harness around it;
each of its points is built fresh after torch._dynamo.reset(). What each change buys:

- complex (cfloat weights, complex einsums: the classic FNO code) vs real (re, im) weights, eager and compiled
- compiled (inductor) vs eager; compile scope model (FFTs inside the graph as extern kernels), pointwise
  (FFTs and spectral products left eager, the pointwise parts compiled) and step (forward, loss and Adam)
- compile modes default, reduce-overhead (CUDA graphs), max-autotune(-no-cudagraphs)
- fp32 (TF32 matmuls, CARAML's 'high') vs fp16 autocast with GradScaler (CARAML's use_amp)

Beside them: neuraloperator's FNO (2.0, optional: its points are skipped in one line where it does
not import) at each RBC problem's width/modes/layers, configured as close to CARAML's as its options go, its
parameter count beside ours, eager and compiled; `profile` points (torch.profiler, RBC2D eager): CUDA kernels
and GPU time per step of the plain loop (real or complex weights; pointwise products as matmuls or as 1x1
convolutions, CARAML's Conv1d), of neuraloperator's FNO (an independent
FNO with complex weights and 1x1 convolutions) and of the benchmark's own step() built in this process
without the harness (`caraml run`'s step time, with the harness, is in the caraml rows); PIC1D and PIC2D
through `caraml run` with CARAML's operators, eager and compiled (PIC2D: torchkbnufft and the matrix backend).
`--group fno-operators` (old name issue19) runs those (about 7 minutes on an H200). The caraml points run on
the plain loop's data
(data=synthetic: made on the device), not the presets' CARAML data path (data=auto: host DataLoaders), which the
data_* points measure. `PIC2D_nufft_check` compares CARAML's PIC2D operator with nufft_backend=matrix against
torchkbnufft in this process under CARAML's matmul precision 'high' (TF32): the operator alone and the model on one
batch from the same weights (matrix eager and compiled), outputs and gradients (input, weights), pass/fail at 1e-4
relative (norm-wise), beside the floor TF32 sets (torchkbnufft against itself, the input moved by float32 rounding;
bench/pic_tf32_cpu.py emulates all of it on a CPU). `--group fno-recheck` (issue19-recheck): RBC2D caraml against
plain, the profile, PIC2D's two backends, PIC1D.
`--group pic-throughput` (issue23-pic; PIC throughput, budget 180 s): that check, PIC2D matrix eager/compiled and
torchkbnufft eager, PIC1D eager/compiled, through `caraml run`, then the plain loop at PIC2D matrix (caraml/plain).
`--group pic1d-layouts` (issue23-pic1d; budget 150 s): PIC1D with dse_layout=channels-last (the default) against
channels-first (the layout before), compiled and eager, and `PIC1D_layout_check`: the two layouts' output and
gradients on one batch in this process (matmul precision highest and high), against 1e-4 and the TF32 floor, then the
plain loop at PIC1D channels-last (caraml/plain). `--group pic1d-triton` (budget 240 s): PIC1D compiled with
dse_backend=triton against matmul, each twice in alternation, `PIC1D_triton_check` (the kernels' output and weight
gradients against channels-first, eager under highest and high, compiled under high), then both eager.
`--group pic1d-triton-fused` (budget 300 s): the same for dse_backend=triton-fused, after channels-first compiled
(the start the goal's 2 x is taken from, on this card), and the plain loop on the same kernels.

The data-path points (data_*: `caraml run fno` over CARAML's loader path, data=file from a file written first with
`caraml data fno-synthetic`, and data=synthetic-host, beside data=synthetic on the device) give CARAML-convention
Timesteps/s and TrainTimesteps/s (5 epochs, the first left out) beside the steady state; alone:
`--only data` (all data_* points, about 4 minutes on an H200).

Prints samples/s per point, compiled/eager speedups, caraml/plain ratios and the goals (compiled never
slower than eager, >= 1.3x eager on RBC2D training, caraml >= 0.98 x plain); writes fno_bench.json into
--out (or $OUT, or ./bench-out). Points run in order of importance until the time budget (default 420 s)
is spent (a point still running then is stopped); those left are listed as skipped. The points, groups and
summary are data in caraml.compare.fno_points; the plain loop and the checks in caraml.compare.fno_plain and
fno_checks. Peak memory in GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from caraml.compare.fno_checks import layout_check, nufft_check
from caraml.compare.fno_plain import neuralop_missing, plain, plain_setup, timed
from caraml.compare.fno_points import (
    DATA_POINTS,
    DATA_SAMPLES,
    GROUP_ALIASES,
    GROUP_BUDGETS,
    GROUPS,
    POINTS,
    SMOKE_RUN,
    FNORun,
    summary,
)


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1] / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def data_point(spec: dict, out: Path, timeout: float, where: FNORun) -> dict:
    """A data-path point: CARAML's data file written first (once, under OUT/fno-data), then `caraml run fno`."""
    problem = spec["problem"]
    folder = out / "fno-data" / problem
    if spec["data_path"] == "file" and not any(folder.glob("*.h5")):
        cmd = [sys.executable, "-m", "caraml", "data", "fno-synthetic", problem, "--out", str(folder)]
        cmd += ["--smoke", "--samples", "20"] if where.smoke else ["--samples", str(DATA_SAMPLES[problem])]
        made = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env())
        if made.returncode:
            return {"status": "failed", "error": f"caraml data fno-synthetic: {made.stderr[-1000:]}"}
    params = [p.replace("{data_dir}", str(folder)) for p in spec["caraml"]]
    if where.smoke:  # the smoke preset's batch of 4, and few samples
        params = [p for p in params if not p.startswith(("global_batch_size=", "batch_size=", "samples="))]
        params += ["samples=20"] if spec["data_path"] == "synthetic-host" else []
    row = caraml({**spec, "caraml": params}, out / "results", timeout, where)
    row["data_file"] = str(folder) if spec["data_path"] == "file" else None
    return row




# the eager profile -------------------------------------------------------------------------------------
def _kernels(run, sync, steps: int, cuda: bool) -> dict:
    """torch.profiler over `steps` steps: CUDA kernels (and copies/memsets) per step and their GPU time per
    step, the busiest kernels by count; on a CPU (--smoke) the top-level aten ops per step instead."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sync()
    with profile(activities=activities) as prof:
        for i in range(steps):
            run(i)
        sync()
    events = prof.events()
    if cuda:
        kernels = [e for e in events if e.device_type == DeviceType.CUDA]
        gpu_us = sum(getattr(e, "device_time", None) or getattr(e, "cuda_time", 0) for e in kernels)
    else:
        kernels = [e for e in events if e.name.startswith("aten::") and not (
            e.cpu_parent and e.cpu_parent.name.startswith("aten::"))]
        gpu_us = None
    counts = {}
    for e in kernels:
        counts[e.name] = counts.get(e.name, 0) + 1
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:12]
    return {"what": "CUDA kernels" if cuda else "top-level aten ops (CPU)", "per_step": len(kernels) / steps,
            "gpu_ms_per_step": gpu_us / steps / 1e3 if gpu_us is not None else None,
            "top": [{"name": name[:90], "per_step": n / steps} for name, n in top]}


def profile_point(spec: dict, where: FNORun) -> dict:
    """RBC2D eager: the plain loop (real or complex weights, pointwise products as matmuls or 1x1 convolutions),
    neuraloperator's FNO, and FNOBench.step() built in this process (the benchmark's step without the harness);
    each timed, then profiled."""
    from caraml.runner import RunSpec, build_bench

    problem = spec["problem"]
    warmup, steps = where.steps(problem)
    variants = {"plain_real": dict(POINTS[f"{problem}_plain_eager"]),
                "plain_complex": {**POINTS[f"{problem}_plain_eager"], "complex": True},
                "plain_conv1x1": {**POINTS[f"{problem}_plain_eager"], "conv1x1": True},
                "plain_complex_conv1x1": {**POINTS[f"{problem}_plain_eager"], "complex": True, "conv1x1": True}}
    if not neuralop_missing():
        variants["neuralop"] = {**POINTS[f"{problem}_plain_eager"], "lib": "neuralop"}
    out = {"status": "ok", "variants": {}}
    for name, vspec in [*variants.items(), ("caraml_bench_step", None)]:
        if vspec is None:
            preset = f"smoke-{problem}" if where.smoke else problem
            bench = build_bench(RunSpec("fno", {"epochs": 0, "data": "synthetic"}, preset=preset),
                                device=where.device)
            sync = bench._sync
            run, batch = (lambda i, bench=bench: bench.step()), bench.data.batch
        else:
            run, sync, batch, _ = plain_setup(vspec, where)
        row = timed(run, sync, batch, warmup, steps)
        row["profile"] = _kernels(run, sync, where.profile_steps, where.device == "cuda")
        out["variants"][name] = row
        if vspec is None:
            bench.close()
    return out




# caraml ------------------------------------------------------------------------------------------------
def caraml(spec: dict, results: Path, timeout: float, where: FNORun) -> dict:
    problem = spec["problem"]
    warmup, steps = where.steps(problem)
    params = [f"device={where.device}", "epochs=0", f"warmup_steps={warmup}", f"measure_steps={steps}"]
    params = [p for p in params if not any(q.split("=")[0] == p.split("=")[0] for q in spec["caraml"])]
    preset = f"smoke-{problem}" if where.smoke else problem
    cmd = [sys.executable, "-m", "caraml", "run", "fno", "--preset", preset, *params, *spec["caraml"],
           "--results", str(results), "--json"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env())
    except subprocess.TimeoutExpired:
        return {"status": "timeout"}
    try:
        record = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"status": "failed", "error": proc.stderr[-2000:]}
    m = record.get("metrics") or {}
    energy = m.get("energy") or {}
    return {"status": record["status"], "error": record.get("error"),
            "samples_per_s": (m.get("throughput") or {}).get("value"),
            "step_ms": ((m.get("step_time_s") or {}).get("median") or 0) * 1e3,
            "first_step_s": (m.get("warmup") or {}).get("first_step_s"),
            "compile_s": (m.get("warmup") or {}).get("compile_s"), "tflops_per_device": m.get("tflops_per_device"),
            "caraml_timesteps_per_s": m.get("caraml_timesteps_per_s"),
            "train_timesteps_per_s": (m.get("train_throughput") or {}).get("value"),
            "peak_memory_gib": (m.get("peak_memory_bytes") or 0) / 2**30, "energy_wh": energy.get("total_wh"),
            "timesteps_per_wh": energy.get("units_per_wh"), "avg_power_w": energy.get("avg_power_w"),
            "data": m.get("data_source"), "caraml_timesteps": m.get("timesteps"),
            "caraml_mean_compile_time_s": m.get("mean_compile_time_s"), "caraml_tflops": m.get("caraml_tflops"),
            "command": "caraml " + " ".join(cmd[3:-3])}


# summary -----------------------------------------------------------------------------------------------

def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fno_bench.py", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="results folder (default $OUT, else ./bench-out)")
    parser.add_argument("--only", help="comma list of point names (data: every data-path point)")
    parser.add_argument("--group", choices=sorted([*GROUPS, *GROUP_ALIASES]), help="a named list of points: "
                        + "; ".join(f"{k}: {', '.join(v)}" for k, v in GROUPS.items()))
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds to spend; points not started by then are skipped (default: "
                             f"$FNO_BENCH_BUDGET_S, else {GROUP_BUDGETS} by group, else 420)")
    parser.add_argument("--smoke", action="store_true",
                        help="check the script on the CPU: tiny shapes, 2+3 steps (no measurement)")
    args = parser.parse_args(argv)
    args.group = GROUP_ALIASES.get(args.group, args.group)
    if args.budget is None:
        given = os.environ.get("FNO_BENCH_BUDGET_S")
        args.budget = float(given) if given else GROUP_BUDGETS.get(args.group, 420.0)
    return args


def point_names(args: argparse.Namespace) -> list[str]:
    """The points to run, in order; an unknown one: one line, exit 2."""
    names = args.only.split(",") if args.only else GROUPS[args.group] if args.group else list(POINTS)
    if "data" in names:  # --only data: every data-path point
        names = [n for n in names if n != "data"] + list(DATA_POINTS)
    unknown = [n for n in names if n not in POINTS]
    if unknown:
        print(f"fno_bench: unknown point(s) {', '.join(unknown)}; choose from: {', '.join(POINTS)}",
              file=sys.stderr)
        sys.exit(2)
    return names


class OutOfTime(BaseException):  # not an Exception: compilers that wrap errors must not swallow it
    pass


def _out_of_time(signum, frame):
    raise OutOfTime


def run_point(name: str, out: Path, left: float, where: FNORun) -> dict:
    """One point with `left` seconds: a plain point that compiles past them is stopped too (SIGALRM)."""
    import torch

    spec, t0 = POINTS[name], time.monotonic()
    signal.signal(signal.SIGALRM, _out_of_time)
    signal.alarm(max(1, int(left)))
    try:
        row = (data_point(spec, out, left, where) if name in DATA_POINTS else
               caraml(spec, out / "results", left, where) if "caraml" in spec else
               profile_point(spec, where) if spec.get("profile") else
               nufft_check(spec, where) if spec.get("nufft_check") else
               layout_check(spec, where) if spec.get("layout_check") else plain(spec, where))
    except OutOfTime:
        row = {"status": "timeout", "error": f"stopped at the time budget after {time.monotonic() - t0:.0f} s"}
        torch._dynamo.reset()
    except Exception as exc:  # noqa: BLE001 - a point that fails is a row that says why
        row = {"status": "failed", "error": f"{type(exc).__name__}: {str(exc)[:1500]}",
               "traceback": traceback.format_exc()[-3000:]}
        torch._dynamo.reset()
    finally:
        signal.alarm(0)
    return {"name": name, **spec, **row, "wall_s": time.monotonic() - t0}


def run_points(names: list[str], budget: float, out: Path, where: FNORun, save) -> list[dict]:
    """Each point in order while 45 s of the budget are left; neuraloperator's skipped where it does not import."""
    start, rows, missing = time.monotonic(), [], neuralop_missing()
    if missing and any(POINTS[n].get("lib") == "neuralop" or POINTS[n].get("profile") for n in names):
        print(f"fno_bench: neuraloperator does not import ({missing[:160]}): its points are skipped and the profile "
              "has no neuraloperator variant (pip install neuraloperator==2.0.0 tensorly tensorly-torch)",
              file=sys.stderr, flush=True)
    for name in names:
        left = budget - (time.monotonic() - start)
        if left < 45:
            rows.append({"name": name, "status": "skipped (time budget)"})
        elif missing and POINTS[name].get("lib") == "neuralop":
            rows.append({"name": name, **POINTS[name], "status": "skipped (no neuraloperator)"})
        else:
            print(f"fno_bench: {name} ({left:.0f} s left)", file=sys.stderr, flush=True)
            rows.append(run_point(name, out, left, where))
        save(rows)
    return rows


def _f(v, fmt):
    return format(v, fmt) if isinstance(v, (int, float)) else "-"


def check_lines(r: dict) -> list[str]:
    """The in-process checks' lines under their row: PIC2D's backends, PIC1D's layouts, TF32's floor."""
    lines = []
    for cname, c in (r.get("checks") or {}).items():  # the PIC2D backend check
        diffs = ", ".join(f"{k} {v:.1e}" for k, v in c["rel_diff"].items())
        verdict = "pass" if c["pass"] else "FAIL"
        lines.append(f"    matrix vs torchkbnufft, {cname:<15} {verdict} (< {r['tolerance']:g}, "
                     f"matmul precision {r['matmul_precision']}, TF32 {'on' if r['tf32'] else 'absent'}; within the "
                     f"TF32 floor: {'yes' if c['within_tf32_floor'] else 'NO'}): {diffs}")
    for cname, c in (r.get("layout_checks") or {}).items():  # PIC1D's layouts
        diffs = ", ".join(f"{k} {v:.1e}" for k, v in c["rel_diff"].items())
        tf32 = "on" if r["tf32"] and cname.startswith("high") else "off"
        worst = f" ({c['worst_weight']})" if c.get("worst_weight") else ""
        lines.append(f"    channels-last vs channels-first, matmul precision {cname:<14} "
                     f"{'pass' if c['pass'] else 'FAIL'} (< {r['tolerance']:g}; TF32 {tf32}): {diffs}{worst}")
    for lname, c in (r.get("tf32_error") or {}).items():
        diffs = ", ".join(f"{k} {v:.1e}" for k, v in c["rel_diff"].items())
        lines.append(f"    TF32's own error: {lname}, precision high against channels-first highest: {diffs}")
    if r.get("tf32_floor"):
        diffs = ", ".join(f"{k} {v:.1e}" for k, v in r["tf32_floor"]["rel_diff"].items())
        lines.append(f"    floor: {r.get('floor_of', 'torchkbnufft')}, the input moved by 2^-24: {diffs}")
    return lines


def row_lines(r: dict, summ: dict) -> list[str]:
    lines = [f"{r['name']:<40} {str(r['status'])[:8]:<8} {_f(r.get('samples_per_s'), '10.1f')} "
             f"{_f(r.get('step_ms'), '8.3f')} {_f(summ['speedup_vs_eager'].get(r['name']), '8.3f')} "
             f"{_f(summ['caraml_over_plain'].get(r['name']), '12.3f')} {_f(r.get('first_step_s'), '10.1f')} "
             f"{_f(r.get('wall_s'), '7.0f')} {_f(r.get('params'), '10d')}"]
    if r.get("error") and r["status"] != "ok":
        lines.append("    " + str(r["error"])[-400:].replace("\n", " "))
    for vname, v in (r.get("variants") or {}).items():  # a profile point
        prof = v["profile"]
        lines.append(f"    {vname:<20} {_f(v.get('samples_per_s'), '10.1f')} samples/s {_f(v.get('step_ms'), '8.3f')} "
                     f"ms/step {_f(prof['per_step'], '8.1f')} {prof['what']}/step, GPU "
                     f"{_f(prof['gpu_ms_per_step'], '.3f')} ms/step")
    return lines + check_lines(r)


def summary_lines(summ: dict) -> list[str]:
    lines = []
    for key, what in (("pic2d_matrix_over_torchkbnufft", "PIC2D matrix / torchkbnufft (caraml run):"),
                      ("pic1d_channels_last_over_first", "PIC1D channels-last / channels-first (caraml run):"),
                      ("ours_over_neuralop", "ours / neuraloperator (samples/s):")):
        if summ.get(key):
            lines.append(f"{what} {json.dumps({k: round(v, 3) for k, v in summ[key].items()})}")
    start = summ.get("pic1d_best_compiled_over_start")
    if start:
        lines.append(f"PIC1D best compiled / start: {start['best']:.1f} / {start['start']['samples_per_s']:.1f} = "
                     f"{start['ratio']:.3f} (start: {start['start']['from']})")
    lines.append(f"goals: {json.dumps(summ['goals'])}")
    for name, row in summ["data_paths"].items():
        lines.append(f"{name:<40} steady {row['steady_samples_per_s'] or 0:10.1f}/s  CARAML Timesteps/s "
                     f"{row['caraml_timesteps_per_s'] or 0:10.1f}  TrainTimesteps/s "
                     f"{row['caraml_train_timesteps_per_s'] or 0:10.1f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    names = point_names(args)
    where = SMOKE_RUN if args.smoke else FNORun()
    import torch

    out = Path(args.out or os.environ.get("OUT") or "bench-out")
    out.mkdir(parents=True, exist_ok=True)
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0],
           "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    steps = {problem: where.steps(problem) for problem in ("RBC2D", "RBC3D", "PIC1D", "PIC2D")}

    def save(rows):
        (out / "fno_bench.json").write_text(json.dumps(
            {"date": time.strftime("%Y-%m-%d"), "env": env, "steps": steps, "rows": rows,
             "summary": summary({r["name"]: r for r in rows})}, indent=1))

    rows = run_points(names, args.budget, out, where, save)
    save(rows)
    summ = summary({r["name"]: r for r in rows})
    print(f"{'point':<40} {'status':<8} {'samples/s':>10} {'step ms':>8} {'x eager':>8} {'caraml/plain':>12} "
          f"{'1st step s':>10} {'wall s':>7} {'params':>10}")
    print("\n".join(line for r in rows for line in row_lines(r, summ)))
    print("\n".join(summary_lines(summ)))
    print(f"fno_bench: wrote {out / 'fno_bench.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
