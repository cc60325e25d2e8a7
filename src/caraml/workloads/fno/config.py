"""FNO's typed config: its fields are the workload's parameters, resolved once, each 0/auto replaced by the
problem's (CARAML's) value and checked against the problem. `FNOConfig.from_params` is the one reader of the flat
parameter values; the Bench, the data files and the checks read its fields. No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from caraml.errors import BadInput
from caraml.kit.compile import COMPILE_MODES, TORCH_COMPILERS, compile_tuning_setting, inductor_only
from caraml.params import read_config, setting
from caraml.workloads.fno.problems import (
    DSE_BACKENDS,
    NAMES,
    PROBLEMS,
    Problem,
    modes_misfit,
    parse_shape,
    shape_text,
    with_operator,
)


def _compiled(values: dict) -> bool:
    """compile_scope applies only where something is compiled."""
    return values.get("compile", "none") != "none"


def dse_backend_misfit(pb: Problem, values: dict) -> str | None:
    """Why the DSE's kernels cannot run with these values (the rest of one line), or None."""
    if pb.kind != "dse":
        return f"applies to PIC1D only (its direct spectral evaluation); {pb.name} has no DSE: leave it out"
    if values["dse_layout"] != "channels-last":
        return "needs dse_layout=channels-last (its [B, P, C] activations): leave dse_layout out"
    if values["complex_mixed_precision"]:
        return "works on float32 spectra: leave complex_mixed_precision off"
    if values["dse_backend"] == "triton-fused" and values["precision"] != "fp32":
        return f"runs the skip products in its float32 kernels: use precision=fp32 (not {values['precision']})"
    return None


DATA_PATHS = ("synthetic", "file", "synthetic-host", "auto")
CARAML_VERSIONS = ("none", "2025.02", "2026.02")


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


@dataclass(frozen=True)
class FNOConfig:
    """One FNO point. Resolved by `from_params`: each 0 and auto holds the problem's value (modes and grid as text,
    e.g. 12x12; grid empty for the PIC problems), read as `problem_spec`, `kept_modes` and `spatial`."""

    problem: str = setting("RBC2D", "PIC1D, PIC2D (particle-in-cell plasma), RBC2D, RBC3D (Rayleigh-Benard "
                           "convection)", choices=NAMES, headline=True)
    mode: str = setting("train", "train (forward, backward, Adam) or eval (inference, no gradients)",
                        choices=("train", "eval"), headline=True)
    # resolved: 0 when global_batch_size is given (see `local_batch`)
    batch_size: int = setting(0, "samples (timesteps) per device per step; 0: the problem's (CARAML's) batch size",
                              minimum=0, headline=True)
    global_batch_size: int = setting(0, "samples per step over all data-parallel devices, split over them as "
                                     "CARAML's batchSize (20 on 4 devices: 5 each); 0: batch_size per device",
                                     minimum=0, headline=True)
    val_batch_size: int = setting(0, "validation samples per device per step in CARAML's epochs (CARAML 2026.02: "
                                  "1); 0: the training batch per device", minimum=0)
    width: int = setting(0, "channels of the Fourier layers; 0: the problem's width", minimum=0)
    modes: str = setting("auto", "Fourier modes kept per dim, e.g. 12x12 or 12x12x6; auto: the problem's",
                         check=_check_shape)
    layers: int = setting(0, "Fourier layers; 0: the problem's", minimum=0)
    grid: str = setting("auto", "RBC grid of synthetic data, e.g. 256x64; auto: the problem's (data=file: the "
                        "file's)", check=_check_shape)
    particles: int = setting(0, "PIC particles per sample of synthetic data; 0: the problem's 100000", minimum=0)
    data: str = setting("synthetic", "synthetic (random tensors made on the device: the model alone), file "
                        "(CARAML's HDF5 data set through CARAML's DataLoaders, every batch copied host -> device; "
                        "make one with `caraml data fno-synthetic`), synthetic-host (the same loaders over arrays "
                        "generated on the host), auto (file where it exists, else synthetic-host)", choices=DATA_PATHS,
                        headline=True)
    workers: int = setting(4, "DataLoader worker processes per device for data=file|synthetic-host (CARAML's "
                           "getDataLoaders: 4)", minimum=0)
    data_path: str = setting("", "data=file: the HDF5 file or its folder; empty: $CARAML_DATA/<CARAML's file name>")
    samples: int = setting(0, "data=synthetic: samples made per device (0: 5 batches, 4 train + 1 validation); "
                           "data=file: the first this many samples of the file (0: all); data=synthetic-host: samples "
                           "made in all (0: 5 global batches)", minimum=0)
    epochs: int = setting(5, "mode=train: epochs of CARAML's epoch runner (Timesteps/s, first epoch left out), run "
                          "after the steady-state measurement; 0: none", minimum=0)
    precision: str = setting("fp32", "fp32 (matmuls as matmul_precision says), fp16 (autocast + GradScaler, "
                             "CARAML's use_amp), bf16 (autocast); formerly amp=off|fp16|bf16",
                             choices=("fp32", "fp16", "bf16"), headline=True, aliases=("amp",),
                             value_aliases=(("off", "fp32"),))
    complex_mixed_precision: bool = setting(False, "FFTs and spectral products in fp16 (CARAML's "
                                            "ComplexMixedPrecision; CUDA, power-of-two FFT sizes)")
    complex_weights: bool = setting(False, "keep spectral weights as torch.cfloat with complex einsums (the classic "
                                    "implementation, for comparison); off: real weights and real matmuls (compiles)")
    compile: str = setting("none", "none (eager), inductor (torch.compile), aot_eager (torch.compile's tracing "
                           "and autograd without code generation: graph breaks and tracing apart from inductor)",
                           choices=("none", *TORCH_COMPILERS), headline=True)
    # reduce-overhead by default: an FNO step is hundreds of small kernels, and CUDA graphs replay them as one
    # (RBC2D training on an H200: 2.5x eager, where mode default gave 1.06x). CARAML's suite names its modes.
    compile_mode: str = setting("reduce-overhead", "torch.compile mode for compile=inductor (reduce-overhead: CUDA "
                                "graphs)", choices=COMPILE_MODES, headline=True, applies=inductor_only)
    compile_tuning: str = compile_tuning_setting()
    compile_scope: str = setting("model", "model (the whole operator, FFTs included), pointwise (FFTs and spectral "
                                 "products left eager), step (the whole train step with Adam), epoch (step, and "
                                 "CARAML's whole train epoch as its torch.compile(self.train))",
                                 choices=("model", "pointwise", "step", "epoch"), applies=_compiled)
    compile_report: bool = setting(False, "CARAML's fno_compile.py table in the record: inference time of eager and "
                                   "each compile mode (5 iterations, mean of 2-4) and the speedup, after the "
                                   "steady-state measurement")
    matmul_precision: str = setting("high", "torch.set_float32_matmul_precision (CARAML: high, i.e. TF32 on GPUs)",
                                    choices=("highest", "high", "medium"))
    lr: float = setting(0.0, "Adam learning rate; 0: the problem's (PIC 1e-3, RBC 1e-4)", minimum=0.0)
    weight_decay: float = setting(1e-5, "Adam weight decay", minimum=0.0)
    adam_impl: str = setting("foreach", "Adam kernels: foreach (PyTorch's default), fused, for-loop",
                             choices=("foreach", "fused", "for-loop"))
    # `problem_spec.kind` says which
    pic2d_operator: str = setting("caraml", "PIC2D only: caraml (CARAML's Kaiser-Bessel NUFFT over the particle "
                                  "index, torchkbnufft, kX modes kept, kY unused) or grid2d (ours before: a 2D "
                                  "Kaiser-Bessel NUFFT of the positions, kX x kY kept)", choices=("caraml", "grid2d"))
    nufft_backend: str = setting("torchkbnufft", "PIC2D's CARAML operator computed by torchkbnufft (as CARAML) or as "
                                 "matrix (torchkbnufft's operator at the kept modes, taken once as a dense matrix: the "
                                 "same results, float64 matmuls whatever TF32 says)",
                                 choices=("torchkbnufft", "matrix"))
    # the same operator in either layout (to rounding); added later: at its default, ids stay as before
    dse_layout: str = setting("channels-last", "PIC1D only: its activations as [B, P, C] with one Vandermonde matrix "
                              "per batch for both transforms (channels-last: no layout copies in the pointwise layers) "
                              "or as [B, C, P] with a forward and an inverse matrix (channels-first, CARAML's Conv1d "
                              "layout, the implementation before); the same results to float rounding",
                              choices=("channels-last", "channels-first"), identifies_at_default=False)
    dse_backend: str = setting("matmul", "PIC1D only: its two DSE products as matmuls over a Vandermonde matrix made "
                               "once per step (matmul) or as Triton kernels that make V's tiles from the positions "
                               "in registers (triton: CUDA GPUs, channels-last, float32 spectra), also with each "
                               "layer's inverse, skip product, bias and GELU in one kernel and the head in another "
                               "(triton-fused: and precision=fp32); the same results to float rounding (docs/fno.md)",
                               choices=DSE_BACKENDS, identifies_at_default=False)
    caraml_version: str = setting("none", "which of CARAML's FNO configurations (fno_benchmark.yaml) the point "
                                  "follows, named in the record and its Version column: 2025.02 (batch 20/8, fp32 and "
                                  "fp16, compiled training) or 2026.02 (batch 4, validation batch 1, fp32, eager); "
                                  "none: not one of CARAML's", choices=CARAML_VERSIONS)

    @property
    def problem_spec(self) -> Problem:
        """CARAML's problem as the PIC2D operator chosen makes it: channels, transform, loss, scheduler, data file."""
        return with_operator(PROBLEMS[self.problem], self.pic2d_operator)

    @property
    def kept_modes(self) -> tuple[int, ...]:
        """The Fourier modes kept per spatial dimension."""
        return parse_shape(self.modes, "modes")

    @property
    def train(self) -> bool:
        return self.mode == "train"

    @property
    def runs_epochs(self) -> bool:
        """Whether CARAML's epoch runner runs (after the steady-state window)."""
        return self.train and self.epochs > 0

    @property
    def compiled(self) -> bool:
        return self.compile in TORCH_COMPILERS

    @property
    def loader(self) -> bool:
        """Whether batches come through CARAML's DataLoaders from the host (every data path but synthetic)."""
        return self.data != "synthetic"

    def batch_misfit(self, dp: int) -> str | None:
        """Why the global batch cannot be split over `dp` data-parallel devices, or None."""
        if self.global_batch_size and self.global_batch_size % dp:
            lower = self.global_batch_size // dp * dp
            fits = f"{lower} or {lower + dp}" if lower else str(dp)
            return (f"fno: global_batch_size={self.global_batch_size} does not split evenly over {dp} data-parallel "
                    f"devices; use a multiple of {dp} (e.g. {fits}), or batch_size=N per device")
        return None

    def local_batch(self, dp: int) -> int:
        """Training samples per device per step: the global batch's share, else batch_size."""
        return self.global_batch_size // dp if self.global_batch_size else self.batch_size

    @property
    def spatial(self) -> tuple[int, ...]:
        """The trailing shape of a synthetic sample: the grid, or (particles,)."""
        return parse_shape(self.grid, "grid") if self.grid else (self.particles,)

    @classmethod
    def from_params(cls, values: dict[str, Any]) -> FNOConfig:
        """The resolved parameter values as a config; BadInput (one line) when they do not fit the problem."""
        pb = with_operator(PROBLEMS[values["problem"]], values["pic2d_operator"])
        if pb.kind == "kbnufft" and values["complex_mixed_precision"]:
            raise BadInput("fno: complex_mixed_precision=on is not available for PIC2D's CARAML operator (torchkbnufft "
                           "runs in complex64): use complex_mixed_precision=off or pic2d_operator=grid2d")
        if pb.kind != "dse" and values["dse_layout"] != "channels-last":
            raise BadInput(f"fno: dse_layout={values['dse_layout']} applies to PIC1D only (its direct spectral "
                           f"evaluation); {pb.name} has no DSE: leave dse_layout out")
        if values["dse_backend"] != "matmul":
            misfit = dse_backend_misfit(pb, values)
            if misfit:
                raise BadInput(f"fno: dse_backend={values['dse_backend']} {misfit}")
        modes, grid = _shapes(values, pb)
        particles = (values["particles"] or pb.particles) if pb.kind != "grid" else 0
        if values["data"] in ("synthetic", "synthetic-host"):  # a file's grid is checked when the file is read
            misfit = modes_misfit(pb.kind, modes, grid if pb.kind == "grid" else (particles,))
            if misfit:
                raise BadInput(f"fno: {pb.name} with modes={shape_text(modes)}: {misfit}")
        if values["global_batch_size"] and values["batch_size"]:
            raise BadInput(f"fno: batch_size={values['batch_size']} (per device) and global_batch_size="
                           f"{values['global_batch_size']} (split over the devices) both given; give one of them "
                           "(after a preset that sets batch_size, add batch_size=0)")
        batch = 0 if values["global_batch_size"] else values["batch_size"] or pb.batch_size
        resolved = {"batch_size": batch, "width": values["width"] or pb.width, "modes": shape_text(modes),
                    "layers": values["layers"] or pb.layers, "grid": shape_text(grid) if pb.kind == "grid" else "",
                    "particles": particles, "lr": values["lr"] or pb.lr}
        return read_config(cls, {**values, **resolved})


def _shapes(values: dict[str, Any], pb: Problem) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The kept modes and the grid: the problem's for auto, else as given, with as many sizes as it has dims."""
    try:
        modes = pb.modes if values["modes"] == "auto" else parse_shape(values["modes"], "modes")
        grid = pb.grid if values["grid"] == "auto" else parse_shape(values["grid"], "grid")
    except ValueError as exc:
        raise BadInput(f"fno: {exc}") from None
    if len(modes) != pb.dims:
        raise BadInput(f"fno: modes={values['modes']} has {len(modes)} sizes; {pb.name} is {pb.dims}D, e.g. modes="
                       + shape_text(pb.modes))
    if pb.kind == "grid" and len(grid) != pb.dims:
        raise BadInput(f"fno: grid={values['grid']} has {len(grid)} sizes; {pb.name} is {pb.dims}D, e.g. grid="
                       + shape_text(pb.grid))
    if pb.kind != "grid" and values["grid"] != "auto":
        raise BadInput(f"fno: {pb.name} has particles, not a grid; set particles= instead of grid=")
    return modes, grid
