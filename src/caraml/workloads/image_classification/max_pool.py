"""ATen's max-pool kernels kept under torch.compile (max_pool_impl=aten): the same math, other kernels.

Inductor lowers max_pool2d to Triton kernels of its own, and its backward stores no argmax: it finds each
window's maximum again from the saved input. On ResNet50's stem pool (3x3, stride 2, a 112 x 112 map) that
backward took 1.48 ms of a 37.7 ms H200 step, about five times its memory floor. ATen's kernels store the argmax
in the forward and send each gradient through it. Wrapped as custom ops, inductor calls them as they are instead
of lowering them. Both take a window's first maximum, so outputs and gradients are the same; the price is the
stored indices (int64, one per output element).
"""

from __future__ import annotations

import torch
from torch.nn.modules.utils import _pair

from caraml.errors import BadInput

if hasattr(torch.library, "custom_op"):  # torch >= 2.4; older ones are refused (kit.torch_features.CUSTOM_OP)
    Tensor = torch.Tensor  # custom_op reads the annotations' types at definition

    @torch.library.custom_op("caraml::max_pool2d", mutates_args=())
    def max_pool2d(x: Tensor, kernel_size: list[int], stride: list[int], padding: list[int], dilation: list[int],
                   ceil_mode: bool) -> tuple[Tensor, Tensor]:
        return torch.ops.aten.max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)

    @max_pool2d.register_fake
    def _max_pool2d_shapes(x, kernel_size, stride, padding, dilation, ceil_mode):
        return torch.ops.aten.max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)

    @torch.library.custom_op("caraml::max_pool2d_backward", mutates_args=())
    def max_pool2d_backward(grad: Tensor, x: Tensor, indices: Tensor, kernel_size: list[int], stride: list[int],
                            padding: list[int], dilation: list[int], ceil_mode: bool) -> Tensor:
        return torch.ops.aten.max_pool2d_with_indices_backward(grad, x, kernel_size, stride, padding, dilation,
                                                                ceil_mode, indices)

    @max_pool2d_backward.register_fake
    def _max_pool2d_backward_shapes(grad, x, indices, kernel_size, stride, padding, dilation, ceil_mode):
        return torch.ops.aten.max_pool2d_with_indices_backward(grad, x, kernel_size, stride, padding, dilation,
                                                                ceil_mode, indices)

    def _keep(ctx, inputs, output):
        x, *window = inputs
        ctx.save_for_backward(x, output[1])  # x for its shape and memory format: the backward writes in its layout
        ctx.window = window

    def _backward(ctx, grad, _grad_indices):
        x, indices = ctx.saved_tensors
        return (max_pool2d_backward(grad, x, indices, *ctx.window),) + (None,) * len(ctx.window)

    max_pool2d.register_autograd(_backward, setup_context=_keep)


class AtenMaxPool2d(torch.nn.Module):
    """A MaxPool2d whose forward and backward are ATen's kernels, also under torch.compile. No parameters, so the
    state dict and the optimizer are the model's own."""

    def __init__(self, pool: torch.nn.MaxPool2d):
        super().__init__()
        self.kernel_size = list(_pair(pool.kernel_size))
        self.stride = list(_pair(pool.stride if pool.stride is not None else pool.kernel_size))
        self.padding, self.dilation = list(_pair(pool.padding)), list(_pair(pool.dilation))
        self.ceil_mode = pool.ceil_mode

    def forward(self, x):
        out, _ = torch.ops.caraml.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                                             self.ceil_mode)
        return out


def use_aten_max_pool(model: torch.nn.Module) -> str:
    """Puts an AtenMaxPool2d in place of each of the model's MaxPool2d; returns what was replaced, for the record."""
    pools = [(name, m) for name, m in model.named_modules() if isinstance(m, torch.nn.MaxPool2d)]
    if not pools:
        raise BadInput("max_pool_impl=aten: this model has no MaxPool2d; use max_pool_impl=compiler")
    for name, pool in pools:
        if pool.return_indices:
            raise BadInput(f"max_pool_impl=aten: {name} returns its indices to the model; use max_pool_impl=compiler")
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent), leaf, AtenMaxPool2d(pool))
    return ", ".join(name for name, _ in pools)
