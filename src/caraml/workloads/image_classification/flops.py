"""Training FLOPs per image, counted by PyTorch on the meta device (caraml.kit.flops): no memory, no compute."""

from __future__ import annotations

from caraml.workloads.image_classification.model import logits, make_model

FLOPS_CONVENTION = (
    "torch.utils.flop_counter on one forward+backward pass at fp32 (2 FLOPs per multiply-add of "
    "convolutions and matrix products, input-gradient of the first layer as torch computes it; "
    "normalisation, activations and the optimizer not counted)"
)
_BATCH = 2  # images counted at once (batch normalisation needs more than one in training mode)


def count_flops_per_image(model_name: str, num_classes: int, image_size: int) -> float:
    """FLOPs of one training step's forward and backward, per image."""
    import torch

    from caraml.kit.flops import count_flops

    total = count_flops(lambda: make_model(model_name, num_classes),
                        lambda: torch.empty(_BATCH, 3, image_size, image_size),
                        train=True, loss=lambda out: logits(out).sum())
    return total / _BATCH
