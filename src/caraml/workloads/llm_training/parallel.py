"""Tensor, pipeline and data parallelism for the GPT of model.py, with PyTorch's own parts only.

Order as in torchtitan: build this rank's pipeline stage on the meta device; materialise, initialise and
tensor-parallelise it one part at a time (so no rank ever holds more than one whole block); compile each
block; then data parallelism: FSDP2 (the "distributed optimizer": parameters, gradients and optimizer
state sharded over the data-parallel replicas) or DDP, or a plain all-reduce of the gradients where DDP
cannot take tensor-parallel (DTensor) parameters.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn

from caraml.workloads.llm_training.model import GPT, GPTConfig, init_weights, rope_cache


def stage_layers(num_layers: int, pp: int, stage: int) -> range:
    """The layers of one pipeline stage (equal shares; layers % pp == 0 is checked up front)."""
    per = num_layers // pp
    return range(stage * per, (stage + 1) * per)


# tensor parallelism -------------------------------------------------------------------------------------------
def _block_plan(cfg: GPTConfig, sequence_parallel: bool) -> dict:
    """Megatron's split: the fused q/k/v and the MLP's first layer by output columns (whole heads: wqkv's rows are
    laid out head by head), wo and w2 by input rows;
    with sequence parallelism the norms work on sequence shards, gathered before and scattered after."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel)

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
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import PrepareModuleOutput, RowwiseParallel

    if not sequence_parallel:
        return {"tok": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())}
    if cfg.position == "learned":  # positions are added to the whole sequence, then it is split
        return {"tok": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
                "": PrepareModuleOutput(output_layouts=Replicate(), desired_output_layouts=Shard(1))}
    return {"tok": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))}  # reduce-scatter


def _head_plan(sequence_parallel: bool, loss_parallel: bool) -> dict:
    """The output layer split by vocabulary columns; with loss_parallel the logits stay sharded for the loss."""
    from torch.distributed.tensor import Replicate, Shard
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


# the stage ----------------------------------------------------------------------------------------------------
@dataclass
class Layout:
    """What this rank holds and with whom it talks."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    dp_rank: int = 0
    tp_rank: int = 0
    pp_rank: int = 0
    mesh: Any = None  # DeviceMesh ("pp", "dp", "tp"), or None for one process
    sequence_parallel: bool = False
    loss_parallel: bool = False
    dp_mode: str = "none"  # none | fsdp2 | ddp | allreduce

    @property
    def first(self) -> bool:
        return self.pp_rank == 0

    @property
    def last(self) -> bool:
        return self.pp_rank == self.pp - 1

    def group(self, name: str):
        return self.mesh[name].get_group() if self.mesh is not None else None


def build_stage(cfg: GPTConfig, lay: Layout, device: torch.device, seed: int, compile_blocks: bool) -> nn.Module:
    """This rank's part of the model: materialised, initialised, tensor-parallel, compiled; not yet data-parallel."""
    with torch.device("meta"):
        model = GPT(cfg, stage_layers(cfg.num_layers, lay.pp, lay.pp_rank), first=lay.first, last=lay.last)
    tp_mesh = lay.mesh["tp"] if lay.tp > 1 else None
    sp = lay.sequence_parallel

    def make(part: nn.Module, prefix: str, plan: dict | None) -> None:
        part.to_empty(device=device)
        init_weights(part, cfg, seed, prefix)
        if tp_mesh is not None and plan:
            _parallelize(part, tp_mesh, plan)

    if model.embed is not None:
        make(model.embed, "embed.", _embedding_plan(cfg, sp))
    for name, block in model.layers.items():
        make(block, f"layers.{name}.", _block_plan(cfg, sp))
    if model.norm is not None:
        make(model.norm, "norm.", None)
        make(model.output, "output.", None)
        if tp_mesh is not None:
            _parallelize(model, tp_mesh, _head_plan(sp, lay.loss_parallel))
        if model.embed is not None:
            model.tie_weights()  # both are vocabulary-sharded alike under tp, so the tie holds
    if model.rope is not None:
        model.rope = rope_cache(cfg, device=device)
    if compile_blocks:
        for name, block in list(model.layers.items()):
            model.layers[name] = torch.compile(block)
    return model


def apply_data_parallel(model: nn.Module, lay: Layout, device: torch.device) -> nn.Module:
    if lay.dp_mode == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        dp_mesh = lay.mesh["dp"]
        # Parameters stay gathered from forward to backward (no second all-gather), as Megatron's
        # distributed optimizer keeps them; gradients are reduce-scattered, optimizer state is sharded.
        for block in model.layers.values():
            fully_shard(block, mesh=dp_mesh, reshard_after_forward=False)
        fully_shard(model, mesh=dp_mesh, reshard_after_forward=False)
        return model
    if lay.dp_mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, process_group=lay.group("dp"),
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


def _local(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


# the tied embedding across pipeline stages ---------------------------------------------------------------------
def tied_embedding_group(lay: Layout):
    """With pp > 1 the first stage holds the embedding and the last stage a copy as output layer (Megatron's
    way): their gradients are summed over a group of the two after every step, so both copies stay equal."""
    if lay.pp == 1:
        return None
    mine = None
    for dp_rank in range(lay.dp):
        for tp_rank in range(lay.tp):
            ranks = [(0 * lay.dp + dp_rank) * lay.tp + tp_rank, ((lay.pp - 1) * lay.dp + dp_rank) * lay.tp + tp_rank]
            group = dist.new_group(ranks)  # every rank creates every group, in the same order
            if (dp_rank, tp_rank) == (lay.dp_rank, lay.tp_rank):
                mine = group
    return mine if (lay.first or lay.last) else None


def tied_weight(model: nn.Module, lay: Layout) -> nn.Parameter | None:
    """This stage's copy of the embedding when it is shared with another stage."""
    if lay.pp == 1:
        return None
    inner = model.module if hasattr(model, "module") else model
    if lay.first:
        return inner.embed.tok.weight
    if lay.last:
        return inner.output.weight
    return None


def sync_tied_gradient(weight: nn.Parameter | None, group) -> None:
    if weight is None or group is None or weight.grad is None:
        return
    from torch.distributed.tensor import DTensor

    grad = weight.grad
    if isinstance(grad, DTensor) and grad.placements != weight.placements:
        # The sharded embedding's backward gives a replicated gradient; shard it like the output layer's copy
        # (a local slice, no communication) so the two stages add up equal pieces.
        grad = weight.grad = grad.redistribute(grad.device_mesh, weight.placements)
    dist.all_reduce(_local(grad), group=group)


# gradient norm over every rank ----------------------------------------------------------------------------------
def grad_square_share(params: list[nn.Parameter], lay: Layout, exclude: nn.Parameter | None = None
                      ) -> torch.Tensor:
    """This rank's share of the squared 2-norm of the whole model's gradients: summed over all ranks (one
    all-reduce, by the caller) it is the squared norm. A gradient held alike by several ranks of a stage
    (replicated over dp, or over tp) is divided by its number of copies; the last stage's copy of a tied
    embedding is left out (counted once, on the first stage). Multi-tensor kernels, no host synchronisation."""
    from torch.distributed.tensor import DTensor, Shard

    stage_ranks = lay.dp * lay.tp
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
        square = square + share * torch.nn.utils.get_total_norm(grads, 2.0, foreach=True).float() ** 2
    return square
