"""The LLM comparison's plain loop (bench/llm_bench.py's points plain, micro, plain_2024 and plain_fp8): nanoGPT's loop
over model.py's GPT, no harness: bf16 autocast, forward and loss compiled as one graph, fused AdamW with caraml's
learning-rate warm-up, clipping at norm 1. With `fp8_recipe`, torchao's float8 training for the blocks' linear layers
(the embedding and the tied output layer in bf16), straight from torchao. With `Recipe` CARAML_2024, CARAML's 2024
training as plain PyTorch spells it. torch is imported when a loop is built."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from caraml.workloads.llm_training import sizes

if TYPE_CHECKING:  # llm_setup builds the plain loop's Schedule: a type here, not an import both ways
    from caraml.compare.llm_setup import LLMSetup


@dataclasses.dataclass(frozen=True)
class Schedule:
    """caraml's peak learning rate and its linear warm-up (samples), which the plain loop follows."""

    lr: float
    warmup_samples: int


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What the plain loop trains with. The default is nanoGPT's: bf16 autocast, no dropout, nothing recomputed, one
    micro-batch per iteration."""

    precision: str = "bf16"  # the autocast type; fp16 with torch.amp's GradScaler (a dynamic loss scale)
    dropout: float = 0.0  # on the attention probabilities and the hidden states, as Megatron drops
    recompute: str = "none"  # none | selective: the attention core recomputed in the backward pass
    accumulation: int = 1  # micro-batches per iteration, their gradients summed before one optimizer step


# CARAML's 2024 training (Megatron: fp16, dropout 0.1, selective recompute) in plain PyTorch: fp16 autocast over fp32
# weights where Megatron keeps fp16 weights with fp32 main copies; the same products in the same precision.
CARAML_2024 = Recipe(precision="fp16", dropout=0.1, recompute="selective")


def _to_float8(model, recipe: str, fast_accum: bool) -> None:
    import torch.nn as nn
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    def block_linear(module, fqn):  # caraml's fp8.is_block_linear, whose size check all 800M linears pass
        return isinstance(module, nn.Linear) and fqn.startswith("layers.")

    config = Float8LinearConfig.from_recipe_name(recipe)
    if fast_accum:  # as the caraml points get fp8_fast_accum=true: all three products accumulate fast
        from torchao.float8.config import Float8GemmConfig

        fast = Float8GemmConfig(use_fast_accum=True)
        config = dataclasses.replace(config, gemm_config_output=fast, gemm_config_grad_input=fast,
                                     gemm_config_grad_weight=fast)
    convert_to_float8_training(model, config=config, module_filter_fn=block_linear)


def _model(setup: LLMSetup, device, fp8_recipe: str | None, recipe: Recipe):
    import torch

    from caraml.workloads.llm_training.model import GPT, GPTConfig, init_weights

    m = setup.model
    cfg = GPTConfig(num_layers=m["num_layers"], hidden_size=m["hidden_size"], num_heads=m["num_attention_heads"],
                    ffn_hidden_size=4 * m["hidden_size"], seq_length=m["seq_length"],
                    max_positions=m["max_position_embeddings"], vocab_size=sizes.padded_vocab(setup.vocab),
                    position="rope", recompute=recipe.recompute, attention_dropout=recipe.dropout,
                    hidden_dropout=recipe.dropout)
    torch.manual_seed(42)
    with device:
        model = GPT(cfg)
    init_weights(model, cfg, seed=42)
    if fp8_recipe:
        _to_float8(model, fp8_recipe, "fp8_fast_accum=true" in setup.fp8_set)
    return model, cfg


def plain_step(setup: LLMSetup, micro: int, schedule: Schedule, fp8_recipe: str | None = None,
               recipe: Recipe = Recipe()):
    """step(i) -> the loss of iteration i (the mean over its micro-batches), on the device."""
    import torch
    import torch.nn.functional as F

    from caraml.workloads.llm_training.model import attention_kernels

    device = torch.device(setup.device)
    model, cfg = _model(setup, device, fp8_recipe, recipe)
    half = torch.float16 if recipe.precision == "fp16" else torch.bfloat16
    scaler = torch.amp.GradScaler(device.type, enabled=recipe.precision == "fp16")
    acc = recipe.accumulation

    def forward_loss(x, y):  # forward and loss as one graph, as caraml's compile_scope=model
        return F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten(0, 1))

    if setup.compile:
        forward_loss = torch.compile(forward_loss)
    params = list(model.parameters())
    optimizer = torch.optim.AdamW([{"params": [p for p in params if p.ndim >= 2], "weight_decay": 0.1},
                                   {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}],
                                  lr=schedule.lr, betas=(0.9, 0.999), eps=1e-8,
                                  **({"fused": True} if device.type == "cuda" else {}))
    batches = []
    for _ in range(2):
        tokens = torch.randint(0, setup.vocab, (micro, cfg.seq_length + 1), device=device)
        batches.append((tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()))

    def step(i):
        for group in optimizer.param_groups:  # caraml's warm-up from 0 (the same weights at every step, so the
            group["lr"] = schedule.lr * min(1.0, i * micro * acc / schedule.warmup_samples)  # same numbers pass
        total = 0.0
        for k in range(acc):
            x, y = batches[(i * acc + k) % 2]
            with torch.autocast(device.type, dtype=half), attention_kernels(setup.attention):
                loss = forward_loss(x, y)
            if acc > 1:
                loss = loss / acc
            scaler.scale(loss).backward()
            total = total + loss.detach()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return total

    return step


def plain_loop(setup: LLMSetup, micro: int, steps: int, warmup: int, schedule: Schedule,
               fp8_recipe: str | None = None, recipe: Recipe = Recipe()) -> dict:
    """The plain loop timed: one synchronisation at each end of the measured window; peak memory in GiB."""
    import torch

    device = torch.device(setup.device)
    cuda = device.type == "cuda"
    step = plain_step(setup, micro, schedule, fp8_recipe, recipe)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    for i in range(warmup):
        first = step(i)
    sync()
    warmup_s = time.perf_counter() - start
    start = time.perf_counter()
    for i in range(steps):
        last = step(i)
    sync()
    wall = time.perf_counter() - start
    return {"micro_batch_size": micro, "steps": steps, "wall_s": wall, "warmup_s": warmup_s,
            "grad_accumulation": recipe.accumulation, "step_ms": wall / steps * 1e3,
            **setup.rates(micro * recipe.accumulation * setup.model["seq_length"] * steps / wall),
            "loss_first": float(first), "loss_last": float(last),
            "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None}
