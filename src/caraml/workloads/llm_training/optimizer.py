"""What the optimizer steps, as Megatron's optimizers do: fp32 main copies of half-precision parameters
(mixed_precision=megatron: Float16Module + the mixed-precision optimizer), and optimizer state sharded over the
data-parallel replicas (distributed_optimizer=zero1: ZeRO-1, Megatron's --use-distributed-optimizer).

ZeRO-1 here: every replica holds every parameter and its full gradient (all-reduced as without sharding); each
parameter is owned by one replica (largest first, to the least loaded), which alone keeps its AdamW state and
steps it; the owners then broadcast the new values, so every replica ends the step with the same parameters. The
updates are the ones an unsharded AdamW computes, so the losses are too.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist
import torch.nn as nn


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """This rank's part of a DTensor (tensor parallel, FSDP2); any other tensor as it is."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch < 2.5: no public DTensor, and no run that makes one (tp and FSDP2 are refused)
        return t
    return t.to_local() if isinstance(t, DTensor) else t


class MainParams:
    """fp32 main copies of the model's half-precision parameters: the gradients move to them after backward, the
    optimizer steps them, and they are copied back (rounded) into the model."""

    def __init__(self, model_params: list[nn.Parameter]):
        self.model_params = model_params
        self.main = [nn.Parameter(p.detach().clone().float()) for p in model_params]
        self._by_model = {id(p): m for p, m in zip(model_params, self.main)}

    def of(self, param: nn.Parameter | None) -> nn.Parameter | None:
        """The main copy of a model parameter."""
        return None if param is None else self._by_model[id(param)]

    @torch.no_grad()
    def grads_to_main(self) -> None:
        """The model's (reduced) gradients as fp32 gradients of the main copies; the half ones are freed."""
        for p, m in zip(self.model_params, self.main):
            m.grad = None if p.grad is None else p.grad.float()
            p.grad = None

    @torch.no_grad()
    def main_to_model(self) -> None:
        for p, m in zip(self.model_params, self.main):
            local_tensor(p).copy_(local_tensor(m))


def owners(sizes: list[int], replicas: int) -> list[int]:
    """Which replica owns each parameter: largest first, each to the replica holding the fewest elements so far
    (ties to the lowest); the same on every replica."""
    load = [0] * replicas
    out = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        r = min(range(replicas), key=lambda r: (load[r], r))
        out[i] = r
        load[r] += sizes[i]
    return out


class ZeroOneOptimizer:
    """An optimizer whose state is sharded over a data-parallel group: this replica steps only the parameters it
    owns (`make(groups)` builds the optimizer of those), then every owner broadcasts its parameters."""

    def __init__(self, groups: list[dict], make: Callable[[list[dict]], torch.optim.Optimizer], group):
        self.group = group
        self.ranks = dist.get_process_group_ranks(group)
        self.rank = dist.get_rank(group)
        self.params = [p for g in groups for p in g["params"]]
        self.owner = owners([local_tensor(p).numel() for p in self.params], len(self.ranks))
        mine = {id(p) for p, o in zip(self.params, self.owner) if o == self.rank}
        own_groups = [{**g, "params": [p for p in g["params"] if id(p) in mine]} for g in groups]
        own_groups = [g for g in own_groups if g["params"]]
        self.inner = make(own_groups) if own_groups else None  # a replica may own nothing (more replicas than tensors)

    @property
    def param_groups(self) -> list[dict]:
        return self.inner.param_groups if self.inner is not None else []

    def step(self) -> None:
        if self.inner is not None:
            self.inner.step()
        self._broadcast()

    @torch.no_grad()
    def _broadcast(self) -> None:
        """Every owner's parameters to every replica, one flat buffer per owner and dtype."""
        from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

        for owner, src in enumerate(self.ranks):
            by_dtype: dict = {}
            for p, o in zip(self.params, self.owner):
                if o == owner:
                    by_dtype.setdefault(local_tensor(p).dtype, []).append(local_tensor(p))
            for tensors in by_dtype.values():
                flat = _flatten_dense_tensors(tensors)
                dist.broadcast(flat, src=src, group=self.group)
                if owner != self.rank:
                    for t, new in zip(tensors, _unflatten_dense_tensors(flat, tensors)):
                        t.copy_(new)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def state_elements(self) -> int:
        """Elements of the parameters whose optimizer state this replica keeps."""
        return sum(local_tensor(p).numel() for p, o in zip(self.params, self.owner) if o == self.rank)
