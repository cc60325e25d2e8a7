"""GPT in the shape of Megatron's (and nanoGPT/torchtitan's code): pre-LayerNorm blocks, one fused q/k/v
projection laid out head by head as Megatron's (so tensor parallelism splits it by whole heads), SDPA causal
attention (flash/cuDNN kernels on GPUs), GELU or SwiGLU MLP, learned or rotary positions, output layer tied to
the token embedding. Under autocast the residual stream is kept in the half precision, as Megatron's fp16/bf16
model keeps it; the norms still compute in fp32.

A model can hold only some of its layers (a pipeline stage): `GPT(cfg, layers=range(a, b), first=..., last=...)`.
Layers live in a ModuleDict keyed by their global index, so parameter names are the same in every layout;
weights are initialised from a generator seeded by (seed, parameter name), so every layout (tp, pp, dp)
starts from the same numbers as a single process.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from caraml.kit.precision import autocast_dtype_in_effect

if TYPE_CHECKING:
    from caraml.workloads.llm_training.config import TrainingConfig


@dataclass(frozen=True)
class GPTConfig:
    num_layers: int
    hidden_size: int
    num_heads: int
    ffn_hidden_size: int
    seq_length: int
    max_positions: int
    vocab_size: int  # padded
    position: str = "rope"  # learned | rope
    activation: str = "gelu"  # gelu | swiglu
    init_std: float = 0.0048
    recompute: str = "none"  # none | selective (attention core) | full (each block)
    attention_dropout: float = 0.0  # on the attention probabilities (SDPA's dropout_p: the fused kernels stay)
    hidden_dropout: float = 0.0  # on the embeddings and each block's attention and MLP outputs (Megatron's)
    norm_eps: float = 1e-5
    rope_base: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @classmethod
    def of(cls, cfg: "TrainingConfig", tp: int = 1) -> "GPTConfig":
        """The model as built from a training config: the MLP width resolved, the vocabulary padded for `tp`."""
        m = cfg.model
        return cls(num_layers=m.num_layers, hidden_size=m.hidden_size, num_heads=m.num_attention_heads,
                   ffn_hidden_size=m.ffn, seq_length=m.seq_length, max_positions=m.max_position_embeddings,
                   vocab_size=m.padded_vocab(tp), position=m.position, activation=m.activation,
                   init_std=m.init_std, recompute=cfg.parallel.recompute,
                   attention_dropout=cfg.compute.attention_dropout, hidden_dropout=cfg.compute.hidden_dropout)


# rotary positions ---------------------------------------------------------------------------------------------
def rope_cache(cfg: GPTConfig, device=None) -> torch.Tensor:
    """cos and sin of the rotation angles, (2, positions, head_dim), non-interleaved halves (GPT-NeoX/Megatron)."""
    d = cfg.head_dim
    inv = 1.0 / (cfg.rope_base ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
    angles = torch.outer(torch.arange(cfg.max_positions, device=device, dtype=torch.float32), inv)
    angles = torch.cat((angles, angles), dim=-1)
    return torch.stack((angles.cos(), angles.sin()))


def apply_rope(x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """x: (batch, heads, seq, head_dim)."""
    seq = x.shape[2]
    cos, sin = rope[0, :seq], rope[1, :seq]
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat((-x2, x1), dim=-1)
    return (x.float() * cos + rotated.float() * sin).type_as(x)


# blocks -------------------------------------------------------------------------------------------------------
def attention_kernels(choice: str):
    """A context (made anew per use) that makes SDPA prefer one kernel: `cudnn` puts cuDNN's fused attention first
    (faster than flash on Hopper), the others fall back in PyTorch's order; `auto` is PyTorch's own choice."""
    from contextlib import nullcontext

    from torch.nn.attention import SDPBackend, sdpa_kernel

    if choice == "auto":
        return nullcontext()
    first = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
             "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[choice]
    order = [first] + [b for b in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                                   SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH) if b != first]
    try:
        return sdpa_kernel(order, set_priority=True)
    except TypeError:  # torch without set_priority: only the chosen kernel and the math fallback
        return sdpa_kernel([first, SDPBackend.MATH])


def core_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout: float = 0.0) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        h = cfg.hidden_size
        self.head_dim = cfg.head_dim
        self.wqkv = nn.Linear(h, 3 * h)  # output rows head by head: [q_0 k_0 v_0 q_1 k_1 v_1 ...]
        self.wo = nn.Linear(h, h)
        self.recompute_core = cfg.recompute == "selective"
        self.dropout = cfg.attention_dropout

    def forward(self, x: torch.Tensor, rope: torch.Tensor | None) -> torch.Tensor:
        batch, seq = x.shape[0], x.shape[1]  # the full sequence, also under sequence parallelism
        # -1 heads: under tensor parallelism each rank holds num_heads / tp of them, each with its q, k and v
        qkv = self.wqkv(x).view(batch, seq, -1, 3, self.head_dim)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(3))
        if rope is not None:
            q, k = apply_rope(q, rope), apply_rope(k, rope)
        dropout = self.dropout if self.training else 0.0
        if self.recompute_core and torch.is_grad_enabled():  # the recompute replays the RNG: the same mask
            y = checkpoint(core_attention, q, k, v, dropout, use_reentrant=False)
        else:
            y = core_attention(q, k, v, dropout)
        return self.wo(y.transpose(1, 2).reshape(batch, seq, -1))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        h, f = cfg.hidden_size, cfg.ffn_hidden_size
        self.swiglu = cfg.activation == "swiglu"
        self.w1 = nn.Linear(h, f)
        self.w3 = nn.Linear(h, f) if self.swiglu else None  # the gate
        self.w2 = nn.Linear(f, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            return self.w2(F.silu(self.w3(x)) * self.w1(x))
        return self.w2(F.gelu(self.w1(x)))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.attn_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.mlp = MLP(cfg)
        self.recompute_block = cfg.recompute == "full"
        self.dropout = cfg.hidden_dropout

    def forward(self, x: torch.Tensor, rope: torch.Tensor | None) -> torch.Tensor:
        if self.recompute_block and torch.is_grad_enabled():
            return checkpoint(self._forward, x, rope, use_reentrant=False)
        return self._forward(x, rope)

    def _forward(self, x, rope):
        p = self.dropout if self.training else 0.0
        x = x + F.dropout(self.attn(self.attn_norm(x), rope), p)
        return x + F.dropout(self.mlp(self.mlp_norm(x)), p)


class Embedding(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.pos = nn.Embedding(cfg.max_positions, cfg.hidden_size) if cfg.position == "learned" else None
        self.dropout = cfg.hidden_dropout

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens)
        if self.pos is not None:
            x = x + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        return F.dropout(x, self.dropout if self.training else 0.0)


class GPT(nn.Module):
    """The whole model, or one pipeline stage of it: the first stage embeds tokens, the last one returns logits."""

    def __init__(self, cfg: GPTConfig, layers: Iterable[int] | None = None, first: bool = True, last: bool = True):
        super().__init__()
        self.cfg = cfg
        self.embed = Embedding(cfg) if first else None
        self.layers = nn.ModuleDict({str(i): Block(cfg) for i in (range(cfg.num_layers) if layers is None else layers)})
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps) if last else None
        self.output = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False) if last else None
        if first and last:
            self.tie_weights()
        self.register_buffer("rope", rope_cache(cfg) if cfg.position == "rope" else None, persistent=False)

    def tie_weights(self) -> None:
        self.output.weight = self.embed.tok.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        if self.embed is not None:
            h = self.embed(x)
            dtype = autocast_dtype_in_effect(h.device.type)  # the residual stream in half precision (Megatron's)
            if dtype is not None:
                h = h.to(dtype)
        for layer in self.layers.values():
            h = layer(h, self.rope)
        if self.norm is not None:
            h = self.output(self.norm(h))
        return h


# initialisation -----------------------------------------------------------------------------------------------
def _seed(seed: int, name: str) -> int:
    return (seed * 1_000_003 + zlib.crc32(name.encode())) % (2 ** 63)


def canonical_name(name: str) -> str:
    """The parameter's name in the whole model; an untied output copy (last pipeline stage) is the embedding."""
    name = name.replace("_orig_mod.", "").replace("_checkpoint_wrapped_module.", "")
    return "embed.tok.weight" if name == "output.weight" else name


@torch.no_grad()
def init_weights(module: nn.Module, cfg: GPTConfig, seed: int, prefix: str = "") -> None:
    """Megatron's initialisation: normal(0, init_std) for weights, init_std / sqrt(2 L) for the projections into
    the residual stream (wo, w2), zero biases, unit norms; each parameter from its own generator."""
    out_std = cfg.init_std / math.sqrt(2.0 * cfg.num_layers)
    for name, param in module.named_parameters():
        full = canonical_name(prefix + name)
        if "norm" in full:
            param.fill_(1.0 if full.endswith("weight") else 0.0)
        elif full.endswith("bias"):
            param.zero_()
        else:
            gen = torch.Generator(device=param.device).manual_seed(_seed(seed, full))
            std = out_std if full.endswith(("wo.weight", "w2.weight")) else cfg.init_std
            param.normal_(0.0, std, generator=gen)


def count_flops_per_token(cfg: GPTConfig, batch: int = 2) -> float:
    """Training FLOPs per token counted by torch.utils.flop_counter on one forward + backward on the meta device
    (no memory, no compute): an independent check of sizes.flops_per_token. On the meta device SDPA runs as
    plain matrix products, so attention is counted in full (causal masking not halved); recomputation is off."""
    from dataclasses import replace

    from torch.utils.flop_counter import FlopCounterMode

    cfg = replace(cfg, recompute="none")
    with torch.device("meta"):
        model = GPT(cfg)
        tokens = torch.zeros(batch, cfg.seq_length, dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        model(tokens).float().sum().backward()
    return counter.get_total_flops() / (batch * cfg.seq_length)
