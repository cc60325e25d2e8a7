"""How a run's processes split into data-, tensor- and pipeline-parallel groups, and where this process sits.

Importable without torch: the device mesh and its process groups are made on first use (`mesh()`), inside the
method. The runner makes one `ParallelDims` per process (the workload's `dims(config, world)`, then
`for_rank(rank)` with the rank the launcher gave); a workload reads its coordinates, groups and stages here
instead of asking torch.distributed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from caraml.errors import BadInput

MESH_DIMS = ("pp", "dp", "tp")  # outermost first: the mesh's shape is (pp, dp, tp)


@dataclass(frozen=True)
class ParallelDims:
    """How the world of processes splits: data-parallel replicas x tensor-parallel x pipeline stages, and this
    process's place in it.

    Ranks are laid out with tp innermost, then dp, then pp (Megatron's order):
    rank = (pp_rank * dp + dp_rank) * tp + tp_rank.
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    rank: int = 0  # this process's global rank
    _mesh: Any = field(default=None, init=False, repr=False, compare=False)
    _groups: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        if not 0 <= self.rank < self.world:
            raise BadInput(f"rank {self.rank} does not exist among {self.world} processes "
                           f"(dp={self.dp} x tp={self.tp} x pp={self.pp})")

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp

    @classmethod
    def split(cls, world: int, tp: int = 1, pp: int = 1, rank: int = 0) -> "ParallelDims":
        """dp = world / (tp * pp); bad input when tp * pp does not divide the world."""
        if tp < 1 or pp < 1:
            raise BadInput(f"tp={tp} and pp={pp} must be >= 1")
        if world % (tp * pp):
            raise BadInput(f"tp*pp = {tp}*{pp} = {tp * pp} does not divide the {world} processes; "
                           f"launch a multiple of {tp * pp} processes or change tp/pp")
        return cls(dp=world // (tp * pp), tp=tp, pp=pp, rank=rank)

    def for_rank(self, rank: int) -> "ParallelDims":
        """The same layout seen from global rank `rank` (no mesh yet)."""
        return replace(self, rank=rank)

    # coordinates ------------------------------------------------------------------------------------------------
    def coords(self, rank: int | None = None) -> tuple[int, int, int]:
        """(dp_rank, tp_rank, pp_rank) of a global rank (this process's by default)."""
        rank = self.rank if rank is None else rank
        tp_rank = rank % self.tp
        dp_rank = (rank // self.tp) % self.dp
        pp_rank = rank // (self.tp * self.dp)
        return dp_rank, tp_rank, pp_rank

    def rank_of(self, dp: int, tp: int, pp: int) -> int:
        """The global rank at data-parallel index `dp`, tensor-parallel index `tp`, pipeline stage `pp`."""
        return (pp * self.dp + dp) * self.tp + tp

    @property
    def dp_rank(self) -> int:
        return self.coords()[0]

    @property
    def tp_rank(self) -> int:
        return self.coords()[1]

    @property
    def pp_rank(self) -> int:
        return self.coords()[2]

    @property
    def dp_enabled(self) -> bool:
        return self.dp > 1

    @property
    def tp_enabled(self) -> bool:
        return self.tp > 1

    @property
    def pp_enabled(self) -> bool:
        return self.pp > 1

    @property
    def first_stage(self) -> bool:
        """This process holds the first pipeline stage (the embedding)."""
        return self.pp_rank == 0

    @property
    def last_stage(self) -> bool:
        """This process holds the last pipeline stage (the output layer and the loss)."""
        return self.pp_rank == self.pp - 1

    def counts_units(self, rank: int | None = None) -> bool:
        """Whether a rank (this process by default) speaks for its data-parallel replica when units are summed:
        one rank per replica (tp rank 0 of the last pipeline stage, where the loss is), so TP x PP runs are not
        counted tp*pp times."""
        _, tp_rank, pp_rank = self.coords(rank)
        return tp_rank == 0 and pp_rank == self.pp - 1

    # the device mesh --------------------------------------------------------------------------------------------
    def mesh(self, device_type: str | None = None):
        """The device mesh (pp, dp, tp) over all ranks, made on first use (it needs an initialised process group);
        `device_type` defaults to the process group's: cuda under NCCL, else cpu."""
        if self._mesh is None:
            import torch.distributed as dist
            from torch.distributed.device_mesh import init_device_mesh

            if device_type is None:
                device_type = "cuda" if dist.get_backend() == "nccl" else "cpu"
            mesh = init_device_mesh(device_type, (self.pp, self.dp, self.tp), mesh_dim_names=MESH_DIMS)
            object.__setattr__(self, "_mesh", mesh)  # frozen: the mesh is a cache, not part of the layout
        return self._mesh

    def group(self, name: str):
        """The process group of this process along one dimension ("dp", "tp" or "pp"); None for a single process."""
        if name not in MESH_DIMS:
            raise ValueError(f"no mesh dimension {name!r}; the dimensions are {', '.join(MESH_DIMS)}")
        if self.world == 1:
            return None
        if name not in self._groups:  # a mesh slice is not free: once per dimension, not once per step
            self._groups[name] = self.mesh()[name].get_group()
        return self._groups[name]

    def as_dict(self) -> dict[str, int]:
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp, "world": self.world}
