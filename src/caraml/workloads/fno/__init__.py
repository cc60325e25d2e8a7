"""Fourier Neural Operator training and inference on CARAML's four problems (its operator benchmark):
PIC1D and PIC2D (electrostatic particle-in-cell plasma: 100,000 particles per sample, through a
direct spectral evaluation and a Kaiser-Bessel NUFFT), RBC2D and RBC3D (Rayleigh-Benard convection
on 256x64 and 64x64x32 grids). Throughput in timesteps/s: one sample is one timestep.

Two throughput conventions, both in the record:
- `throughput` (ours, the harness's): steady-state samples/s over the measured window of `step()`s.
- `caraml_timesteps_per_s` and `train_throughput` (CARAML's Timesteps/s and TrainTimesteps/s): an epoch
  runner over the train/validation split, n_epochs x (train + validation samples) / the summed
  train + validation time, the first epoch left out (in CARAML it holds the compilation; here the harness's
  warm-up has compiled before); TrainTimesteps/s over training only.

CARAML's epochs run after the steady-state window, as the harness's extra phase `caraml-epochs` (a power
phase of its own, stoppable at every step); until this version they ran while the benchmark was built, before
the window. The figures keep their meaning.

Declaring the workload imports no torch: the parameters (here), their typed config (config.py), the problems
(problems.py) and `caraml data fno-synthetic` (cli.py). The model (model.py), the data files (files.py), the
FLOP formulas (flops.py) and the benchmark (bench.py) are loaded by `build`.
"""

from __future__ import annotations

from typing import Any

from caraml.errors import BadInput
from caraml.kit import torch_features as tf
from caraml.params import Param
from caraml.workloads import Col, Workload, register
from caraml.workloads.fno.config import FNOConfig
from caraml.workloads.fno.problems import NAMES, PROBLEMS, parse_shape, shape_text

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def _check_shape(text: str) -> str | None:
    if text == "auto":
        return None
    try:
        parse_shape(text, "value")
    except ValueError as exc:
        if "every size" in str(exc):
            return "has a size below 1: every size must be a whole number >= 1 (e.g. 12x12), or auto"
        return "is not 'auto' or whole numbers >= 1 joined by x (e.g. 12x12)"
    return None


PARAMS = [
    Param("problem", str, "RBC2D", "PIC1D, PIC2D (particle-in-cell plasma), RBC2D, RBC3D (Rayleigh-Benard convection)",
          choices=NAMES, headline=True),
    Param("mode", str, "train", "train (forward, backward, Adam) or eval (inference, no gradients)",
          choices=("train", "eval"), headline=True),
    Param("batch_size", int, 0, "samples (timesteps) per device per step; 0: the problem's (CARAML's) batch size",
          minimum=0, headline=True),
    Param("width", int, 0, "channels of the Fourier layers; 0: the problem's width", minimum=0),
    Param("modes", str, "auto", "Fourier modes kept per dim, e.g. 12x12 or 12x12x6; auto: the problem's",
          check=_check_shape),
    Param("layers", int, 0, "Fourier layers; 0: the problem's", minimum=0),
    Param("grid", str, "auto", "RBC grid of synthetic data, e.g. 256x64; auto: the problem's (data=file: the file's)",
          check=_check_shape),
    Param("particles", int, 0, "PIC particles per sample of synthetic data; 0: the problem's 100000", minimum=0),
    Param("data", str, "synthetic", "synthetic (random tensors of the problem's shapes, made on the device) or "
          "file (CARAML's HDF5 data set; make one with `caraml data fno-synthetic`)", choices=("synthetic", "file"),
          headline=True),
    Param("data_path", str, "", "data=file: the HDF5 file or its folder; empty: $CARAML_DATA/<CARAML's file name>"),
    Param("samples", int, 0, "data=synthetic: samples made per device (0: 5 batches, 4 train + 1 validation); "
          "data=file: the first this many samples of the file (0: all)", minimum=0),
    Param("epochs", int, 5, "mode=train: epochs of CARAML's epoch runner (Timesteps/s, first epoch left out), run "
          "after the steady-state measurement; 0: none", minimum=0),
    Param("precision", str, "fp32", "fp32 (matmuls as matmul_precision says), fp16 (autocast + GradScaler, CARAML's "
          "use_amp), bf16 (autocast); formerly amp=off|fp16|bf16", choices=("fp32", "fp16", "bf16"), headline=True,
          aliases=("amp",), value_aliases=(("off", "fp32"),)),
    Param("complex_mixed_precision", bool, False, "FFTs and spectral products in fp16 (CARAML's "
          "ComplexMixedPrecision; CUDA, power-of-two FFT sizes)"),
    Param("complex_weights", bool, False, "keep spectral weights as torch.cfloat with complex einsums (the classic "
          "implementation, for comparison); off: real weights and real matmuls (compiles)"),
    Param("compile", str, "none", "none (eager) or inductor (torch.compile)", choices=("none", "inductor"),
          headline=True),
    # reduce-overhead by default: an FNO step is hundreds of small kernels, and CUDA graphs replay them as one
    # (RBC2D training on an H200: 2.5x eager, where mode default gave 1.06x). CARAML's suite names its modes.
    Param("compile_mode", str, "reduce-overhead", "torch.compile mode for compile=inductor (reduce-overhead: CUDA "
          "graphs)", choices=COMPILE_MODES, headline=True),
    Param("compile_scope", str, "model", "model (the whole operator, FFTs included), pointwise (FFTs and spectral "
          "products left eager), step (the whole train step with Adam)", choices=("model", "pointwise", "step")),
    Param("compile_report", bool, False, "CARAML's fno_compile.py table in the record: inference time of eager and "
          "each compile mode (5 iterations, mean of 2-4) and the speedup, after the steady-state measurement"),
    Param("matmul_precision", str, "high", "torch.set_float32_matmul_precision (CARAML: high, i.e. TF32 on GPUs)",
          choices=("highest", "high", "medium")),
    Param("lr", float, 0.0, "Adam learning rate; 0: the problem's (PIC 1e-3, RBC 1e-4)", minimum=0.0),
    Param("weight_decay", float, 1e-5, "Adam weight decay", minimum=0.0),
    Param("adam_impl", str, "foreach", "Adam kernels: foreach (PyTorch's default), fused, for-loop",
          choices=("foreach", "fused", "for-loop")),
]


def _smoke(problem: str, **extra) -> dict[str, Any]:
    """Tiny shapes: a train and an eval run each take a few seconds on two CPU cores."""
    base = {"problem": problem, "width": 8, "layers": 2, "batch_size": 4, "epochs": 2, "warmup_steps": 2,
            "measure_steps": 5}
    return {**base, **extra}


PRESETS = {
    "smoke-PIC1D": _smoke("PIC1D", modes="4", particles=512),
    "smoke-PIC2D": _smoke("PIC2D", modes="4x4", particles=512),
    "smoke-RBC2D": _smoke("RBC2D", modes="4x4", grid="32x16"),
    "smoke-RBC3D": _smoke("RBC3D", modes="4x4x2", grid="16x16x8"),
    **{name: {"problem": name, "batch_size": pb.batch_size, "width": pb.width, "modes": shape_text(pb.modes),
              "layers": pb.layers, **({"grid": shape_text(pb.grid)} if pb.grid else {"particles": pb.particles})}
       for name, pb in PROBLEMS.items()},
}


def check_launch(cfg: FNOConfig, devices: int) -> str | None:
    """Any number of processes fits: each is a data-parallel replica. Declared so that a sweep makes each point's
    config while it expands, where FNOConfig.from_params refuses modes or grids that do not fit the problem."""
    return None


def check_device(cfg: FNOConfig, device) -> None:
    """Everything that can be refused before the run starts: device features, the precision, the data file."""
    if cfg.complex_mixed_precision and device.type != "cuda":
        raise BadInput("fno: complex_mixed_precision=on needs a CUDA GPU (cuFFT's half-precision FFTs); "
                       f"this run is on {device.type}: use complex_mixed_precision=off")
    from caraml.kit.precision import check_precision

    check_precision(cfg.precision, device)
    if cfg.data == "file":
        import os

        from caraml.workloads.fno import files

        files.check(files.resolve_path(cfg.data_path, cfg.problem, os.environ.get("CARAML_DATA")), cfg.problem)


def torch_features(cfg: FNOConfig, dims) -> tuple:
    """What of torch a run needs beyond the oldest supported one."""
    compiles = cfg.compiled or cfg.compile_report
    return ((tf.COMPILE,) if compiles else ()) + ((tf.GRAD_SCALER,) if cfg.precision == "fp16" else ())


def build(cfg: FNOConfig, ctx):
    from caraml.workloads.fno.bench import FNOBench

    return FNOBench(cfg, ctx)


WORKLOAD = register(Workload(
    name="fno", unit="timesteps", params=PARAMS, presets=PRESETS, config=FNOConfig, build=build,
    check_device=check_device, check_launch=check_launch, torch_features=torch_features,
    description="Fourier Neural Operator training and inference (PIC1D, PIC2D, RBC2D, RBC3D), CARAML's operator "
                "benchmark",
    columns=("system", Col("problem", "Problem", "param:problem"), "devices",
             Col("dp", "DataParallel", "metric:dp", "int"),
             Col("model_params_m", "ModelParam (Million)", "metric:model_params_m"),
             Col("model_size_mb", "ModelSize (MB)", "metric:model_size_mb"), "global_batch_size",
             Col("input_shape", "InputShape", "label:input_shape"), Col("mode", "Mode", "param:mode"),
             Col("precision", "MixedPrecision", "param:precision"),  # older records: amp (Param.aliases)
             Col("complex_mixed_precision", "ComplexMixedPrecision", "param:complex_mixed_precision", "bool"),
             Col("compile", "Compiler", "param:compile"), Col("compile_mode", "CompileMode", "param:compile_mode"),
             "throughput",
             Col("caraml_timesteps_per_s", "Timesteps/second", "metric:caraml_timesteps_per_s"),
             Col("train_throughput", "TrainTimesteps/second", "metric:train_throughput.value"),
             "tflops_per_device", "peak_memory_gib", "energy_per_device_wh", "ours",
             Col("nodes", "Nodes", "shared:nodes", default=False),
             Col("grid", "Grid", "label:grid", default=False),
             Col("particles", "Particles", "metric:particles", "int", default=False),
             Col("complex_weights", "ComplexWeights", "param:complex_weights", "bool", default=False),
             Col("compile_scope", "CompileScope", "param:compile_scope", default=False),
             Col("data", "Data", "param:data", default=False),
             Col("energy_wh", "Energy Wh", "shared:energy_wh", default=False)),
    metrics=("global_batch_size", "dp", "settings", "model_params", "model_params_m", "model_size_mb", "input_shape",
             "grid", "particles", "data", "train_throughput", "caraml_timesteps_per_s", "epochs",
             "throughput_conventions", "flops", "memory_split", "compile_report", "math"),
))
