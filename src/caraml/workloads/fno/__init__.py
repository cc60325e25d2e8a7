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
DATA_PATHS = ("synthetic", "file", "synthetic-host", "auto")
CARAML_VERSIONS = ("none", "2025.02", "2026.02")
# CARAML's config file per problem (operator_learning/config/...; its table's Config column)
CARAML_CONFIG_FILES = {"PIC1D": "electrostatic_plasma1d_pic.yaml", "PIC2D": "electrostatic_plasma2d_pic.yaml",
                       "RBC2D": "rbc2d_dedalus.yaml", "RBC3D": "rbc3d_pysdc.yaml"}


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
    Param("global_batch_size", int, 0, "samples per step over all data-parallel devices, split over them as CARAML's "
          "batchSize (20 on 4 devices: 5 each); 0: batch_size per device", minimum=0, headline=True),
    Param("val_batch_size", int, 0, "validation samples per device per step in CARAML's epochs (CARAML 2026.02: 1); "
          "0: the training batch per device", minimum=0),
    Param("width", int, 0, "channels of the Fourier layers; 0: the problem's width", minimum=0),
    Param("modes", str, "auto", "Fourier modes kept per dim, e.g. 12x12 or 12x12x6; auto: the problem's",
          check=_check_shape),
    Param("layers", int, 0, "Fourier layers; 0: the problem's", minimum=0),
    Param("grid", str, "auto", "RBC grid of synthetic data, e.g. 256x64; auto: the problem's (data=file: the file's)",
          check=_check_shape),
    Param("particles", int, 0, "PIC particles per sample of synthetic data; 0: the problem's 100000", minimum=0),
    Param("data", str, "synthetic", "synthetic (random tensors made on the device: the model alone), file (CARAML's "
          "HDF5 data set through CARAML's DataLoaders, every batch copied host -> device; make one with `caraml data "
          "fno-synthetic`), synthetic-host (the same loaders over arrays generated on the host), auto (file where it "
          "exists, else synthetic-host)", choices=DATA_PATHS, headline=True),
    Param("workers", int, 4, "DataLoader worker processes per device for data=file|synthetic-host (CARAML's "
          "getDataLoaders: 4)", minimum=0),
    Param("data_path", str, "", "data=file: the HDF5 file or its folder; empty: $CARAML_DATA/<CARAML's file name>"),
    Param("samples", int, 0, "data=synthetic: samples made per device (0: 5 batches, 4 train + 1 validation); "
          "data=file: the first this many samples of the file (0: all); data=synthetic-host: samples made in all "
          "(0: 5 global batches)", minimum=0),
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
          "products left eager), step (the whole train step with Adam), epoch (step, and CARAML's whole train epoch "
          "as its torch.compile(self.train))", choices=("model", "pointwise", "step", "epoch")),
    Param("compile_report", bool, False, "CARAML's fno_compile.py table in the record: inference time of eager and "
          "each compile mode (5 iterations, mean of 2-4) and the speedup, after the steady-state measurement"),
    Param("matmul_precision", str, "high", "torch.set_float32_matmul_precision (CARAML: high, i.e. TF32 on GPUs)",
          choices=("highest", "high", "medium")),
    Param("lr", float, 0.0, "Adam learning rate; 0: the problem's (PIC 1e-3, RBC 1e-4)", minimum=0.0),
    Param("weight_decay", float, 1e-5, "Adam weight decay", minimum=0.0),
    Param("adam_impl", str, "foreach", "Adam kernels: foreach (PyTorch's default), fused, for-loop",
          choices=("foreach", "fused", "for-loop")),
    Param("pic2d_operator", str, "caraml", "PIC2D only: caraml (CARAML's Kaiser-Bessel NUFFT over the particle "
          "index, torchkbnufft, kX modes kept, kY unused) or grid2d (ours before: a 2D Kaiser-Bessel NUFFT of the "
          "positions, kX x kY kept)", choices=("caraml", "grid2d")),
    Param("nufft_backend", str, "torchkbnufft", "PIC2D's CARAML operator computed by torchkbnufft (as CARAML) or as "
          "matrix (torchkbnufft's operator at the kept modes, taken once as a dense matrix: the same results, "
          "float64 matmuls whatever TF32 says)", choices=("torchkbnufft", "matrix")),
    # the same operator in either layout (to rounding); added later: at its default, ids stay as before
    Param("dse_layout", str, "channels-last", "PIC1D only: its activations as [B, P, C] with one Vandermonde matrix "
          "per batch for both transforms (channels-last: no layout copies in the pointwise layers) or as [B, C, P] "
          "with a forward and an inverse matrix (channels-first, CARAML's Conv1d layout, the implementation before); "
          "the same results to float rounding", choices=("channels-last", "channels-first"),
          identifies_at_default=False),
    Param("caraml_version", str, "none", "which of CARAML's FNO configurations (fno_benchmark.yaml) the point "
          "follows, named in the record and its Version column: 2025.02 (batch 20/8, fp32 and fp16, compiled "
          "training) or 2026.02 (batch 4, validation batch 1, fp32, eager); none: not one of CARAML's",
          choices=CARAML_VERSIONS),
]


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
