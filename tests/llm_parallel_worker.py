"""Run by torchrun in tests/test_llm_training.py: train each layout named on the command line for a few
iterations on CPU (gloo) and write rank 0's losses as JSON: {"name": [loss, ...], ...}.

    python -m torch.distributed.run --standalone --nproc-per-node 4 tests/llm_parallel_worker.py \
        OUT.json STEPS NAME=key:value,key:value ...
"""

import json
import sys

from caraml import distributed
from caraml.crosscheck import train_losses


def main() -> None:
    out, steps, layouts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    ctx = distributed.launch_env()
    distributed.init(ctx, "cpu")
    losses = {}
    for layout in layouts:
        name, _, spec = layout.partition("=")
        overrides = dict(item.split(":", 1) for item in spec.split(",") if item)
        losses[name] = train_losses(overrides, steps)
    if ctx.is_main:
        with open(out, "w") as handle:
            json.dump(losses, handle)
    distributed.shutdown(ctx)
    distributed.end_rank(0)  # not through the interpreter's teardown: see end_rank


if __name__ == "__main__":
    main()
