"""Tensor, pipeline and data parallelism for the GPT of model.py, with PyTorch's own parts only.

Order as in torchtitan: build this rank's pipeline stage on the meta device; materialise, initialise and
tensor-parallelise it one part at a time (so no rank ever holds more than one whole block); compile each
block; then data parallelism: FSDP2 (the "distributed optimizer": parameters, gradients and optimizer
state sharded over the data-parallel replicas) or DDP, or a plain all-reduce of the gradients where DDP
cannot take tensor-parallel (DTensor) parameters. Where this rank sits, its groups and its stage come from
caraml.parallel_dims.ParallelDims; which options take effect on that layout is the `ParallelPlan`.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn

from caraml.parallel_dims import ParallelDims
from caraml.workloads.llm_training.config import ParallelConfig
from caraml.workloads.llm_training.model import GPT, GPTConfig, init_weights, rope_cache


def stage_layers(num_layers: int, pp: int, stage: int) -> range:
    """The layers of one pipeline stage (equal shares; layers % pp == 0 is checked up front)."""
    per = num_layers // pp
    return range(stage * per, (stage + 1) * per)


# tensor parallelism -------------------------------------------------------------------------------------------
def _placements() -> tuple[type, type]:
    """DTensor's Replicate and Shard: public from torch 2.5, in torch.distributed._tensor before (the plans are
    made there too, and used only under tp > 1, which is refused before 2.5)."""
    try:
        from torch.distributed.tensor import Replicate, Shard
    except ImportError:
        from torch.distributed._tensor import Replicate, Shard
    return Replicate, Shard


def _block_plan(cfg: GPTConfig, sequence_parallel: bool) -> dict:
    """Megatron's split: the fused q/k/v and the MLP's first layer by output columns (whole heads: wqkv's rows are
    laid out head by head), wo and w2 by input rows;
    with sequence parallelism the norms work on sequence shards, gathered before and scattered after."""
    Replicate, Shard = _placements()
    from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel

    seq = Shard(1) if sequence_parallel else Replicate()
    plan = {
        "attn": PrepareModuleInput(input_layouts=(seq, None), desired_input_layouts=(Replicate(), None)),
        "attn.wqkv": ColwiseParallel(),
        "attn.wo": RowwiseParallel(output_layouts=seq),
        "mlp": PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(Replicate(),)),
        "mlp.w1": ColwiseParallel(), "mlp.w2": RowwiseParallel(output_layouts=seq),
    }
    if cfg.activation == "swiglu":
        plan["mlp.w3"] = ColwiseParallel()
    if sequence_parallel:
        plan["attn_norm"] = SequenceParallel()
        plan["mlp_norm"] = SequenceParallel()
    return plan


def _embedding_plan(cfg: GPTConfig, sequence_parallel: bool) -> dict:
    """The embedding split by vocabulary rows (Megatron's VocabParallelEmbedding)."""
    Replicate, Shard = _placements()
    from torch.distributed.tensor.parallel import PrepareModuleOutput, RowwiseParallel

    if not sequence_parallel:
        return {"tok": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())}
    if cfg.position == "learned":  # positions are added to the whole sequence, then it is split
        return {"tok": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
                "": PrepareModuleOutput(output_layouts=Replicate(), desired_output_layouts=Shard(1))}
    return {"tok": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))}  # reduce-scatter


def _head_plan(sequence_parallel: bool, loss_parallel: bool) -> dict:
    """The output layer split by vocabulary columns; with loss_parallel the logits stay sharded for the loss."""
    Replicate, Shard = _placements()
    from torch.distributed.tensor.parallel import ColwiseParallel, SequenceParallel

    plan = {"output": ColwiseParallel(input_layouts=Shard(1) if sequence_parallel else Replicate(),
                                      output_layouts=Shard(-1) if loss_parallel else Replicate(),
                                      use_local_output=not loss_parallel)}
    if sequence_parallel:
        plan["norm"] = SequenceParallel()
    return plan


def _parallelize(module: nn.Module, tp_mesh, plan: dict) -> None:
    from torch.distributed.tensor.parallel import parallelize_module

    if "" in plan:  # a style for the module itself
        plan = dict(plan)
        parallelize_module(module, tp_mesh, plan.pop(""))
    kwargs = {}
    if "src_data_rank" in inspect.signature(parallelize_module).parameters:
        kwargs["src_data_rank"] = None  # every rank initialised the same numbers: take the local shard, no scatter
    parallelize_module(module, tp_mesh, plan, **kwargs)


# the plan ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ParallelPlan:
    """How the GPT uses its layout (caraml.parallel_dims.ParallelDims): the options that take effect there."""

    sequence_parallel: bool = False  # norms and residuals on sequence shards (tp > 1 only)
    loss_parallel: bool = False  # cross-entropy on vocabulary-sharded logits (tp > 1 only)
    dp_mode: str = "none"  # none | fsdp2 | ddp | allreduce
    zero1: bool = False  # optimizer state sharded over the data-parallel replicas (Megatron's distributed optimizer)

    @classmethod
    def of(cls, par: ParallelConfig, dims: ParallelDims) -> "ParallelPlan":
        """The options asked for (`par`) as they apply on `dims`: the tp options only with tp > 1; data
        parallelism by FSDP2 (distributed_optimizer=fsdp), else DDP, else a plain all-reduce where DDP cannot take
        tensor-parallel (DTensor) parameters; zero1 shards the optimizer state on top of DDP or the all-reduce."""
        if not dims.dp_enabled:
            mode = "none"
        elif par.distributed_optimizer == "fsdp":
            mode = "fsdp2"
        else:
            mode = "allreduce" if dims.tp_enabled else "ddp"
        return cls(sequence_parallel=par.sequence_parallel and dims.tp_enabled,
                   loss_parallel=par.loss_parallel and dims.tp_enabled, dp_mode=mode,
                   zero1=par.distributed_optimizer == "zero1" and dims.dp_enabled)

    def as_dict(self) -> dict[str, Any]:
        return {"dp_mode": self.dp_mode, "sequence_parallel": self.sequence_parallel,
                "loss_parallel": self.loss_parallel, "optimizer_state_sharded": self.zero1}


# the stage ----------------------------------------------------------------------------------------------------
def build_stage(cfg: GPTConfig, dims: ParallelDims, plan: ParallelPlan, device: torch.device, seed: int,
                compile_blocks: dict | None, convert_block=None) -> nn.Module:
    """This rank's part of the model: materialised, initialised, tensor-parallel, compiled (with the options of
    torch.compile `compile_blocks`, or not at all when None); not yet data-parallel. `convert_block(name, block)`
    changes each initialised block before tensor parallelism and compilation (fp8, fused kernels: fast_paths.py)."""
    with torch.device("meta"):
        model = GPT(cfg, stage_layers(cfg.num_layers, dims.pp, dims.pp_rank), first=dims.first_stage,
                    last=dims.last_stage)
    tp_mesh = dims.mesh()["tp"] if dims.tp_enabled else None
    sp = plan.sequence_parallel

    def make(part: nn.Module, prefix: str, tp_plan: dict | None) -> None:
        part.to_empty(device=device)
        init_weights(part, cfg, seed, prefix)
        if tp_mesh is not None and tp_plan:
            _parallelize(part, tp_mesh, tp_plan)

    if model.embed is not None:
        make(model.embed, "embed.", _embedding_plan(cfg, sp))
    for name, block in model.layers.items():
        make(block, f"layers.{name}.", _block_plan(cfg, sp) if convert_block is None else None)
        if convert_block is not None:
            convert_block(name, block)
            if tp_mesh is not None:
                _parallelize(block, tp_mesh, _block_plan(cfg, sp))
    if model.norm is not None:
        make(model.norm, "norm.", None)
        make(model.output, "output.", None)
        if tp_mesh is not None:
            _parallelize(model, tp_mesh, _head_plan(sp, plan.loss_parallel))
        if model.embed is not None:
            model.tie_weights()  # both are vocabulary-sharded alike under tp, so the tie holds
    if model.rope is not None:
        model.rope = rope_cache(cfg, device=device)
    if compile_blocks is not None:
        for name, block in list(model.layers.items()):
            model.layers[name] = torch.compile(block, **compile_blocks)
    return model


def apply_data_parallel(model: nn.Module, dims: ParallelDims, plan: ParallelPlan, device: torch.device
                        ) -> nn.Module:
    if plan.dp_mode == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        dp_mesh = dims.mesh()["dp"]
        # Parameters stay gathered from forward to backward (no second all-gather), as Megatron's
        # distributed optimizer keeps them; gradients are reduce-scattered, optimizer state is sharded.
        for block in model.layers.values():
            fully_shard(block, mesh=dp_mesh, reshard_after_forward=False)
        fully_shard(model, mesh=dp_mesh, reshard_after_forward=False)
        return model
    if plan.dp_mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, process_group=dims.group("dp"),
                                       device_ids=[device.index] if device.type == "cuda" else None,
                                       gradient_as_bucket_view=True)
    return model


def all_reduce_gradients(params: list[nn.Parameter], group) -> None:
    """Mean of the gradients over the data-parallel replicas, in flat buckets (dp_mode allreduce)."""
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    grads = [_local(p.grad) for p in params if p.grad is not None]
    size = dist.get_world_size(group)
    bucket: list[torch.Tensor] = []
    for i, g in enumerate(grads):
        bucket.append(g)
        if sum(t.numel() for t in bucket) >= 25_000_000 or i == len(grads) - 1:
            by_dtype: dict = {}
            for t in bucket:
                by_dtype.setdefault(t.dtype, []).append(t)
            for same in by_dtype.values():
                flat = _flatten_dense_tensors(same)
                dist.all_reduce(flat, group=group)
                flat.div_(size)
                for t, reduced in zip(same, _unflatten_dense_tensors(flat, same)):
                    t.copy_(reduced)
            bucket = []


class _NoDTensor:
    """Stands for DTensor and Shard where torch has no public DTensor (before 2.5): no tensor is one, and no run
    makes one there (tensor parallelism and FSDP2 are refused, caraml.kit.torch_features)."""


def _dtensor() -> tuple[type, type]:
    """torch's DTensor and Shard classes (_NoDTensor twice before torch 2.5)."""
    try:
        from torch.distributed.tensor import DTensor, Shard
    except ImportError:
        return _NoDTensor, _NoDTensor
    return DTensor, Shard


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, _dtensor()[0]) else t


def _total_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of all `grads` together, by multi-tensor kernels (torch.nn.utils.get_total_norm from 2.6)."""
    if hasattr(torch.nn.utils, "get_total_norm"):
        return torch.nn.utils.get_total_norm(grads, 2.0, foreach=True)
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)


# the tied embedding across pipeline stages ---------------------------------------------------------------------
def tied_embedding_group(dims: ParallelDims):
    """With pp > 1 the first stage holds the embedding and the last stage a copy as output layer (Megatron's
    way): their gradients are summed over a group of the two after every step, so both copies stay equal."""
    if not dims.pp_enabled:
        return None
    mine = None
    for dp_rank in range(dims.dp):
        for tp_rank in range(dims.tp):
            ranks = [dims.rank_of(dp_rank, tp_rank, 0), dims.rank_of(dp_rank, tp_rank, dims.pp - 1)]
            group = dist.new_group(ranks)  # every rank creates every group, in the same order
            if (dp_rank, tp_rank) == (dims.dp_rank, dims.tp_rank):
                mine = group
    return mine if (dims.first_stage or dims.last_stage) else None


def tied_weight(model: nn.Module, dims: ParallelDims) -> nn.Parameter | None:
    """This stage's copy of the embedding when it is shared with another stage."""
    if not dims.pp_enabled:
        return None
    inner = model.module if hasattr(model, "module") else model
    if dims.first_stage:
        return inner.embed.tok.weight
    if dims.last_stage:
        return inner.output.weight
    return None


def sync_tied_gradient(weight: nn.Parameter | None, group) -> None:
    if weight is None or group is None or weight.grad is None:
        return
    grad = weight.grad
    if isinstance(grad, _dtensor()[0]) and grad.placements != weight.placements:
        # The sharded embedding's backward gives a replicated gradient; shard it like the output layer's copy
        # (a local slice, no communication) so the two stages add up equal pieces.
        grad = weight.grad = grad.redistribute(grad.device_mesh, weight.placements)
    dist.all_reduce(_local(grad), group=group)


# gradient norm over every rank ----------------------------------------------------------------------------------
def grad_square_share(params: list[nn.Parameter], dims: ParallelDims, exclude: nn.Parameter | None = None
                      ) -> torch.Tensor:
    """This rank's share of the squared 2-norm of the whole model's gradients: summed over all ranks (one
    all-reduce, by the caller) it is the squared norm. A gradient held alike by several ranks of a stage
    (replicated over dp, or over tp) is divided by its number of copies; the last stage's copy of a tied
    embedding is left out (counted once, on the first stage). Multi-tensor kernels, no host synchronisation."""
    DTensor, Shard = _dtensor()
    stage_ranks = dims.dp * dims.tp
    by_share: dict[float, list[torch.Tensor]] = {}
    for p in params:
        g = p.grad
        if g is None or p is exclude:
            continue
        distinct = 1  # how many different pieces of this gradient the stage's ranks hold
        if isinstance(g, DTensor):
            for size, placement in zip(g.device_mesh.mesh.shape, g.placements):
                if isinstance(placement, Shard):
                    distinct *= size
            g = g.to_local()
        by_share.setdefault(distinct / stage_ranks, []).append(g)
    square = torch.zeros((), dtype=torch.float32, device=next(iter(by_share.values()))[0].device if by_share
                         else "cpu")
    for share, grads in by_share.items():
        square = square + share * _total_norm(grads).float() ** 2
    return square
