"""Data-parallel launch context: read from torchrun's variables, one process per device."""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass

_started = False  # this process started a process group (start_group): see end_rank


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
        start_group(ctx.backend)


def start_group(backend: str, **options) -> None:
    """torch.distributed.init_process_group, remembered: a process that started a group ends through end_rank."""
    import torch.distributed as dist

    global _started
    dist.init_process_group(backend=backend, **options)
    _started = True


def shutdown(ctx: DistContext) -> None:
    if ctx.world_size == 1:
        return
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()  # all ranks tear down together, none while another still writes its output
        dist.destroy_process_group()


def end_rank(code) -> None:
    """End this process now, its output flushed, without the interpreter's teardown, when it started a process group
    (a torchrun/srun rank, or megatron-core's group of one process); otherwise return.

    A gloo group outlives destroy_process_group while Python objects (a device mesh, a cached group) hold it, and its
    worker thread frees each finished collective after the caller has moved on. When that happens while Python
    finalises, freeing the collective's tensors takes the GIL, the thread is ended inside a destructor and the rank
    aborts ("terminate called without an active exception"; pytorch/pytorch#179291): a complete run reported as
    failed, 2 runs in 43 of a 4-rank CPU test on a loaded 2-core machine.
    """
    if _started:
        end_now(code)


def end_now(code) -> None:
    """End this process now, its output flushed, without the interpreter's teardown (atexit handlers, the joins of
    threads still working)."""
    sys.stdout.flush()
    sys.stderr.flush()
    _flush_c_stdio()
    os._exit(code if isinstance(code, int) else 0)


def group_started() -> bool:
    """Whether this process started a process group (start_group), and so must end through end_rank."""
    return _started


def _flush_c_stdio() -> None:
    """fflush(NULL): what native code (NCCL's log, a C extension) left in the C library's buffers, which os._exit
    does not write."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # no C library to ask (not a POSIX system)
        pass


def launcher() -> str:
    """How this process was started: torchrun, srun (one task per device), or a single process."""
    if "TORCHELASTIC_RUN_ID" in os.environ:
        return "torchrun"
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and "SLURM_PROCID" in os.environ:
        return "srun"
    return "single"
