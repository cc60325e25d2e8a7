"""The one way a torchvision classifier is made (for training, on the IPU, for counting FLOPs), and its logits."""

from __future__ import annotations


def make_model(name: str, num_classes: int):
    """A torchvision classification model by name, freshly initialised (on torch's current default device)."""
    import torchvision

    return torchvision.models.get_model(name, num_classes=num_classes)


def logits(out):
    """Inception and GoogLeNet return (logits, aux) in training mode."""
    if isinstance(out, tuple):
        return out[0]
    return out
