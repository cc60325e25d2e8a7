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

Declaring the workload imports no torch: its typed config, whose fields are its parameters (config.py), the
problems (problems.py) and `caraml data fno-synthetic` (cli.py). The model (model.py), the data files (files.py), the
FLOP formulas (flops.py) and the benchmark (bench.py) are loaded by `build`.
"""

from __future__ import annotations

from typing import Any

from caraml.errors import BadInput
from caraml.kit import torch_features as tf
from caraml.workloads import Col, Workload, register
from caraml.workloads.fno.config import FNOConfig
from caraml.workloads.fno.problems import PROBLEMS, shape_text


def _smoke(problem: str, **extra) -> dict[str, Any]:
    """Tiny shapes: a train and an eval run each take a few seconds on two CPU cores."""
    base = {"problem": problem, "width": 8, "layers": 2, "batch_size": 4, "epochs": 2, "warmup_steps": 2,
            "measure_steps": 5, "workers": 1}
    return {**base, **extra}


PRESETS = {
    "smoke-PIC1D": _smoke("PIC1D", modes="4", particles=512),
    "smoke-PIC2D": _smoke("PIC2D", modes="4x4", particles=512),
    "smoke-RBC2D": _smoke("RBC2D", modes="4x4", grid="32x16"),
    "smoke-RBC3D": _smoke("RBC3D", modes="4x4x2", grid="16x16x8"),
    # CARAML's settings per problem, its data path: the data set's file where it exists, else host arrays
    **{name: {"problem": name, "batch_size": pb.batch_size, "width": pb.width, "modes": shape_text(pb.modes),
              "data": "auto",
              "layers": pb.layers, **({"grid": shape_text(pb.grid)} if pb.grid else {"particles": pb.particles})}
       for name, pb in PROBLEMS.items()},
}


def check_launch(cfg: FNOConfig, devices: int) -> str | None:
    """Each process is a data-parallel replica: a global batch must split evenly over them. Declared also so that
    a sweep makes each point's config while it expands, where FNOConfig.from_params refuses modes or grids that do
    not fit the problem."""
    return cfg.batch_misfit(devices)


def check_device(cfg: FNOConfig, device) -> None:
    """Everything that can be refused before the run starts: device features, the precision, the data file."""
    if cfg.complex_mixed_precision and device.type != "cuda":
        raise BadInput("fno: complex_mixed_precision=on needs a CUDA GPU (cuFFT's half-precision FFTs); "
                       f"this run is on {device.type}: use complex_mixed_precision=off")
    from caraml.kit.optim import check_kernels
    from caraml.kit.precision import check_precision

    check_precision(cfg.precision, device)
    check_kernels("adam_impl", cfg.adam_impl, "adam", device)
    if cfg.data == "file":
        import os

        from caraml.workloads.fno import files

        pb = cfg.problem_spec
        files.check(files.resolve_path(cfg.data_path, pb, os.environ.get("CARAML_DATA")), pb)


def torch_features(cfg: FNOConfig, dims) -> tuple:
    """What of torch a run needs beyond the oldest supported one."""
    compiles = cfg.compiled or cfg.compile_report
    return ((tf.COMPILE,) if compiles else ()) + ((tf.GRAD_SCALER,) if cfg.precision == "fp16" else ())


def build(cfg: FNOConfig, ctx):
    from caraml.workloads.fno.bench import FNOBench

    return FNOBench(cfg, ctx)


WORKLOAD = register(Workload(
    name="fno", unit="timesteps", presets=PRESETS, config=FNOConfig, build=build,
    check_device=check_device, check_launch=check_launch, torch_features=torch_features,
    description="Fourier Neural Operator training and inference (PIC1D, PIC2D, RBC2D, RBC3D), CARAML's operator "
                "benchmark",
    # CARAML's FNO table (fno_benchmark.yaml) in its order where we have the figure, then ours; CARAML's epoch
    # figures show where some row has them (mode=train with epochs)
    columns=("system", Col("caraml_version", "Version", "param:caraml_version", default="if-any"),
             Col("nodes", "Nodes", "shared:nodes", default=False), "devices",
             Col("dp", "DataParallel", "metric:dp", "int"), Col("problem", "Problem", "param:problem"),
             Col("caraml_config", "Config", "label:caraml_config", default=False),
             Col("model_params_m", "ModelParam (Million)", "metric:model_params_m"),
             Col("model_size_mb", "ModelSize (MB)", "metric:model_size_mb"),
             Col("grid", "Grid", "label:grid", default=False),
             Col("particles", "Particles", "metric:particles", "int", default=False), "global_batch_size",
             Col("input_shape", "InputShape", "label:input_shape"),
             Col("runtime_min", "Runtime (min)", "shared:runtime_min", default=False),
             Col("epochs_run", "Epochs", "metric:counted_epochs", "int", default="if-any"),
             Col("mode", "Mode", "param:mode"),
             Col("precision", "MixedPrecision", "param:precision"),  # older records: amp (Param.aliases)
             Col("complex_mixed_precision", "ComplexMixedPrecision", "param:complex_mixed_precision", "bool"),
             Col("compile", "Compiler", "param:compile"),
             # CARAML's word for a run that compiles nothing
             Col("compile_mode", "CompileMode", "param:compile_mode",
                 shows=lambda v, params: "eager" if params.get("compile") == "none" else v),
             Col("mean_compile_time_s", "MeanCompileTime (s)", "metric:mean_compile_time_s", default="if-any"),
             Col("epoch_time_s", "TotalEpochTime (s)", "metric:total_epoch_time_s", default="if-any"),
             Col("train_time_s", "TotalTrainTime (s)", "metric:total_train_time_s", default="if-any"),
             Col("compute_time_s", "TotalComputeTime (s)", "metric:total_compute_time_s", default="if-any"),
             Col("timesteps", "Timesteps", "metric:timesteps", "int", default="if-any"),
             "throughput",
             Col("caraml_timesteps_per_s", "Timesteps/second", "metric:caraml_timesteps_per_s"),
             Col("train_timesteps", "TrainTimesteps", "metric:train_timesteps", "int", default="if-any"),
             Col("train_throughput", "TrainTimesteps/second", "metric:train_throughput.value"),
             Col("peak_fwd_mem_mb", "PeakFwdMem (MB)", "metric:peak_fwd_mem_mb", default="if-any"),
             Col("persistent_mem_mb", "PersistentMem (MB)", "metric:persistent_mem_mb", default="if-any"),
             Col("activation_mem_mb", "ActivationMem (MB)", "metric:activation_mem_mb", default="if-any"),
             Col("caraml_tflops", "TFLOPs", "metric:caraml_tflops", default="if-any"),
             "tflops_per_device", "peak_memory_gib",
             Col("energy_per_device_wh", "Energy/GPU (Wh)", "shared:energy_per_device_wh"),
             Col("energy_wh", "TotalEnergy (Wh)", "shared:energy_wh", default=False), "ours",
             Col("complex_weights", "ComplexWeights", "param:complex_weights", "bool", default=False),
             Col("compile_scope", "CompileScope", "param:compile_scope", default=False),
             Col("data", "Data", "metric:data_source|param:data", "word", default=False)),
    metrics=("global_batch_size", "dp", "settings", "model_params", "model_params_m", "model_size_mb", "input_shape",
             "grid", "particles", "data", "train_throughput", "caraml_timesteps_per_s", "caraml_spread", "epochs",
             "throughput_conventions", "flops", "memory_split", "compile_report", "math", "caraml_config",
             "caraml_version", "data_source", "mean_compile_time_s", "total_epoch_time_s", "total_train_time_s",
             "total_compute_time_s", "timesteps", "train_timesteps", "counted_epochs", "caraml_tflops",
             "peak_fwd_mem_mb", "persistent_mem_mb", "activation_mem_mb"),
))
