"""The stem convolution on more input channels (stem_pad_channels): the same math, a shape cuDNN likes.

A ResNet's 7x7 stem convolves the 3 image channels. In bf16 NHWC, cuDNN pads those to 8 itself (extra
`nhwcAddPaddingKernel` launches) and runs the stem on an older cutlass kernel (1.64 ms of a 37.7 ms H200 step).
Here the input is padded with zero channels and the weight with zero input channels inside the forward: every
extra product is 0 * 0, so the output and every gradient are those of the unpadded model, and the parameters
are the model's own (no extra weight channel exists, none gets a gradient or weight decay).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from caraml.errors import BadInput


class ZeroChannelPadConv(torch.nn.Module):
    """A Conv2d on its input and weight padded with zero channels up to `channels`. Holds the convolution's own
    parameters: the same names in the state dict, the same order in the optimizer."""

    def __init__(self, conv: torch.nn.Conv2d, channels: int):
        super().__init__()
        self.weight, self.bias = conv.weight, conv.bias
        self.stride, self.padding, self.dilation = conv.stride, conv.padding, conv.dilation
        self.pad = (0, 0, 0, 0, 0, channels - conv.in_channels)  # (W, H, C) from the last dimension

    def forward(self, x):
        return F.conv2d(_padded(x, self.pad), _padded(self.weight, self.pad), self.bias, self.stride, self.padding,
                        self.dilation)


def _padded(t, pad):
    """`t` with zero channels appended, in its memory format (channels_last stays channels_last)."""
    out = F.pad(t, pad)
    if t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous():
        out = out.contiguous(memory_format=torch.channels_last)
    return out


def pad_stem(model: torch.nn.Module, channels: int) -> str:
    """Puts a ZeroChannelPadConv in place of the model's stem, its first convolution on the 3 image channels;
    returns what was padded, for the record."""
    stem = next(((name, m) for name, m in model.named_modules()
                 if isinstance(m, torch.nn.Conv2d) and m.in_channels == 3 and m.groups == 1), None)
    if stem is None:
        raise BadInput(f"stem_pad_channels={channels}: this model has no convolution on the 3 image channels; "
                       "use stem_pad_channels=0")
    name, conv = stem
    if conv.padding_mode != "zeros":
        raise BadInput(f"stem_pad_channels={channels}: the stem convolution {name} pads its border with "
                       f"{conv.padding_mode}, not zeros; use stem_pad_channels=0")
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent), leaf, ZeroChannelPadConv(conv, channels))
    return f"{name}: {conv.in_channels} -> {channels} input channels, the extra ones zeros"
