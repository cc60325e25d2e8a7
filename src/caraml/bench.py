"""The workload contract: what a workload's `build` is given (a RunContext) and what it gives back (a Bench).

The harness and the runner read only this: a Bench's `info` says how many units one step trains per
data-parallel replica, how many FLOPs one unit costs and by which convention, which precision is
actually in use and whether anything was compiled. They never read a workload's parameter names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from caraml.errors import BadInput


@dataclass(frozen=True)
class ParallelDims:
    """How the world of processes splits: data-parallel replicas x tensor-parallel x pipeline stages.

    Ranks are laid out with tp innermost, then dp, then pp (Megatron's order):
    rank = (pp_rank * dp + dp_rank) * tp + tp_rank.
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp

    @classmethod
    def split(cls, world: int, tp: int = 1, pp: int = 1) -> "ParallelDims":
        """dp = world / (tp * pp); bad input when tp * pp does not divide the world."""
        if tp < 1 or pp < 1:
            raise BadInput(f"tp={tp} and pp={pp} must be >= 1")
        if world % (tp * pp):
            raise BadInput(f"tp*pp = {tp}*{pp} = {tp * pp} does not divide the {world} processes; "
                           f"launch a multiple of {tp * pp} processes or change tp/pp")
        return cls(dp=world // (tp * pp), tp=tp, pp=pp)

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(dp_rank, tp_rank, pp_rank) of a global rank."""
        tp_rank = rank % self.tp
        dp_rank = (rank // self.tp) % self.dp
        pp_rank = rank // (self.tp * self.dp)
        return dp_rank, tp_rank, pp_rank

    def counts_units(self, rank: int) -> bool:
        """Whether this rank speaks for its data-parallel replica when units are summed: one rank per replica
        (tp rank 0 of the last pipeline stage, where the loss is), so TP x PP runs are not counted tp*pp times."""
        _, tp_rank, pp_rank = self.coords(rank)
        return tp_rank == 0 and pp_rank == self.pp - 1

    def as_dict(self) -> dict[str, int]:
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp, "world": self.world}


@dataclass
class RunContext:
    """Everything a workload's `build` needs besides its parameters."""

    device: Any  # torch.device
    seed: int
    dist: Any  # caraml.distributed.DistContext: rank, world_size, all_reduce, barrier
    dims: ParallelDims = field(default_factory=ParallelDims)
    data_root: str | None = None  # where datasets live (CARAML_DATA or --data-root); None: synthetic only
    _mesh: Any = field(default=None, repr=False)

    @property
    def rank(self) -> int:
        return self.dist.rank

    @property
    def world_size(self) -> int:
        return self.dist.world_size

    def mesh(self):
        """The device mesh (pp, dp, tp) over all ranks, made on first use; needs an initialised process group."""
        if self._mesh is None:
            from torch.distributed.device_mesh import init_device_mesh

            self._mesh = init_device_mesh(self.device.type, (self.dims.pp, self.dims.dp, self.dims.tp),
                                          mesh_dim_names=("pp", "dp", "tp"))
        return self._mesh


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


@runtime_checkable
class Bench(Protocol):
    """One configured benchmark; `step()` runs one step without synchronising the device."""

    info: BenchInfo

    def step(self) -> None: ...

    def details(self) -> dict: ...  # workload metrics for the record (keys declared in Workload.metrics)

    def close(self) -> None: ...

    # Optional: `extra_phase: str` and `run_extra(should_stop)` for a workload's own measurement after the
    # steady-state window (CARAML's epochs), timed by the workload and shown as a power phase of its own.

    # Optional: a measurement of the workload's own after the steady-state window (e.g. CARAML's epochs). A
    # Bench with `extra_phase = "name"` gets `run_extra(should_stop)` called once, as a power phase of that name;
    # `should_stop()` is collective (every rank calls it equally often) and says when to end early. It reports
    # what it measured through details(), naming the convention of each figure.
