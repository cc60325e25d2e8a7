"""Fourier Neural Operator training and inference on PIC and RBC problems (CARAML's operator
benchmark): parameters declared, not built yet. Sweeps expand; running a point says so plainly.
"""

from __future__ import annotations

from caraml.params import Param
from caraml.workloads import Col, Workload, register

PROBLEMS = ("PIC1D", "PIC2D", "RBC2D", "RBC3D")

PARAMS = [
    Param("problem", str, "RBC2D", "PIC1D, PIC2D (particle-in-cell plasma), RBC2D, RBC3D (Rayleigh-Benard convection)",
          choices=PROBLEMS),
    Param("mode", str, "train", "train (forward, backward, optimizer) or eval (inference)", choices=("train", "eval")),
    Param("batch_size", int, 20, "samples per device per step", minimum=1),
    Param("amp", bool, False, "automatic mixed precision (autocast)"),
    Param("amp_dtype", str, "bf16", "autocast dtype when amp is on", choices=("bf16", "fp16")),
    Param("compile_mode", str, "none", "none (eager) or a torch.compile mode",
          choices=("none", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")),
    Param("width", int, 16, "channels of the Fourier layers", minimum=1),
    Param("modes", int, 12, "Fourier modes kept per dimension", minimum=1),
    Param("layers", int, 4, "Fourier layers", minimum=1),
    Param("data", str, "synthetic", "synthetic fields of the problem's shape, or the solver data CARAML fetches",
          choices=("synthetic", "solver")),
    Param("lr", float, 1e-3, "Adam learning rate", minimum=0.0),
]


WORKLOAD = register(Workload(
    name="fno", unit="timesteps", params=PARAMS, presets={}, build=None,
    description="Fourier Neural Operator training and inference (PIC, RBC) - not built yet",
    columns=("system", Col("problem", "Problem", "param:problem"), "devices", "global_batch_size",
             Col("mixed_precision", "MixedPrecision", "param:amp", "bool"),
             Col("compile_mode", "CompileMode", "param:compile_mode"), Col("mode", "Mode", "param:mode"),
             "throughput", Col("train_throughput", "TrainTimesteps/s", "metric:train_throughput.value"),
             "peak_memory_gib", "energy_per_device_wh", "ours",
             Col("nodes", "Nodes", "shared:nodes", default=False),
             Col("energy_wh", "Energy Wh", "shared:energy_wh", default=False)),
    metrics=("train_throughput", "global_batch_size"),
))
