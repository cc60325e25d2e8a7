"""Fused kernels for the GPT step, each behind its own parameter and off by default (issue 23's MFU levers):

- `fused_loss`: the output layer and the cross-entropy in one pass over row chunks, so the (tokens x vocabulary)
  logits are never held whole: `chunked` in plain PyTorch (runs anywhere), or liger-kernel's Triton kernel
  (`liger`) where it imports on a GPU, else the chunked one, the fallback named in the record.
- `gelu_epilogue`: the MLP's first matrix product with its bias and GELU as one cuBLASLt epilogue
  (`torch._addmm_activation`); the backward, by hand, recomputes the pre-activation with a bias-epilogue product
  (torch exposes no DGELU epilogue), so the pre-activation is never stored.
- `fused_norm_residual`: the residual add and the MLP's LayerNorm as one autograd node that keeps only the sum and
  the norm's statistics; its backward adds the residual's gradient into the norm's.

Each is checked on the CPU against the plain path, values and gradients (tests/test_llm_fused.py).
"""

from __future__ import annotations

import torch
import torch.nn as nn

LOSS_CHOICES = ("none", "chunked", "liger")
CHUNK_ROWS = 8192  # rows of logits alive at once: 8192 x 50304 fp32 = 1.6 GB on the 800M


def _autocast_dtype(device_type: str):
    from caraml.kit.precision import autocast_dtype_in_effect

    return autocast_dtype_in_effect(device_type)


# fused linear + cross-entropy -----------------------------------------------------------------------------------
class ChunkedLinearCrossEntropy(torch.autograd.Function):
    """mean over rows of cross_entropy(hidden @ weight.T, targets), its gradients computed chunk by chunk in the
    forward (as liger does): only `chunk` rows of logits exist at a time, in fp32."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk, dtype):
        rows = hidden.shape[0]
        h = hidden.to(dtype)
        w = weight.to(dtype)
        grad_h = torch.empty_like(h)
        wide = torch.promote_types(dtype, torch.float32)  # the softmax in fp32 at least
        grad_w = torch.zeros(weight.shape, dtype=wide, device=weight.device)
        total = torch.zeros((), dtype=wide, device=hidden.device)
        for start in range(0, rows, chunk):
            hc, tc = h[start:start + chunk], targets[start:start + chunk]
            logits = (hc @ w.t()).to(wide)
            lse = torch.logsumexp(logits, dim=-1)
            total += (lse - logits.gather(1, tc[:, None]).squeeze(1)).sum()
            grad = torch.softmax(logits, dim=-1)  # d(sum of losses)/d(logits) = softmax - one-hot
            grad[torch.arange(tc.shape[0], device=tc.device), tc] -= 1.0
            grad = grad.to(dtype)
            grad_h[start:start + chunk] = grad @ w
            grad_w += (grad.t() @ hc).to(wide)
        ctx.save_for_backward(grad_h, grad_w)
        ctx.rows, ctx.hidden_dtype, ctx.weight_dtype = rows, hidden.dtype, weight.dtype
        return total / rows

    @staticmethod
    def backward(ctx, grad_loss):
        grad_h, grad_w = ctx.saved_tensors
        scale = grad_loss / ctx.rows
        return (grad_h * scale).to(ctx.hidden_dtype), (grad_w * scale).to(ctx.weight_dtype), None, None, None


def chunked_linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                                 chunk: int = CHUNK_ROWS) -> torch.Tensor:
    """Mean cross-entropy of the logits hidden @ weight.T against targets, never holding all logits: hidden
    (..., h), weight (V, h), targets (...). The products run in autocast's dtype where autocast is on."""
    dtype = _autocast_dtype(hidden.device.type) or hidden.dtype
    with torch.autocast(hidden.device.type, enabled=False):
        return ChunkedLinearCrossEntropy.apply(hidden.reshape(-1, hidden.shape[-1]), weight, targets.reshape(-1),
                                               chunk, dtype)


def liger_loss():
    """liger-kernel's fused linear cross-entropy as loss(hidden, weight, targets), or why it is not usable."""
    try:
        from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss
    except Exception as exc:  # noqa: BLE001 - absent, or its Triton/CUDA imports fail
        return None, f"liger-kernel does not import ({type(exc).__name__}: {str(exc)[:120]})"
    loss = LigerFusedLinearCrossEntropyLoss()

    def apply(hidden, weight, targets):
        dtype = _autocast_dtype(hidden.device.type) or hidden.dtype
        return loss(weight.to(dtype), hidden.reshape(-1, hidden.shape[-1]).to(dtype), targets.reshape(-1))

    return apply, None


LIGER_BROKEN_FROM_TRITON = (3, 5)  # Liger-Kernel#916 (open): its fused linear cross-entropy faults on Triton 3.5+


def triton_version() -> tuple | None:
    from importlib import metadata

    try:
        return tuple(int(p) for p in metadata.version("triton").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return None


def liger_known_broken() -> str | None:
    """Why liger's kernel must not run here, where a known fault would kill the run (an illegal memory access
    cannot be caught: the CUDA context is lost); None otherwise."""
    version = triton_version()
    if version is not None and version >= LIGER_BROKEN_FROM_TRITON:
        return (f"liger's fused linear cross-entropy faults with an illegal memory access under Triton "
                f"{'.'.join(map(str, version))} (Liger-Kernel#916; seen on the H200 with liger-kernel 0.8.5, "
                f"torch 2.11)")
    return None


def loss_backend(choice: str, device: torch.device):
    """(loss(hidden, weight, targets), what runs) for fused_loss=`choice` on `device`: liger where it imports on a
    GPU and has no known fault with this Triton, else the chunked PyTorch one, the reason named."""
    if choice == "liger":
        if device.type != "cuda":
            return chunked_linear_cross_entropy, f"chunked (liger needs a CUDA GPU; this run is on {device.type})"
        broken = liger_known_broken()
        if broken:
            return chunked_linear_cross_entropy, f"chunked ({broken})"
        fn, why = liger_loss()
        if fn is not None:
            return fn, "liger"
        return chunked_linear_cross_entropy, f"chunked ({why})"
    return chunked_linear_cross_entropy, "chunked"


# GELU-bias epilogue -----------------------------------------------------------------------------------------------
def epilogue_gelu_kind(device_type: str) -> str:
    """The GELU torch._addmm_activation computes: cuBLASLt's tanh approximation on CUDA, the exact one on CPU."""
    return "tanh" if device_type == "cuda" else "none"


class LinearGelu(torch.autograd.Function):
    """gelu(x @ weight.T + bias) as one matrix product with a bias+GELU epilogue; the backward recomputes the
    pre-activation (a bias-epilogue product) instead of storing it, then applies GELU's derivative by hand."""

    @staticmethod
    def forward(ctx, x, weight, bias, dtype):
        x2, w, b = x.reshape(-1, x.shape[-1]).to(dtype), weight.to(dtype), bias.to(dtype)
        out = torch._addmm_activation(b, x2, w.t(), use_gelu=True)
        ctx.save_for_backward(x2, weight, bias)
        ctx.dtype, ctx.shape, ctx.x_dtype = dtype, x.shape, x.dtype
        return out.view(*x.shape[:-1], -1)

    @staticmethod
    def backward(ctx, grad_out):
        x2, weight, bias = ctx.saved_tensors
        dtype = ctx.dtype
        w = weight.to(dtype)
        wide = torch.promote_types(dtype, torch.float32)  # GELU's derivative in fp32 at least
        pre = torch.addmm(bias.to(dtype), x2, w.t()).to(wide)
        g = grad_out.reshape(-1, grad_out.shape[-1]).to(wide)
        if epilogue_gelu_kind(x2.device.type) == "tanh":
            k = 0.7978845608028654  # sqrt(2 / pi)
            inner = k * (pre + 0.044715 * pre ** 3)
            t = torch.tanh(inner)
            slope = 0.5 * (1 + t) + 0.5 * pre * (1 - t * t) * k * (1 + 3 * 0.044715 * pre * pre)
        else:
            cdf = 0.5 * (1 + torch.erf(pre * 0.7071067811865476))
            slope = cdf + pre * torch.exp(-0.5 * pre * pre) * 0.3989422804014327
        grad_pre = (g * slope).to(dtype)
        grad_x = (grad_pre @ w).view(ctx.shape).to(ctx.x_dtype)
        grad_w = (grad_pre.t() @ x2).to(weight.dtype)
        grad_b = grad_pre.to(wide).sum(0).to(bias.dtype)
        return grad_x, grad_w, grad_b, None


def linear_gelu(x: torch.Tensor, linear: nn.Linear) -> torch.Tensor:
    dtype = _autocast_dtype(x.device.type) or x.dtype
    with torch.autocast(x.device.type, enabled=False):
        return LinearGelu.apply(x, linear.weight, linear.bias, dtype)


# residual add + LayerNorm -------------------------------------------------------------------------------------------
class AddLayerNorm(torch.autograd.Function):
    """(s, layer_norm(s)) for s = x + y: the norm in fp32 (as autocast runs it), s in x's dtype; one node whose
    backward adds the gradient arriving at s to the norm's input gradient."""

    @staticmethod
    def forward(ctx, x, y, weight, bias, eps):
        s = x + y
        wide = torch.promote_types(s.dtype, torch.float32)  # the norm in fp32 at least, as autocast runs it
        normed, mean, rstd = torch.native_layer_norm(s.to(wide), (s.shape[-1],), weight, bias, eps)
        ctx.save_for_backward(s, weight, bias, mean, rstd)
        return s, normed

    @staticmethod
    def backward(ctx, grad_s, grad_normed):
        s, weight, bias, mean, rstd = ctx.saved_tensors
        wide = mean.dtype
        grad_in, grad_w, grad_b = torch.ops.aten.native_layer_norm_backward(
            grad_normed.to(wide), s.to(wide), (s.shape[-1],), mean, rstd, weight, bias, [True, True, True])
        if grad_s is not None:
            grad_in = grad_in + grad_s.to(wide)
        grad_in = grad_in.to(s.dtype)
        return grad_in, grad_in, grad_w, grad_b, None


def add_layer_norm(x: torch.Tensor, y: torch.Tensor, norm: nn.LayerNorm) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.autocast(x.device.type, enabled=False):
        return AddLayerNorm.apply(x, y.to(x.dtype), norm.weight, norm.bias, norm.eps)


# applying the levers to a built model --------------------------------------------------------------------------------
def epilogue_mlp_forward(mlp, x):
    """An MLP's forward with the first product's bias and GELU as one epilogue (gelu MLPs only)."""
    return mlp.w2(linear_gelu(x, mlp.w1))


def fused_block_forward(block, x, rope):
    """A block's forward with the residual add and the MLP's norm as one node (AddLayerNorm)."""
    s, normed = add_layer_norm(x, block.attn(block.attn_norm(x), rope), block.mlp_norm)
    return s + block.mlp(normed)


def apply_levers(model: nn.Module, gelu_epilogue: bool, fused_norm_residual: bool) -> list[str]:
    """Switch the blocks of a built model (before tensor parallelism, compilation and data parallelism) to the
    fused paths asked for; the parameters and their names are unchanged. Returns what was switched."""
    from types import MethodType

    done = []
    for name, block in model.layers.items():
        if gelu_epilogue:
            block.mlp.forward = MethodType(epilogue_mlp_forward, block.mlp)
            done.append(f"layers.{name}.mlp: gelu epilogue")
        if fused_norm_residual:
            block._forward = MethodType(fused_block_forward, block)
            done.append(f"layers.{name}: add+norm")
    return done


def defer_head(head: nn.Linear) -> None:
    """The output layer passes its input through (its weight stays the tied parameter): the fused loss applies
    it, chunk by chunk."""
    head.forward = lambda hidden: hidden
