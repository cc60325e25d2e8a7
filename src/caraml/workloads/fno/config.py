"""FNO's typed config: its parameters resolved once, each 0/auto replaced by the problem's (CARAML's) value and
checked against the problem. `FNOConfig.from_params` is the one reader of the flat parameter values; the Bench,
the data files and the checks read its fields. No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from caraml.errors import BadInput
from caraml.workloads.fno.problems import (
    PROBLEMS,
    Problem,
    modes_misfit,
    parse_shape,
    shape_text,
    with_operator,
)


@dataclass(frozen=True)
class FNOConfig:
    problem: Problem
    """CARAML's problem (PIC1D, PIC2D, RBC2D, RBC3D): channels, transform, loss, scheduler, data file"""
    mode: str
    """train (forward, backward, Adam) or eval (inference, no gradients)"""
    batch_size: int
    """samples (timesteps) per device per step (with global_batch_size: 0, the global batch is split)"""
    global_batch_size: int
    """samples per step over all data-parallel devices (CARAML's batchSize), split over them; 0: batch_size"""
    val_batch_size: int
    """validation samples per device per step in CARAML's epochs; 0: the training batch per device"""
    width: int
    """channels of the Fourier layers"""
    modes: tuple[int, ...]
    """Fourier modes kept per spatial dimension"""
    layers: int
    """Fourier layers"""
    grid: tuple[int, ...]
    """the RBC grid of synthetic data; () for the PIC problems (data=file: the file's grid is used)"""
    particles: int
    """PIC particles per sample of synthetic data; 0 for the RBC problems"""
    data: str
    """synthetic (random tensors made on the device), file (CARAML's HDF5 data set through DataLoaders),
    synthetic-host (the same loaders over generated arrays) or auto (file where it exists, else synthetic-host)"""
    workers: int
    """DataLoader worker processes per device (file, synthetic-host)"""
    data_path: str
    """data=file: the HDF5 file or its folder; empty: $CARAML_DATA/<CARAML's file name>"""
    samples: int
    """data=synthetic: samples made per device (0: 5 batches with epochs, else 2); data=file: the first this many
    (0: all); data=synthetic-host: samples made in all (0: 5 global batches)"""
    epochs: int
    """mode=train: epochs of CARAML's epoch runner, after the steady-state window; 0: none"""
    precision: str
    """fp32 (matmuls as matmul_precision says), fp16 (autocast + GradScaler, CARAML's use_amp) or bf16 (autocast)"""
    complex_mixed_precision: bool
    """FFTs and spectral products in fp16 (CARAML's ComplexMixedPrecision; CUDA, power-of-two FFT sizes)"""
    complex_weights: bool
    """spectral weights as torch.cfloat with complex einsums (the classic implementation); off: real pairs"""
    compile: str
    """none (eager) or inductor (torch.compile)"""
    compile_mode: str
    """torch.compile mode for compile=inductor"""
    compile_scope: str
    """model, pointwise (FFTs and spectral products left eager), step (the whole train step with Adam) or epoch
    (step, and CARAML's whole train epoch compiled as its torch.compile(self.train))"""
    compile_report: bool
    """CARAML's fno_compile.py table: inference time of eager and each compile mode, and the speedup"""
    matmul_precision: str
    """torch.set_float32_matmul_precision (CARAML: high, i.e. TF32 on GPUs)"""
    lr: float
    """Adam learning rate"""
    weight_decay: float
    """Adam weight decay"""
    adam_impl: str
    """Adam kernels: foreach, fused, for-loop"""
    pic2d_operator: str
    """PIC2D: caraml (its Kaiser-Bessel NUFFT over the particle index, kX kept) or grid2d (ours, kX x kY on the
    2D positions); `problem.kind` says which"""
    nufft_backend: str
    """how CARAML's PIC2D operator is computed: torchkbnufft (as CARAML) or matrix (the same operator as a dense
    matrix)"""
    dse_layout: str
    """PIC1D's activations: channels-last ([B, P, C], one Vandermonde matrix) or channels-first ([B, C, P], two)"""
    caraml_version: str
    """which CARAML configuration the point follows (2025.02, 2026.02), or none"""

    @property
    def train(self) -> bool:
        return self.mode == "train"

    @property
    def runs_epochs(self) -> bool:
        """Whether CARAML's epoch runner runs (after the steady-state window)."""
        return self.train and self.epochs > 0

    @property
    def compiled(self) -> bool:
        return self.compile == "inductor"

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
        return self.grid or (self.particles,)

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
        resolved = {"problem": pb, "batch_size": batch,
                    "width": values["width"] or pb.width, "modes": modes, "layers": values["layers"] or pb.layers,
                    "grid": grid if pb.kind == "grid" else (), "particles": particles, "lr": values["lr"] or pb.lr}
        return cls(**{f.name: resolved[f.name] if f.name in resolved else values[f.name] for f in fields(cls)})


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
