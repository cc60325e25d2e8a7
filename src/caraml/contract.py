"""The workload contract: what a workload's `build` is given (a RunContext) and what it gives back (a Bench).

The harness and the runner read only this: a Bench's `info` says how many units one step trains per
data-parallel replica, how many FLOPs one unit costs and by which convention, which precision is
actually in use and whether anything was compiled. They never read a workload's parameter names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from caraml.parallel_dims import ParallelDims


@dataclass
class RunContext:
    """Everything a workload's `build` needs besides its parameters."""

    device: Any  # torch.device
    seed: int
    dist: Any  # caraml.distributed.DistContext: rank, world_size, all_reduce, barrier
    dims: ParallelDims = field(default_factory=ParallelDims)
    data_root: str | None = None  # where datasets live (CARAML_DATA or --data-root); None: synthetic only

    @property
    def rank(self) -> int:
        return self.dist.rank

    @property
    def world_size(self) -> int:
        return self.dist.world_size

    def mesh(self):
        """The device mesh (pp, dp, tp) over all ranks on this run's device type, made on first use by `dims`;
        needs an initialised process group."""
        return self.dims.mesh(self.device.type)


@dataclass
class BenchInfo:
    """What the harness needs to know about a built benchmark, and nothing about its model."""

    units_per_step: float  # units one step trains (or infers) per data-parallel replica
    unit: str  # "images", "tokens", "timesteps"
    flops_per_unit: float | None  # None: not counted
    flops_convention: str  # what is counted, so that TFLOP/s and MFU can be read right
    precision: str  # the precision actually in use, for the peak rate behind MFU ("fp32", "tf32", "bf16", "fp16")
    compiled: bool = False  # the first steps include compilation (reported apart as warmup.compile_s)
    compile_setup_s: float = 0.0  # compilation done in build, before the first step (e.g. TorchScript tracing)
    mfu_also: tuple = ()  # further precisions whose peak MFU is stated against too (fp8 training: "bf16")


@runtime_checkable
class Bench(Protocol):
    """One configured benchmark; `step()` runs one step without synchronising the device."""

    info: BenchInfo

    def step(self) -> None: ...

    def details(self) -> dict: ...  # workload metrics for the record (keys declared in Workload.metrics)

    def close(self) -> None: ...

    # Optional: `begin_measure()`, called once right before the measured window, so a workload that keeps
    # figures of its own per step (the LLM's iteration times and losses) knows which steps are measured.

    # Optional: `health() -> str | None`, called once after the run measured (after details()): None when the
    # figures describe training; else why they do not (a loss that is not finite at the end of the measured
    # window, an optimizer that never stepped), and the record's status is `diverged` with that reason as error.
    # It must give the same answer on every rank.

    # Optional: a measurement of the workload's own after the steady-state window (e.g. CARAML's epochs). A
    # Bench with `extra_phase = "name"` gets `run_extra(should_stop)` called once, as a power phase of that name;
    # `should_stop()` is called once per step of that loop (caraml.kit.epochs does), equally often on every rank,
    # and says when to end early. It reports
    # what it measured through details(), naming the convention of each figure.

    # Optional: `live_loss() -> float | None`, asked when a live line is due: the loss of the newest step known to
    # have completed, read without waiting for the device (caraml.kit.readback), or None.

    # Optional: `extra_left(steps_done, elapsed_s) -> float | None`: the seconds the extra phase still needs, for
    # its live line's ETA (None: unknown).
