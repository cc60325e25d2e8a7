"""Whether a run's measured figures describe training: the check behind a Bench's optional `health()`."""

from __future__ import annotations


def weights_not_finite(optimizer, hint: str = "lower lr") -> str | None:
    """Why training diverged, when a parameter the optimizer trains holds NaN or Inf (a loss that went to NaN or
    Inf, or an update too large, leaves them so); None when every one is finite. One host synchronisation, after
    the run; the same on every data-parallel replica, whose weights are equal."""
    import torch

    params = [p for group in optimizer.param_groups for p in group["params"]]
    if not params:
        return None
    local = [p.to_local() if hasattr(p, "to_local") else p for p in params]
    with torch.no_grad():
        finite = torch.stack([t.detach().isfinite().all() for t in local]).cpu().tolist()
    bad = finite.count(False)
    if not bad:
        return None
    return (f"{bad} of the {len(params)} trained parameter tensors hold NaN or Inf after the run: training "
            f"diverged; {hint}")
