"""Run by torchrun in tests/test_llm_caraml.py: train each layout named on the command line for a few iterations
on CPU (gloo); write rank 0's losses and every rank's optimizer-state elements as JSON:
{"name": {"losses": [...], "state_elements": [rank 0's, rank 1's, ...], "parameters": N}, ...}.

    python -m torch.distributed.run --standalone --nproc-per-node 4 tests/llm_zero1_worker.py \
        OUT.json STEPS NAME=key:value,key:value ...
"""

import json
import sys

import torch
import torch.distributed as dist

from caraml import distributed
from caraml.runner import RunSpec, build_bench


def state_elements(bench) -> int:
    """Elements whose AdamW state this rank keeps."""
    opt = bench.optimizer
    if hasattr(opt, "state_elements"):
        return opt.state_elements()
    return sum(p.numel() for g in opt.param_groups for p in g["params"])


def main() -> None:
    out, steps, layouts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    ctx = distributed.launch_env()
    distributed.init(ctx, "cpu")
    found = {}
    for layout in layouts:
        name, _, spec = layout.partition("=")
        overrides = dict(item.split(":", 1) for item in spec.split(",") if item)
        bench = build_bench(RunSpec("llm_training", overrides, "smoke"), device="cpu")
        for _ in range(steps):
            bench.step()
        counts = [None] * dist.get_world_size()
        dist.all_gather_object(counts, state_elements(bench))
        total = sum(p.numel() for p in bench.update_params)
        found[name] = {"losses": bench.loss_values(), "state_elements": counts, "parameters": total,
                       "half_parameters": all(p.dtype != torch.float32 for p in bench.params)}
        bench.close()
    if ctx.is_main:
        with open(out, "w") as handle:
            json.dump(found, handle)
    distributed.shutdown(ctx)
    distributed.end_rank(0)  # not through the interpreter's teardown: see end_rank


if __name__ == "__main__":
    main()
