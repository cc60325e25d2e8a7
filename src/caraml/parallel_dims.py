"""How a run's processes split into data-, tensor- and pipeline-parallel groups (torch-free)."""

from __future__ import annotations

from dataclasses import dataclass

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
