"""One training step's backward and optimizer step, shared by the workloads (no torch import at module level)."""

from __future__ import annotations


def backward_and_step(loss, optimizer, scaler=None) -> None:
    """Backward, optimizer step (through the fp16 GradScaler when there is one) and gradients cleared.
    Plain Python over torch calls, so it compiles as part of a compiled train step."""
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
