"""Data-parallel launch context: read from torchrun's variables, one process per device."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass


@dataclass
class DistContext:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def nodes(self) -> int:
        return max(1, self.world_size // max(1, self.local_world_size))

    @property
    def node_rank(self) -> int:
        """This process's node, counted from 0: torchrun and srun number ranks node by node."""
        return self.rank // max(1, self.local_world_size)

    def all_reduce(self, value: float, op: str = "sum") -> float:
        """One float reduced over all ranks (sum or max); the value itself when alone."""
        if self.world_size == 1:
            return value
        import torch
        import torch.distributed as dist

        device = f"cuda:{self.local_rank}" if self.backend == "nccl" else "cpu"
        t = torch.tensor([value], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return float(t.item())

    def barrier(self) -> None:
        if self.world_size > 1:
            self.all_reduce(0.0)


def node_name() -> str:
    """This node's name in records and energy files: CARAML_HOSTNAME where set (the tests' emulated nodes, several
    on one host, each needing a name of its own), else the host name."""
    return os.environ.get("CARAML_HOSTNAME") or socket.gethostname()


def launch_env() -> DistContext:
    """The ranks torchrun (or srun with the same variables) gave this process; no process group yet."""
    env = os.environ
    world = int(env.get("WORLD_SIZE", "1"))
    return DistContext(
        rank=int(env.get("RANK", "0")),
        local_rank=int(env.get("LOCAL_RANK", "0")),
        world_size=world,
        local_world_size=int(env.get("LOCAL_WORLD_SIZE", str(world))),
    )


def init(ctx: DistContext, device_type: str) -> None:
    """Start the process group: NCCL on GPUs, gloo on CPU."""
    if ctx.world_size == 1:
        return
    import torch.distributed as dist

    ctx.backend = "nccl" if device_type == "cuda" else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=ctx.backend)


def shutdown(ctx: DistContext) -> None:
    if ctx.world_size == 1:
        return
    import torch.distributed as dist

    if dist.is_initialized():
        # All ranks tear down together: a rank that destroys its gloo group while rank 0 is still writing the
        # record can abort at exit ("terminate called without an active exception"), seen on a loaded machine.
        dist.barrier()
        dist.destroy_process_group()


def launcher() -> str:
    """How this process was started: torchrun, srun (one task per device), or a single process."""
    if "TORCHELASTIC_RUN_ID" in os.environ:
        return "torchrun"
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and "SLURM_PROCID" in os.environ:
        return "srun"
    return "single"
