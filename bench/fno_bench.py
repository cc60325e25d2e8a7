"""FNO training benchmark on one GPU: a plain loop (this process) against `caraml run fno` (subprocesses).

    PYTHONPATH=src python3 bench/fno_bench.py --out DIR [--only NAME,... | --group issue19|issue19-recheck|
                                             issue23-pic|issue23-pic1d] [--budget SECONDS] [--smoke]

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
`--group issue19` runs those (about 7 minutes on an H200). The caraml points run on the plain loop's data
(data=synthetic: made on the device), not the presets' CARAML data path (data=auto: host DataLoaders), which the
data_* points measure. `PIC2D_nufft_check` compares CARAML's PIC2D operator with nufft_backend=matrix against
torchkbnufft in this process under CARAML's matmul precision 'high' (TF32): the operator alone and the model on one
batch from the same weights (matrix eager and compiled), outputs and gradients (input, weights), pass/fail at 1e-4
relative (norm-wise), beside the floor TF32 sets (torchkbnufft against itself, the input moved by float32 rounding;
bench/pic_tf32_cpu.py emulates all of it on a CPU). `--group issue19-recheck`: RBC2D caraml against plain, the
profile, PIC2D's two backends, PIC1D.
`--group issue23-pic` (PIC throughput, budget 180 s): that check, PIC2D matrix eager/compiled and torchkbnufft
eager, PIC1D eager/compiled, through `caraml run`, then the plain loop at PIC2D matrix (caraml/plain).
`--group issue23-pic1d` (budget 150 s): PIC1D with dse_layout=channels-last (the default) against channels-first
(the layout before), compiled and eager, and `PIC1D_layout_check`: the two layouts' output and gradients on one
batch in this process (matmul precision highest and high), against 1e-4 and the TF32 floor, then the plain loop at
PIC1D channels-last (caraml/plain).

The data-path points (data_*: `caraml run fno` over CARAML's loader path, data=file from a file written first with
`caraml data fno-synthetic`, and data=synthetic-host, beside data=synthetic on the device) give CARAML-convention
Timesteps/s and TrainTimesteps/s (5 epochs, the first left out) beside the steady state; alone:
`--only data` (all data_* points, about 4 minutes on an H200).

Prints samples/s per point, compiled/eager speedups, caraml/plain ratios and the goals (compiled never
slower than eager, >= 1.3x eager on RBC2D training, caraml >= 0.98 x plain); writes fno_bench.json into
--out (or $OUT, or ./bench-out). Points run in order of importance until the time budget (default 420 s)
is spent (a point still running then is stopped); those left are listed as skipped.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

STEPS = {"RBC2D": (20, 300), "RBC3D": (10, 100), "PIC1D": (8, 40), "PIC2D": (8, 40)}  # warm-up, measured steps
# --smoke: the whole script on a CPU with tiny shapes (a check of the script, not a measurement)
SMOKE = {"RBC2D": {"width": 8, "modes": (4, 4), "grid": (32, 16), "batch": 4},
         "RBC3D": {"width": 8, "modes": (4, 4, 2), "grid": (16, 16, 8), "batch": 4},
         "PIC1D": {"width": 8, "modes": (4,), "particles": 512, "batch": 4},
         "PIC2D": {"width": 8, "modes": (4, 4), "particles": 512, "batch": 4}}
# profile_steps: steps recorded by torch.profiler per variant (after its warm-up and timed steps)
RUN = {"device": "cuda", "smoke": False, "profile_steps": 10}


def _p(problem, **kw) -> dict:
    """A point: plain loop options (compile mode None = eager; PIC: the operator's dse_layout, nufft_backend)."""
    return {"problem": problem, "compile": None, "scope": "model", "complex": False, "amp": None, "lib": "caraml",
            "dse_layout": "channels-last", "nufft_backend": "torchkbnufft", **kw}


# The caraml points measure the plain loop's work: batches made on the device (data=synthetic), not the presets'
# CARAML data path (data=auto: host DataLoaders, every batch copied host -> device), which the data_* points measure.
SAME_DATA = "data=synthetic"


def _c(problem, *params) -> dict:
    """A point run by `caraml run fno` with these extra parameters, on the plain loop's data."""
    return {"problem": problem, "caraml": [SAME_DATA, *params]}


# In order of importance: the time budget cuts from the end.
POINTS = {
    "RBC2D_plain_eager": _p("RBC2D"),
    "RBC2D_caraml_eager": _c("RBC2D"),
    "RBC2D_plain_compiled": _p("RBC2D", compile="default"),
    "RBC2D_caraml_compiled": _c("RBC2D", "compile=inductor"),
    "RBC3D_plain_eager": _p("RBC3D"),
    "RBC3D_caraml_eager": _c("RBC3D"),
    "RBC3D_plain_compiled": _p("RBC3D", compile="default"),
    "RBC3D_caraml_compiled": _c("RBC3D", "compile=inductor"),
    "RBC2D_plain_eager_complex": _p("RBC2D", complex=True),
    "RBC2D_plain_compiled_complex": _p("RBC2D", compile="default", complex=True),
    "RBC2D_plain_reduce_overhead": _p("RBC2D", compile="reduce-overhead"),
    "RBC2D_plain_compiled_pointwise": _p("RBC2D", compile="default", scope="pointwise"),
    "RBC2D_plain_eager_fp16": _p("RBC2D", amp="fp16"),
    "RBC2D_plain_compiled_fp16": _p("RBC2D", compile="default", amp="fp16"),
    "RBC2D_caraml_compiled_fp16": _c("RBC2D", "compile=inductor", "precision=fp16"),
    "RBC2D_caraml_reduce_overhead": _c("RBC2D", "compile=inductor", "compile_mode=reduce-overhead"),
    "RBC2D_plain_compiled_step": _p("RBC2D", compile="default", scope="step"),
    "RBC3D_plain_reduce_overhead": _p("RBC3D", compile="reduce-overhead"),
    "RBC3D_plain_eager_fp16": _p("RBC3D", amp="fp16"),
    "RBC3D_plain_compiled_fp16": _p("RBC3D", compile="default", amp="fp16"),
    "RBC3D_plain_eager_complex": _p("RBC3D", complex=True),
    "RBC3D_plain_compiled_step": _p("RBC3D", compile="default", scope="step"),
    "RBC2D_plain_reduce_overhead_step": _p("RBC2D", compile="reduce-overhead", scope="step"),
    "RBC2D_caraml_compiled_step": _c("RBC2D", "compile=inductor", "compile_scope=step"),
    "RBC2D_caraml_eager_power_off": _c("RBC2D", "power=off"),
    "RBC2D_caraml_epochs": _c("RBC2D", "compile=inductor", "epochs=5"),
    "RBC2D_plain_max_autotune_nocg": _p("RBC2D", compile="max-autotune-no-cudagraphs"),
    "RBC2D_plain_max_autotune": _p("RBC2D", compile="max-autotune"),
    "RBC2D_plain_reduce_overhead_fp16": _p("RBC2D", compile="reduce-overhead", amp="fp16"),
    "RBC2D_plain_compiled_half_spectral_fp16": _p("RBC2D", compile="default", amp="fp16", half=True),
    # neuraloperator beside ours, the eager profile, PIC with CARAML's operators
    "RBC2D_profile_eager": {"problem": "RBC2D", "profile": True},
    "RBC2D_neuralop_eager": _p("RBC2D", lib="neuralop"),
    "RBC2D_neuralop_compiled": _p("RBC2D", lib="neuralop", compile="default"),
    "RBC3D_neuralop_eager": _p("RBC3D", lib="neuralop"),
    "RBC3D_neuralop_compiled": _p("RBC3D", lib="neuralop", compile="default"),
    "PIC1D_caraml_eager": _c("PIC1D"),
    "PIC1D_caraml_compiled": _c("PIC1D", "compile=inductor"),
    # the plain loop at the new PIC points (caraml/plain), the same operators and data shapes
    "PIC1D_plain_eager": _p("PIC1D"),
    "PIC1D_plain_compiled": _p("PIC1D", compile="default"),
    "PIC2D_plain_matrix_eager": _p("PIC2D", nufft_backend="matrix"),
    "PIC2D_plain_matrix_compiled": _p("PIC2D", nufft_backend="matrix", compile="default"),
    # PIC1D's layout before (channels-first: [B, C, P], a forward and an inverse Vandermonde matrix)
    "PIC1D_caraml_channels_first_eager": _c("PIC1D", "dse_layout=channels-first"),
    "PIC1D_caraml_channels_first_compiled": _c("PIC1D", "dse_layout=channels-first", "compile=inductor"),
    "PIC1D_layout_check": {"problem": "PIC1D", "layout_check": True, "compiled": True},
    "PIC2D_caraml_eager": _c("PIC2D"),
    "PIC2D_caraml_compiled": _c("PIC2D", "compile=inductor"),
    "PIC2D_caraml_matrix_eager": _c("PIC2D", "nufft_backend=matrix"),
    "PIC2D_caraml_matrix_compiled": _c("PIC2D", "nufft_backend=matrix", "compile=inductor"),
    "PIC2D_caraml_grid2d_compiled": _c("PIC2D", "pic2d_operator=grid2d", "compile=inductor"),
    # nufft_backend=matrix (eager and compiled) against torchkbnufft in this process under TF32
    "PIC2D_nufft_check": {"problem": "PIC2D", "nufft_check": True, "compiled": True},
}
GROUPS = {  # in order of importance: the time budget cuts from the end
    "issue19": [
        "RBC2D_profile_eager", "RBC2D_plain_eager", "RBC2D_caraml_eager", "RBC2D_neuralop_eager",
        "RBC2D_plain_compiled", "RBC2D_caraml_compiled", "RBC2D_neuralop_compiled", "PIC2D_caraml_matrix_eager",
        "PIC2D_caraml_eager", "PIC2D_caraml_matrix_compiled", "PIC1D_caraml_eager", "PIC1D_caraml_compiled",
        "RBC3D_plain_eager", "RBC3D_neuralop_eager", "RBC3D_caraml_eager", "RBC3D_plain_compiled",
        "RBC3D_neuralop_compiled", "RBC3D_caraml_compiled", "PIC2D_caraml_compiled", "PIC2D_caraml_grid2d_compiled"],
    # the re-measurement after caraml's points moved to the plain loop's data and PIC2D's matrix backend came
    # first: caraml/plain on RBC2D, the profile, PIC2D torchkbnufft against matrix, PIC1D (about 6 minutes)
    "issue19-recheck": [
        "RBC2D_plain_eager", "RBC2D_caraml_eager", "RBC2D_plain_compiled", "RBC2D_caraml_compiled",
        "RBC2D_profile_eager", "PIC2D_caraml_matrix_eager", "PIC2D_caraml_eager", "PIC2D_caraml_matrix_compiled",
        "PIC2D_nufft_check", "PIC1D_caraml_eager", "PIC1D_caraml_compiled", "PIC2D_caraml_compiled"],
    # PIC throughput: the matrix backend's precision under TF32 (operator and model, eager and compiled,
    # against torchkbnufft), PIC2D matrix eager/compiled and torchkbnufft eager, PIC1D eager/compiled (~2 minutes)
    "issue23-pic": [
        "PIC2D_nufft_check", "PIC2D_caraml_matrix_eager", "PIC2D_caraml_matrix_compiled", "PIC2D_caraml_eager",
        "PIC1D_caraml_eager", "PIC1D_caraml_compiled", "PIC2D_plain_matrix_compiled", "PIC2D_plain_matrix_eager"],
    # PIC1D: dse_layout=channels-last (the default now) against channels-first (before), eager and
    # compiled through `caraml run` (about 2 minutes)
    "issue23-pic1d": [
        "PIC1D_caraml_compiled", "PIC1D_caraml_channels_first_compiled", "PIC1D_caraml_eager",
        "PIC1D_caraml_channels_first_eager", "PIC1D_layout_check", "PIC1D_plain_compiled", "PIC1D_plain_eager"]}
GROUP_BUDGETS = {"issue23-pic": 180, "issue23-pic1d": 150}  # seconds, where --budget is not given (else 420)
PIC1D_START = 1193.0  # PIC1D compiled samples/s on the H200 before the channels-last layout


# CARAML's data path (data=file through its DataLoaders) beside data on the device: `--only data` runs these
DATA_SAMPLES = {"RBC2D": 1000, "RBC3D": 200}  # in the file and in synthetic-host: 40 / 8 training batches of 20
CARAML_EPOCHS = ("epochs=5", "global_batch_size=20", "batch_size=0")


def _d(problem, data, *params) -> dict:
    """A data-path point: `caraml run fno` with CARAML's 5 epochs over data=synthetic|file|synthetic-host."""
    extra = {"file": ["data=file", "data_path={data_dir}"],
             "synthetic-host": ["data=synthetic-host", f"samples={DATA_SAMPLES[problem]}"]}.get(
        data, ["data=synthetic"])
    return {"problem": problem, "caraml": [*CARAML_EPOCHS, *extra, *params], "data_path": data}


DATA_POINTS = {
    "data_RBC2D_synthetic": _d("RBC2D", "synthetic"),
    "data_RBC2D_file": _d("RBC2D", "file"),
    "data_RBC2D_host": _d("RBC2D", "synthetic-host"),
    "data_RBC3D_synthetic": _d("RBC3D", "synthetic"),
    "data_RBC3D_file": _d("RBC3D", "file"),
    # CARAML 2025.02 as its suite runs it: the whole train epoch compiled (mode default), data from the file
    "data_RBC2D_file_caraml_2025": _d("RBC2D", "file", "compile=inductor", "compile_mode=default",
                                      "compile_scope=epoch", "caraml_version=2025.02"),
}
POINTS.update(DATA_POINTS)


def data_point(spec: dict, out: Path, timeout: float) -> dict:
    """A data-path point: CARAML's data file written first (once, under OUT/fno-data), then `caraml run fno`."""
    problem = spec["problem"]
    folder = out / "fno-data" / problem
    if spec["data_path"] == "file" and not any(folder.glob("*.h5")):
        cmd = [sys.executable, "-m", "caraml", "data", "fno-synthetic", problem, "--out", str(folder)]
        cmd += ["--smoke", "--samples", "20"] if RUN["smoke"] else ["--samples", str(DATA_SAMPLES[problem])]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
        made = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        if made.returncode:
            return {"status": "failed", "error": f"caraml data fno-synthetic: {made.stderr[-1000:]}"}
    params = [p.replace("{data_dir}", str(folder)) for p in spec["caraml"]]
    if RUN["smoke"]:  # the smoke preset's batch of 4, and few samples
        params = [p for p in params if not p.startswith(("global_batch_size=", "batch_size=", "samples="))]
        params += ["samples=20"] if spec["data_path"] == "synthetic-host" else []
    row = caraml({**spec, "caraml": params}, out / "results", timeout)
    row["data_file"] = str(folder) if spec["data_path"] == "file" else None
    return row


def data_summary(by: dict) -> dict:
    """Per data-path point: steady state (ours) beside CARAML's Timesteps/s; file and host over device data."""
    out = {}
    for name in DATA_POINTS:
        row = by.get(name) or {}
        if row.get("status") != "ok":
            continue
        twin = by.get(f"data_{POINTS[name]['problem']}_synthetic") or {}
        out[name] = {"steady_samples_per_s": row.get("samples_per_s"),
                     "caraml_timesteps_per_s": row.get("caraml_timesteps_per_s"),
                     "caraml_train_timesteps_per_s": row.get("train_timesteps_per_s"),
                     "caraml_over_steady": (row["caraml_timesteps_per_s"] / row["samples_per_s"]
                                            if row.get("caraml_timesteps_per_s") and row.get("samples_per_s")
                                            else None),
                     "steady_over_device_data": (row["samples_per_s"] / twin["samples_per_s"]
                                                 if twin.get("samples_per_s") and row.get("samples_per_s") else None)}
    return out


# the plain loop ------------------------------------------------------------------------------------------
def neuralop_fno(pb, size: dict):
    """neuraloperator's FNO as close to CARAML's as its options go: one linear lift, linear 1x1 skips, no
    positional embedding, no channel MLP, projection 4 x width; the same kept modes (its n_modes counts all kept
    frequencies of a dim, the last before the rfft halving: 2 m - 2 keeps m)."""
    from neuralop.models import FNO

    modes = size["modes"]
    n_modes = tuple(2 * m for m in modes[:-1]) + (2 * (modes[-1] - 1),)
    return FNO(n_modes=n_modes, in_channels=pb.in_channels, out_channels=pb.out_channels,
               hidden_channels=size["width"], n_layers=pb.layers, lifting_channel_ratio=0, projection_channel_ratio=4,
               positional_embedding=None, use_channel_mlp=False, fno_skip="linear")


def neuralop_missing() -> str | None:
    """Why neuraloperator cannot be used here, or None."""
    try:
        import neuralop  # noqa: F401
        from neuralop.models import FNO  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means: skip its points
        return f"{type(exc).__name__}: {exc}"
    return None


def _plain_setup(spec: dict):
    """(run(i): one training step, sync(), samples per step, model) for a plain-loop point."""
    import torch

    from caraml.workloads.fno.bench import loss_fn
    from caraml.workloads.fno.model import build_model
    from caraml.workloads.fno.problems import PROBLEMS

    torch._dynamo.reset()
    torch.set_float32_matmul_precision("high")
    torch.manual_seed(0)
    pb = PROBLEMS[spec["problem"]]
    device = torch.device(RUN["device"])
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.empty_cache()
    size = SMOKE[pb.name] if RUN["smoke"] else {"width": pb.width, "modes": pb.modes, "grid": pb.grid,
                                                "particles": pb.particles, "batch": pb.batch_size}
    spatial = size["grid"] if pb.kind == "grid" else (size["particles"],)
    if spec.get("lib") == "neuralop":
        model = neuralop_fno(pb, size).to(device)
    else:
        model = build_model(pb, size["width"], size["modes"], pb.layers, complex_weights=spec["complex"],
                            half_spectral=spec.get("half", False), particles=spatial[-1] if pb.particles else 0,
                            nufft_backend=spec["nufft_backend"], dse_layout=spec["dse_layout"]).to(device)
        for module in model.modules():  # the pointwise products as 1x1 convolutions (CARAML's Conv1d)
            if spec.get("conv1x1") and hasattr(module, "as_conv"):
                module.as_conv = True
    optimizer = torch.optim.Adam(model.parameters(), lr=pb.lr, weight_decay=1e-5)
    loss_of = loss_fn(pb.loss)
    batches = [(torch.randn(size["batch"], pb.in_channels, *spatial, device=device),
                torch.randn(size["batch"], pb.out_channels, *spatial, device=device)) for _ in range(2)]
    for x, _ in batches if pb.position_channels else ():  # PIC: positions in [0, 2 pi), as caraml's are made
        x[:, :pb.position_channels] = 2 * math.pi * torch.rand_like(x[:, :pb.position_channels])
    amp = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(spec["amp"])
    scaler = torch.amp.GradScaler(device.type) if spec["amp"] == "fp16" else None
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    mode = spec["compile"]
    options = {} if mode in (None, "default") else {"mode": mode}
    forward = model
    if mode and spec["scope"] == "pointwise":
        model.exclude_spectral_from_compile()
    if mode and spec["scope"] in ("model", "pointwise"):
        forward = torch.compile(model, **options)

    def train_step(x, y):
        with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
            loss = loss_of(forward(x), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step = torch.compile(train_step, **options) if mode and spec["scope"] == "step" else train_step

    def run(i):
        if mode:
            torch.compiler.cudagraph_mark_step_begin()
        step(*batches[i % 2])

    return run, sync, size["batch"], model


def _timed(run, sync, batch: int, warmup: int, steps: int) -> dict:
    start = time.perf_counter()
    run(0)
    sync()
    first = time.perf_counter() - start
    for i in range(1, warmup):
        run(i)
    sync()
    warm = time.perf_counter() - start
    start = time.perf_counter()
    for i in range(steps):
        run(i)
    sync()
    wall = time.perf_counter() - start
    return {"status": "ok", "samples_per_s": batch * steps / wall, "step_ms": wall / steps * 1e3,
            "first_step_s": first, "warmup_s": warm, "steps": steps}


def plain(spec: dict) -> dict:
    from caraml.workloads.fno.model import count_parameters

    run, sync, batch, model = _plain_setup(spec)
    warmup, steps = STEPS[spec["problem"]]
    return {**_timed(run, sync, batch, warmup, steps), "params": count_parameters(model)}


# the eager profile -------------------------------------------------------------------------------------
def _kernels(run, sync, steps: int) -> dict:
    """torch.profiler over `steps` steps: CUDA kernels (and copies/memsets) per step and their GPU time per
    step, the busiest kernels by count; on a CPU (--smoke) the top-level aten ops per step instead."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = RUN["device"] == "cuda"
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


def profile_point(spec: dict) -> dict:
    """RBC2D eager: the plain loop (real or complex weights, pointwise products as matmuls or 1x1 convolutions),
    neuraloperator's FNO, and FNOBench.step() built in this process (the benchmark's step without the harness);
    each timed, then profiled."""
    from caraml.runner import RunSpec, build_bench

    problem = spec["problem"]
    warmup, steps = STEPS[problem]
    variants = {"plain_real": dict(POINTS[f"{problem}_plain_eager"]),
                "plain_complex": {**POINTS[f"{problem}_plain_eager"], "complex": True},
                "plain_conv1x1": {**POINTS[f"{problem}_plain_eager"], "conv1x1": True},
                "plain_complex_conv1x1": {**POINTS[f"{problem}_plain_eager"], "complex": True, "conv1x1": True}}
    if not neuralop_missing():
        variants["neuralop"] = {**POINTS[f"{problem}_plain_eager"], "lib": "neuralop"}
    out = {"status": "ok", "variants": {}}
    for name, vspec in [*variants.items(), ("caraml_bench_step", None)]:
        if vspec is None:
            preset = f"smoke-{problem}" if RUN["smoke"] else problem
            bench = build_bench(RunSpec("fno", {"epochs": 0, "data": "synthetic"}, preset=preset),
                                device=RUN["device"])
            sync = bench._sync
            run, batch = (lambda i, bench=bench: bench.step()), bench.data.batch
        else:
            run, sync, batch, _ = _plain_setup(vspec)
        row = _timed(run, sync, batch, warmup, steps)
        row["profile"] = _kernels(run, sync, RUN["profile_steps"])
        out["variants"][name] = row
        if vspec is None:
            bench.close()
    return out


# PIC2D: the matrix backend against torchkbnufft ---------------------------------------------------------
NUFFT_CHECK_SMOKE = {"width": 8, "modes": (4, 4), "particles": 512, "batch": 2}
NUFFT_TOLERANCE = 1e-4  # the matrix backend's results equal torchkbnufft's within this, relative


def _rel_diffs(a, b) -> tuple[float, float]:
    """|a - b| / |b| (norms: held to 1e-4) and max |a - b| / max |b| (elementwise: reported). Under TF32 the model's
    other products round inputs that differ in the last float32 bit a TF32 step apart now and then, whatever the
    backend, which moves single elements by ~1e-4 but not the norms."""
    a, b = a.double(), b.double()
    return (float((a - b).norm() / b.norm().clamp_min(1e-300)),
            float((a - b).abs().max() / b.abs().max().clamp_min(1e-300)))


def _operator_results(size: dict, backend: str, device) -> dict:
    """One spectral conv through CARAML's operator alone: forward to the kept kX, a fixed per-mode factor, inverse;
    backward from a fixed cotangent to the operator's input."""
    import torch

    from caraml.workloads.fno.model import ParticleIndexNUFFT

    op = ParticleIndexNUFFT(size["modes"], size["particles"], backend).to(device)
    gen = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(size["batch"], size["width"], size["particles"], generator=gen).to(device).requires_grad_(True)
    factor = torch.randn(size["batch"], size["width"], size["modes"][0], 2, generator=gen).to(device)
    spec = op(x, None, False)
    back = op.inverse(spec * factor, None, (size["particles"],))
    (back * torch.randn(back.shape, generator=gen).to(device)).sum().backward()
    return {"spectrum": spec.detach(), "inverse": back.detach(), "input_grad": x.grad}


def _model_results(pb, size: dict, backend: str, compiled: bool, x, y, input_noise: float = 0.0,
                   dse_layout: str = "channels-first") -> dict:
    """The FNO (CARAML's initial weights from seed 0) on one batch: output, L1 loss gradients w.r.t. the input and
    every weight; input_noise: the input times 1 + input_noise * N(0, 1)."""
    import torch

    from caraml.workloads.fno.bench import loss_fn
    from caraml.workloads.fno.model import build_model

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = build_model(pb, size["width"], size["modes"], pb.layers, particles=size["particles"],
                        nufft_backend=backend, dse_layout=dse_layout).to(x.device)
    forward = torch.compile(model) if compiled else model
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(9)).to(x.device)
    x = (x * (1 + input_noise * noise)).requires_grad_(True)
    pred = forward(x)
    loss_fn(pb.loss)(pred, y).backward()
    return {"output": pred.detach(), "input_grad": x.grad,
            **{f"grad {name}": q.grad for name, q in model.named_parameters()}}


def _compare(results: dict, reference: dict) -> dict:
    """Per quantity (the weights' gradients: the worst parameter) the norm-wise and the elementwise relative
    difference; pass when every norm-wise one is below 1e-4."""
    out = {}
    for which, index in (("rel_diff", 0), ("rel_diff_elementwise", 1)):
        diffs = {name: _rel_diffs(t, reference[name])[index] for name, t in results.items()}
        out[which] = {k: v for k, v in diffs.items() if not k.startswith("grad ")}
        weights = [v for k, v in diffs.items() if k.startswith("grad ")]
        if weights:
            out[which]["weight_grads_max"] = max(weights)
    worst = max(out["rel_diff"].values())
    return {**out, "max_rel_diff": worst, "pass": worst < NUFFT_TOLERANCE}


def nufft_check(spec: dict) -> dict:
    """CARAML's PIC2D operator with nufft_backend=matrix against torchkbnufft under CARAML's float32 matmul precision
    'high' (TF32 on an NVIDIA GPU; none on a CPU): the operator alone (spectrum, inverse, gradient w.r.t. its input)
    and the model on one batch from the same initial weights (output, gradients w.r.t. the input and the weights),
    matrix eager and compiled (spec 'compiled') against torchkbnufft eager. Each quantity's relative difference
    (norm-wise; weights: the worst parameter; the elementwise one beside it), pass/fail at 1e-4. Beside them the
    floor that TF32 sets for the model: torchkbnufft against itself with the input moved by 2^-24 (relative); a
    model check is within it when no further from torchkbnufft than max(1e-4, floor)."""
    import torch

    from caraml.workloads.fno.problems import PROBLEMS

    pb = PROBLEMS[spec["problem"]]
    size = NUFFT_CHECK_SMOKE if RUN["smoke"] else {"width": pb.width, "modes": pb.modes, "particles": pb.particles,
                                                   "batch": pb.batch_size}
    device = torch.device(RUN["device"])
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")  # CARAML's: TF32 matmuls wherever the device has them
    try:
        reference = _operator_results(size, "torchkbnufft", device)
        checks = {"operator": _compare(_operator_results(size, "matrix", device), reference)}
        gen = torch.Generator(device="cpu").manual_seed(0)
        p = size["particles"]
        x = torch.randn(size["batch"], pb.in_channels, p, generator=gen)
        x[:, :pb.position_channels] = 2 * torch.pi * torch.rand(size["batch"], pb.position_channels, p, generator=gen)
        y = torch.randn(size["batch"], pb.out_channels, p, generator=gen)
        x, y = x.to(device), y.to(device)
        reference = _model_results(pb, size, "torchkbnufft", False, x, y)
        checks["model_eager"] = _compare(_model_results(pb, size, "matrix", False, x, y), reference)
        if spec.get("compiled"):
            checks["model_compiled"] = _compare(_model_results(pb, size, "matrix", True, x, y), reference)
        # what TF32 alone moves: torchkbnufft against itself, the input moved by float32 rounding
        floor = _compare(_model_results(pb, size, "torchkbnufft", False, x, y, input_noise=2.0 ** -24), reference)
    finally:
        torch.set_float32_matmul_precision(previous)
        torch._dynamo.reset()
    # the model's other TF32 products move its weight gradients by about 1e-4 for a float32-rounding change of the
    # input (CPU emulation: 1.2e-4): a model-level difference no larger than that is all TF32's, none the backend's
    bound = max(NUFFT_TOLERANCE, floor["max_rel_diff"])
    for name, check in checks.items():
        check["within_tf32_floor"] = check["pass"] if name == "operator" else check["max_rel_diff"] <= bound
    tf32 = device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8  # what 'high' means there
    return {"status": "ok", "matmul_precision": "high", "tf32": tf32, "tolerance": NUFFT_TOLERANCE,
            "size": {k: list(v) if isinstance(v, tuple) else v for k, v in size.items()}, "checks": checks,
            "tf32_floor": {k: floor[k] for k in ("rel_diff", "rel_diff_elementwise", "max_rel_diff")},
            "max_rel_diff": max(c["max_rel_diff"] for c in checks.values()),
            "equal_within_1e-4": all(c["pass"] for c in checks.values()),
            "within_tf32_floor": all(c["within_tf32_floor"] for c in checks.values())}


# PIC1D: the channels-last layout against channels-first ----------------------------------------------------
LAYOUT_CHECK_SMOKE = {"width": 8, "modes": (4,), "particles": 512, "batch": 2}


def layout_check(spec: dict) -> dict:
    """PIC1D's model in dse_layout=channels-last against channels-first on one batch from the same weights, eager,
    under matmul precision highest and high (TF32 on GPUs, CARAML's), and channels-last compiled under high, beside
    the floor TF32 sets (channels-first against itself, the input moved by float32 rounding); pass/fail at 1e-4
    relative (norm-wise)."""
    import torch

    from caraml.workloads.fno.problems import PROBLEMS

    pb, device = PROBLEMS["PIC1D"], torch.device(RUN["device"])
    size = LAYOUT_CHECK_SMOKE if RUN["smoke"] else {"width": pb.width, "modes": pb.modes, "particles": pb.particles,
                                                    "batch": pb.batch_size}
    gen = torch.Generator(device="cpu").manual_seed(5)
    x = torch.randn(size["batch"], pb.in_channels, size["particles"], generator=gen)
    x[:, 0] = 2 * math.pi * torch.rand(size["batch"], size["particles"], generator=gen)
    y = torch.randn(size["batch"], pb.out_channels, size["particles"], generator=gen)
    x, y = x.to(device), y.to(device)
    before, checks, refs = torch.get_float32_matmul_precision(), {}, {}
    try:
        for precision in ("highest", "high"):
            torch.set_float32_matmul_precision(precision)
            refs[precision] = ref = _model_results(pb, size, "torchkbnufft", False, x, y, dse_layout="channels-first")
            now = _model_results(pb, size, "torchkbnufft", False, x, y, dse_layout="channels-last")
            checks[precision] = _compare(now, ref)
            if precision == "high":  # TF32's own error, each layout against channels-first under highest
                tf32_error = {"channels-first": _compare(ref, refs["highest"]),
                              "channels-last": _compare(now, refs["highest"])}
        if spec.get("compiled"):  # channels-last compiled (the fused one-channel head too) against eager, high
            checks["high, compiled"] = _compare(_model_results(pb, size, "torchkbnufft", True, x, y,
                                                               dse_layout="channels-last"), ref)
        floor = _compare(_model_results(pb, size, "torchkbnufft", False, x, y, input_noise=2.0 ** -24,
                                        dse_layout="channels-first"), ref)
    finally:
        torch.set_float32_matmul_precision(before)
    tf32 = device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8
    # under TF32 the layouts round different operands (V and c/P Y, against c/P V): what they may differ by is
    # TF32's own error, measured here as channels-first's under high against highest (floor: the input moved)
    bound = max(NUFFT_TOLERANCE, floor["max_rel_diff"], tf32_error["channels-first"]["max_rel_diff"])
    return {"status": "ok", "tf32": tf32, "tolerance": NUFFT_TOLERANCE,
            "size": {k: list(v) if isinstance(v, tuple) else v for k, v in size.items()},
            "layout_checks": checks, "floor_of": "channels-first",
            "tf32_floor": {k: floor[k] for k in ("rel_diff", "max_rel_diff")},
            "tf32_error": {k: {"rel_diff": c["rel_diff"], "max_rel_diff": c["max_rel_diff"]}
                           for k, c in tf32_error.items()},
            "equal_within_1e-4": {k: c["pass"] for k, c in checks.items()},
            "high_within_tf32_floor": all(c["max_rel_diff"] <= bound for k, c in checks.items()
                                          if k.startswith("high"))}


# caraml ------------------------------------------------------------------------------------------------
def caraml(spec: dict, results: Path, timeout: float) -> dict:
    problem = spec["problem"]
    warmup, steps = STEPS[problem]
    params = [f"device={RUN['device']}", "epochs=0", f"warmup_steps={warmup}", f"measure_steps={steps}"]
    params = [p for p in params if not any(q.split("=")[0] == p.split("=")[0] for q in spec["caraml"])]
    preset = f"smoke-{problem}" if RUN["smoke"] else problem
    cmd = [sys.executable, "-m", "caraml", "run", "fno", "--preset", preset, *params, *spec["caraml"],
           "--results", str(results), "--json"]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
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
            "peak_memory_gb": (m.get("peak_memory_bytes") or 0) / 1e9, "energy_wh": energy.get("total_wh"),
            "timesteps_per_wh": energy.get("units_per_wh"), "avg_power_w": energy.get("avg_power_w"),
            "data": m.get("data_source"), "caraml_timesteps": m.get("timesteps"),
            "caraml_mean_compile_time_s": m.get("mean_compile_time_s"), "caraml_tflops": m.get("caraml_tflops"),
            "command": "caraml " + " ".join(cmd[3:-3])}


# summary -----------------------------------------------------------------------------------------------
def summary(by: dict) -> dict:
    def rate(name):
        row = by.get(name) or {}
        return row.get("samples_per_s") if row.get("status") == "ok" else None

    out = {"speedup_vs_eager": {}, "caraml_over_plain": {}, "goals": {}, "data_paths": data_summary(by)}
    for name, _row in by.items():
        spec = POINTS[name]
        if name in DATA_POINTS or spec.get("nufft_check") or spec.get("layout_check"):
            continue
        if "caraml" in spec:
            twin = name.replace("_caraml_", "_plain_").replace("_power_off", "").replace("_epochs", "_compiled")
            if rate(name) and rate(twin):
                out["caraml_over_plain"][name] = rate(name) / rate(twin)
        elif spec.get("compile"):
            eager = f"{spec['problem']}_{'neuralop' if spec['lib'] == 'neuralop' else 'plain'}_eager" + (
                "_complex" if spec["complex"] else "") + (f"_{spec['amp']}" if spec["amp"] else "")
            if name.replace("_compiled", "_eager") in POINTS:  # its twin by name (e.g. PIC2D_plain_matrix_*)
                eager = name.replace("_compiled", "_eager")
            if rate(name) and rate(eager):
                out["speedup_vs_eager"][name] = rate(name) / rate(eager)
    for name in by:  # neuraloperator's FNO against ours, the same plain loop
        ours = name.replace("_neuralop_", "_plain_")
        if "_neuralop_" in name and rate(name) and rate(ours):
            out.setdefault("ours_over_neuralop", {})[ours] = rate(ours) / rate(name)
    real = {k: v for k, v in out["speedup_vs_eager"].items() if "complex" not in k and "neuralop" not in k}
    out["goals"]["compiled_never_slower_than_eager"] = (min(real.values()) >= 1.0) if real else None
    rbc2d = out["speedup_vs_eager"].get("RBC2D_plain_compiled")
    out["goals"]["rbc2d_compiled_default_at_least_1.3x"] = rbc2d >= 1.3 if rbc2d else None
    best = max((v for k, v in real.items() if k.startswith("RBC2D") and "fp16" not in k), default=None)
    out["goals"]["rbc2d_best_compiled_fp32_speedup"] = best
    ratios = [v for k, v in out["caraml_over_plain"].items() if "power_off" not in k]
    out["goals"]["caraml_at_least_0.98_plain"] = min(ratios) >= 0.98 if ratios else None
    # PIC2D's matrix backend over torchkbnufft (>= 2x, equal within 1e-4)
    for scope in ("eager", "compiled"):
        kb, mx = rate(f"PIC2D_caraml_{scope}"), rate(f"PIC2D_caraml_matrix_{scope}")
        if kb and mx:
            out.setdefault("pic2d_matrix_over_torchkbnufft", {})[scope] = mx / kb
    kb, mx = rate("PIC2D_caraml_eager"), rate("PIC2D_caraml_matrix_compiled")
    if kb and mx:  # torchkbnufft is measured eager only (CARAML runs it so; compiling it breaks the graph)
        out.setdefault("pic2d_matrix_over_torchkbnufft", {})["compiled_over_torchkbnufft_eager"] = mx / kb
    ratios = out.get("pic2d_matrix_over_torchkbnufft")
    if ratios:
        out["goals"]["pic2d_matrix_at_least_2x_torchkbnufft"] = min(ratios.values()) >= 2
    # PIC1D channels-last (now) over channels-first (before); the goal: compiled >= 2 x 1,193 samples/s
    for scope in ("eager", "compiled"):
        now, before = rate(f"PIC1D_caraml_{scope}"), rate(f"PIC1D_caraml_channels_first_{scope}")
        if now and before:
            out.setdefault("pic1d_channels_last_over_first", {})[scope] = now / before
    layouts = by.get("PIC1D_layout_check") or {}
    if layouts.get("status") == "ok":
        out["goals"]["pic1d_layouts_equal_within_1e-4"] = layouts["equal_within_1e-4"]
        out["goals"]["pic1d_layouts_within_tf32_floor"] = layouts["high_within_tf32_floor"]
    if rate("PIC1D_caraml_compiled"):
        out["goals"]["pic1d_compiled_at_least_2x_issue_start"] = rate("PIC1D_caraml_compiled") >= 2 * PIC1D_START
    check = by.get("PIC2D_nufft_check") or {}
    if check.get("status") == "ok":
        out["goals"]["pic2d_matrix_equal_within_1e-4"] = check["equal_within_1e-4"]
        out["goals"]["pic2d_matrix_within_tf32_floor"] = check["within_tf32_floor"]
    return out


class OutOfTime(BaseException):  # not an Exception: compilers that wrap errors must not swallow it
    pass


def _out_of_time(signum, frame):
    raise OutOfTime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    parser.add_argument("--only", help="comma list of point names")
    parser.add_argument("--group", choices=sorted(GROUPS), help="a named list of points: " + "; ".join(
        f"{k}: {', '.join(v)}" for k, v in GROUPS.items()))
    parser.add_argument("--budget", type=float, default=os.environ.get("FNO_BENCH_BUDGET_S"),
                        help="seconds to spend; points not started by then are skipped (default: "
                             f"$FNO_BENCH_BUDGET_S, else {GROUP_BUDGETS} by group, else 420)")
    parser.add_argument("--smoke", action="store_true",
                        help="check the script on the CPU: tiny shapes, 2+3 steps (no measurement)")
    args = parser.parse_args()
    if args.smoke:
        RUN.update(device="cpu", smoke=True, profile_steps=2)
        STEPS.update({k: (2, 3) for k in STEPS})
    names = args.only.split(",") if args.only else GROUPS[args.group] if args.group else list(POINTS)
    if args.budget is None:
        args.budget = GROUP_BUDGETS.get(args.group, 420.0)
    if "data" in names:  # --only data: every data-path point
        names = [n for n in names if n != "data"] + list(DATA_POINTS)
    unknown = [n for n in names if n not in POINTS]
    if unknown:
        sys.exit(f"fno_bench: unknown point(s) {', '.join(unknown)}; choose from: {', '.join(POINTS)}")
    import torch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0],
           "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    start = time.monotonic()
    rows = []
    missing = neuralop_missing()
    if missing and any(POINTS[n].get("lib") == "neuralop" or POINTS[n].get("profile") for n in names):
        print(f"fno_bench: neuraloperator does not import ({missing[:160]}): its points are skipped and the profile "
              "has no neuraloperator variant (pip install neuraloperator==2.0.0 tensorly tensorly-torch)",
              file=sys.stderr, flush=True)

    def save():
        by = {r["name"]: r for r in rows}
        (out / "fno_bench.json").write_text(json.dumps(
            {"date": time.strftime("%Y-%m-%d"), "env": env, "steps": STEPS, "rows": rows, "summary": summary(by)},
            indent=1))

    for name in names:
        left = args.budget - (time.monotonic() - start)
        spec = POINTS[name]
        if left < 45:
            rows.append({"name": name, "status": "skipped (time budget)"})
            continue
        if missing and spec.get("lib") == "neuralop":
            rows.append({"name": name, **spec, "status": "skipped (no neuraloperator)"})
            continue
        print(f"fno_bench: {name} ({left:.0f} s left)", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        signal.signal(signal.SIGALRM, _out_of_time)
        signal.alarm(max(1, int(left)))  # a plain point that compiles past the budget is stopped too
        try:
            row = (data_point(spec, out, timeout=left) if name in DATA_POINTS else
                   caraml(spec, out / "results", timeout=left) if "caraml" in spec else
                   profile_point(spec) if spec.get("profile") else
                   nufft_check(spec) if spec.get("nufft_check") else
                   layout_check(spec) if spec.get("layout_check") else plain(spec))
        except OutOfTime:
            row = {"status": "timeout", "error": f"stopped at the time budget after {time.monotonic() - t0:.0f} s"}
            torch._dynamo.reset()
        except Exception as exc:  # noqa: BLE001 - a point that fails is a row that says why
            row = {"status": "failed", "error": f"{type(exc).__name__}: {str(exc)[:1500]}",
                   "traceback": traceback.format_exc()[-3000:]}
            torch._dynamo.reset()
        finally:
            signal.alarm(0)
        rows.append({"name": name, **{k: v for k, v in spec.items()}, **row, "wall_s": time.monotonic() - t0})
        save()
    save()
    summ = summary({r["name"]: r for r in rows})
    def f(v, fmt):
        return format(v, fmt) if isinstance(v, (int, float)) else "-"

    print(f"{'point':<40} {'status':<8} {'samples/s':>10} {'step ms':>8} {'x eager':>8} {'caraml/plain':>12} "
          f"{'1st step s':>10} {'wall s':>7} {'params':>10}")
    for r in rows:
        print(f"{r['name']:<40} {str(r['status'])[:8]:<8} {f(r.get('samples_per_s'), '10.1f')} "
              f"{f(r.get('step_ms'), '8.3f')} {f(summ['speedup_vs_eager'].get(r['name']), '8.3f')} "
              f"{f(summ['caraml_over_plain'].get(r['name']), '12.3f')} {f(r.get('first_step_s'), '10.1f')} "
              f"{f(r.get('wall_s'), '7.0f')} {f(r.get('params'), '10d')}")
        if r.get("error") and r["status"] != "ok":
            print("   ", str(r["error"])[-400:].replace("\n", " "))
        for vname, v in (r.get("variants") or {}).items():  # a profile point
            prof = v["profile"]
            print(f"    {vname:<20} {f(v.get('samples_per_s'), '10.1f')} samples/s {f(v.get('step_ms'), '8.3f')} "
                  f"ms/step {f(prof['per_step'], '8.1f')} {prof['what']}/step, GPU "
                  f"{f(prof['gpu_ms_per_step'], '.3f')} ms/step")
        for cname, c in (r.get("checks") or {}).items():  # the PIC2D backend check
            diffs = ", ".join(f"{k} {v:.1e}" for k, v in c["rel_diff"].items())
            print(f"    matrix vs torchkbnufft, {cname:<15} {'pass' if c['pass'] else 'FAIL'} (< {r['tolerance']:g}, "
                  f"matmul precision {r['matmul_precision']}, TF32 {'on' if r['tf32'] else 'absent'}; within the "
                  f"TF32 floor: {'yes' if c['within_tf32_floor'] else 'NO'}): {diffs}")
        for cname, c in (r.get("layout_checks") or {}).items():  # PIC1D's layouts
            diffs = ", ".join(f"{k} {v:.1e}" for k, v in c["rel_diff"].items())
            tf32 = "on" if r["tf32"] and cname.startswith("high") else "off"
            verdict = "pass" if c["pass"] else "FAIL"
            print(f"    channels-last vs channels-first, matmul precision {cname:<14} {verdict} "
                  f"(< {r['tolerance']:g}; TF32 {tf32}): {diffs}")
        for lname, c in (r.get("tf32_error") or {}).items():
            diffs = ", ".join(f"{k} {v:.1e}" for k, v in c["rel_diff"].items())
            print(f"    TF32's own error: {lname}, precision high against channels-first highest: {diffs}")
        if r.get("tf32_floor"):
            diffs = ", ".join(f"{k} {v:.1e}" for k, v in r["tf32_floor"]["rel_diff"].items())
            print(f"    floor: {r.get('floor_of', 'torchkbnufft')}, the input moved by 2^-24: {diffs}")
    if summ.get("pic2d_matrix_over_torchkbnufft"):
        print("PIC2D matrix / torchkbnufft (caraml run):", json.dumps(
            {k: round(v, 3) for k, v in summ["pic2d_matrix_over_torchkbnufft"].items()}))
    if summ.get("pic1d_channels_last_over_first"):
        print("PIC1D channels-last / channels-first (caraml run):", json.dumps(
            {k: round(v, 3) for k, v in summ["pic1d_channels_last_over_first"].items()}))
    if summ.get("ours_over_neuralop"):
        print("ours / neuraloperator (samples/s):", json.dumps({k: round(v, 3) for k, v in
                                                               summ["ours_over_neuralop"].items()}))
    print("goals:", json.dumps(summ["goals"]))
    for name, row in summ["data_paths"].items():
        print(f"{name:<40} steady {row['steady_samples_per_s'] or 0:10.1f}/s  CARAML Timesteps/s "
              f"{row['caraml_timesteps_per_s'] or 0:10.1f}  TrainTimesteps/s "
              f"{row['caraml_train_timesteps_per_s'] or 0:10.1f}")
    print(f"fno_bench: wrote {out / 'fno_bench.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
