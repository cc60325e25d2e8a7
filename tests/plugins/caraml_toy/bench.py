"""The toy workload's Bench: one SGD step of a linear model on random data, built from the kit's parts."""

from __future__ import annotations

import torch

from caraml.contract import BenchInfo
from caraml.kit.data_parallel import wrap_ddp
from caraml.kit.flops import count_flops
from caraml.kit.precision import autocast, precision_in_use


class ToyBench:
    def __init__(self, cfg, ctx):
        torch.manual_seed(ctx.seed + ctx.rank)
        self.device = ctx.device
        make = lambda: torch.nn.Linear(cfg.features, 1)  # noqa: E731
        self.model = wrap_ddp(make().to(ctx.device), ctx.device, ctx.world_size)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=cfg.lr)
        self.autocast = autocast(cfg.precision, ctx.device)
        self.x = torch.randn(cfg.batch_size, cfg.features, device=ctx.device)
        self.y = self.x.sum(dim=1, keepdim=True)
        self.loss = None
        flops = count_flops(make, lambda: torch.empty(cfg.batch_size, cfg.features), train=True)
        self.info = BenchInfo(units_per_step=cfg.batch_size, unit="samples", flops_per_unit=flops / cfg.batch_size,
                              flops_convention="torch.utils.flop_counter: forward + backward of the linear layer",
                              precision=precision_in_use(cfg.precision, ctx.device, tf32_allowed=False))

    def step(self) -> None:
        with self.autocast():
            loss = torch.nn.functional.mse_loss(self.model(self.x).float(), self.y)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.loss = loss.detach()

    def details(self) -> dict:
        return {"final_loss": float(self.loss) if self.loss is not None else None}

    def close(self) -> None:
        self.x = self.y = None
