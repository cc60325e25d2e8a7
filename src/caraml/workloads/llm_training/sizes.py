"""A GPT's sizes, parameter counts and FLOPs by formula: plain arithmetic, no torch.

The model (model.py) is Megatron's GPT: pre-LayerNorm blocks with biases, q/k/v/output projections,
a GELU (or SwiGLU) MLP, learned or rotary positions, and an output layer tied to the token embedding.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from caraml.workloads.llm_training.config import ModelShape

# Megatron's --make-vocab-size-divisible-by default: the vocabulary is padded to a multiple of 128 x tp.
VOCAB_MULTIPLE = 128

FLOPS_CONVENTION = (
    "training FLOPs per token = 6*N + 12*L*h*s (PaLM/nanoGPT): N = parameters of the matrix products (per layer "
    "q,k,v,o 4h^2 and MLP 2hf, 3hf with SwiGLU; plus the tied output layer V*h; embedding lookups, biases and "
    "norms not counted), 2 FLOPs per multiply-add, backward = 2x forward; attention scores and values "
    "12*L*h*s per token, causal masking not halved, recomputation not counted"
)

CARAML_TFLOPS_FORMULA = (
    "CARAML's Megatron patch (newest, aux/nvidia_megatron_energy_llm_fix.patch): c*f*B*s*L*h^2*(1 + s/(6h) + "
    "V/(16*(f/4)*L*h)) / (t_iter * devices * 1e12), c = 24 (32 with SwiGLU), f = 4 with recompute (selective or "
    "full) else 3, B global batch, V padded vocabulary, t_iter median iteration time; it assumes an MLP of 4h "
    "(the 2024 patch's vocabulary term V/(16*L*h) is the same for f = 4, which CARAML always uses)"
)


def padded_vocab(vocab_size: int, tp: int = 1, multiple: int = VOCAB_MULTIPLE) -> int:
    """Megatron's padding: the next multiple of 128 x tp, so that each tensor-parallel rank holds an equal share."""
    step = multiple * tp
    return int(math.ceil(vocab_size / step) * step)


def parameter_counts(layers: int, hidden: int, ffn: int, vocab: int, positions: int, position: str = "rope",
                     activation: str = "gelu") -> dict[str, int]:
    """Parameters of the model as built (tied output layer counted once)."""
    h, f = hidden, ffn
    up = 2 if activation == "swiglu" else 1  # SwiGLU has a gate and an up projection
    per_layer = (2 * h  # attention LayerNorm
                 + 4 * h * h + 4 * h  # q, k, v, o with biases
                 + 2 * h  # MLP LayerNorm
                 + up * (h * f + f)  # MLP in (and gate)
                 + f * h + h)  # MLP out
    embedding = vocab * h + (positions * h if position == "learned" else 0)
    total = embedding + layers * per_layer + 2 * h  # + final LayerNorm
    matmul = layers * (4 * h * h + (up + 1) * h * f) + vocab * h  # what 6N counts: weights of matrix products
    return {"total": total, "embedding": embedding, "non_embedding": total - embedding, "matmul": matmul}


def flops_per_token(layers: int, hidden: int, ffn: int, vocab: int, seq: int, activation: str = "gelu") -> float:
    """Training FLOPs per token by FLOPS_CONVENTION."""
    matmul = parameter_counts(layers, hidden, ffn, vocab, 0, "rope", activation)["matmul"]
    return 6.0 * matmul + 12.0 * layers * hidden * seq


def caraml_flops_per_iteration(global_batch: int, seq: int, layers: int, hidden: int, vocab: int,
                               recompute: bool, activation: str = "gelu") -> float:
    """FLOPs of one iteration as CARAML's Megatron patch counts them (CARAML_TFLOPS_FORMULA)."""
    f = 4 if recompute else 3
    c = 32 if activation == "swiglu" else 24
    return float(c) * f * global_batch * seq * layers * hidden ** 2 * (
        1 + seq / (6.0 * hidden) + vocab / (16.0 * (f / 4) * layers * hidden))


def sizes(model: "ModelShape", tp: int) -> dict[str, Any]:
    """Everything the record states about the model's size, from its shape and the tensor-parallel size."""
    vocab = padded_vocab(model.vocab_size, tp)
    counts = parameter_counts(model.num_layers, model.hidden_size, model.ffn, vocab, model.max_position_embeddings,
                              model.position, model.activation)
    return {"vocab_size": model.vocab_size, "padded_vocab_size": vocab, "ffn_hidden_size": model.ffn,
            "parameters": counts,
            "flops_per_token": flops_per_token(model.num_layers, model.hidden_size, model.ffn, vocab,
                                               model.seq_length, model.activation)}
