"""fp8 vs bf16 loss on the CPU (docs/performance.md, "fp8 loss on the CPU"): a small GPT on OSCAR-shaped data,
torchao's tensorwise float8 emulated (float8-rounded operands, products in fp32: CPU _scaled_mm is too slow).
Data first: python -c "from pathlib import Path; import llm_bench; llm_bench.oscar_shaped(Path('/tmp/fp8x'), 50257)"
(PYTHONPATH=src:bench). Run: PYTHONPATH=src python THIS label precision seed lr warmup_samples steps [k=v ...]"""
import dataclasses
import json
import sys
import time

import torch

from caraml.crosscheck import train_losses
from caraml.workloads.llm_training import fp8

torch.set_num_threads(1)
fp8.check = lambda device: None
_lc = fp8.linear_config
fp8.linear_config = lambda recipe, fast_accum=False: dataclasses.replace(_lc(recipe, fast_accum), emulate=True)
label, precision, seed, lr, warm, steps = sys.argv[1:7]
extra = dict(a.split("=", 1) for a in sys.argv[7:])
over = {"model_size": "custom", "num_layers": 4, "hidden_size": 256, "num_attention_heads": 8, "ffn_hidden_size": 0,
        "seq_length": 256, "max_position_embeddings": 256, "vocab_size": 50257, "micro_batch_size": 4,
        "precision": precision, "mixed_precision": "autocast", "recompute": "none", "compile": "none",
        "data": "oscar", "data_path": "/tmp/fp8x/oscar_shaped", "lr": float(lr), "min_lr": 1e-5,
        "lr_warmup_samples": int(warm), "lr_decay_samples": 128_953_125, "clip_grad": 1.0, "weight_decay": 0.1,
        "seed": int(seed), "attention_dropout": 0.0, "hidden_dropout": 0.0, **extra}
t = time.time()
losses = train_losses(over, int(steps), preset="smoke")
json.dump({"label": label, "over": over, "losses": losses, "s": time.time() - t}, open(f"/tmp/fp8x/{label}.json", "w"))
tail = losses[-20:]
print(label, f"{time.time()-t:.0f}s", "first", round(losses[0], 4), "last", round(losses[-1], 4),
      "tail20", round(sum(tail) / len(tail), 4), flush=True)
