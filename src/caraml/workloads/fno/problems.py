"""CARAML's four FNO problems as data (no torch): shapes, model sizes, optimisers, data files.

The numbers are those of CARAML's operator_benchmark configs (electrostatic_plasma1d_pic.yaml,
electrostatic_plasma2d_pic.yaml, rbc2d_dedalus.yaml, rbc3d_pysdc.yaml) as listed in its FNO table.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# CARAML's config file per problem (operator_learning/config/...; its table's Config column)
CARAML_CONFIG_FILES = {"PIC1D": "electrostatic_plasma1d_pic.yaml", "PIC2D": "electrostatic_plasma2d_pic.yaml",
                       "RBC2D": "rbc2d_dedalus.yaml", "RBC3D": "rbc3d_pysdc.yaml"}


@dataclass(frozen=True)
class Problem:
    name: str
    in_channels: int
    out_channels: int
    width: int
    modes: tuple[int, ...]  # Fourier modes kept per spatial dimension
    layers: int
    batch_size: int
    # "grid" (FFT on a uniform grid), "dse" (direct spectral evaluation), "kbnufft" (CARAML's Kaiser-Bessel NUFFT
    # over the particle index, torchkbnufft) or "nufft" (ours: Kaiser-Bessel NUFFT of the 2D positions)
    kind: str
    grid: tuple[int, ...] = ()  # uniform grid of the RBC problems
    particles: int = 0  # particles per sample of the PIC problems
    position_channels: int = 0  # PIC: the first channels of the input hold particle positions in [0, domain)
    file: str = ""  # CARAML's data file (FNOBenchmark data set)
    lr: float = 1e-3
    weight_decay: float = 1e-5
    scheduler: str = "step"  # "step" (StepLR 50 epochs, gamma 0.5) or "cosine"
    loss: str = "l1"  # "l1" or "vector_norm" (relative L2 per sample)

    @property
    def dims(self) -> int:
        return len(self.modes)

    @property
    def spatial(self) -> tuple[int, ...]:
        """The trailing shape of one sample's input after its channels: the grid, or (particles,)."""
        return self.grid if self.kind == "grid" else (self.particles,)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """CARAML's InputShape: [batch, channels, *grid or particles]."""
        return (self.batch_size, self.in_channels, *self.spatial)


PROBLEMS: dict[str, Problem] = {
    "PIC1D": Problem("PIC1D", 2, 1, width=32, modes=(16,), layers=4, batch_size=20, kind="dse", particles=100_000,
                     position_channels=1, file="PIC1D_electrostatic.h5", lr=1e-3, scheduler="step", loss="l1"),
    "PIC2D": Problem("PIC2D", 3, 2, width=32, modes=(16, 16), layers=4, batch_size=8, kind="kbnufft",
                     particles=100_000, position_channels=2, file="PIC2D_electrostatic.h5", lr=1e-3,
                     scheduler="step", loss="l1"),
    "RBC2D": Problem("RBC2D", 4, 4, width=16, modes=(12, 12), layers=2, batch_size=20, kind="grid", grid=(256, 64),
                     file="RBC2D_256x64_Ra1e7_dt1e-3_update.h5", lr=1e-4, scheduler="cosine", loss="vector_norm"),
    "RBC3D": Problem("RBC3D", 5, 5, width=25, modes=(12, 12, 6), layers=2, batch_size=20, kind="grid",
                     grid=(64, 64, 32), file="RBC3D_64x64x32_Ra1e5_dt0_5_solution.h5", lr=1e-4, scheduler="cosine",
                     loss="vector_norm"),
}
NAMES = tuple(PROBLEMS)
# PIC1D's DSE products: matmul (V built once per step, then batched products), triton (kernels that make V's tiles
# in registers), triton-fused (those, each layer's inverse, skip product, bias and GELU in one kernel, and the
# one-channel projection head in one more)
DSE_BACKENDS = ("matmul", "triton", "triton-fused")
# PIC2D's operator: CARAML's (kX of kX x kY used, as its Kaiser-Bessel path) or ours before (2D, kX x kY kept)
PIC2D_OPERATORS = {"caraml": "kbnufft", "grid2d": "nufft"}


def with_operator(problem: Problem, pic2d_operator: str) -> Problem:
    """The problem as the PIC2D operator chosen makes it (other problems have one operator: unchanged)."""
    kind = PIC2D_OPERATORS[pic2d_operator]
    return replace(problem, kind=kind) if problem.name == "PIC2D" and problem.kind != kind else problem

TRAIN_FRACTION = 0.8  # CARAML's split: the first 80 % of the samples train, the rest validate
STEP_LR = (50, 0.5)  # StepLR(step_size=50 epochs, gamma=0.5) of the PIC configs


def modes_misfit(kind: str, modes: tuple[int, ...], spatial: tuple[int, ...]) -> str | None:
    """Why the kept modes do not fit the grid or the particles, or None when they do."""
    if kind == "grid":
        for i, (n, m) in enumerate(zip(spatial[:-1], modes[:-1])):
            if 2 * m > n:
                return f"modes {m} in grid dim {i} need at least {2 * m} points, the grid has {n}"
        if modes[-1] > spatial[-1] // 2 + 1:
            return (f"modes {modes[-1]} in the last grid dim need at least {2 * modes[-1] - 2} points, "
                    f"the grid has {spatial[-1]}")
    elif kind == "dse" and modes[0] > spatial[-1] // 2 + 1:
        return f"{modes[0]} modes need at least {2 * modes[0] - 2} particles, there are {spatial[-1]}"
    elif kind == "kbnufft" and modes[0] > spatial[-1]:
        return f"kX={modes[0]} modes need at least {modes[0]} particles, there are {spatial[-1]}"
    return None


def parse_shape(text: str, what: str) -> tuple[int, ...]:
    """'12x12x6' -> (12, 12, 6); ValueError with a readable message otherwise."""
    try:
        out = tuple(int(part) for part in str(text).lower().replace("×", "x").split("x"))
    except ValueError:
        raise ValueError(f"{what}={text} is not a list of whole numbers joined by x (e.g. 12x12)") from None
    if not out or any(n < 1 for n in out):
        raise ValueError(f"{what}={text}: every size must be >= 1")
    return out


def shape_text(shape) -> str:
    return "x".join(str(n) for n in shape)
