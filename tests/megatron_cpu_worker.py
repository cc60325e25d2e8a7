"""Both backends' losses and gradient norms on the CPU, printed as JSON: megatron-core calls CUDA throughout, so
its hard-coded CUDA calls are redirected to the CPU here (device factories, streams, the RNG tracker, the CUDA type
its gradient clipping asserts) — a test device, not a way to run it. Runs Megatron's DDP with its FP32 optimizer
(distributed_optimizer=off) or its distributed optimizer (zero1), with or without gradient clipping.
Usage: python megatron_cpu_worker.py JSON_OVERRIDES STEPS, where JSON_OVERRIDES is one dict of smoke-preset
overrides or a list of them (one import of megatron-core for several runs); prints one JSON list, per run
{"native": losses, "megatron-core": losses, "native grad norms": [...], "megatron-core grad norms": [...],
"native caraml-log": {"phase", "iterations"} (the extra phase asked for, the iterations it would time), ...}.
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


_type = torch.Tensor.type


def _as_cuda_type(self, *args, **kwargs):
    """megatron-core's clipping asserts `grad.type() == 'torch.cuda.FloatTensor'`."""
    if args or kwargs or _type(self) != "torch.FloatTensor":
        return _type(self, *args, **kwargs)
    return "torch.cuda.FloatTensor"


torch.Tensor.type = _as_cuda_type
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

from caraml import distributed  # noqa: E402
from caraml.contract import RunContext  # noqa: E402
from caraml.distributed import DistContext  # noqa: E402
from caraml.runner import RunSpec, resolve  # noqa: E402
from caraml.workloads.llm_training import parallel  # noqa: E402
from caraml.workloads.llm_training.bench import GPTBench  # noqa: E402
from caraml.workloads.llm_training.megatron_core import MegatronBench  # noqa: E402

_square_share = parallel.grad_square_share


def _recording_norms(bench, norms: list) -> None:
    """Record each iteration's global gradient norm (before clipping) as the backend computes it."""
    if isinstance(bench, MegatronBench):
        step = bench.optimizer.step

        def stepped():
            done, norm, zeros = step()
            norms.append(float(norm))
            return done, norm, zeros

        bench.optimizer.step = stepped
    else:
        parallel.grad_square_share = lambda *a, **k: _noted(_square_share(*a, **k), norms)


def _noted(square, norms):
    norms.append(float(square.sqrt()))
    return square


def _run(overrides: dict, steps: int) -> dict:
    out = {}
    for backend, make in (("megatron-core", MegatronBench), ("native", GPTBench)):
        cfg = resolve(RunSpec("llm_training", {**overrides, "backend": backend}, preset="smoke")).config
        bench = make(cfg, RunContext(device=torch.device("cpu"), seed=42, dist=DistContext()))
        norms = []
        _recording_norms(bench, norms)
        for _ in range(steps):
            bench.step()
        out[backend], out[f"{backend} grad norms"] = bench.loss_values(), norms
        out[f"{backend} caraml-log"] = {"phase": bench.extra_phase, "iterations": len(bench.run_step_times())}
        bench.close()
    return out


given, steps = json.loads(sys.argv[1]), int(sys.argv[2])
print(json.dumps([_run(overrides, steps) for overrides in (given if isinstance(given, list) else [given])]))
distributed.end_rank(0)  # megatron-core's gloo group: not through the interpreter's teardown (see end_rank)
