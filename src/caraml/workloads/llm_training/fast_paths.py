"""The faster paths a GPT run asked for (precision=fp8, fused_loss, gelu_epilogue, fused_norm_residual), applied
to the model as it is built, and stated in the record (`fast_paths`): what was converted, which loss ran, and
any fallback with its reason. Nothing here is on unless its parameter says so."""

from __future__ import annotations

import torch.nn as nn

from caraml.workloads.llm_training import fp8, fused
from caraml.workloads.llm_training.config import ComputeConfig


class FastPaths:
    def __init__(self, compute: ComputeConfig, device):
        self.compute, self.device = compute, device
        self.fp8_layers: list[str] = []
        self.fused_layers: list[str] = []
        self.loss = None  # loss(hidden, targets) with the head inside, when fused_loss is on
        self.loss_in_use: str | None = None

    @property
    def fp8(self) -> bool:
        return self.compute.precision == "fp8"

    def any_block_change(self) -> bool:
        c = self.compute
        return self.fp8 or c.gelu_epilogue or c.fused_norm_residual

    def convert_block(self, name: str, block: nn.Module) -> None:
        """One transformer block, materialised and initialised, before tensor parallelism and compilation."""
        c = self.compute
        if self.fp8:
            self.fp8_layers += [f"layers.{name}.{n}" for n in fp8.convert(block, c.fp8_recipe, c.fp8_fast_accum)]
        holder = nn.Module()
        holder.layers = nn.ModuleDict({name: block})
        self.fused_layers += fused.apply_levers(holder, c.gelu_epilogue, c.fused_norm_residual)

    def attach_loss(self, model: nn.Module) -> None:
        """fused_loss: the model returns the final norm's output, and the loss applies the (tied) output layer."""
        if self.compute.fused_loss == "none":
            return
        inner = model.module if hasattr(model, "module") else model  # DDP's wrapped module
        backend, self.loss_in_use = fused.loss_backend(self.compute.fused_loss, self.device)
        head = inner.output
        fused.defer_head(head)
        self.loss = lambda hidden, targets: backend(hidden, head.weight, targets)

    def as_dict(self) -> dict:
        c = self.compute
        return {"fp8": {"recipe": c.fp8_recipe, "library": "torchao.float8",
                        "fast_accum": "forward and backward products" if c.fp8_fast_accum else "forward product",
                        "layers": len(self.fp8_layers),
                        "converted": self.fp8_layers[:8] + (["..."] if len(self.fp8_layers) > 8 else []),
                        "bf16": "embedding, output layer, norms, attention core"} if self.fp8 else None,
                "fused_loss": {"asked": c.fused_loss, "in_use": self.loss_in_use} if c.fused_loss != "none" else None,
                "gelu_epilogue": ({"gelu": "tanh" if self.device.type == "cuda" else "exact",
                                   "backward": "pre-activation recomputed"} if c.gelu_epilogue else None),
                "fused_norm_residual": c.fused_norm_residual}
