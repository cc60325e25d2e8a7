"""Both backends' losses on the CPU, printed as JSON: megatron-core calls CUDA throughout, so its hard-coded CUDA
calls are redirected to the CPU here (device factories, streams, the RNG tracker) — a test device, not a way to
run it. Gradient clipping off (megatron-core asserts CUDA gradients there), Megatron's DDP with its FP32
optimizer (its distributed optimizer needs CUDA buffers). Usage: python megatron_cpu_worker.py JSON_OVERRIDES STEPS
"""

import contextlib
import json
import sys
import warnings

import torch

warnings.filterwarnings("ignore")


def _on_cpu(factory):
    def made(*args, **kwargs):
        if "cuda" in str(kwargs.get("device", "")):
            kwargs["device"] = "cpu"
        return factory(*args, **kwargs)
    return made


class _Stream:
    def wait_event(self, event):
        pass

    def wait_stream(self, stream):
        pass


torch.cuda.current_device = lambda: "cpu"
torch.cuda.current_stream = lambda *a: _Stream()
for _name in ("tensor", "zeros", "ones", "empty", "full", "arange", "zeros_like", "empty_like"):
    setattr(torch, _name, _on_cpu(getattr(torch, _name)))

import megatron.core.fusions.fused_softmax as fused_softmax  # noqa: E402
import megatron.core.transformer.utils as transformer_utils  # noqa: E402
from megatron.core.tensor_parallel import random as megatron_random  # noqa: E402


def _causal(sq):
    return torch.triu(torch.ones(sq, sq), diagonal=1).bool()


transformer_utils.get_default_causal_mask = fused_softmax.get_default_causal_mask = _causal
megatron_random.CudaRNGStatesTracker.add = lambda self, name, seed: None
megatron_random.CudaRNGStatesTracker.fork = lambda self, name=None: contextlib.nullcontext()

from caraml.contract import RunContext  # noqa: E402
from caraml.distributed import DistContext  # noqa: E402
from caraml.runner import RunSpec, resolve  # noqa: E402
from caraml.workloads.llm_training.bench import GPTBench  # noqa: E402
from caraml.workloads.llm_training.megatron_core import MegatronBench  # noqa: E402

overrides, steps = json.loads(sys.argv[1]), int(sys.argv[2])
out = {}
for backend, make in (("megatron-core", MegatronBench), ("native", GPTBench)):
    cfg = resolve(RunSpec("llm_training", {**overrides, "backend": backend}, preset="smoke")).config
    bench = make(cfg, RunContext(device=torch.device("cpu"), seed=42, dist=DistContext()))
    for _ in range(steps):
        bench.step()
    out[backend] = bench.loss_values()
    bench.close()
print(json.dumps(out))
