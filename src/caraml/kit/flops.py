"""FLOPs counted by PyTorch itself (torch.utils.flop_counter), on the meta device: no memory, no compute."""

from __future__ import annotations

from typing import Callable


def count_flops(make_model: Callable, make_inputs: Callable, train: bool = True, loss: Callable | None = None,
                custom_mapping: dict | None = None, device: str = "meta") -> float:
    """FLOPs of one forward (and backward when `train`) of `make_model()` on `make_inputs()`, both made on
    `device` (meta by default: shapes only). `loss(output)` gives the scalar to differentiate (default: the sum
    of the output); `custom_mapping` adds formulas for operations the counter does not know (e.g. FFTs)."""
    return count_flops_by_op(make_model, make_inputs, train, loss, custom_mapping, device)["total"]


def count_flops_by_op(make_model: Callable, make_inputs: Callable, train: bool = True, loss: Callable | None = None,
                      custom_mapping: dict | None = None, device: str = "meta") -> dict:
    """As `count_flops`, with the count of each operation beside the total: {"total": FLOPs, "by_op": {operation
    (an aten overload packet, as custom_mapping keys it): FLOPs}}, so that a workload can report a part (e.g. its
    FFTs) apart."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device(device):
        model = make_model()
        inputs = make_inputs()
    model.train(train)
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    with FlopCounterMode(display=False, custom_mapping=custom_mapping or {}) as counter:
        if train:
            out = model(*inputs)
            (loss(out) if loss else out.sum()).backward()
        else:
            with torch.no_grad():
                model(*inputs)
    by_op = counter.get_flop_counts().get("Global", {})
    return {"total": float(counter.get_total_flops()), "by_op": {op: float(n) for op, n in by_op.items()}}
