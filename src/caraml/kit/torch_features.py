"""The PyTorch features a run needs, checked before it starts.

A site's container brings its own torch (NGC 24.02 has 2.3, CARAML's ROCm image 2.1), older than the one caraml
is developed on. Each workload declares what its configuration needs (`Workload.torch_features`); the runner
refuses a run whose torch lacks one, in one line naming the feature and the first torch release that has it,
instead of an ImportError from deep inside the step. Presence is probed (an import, an attribute), not read from
the version string: vendor builds such as NGC's 2.3.0a0+ebedce2 backport and omit things.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from caraml.errors import BadInput


@dataclass(frozen=True)
class Feature:
    """A piece of PyTorch that some configurations need."""

    what: str  # what it is for, as the user asked for it: "pipeline parallelism (pp > 1)"
    api: str  # the dotted name torch must have: "torch.distributed.pipelining"
    since: str  # the first torch release that has `api`: "2.4"
    instead: str  # the configuration that does without it: "pp=1"

    def present(self) -> bool:
        return _resolves(self.api)

    def problem(self) -> str:
        """The line that refuses a run needing this feature on this torch."""
        import torch

        return (f"{self.what} needs {self.api}, in torch {self.since} or newer; this torch is {torch.__version__}: "
                f"use a container image with torch >= {self.since}, or {self.instead}")


def _resolves(dotted: str) -> bool:
    """Whether `a.b.c` names something: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:  # noqa: BLE001 - not there, or there but unusable in this build: absent either way
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


# The features the workloads need beyond the oldest torch caraml is tested on (2.3); the releases were read from
# the torch wheels themselves (the module or name first appears in that release).
PIPELINING = Feature("pipeline parallelism (pp > 1)", "torch.distributed.pipelining", "2.4", "pp=1")
TENSOR_PARALLEL = Feature("tensor parallelism (tp > 1)", "torch.distributed.tensor.Replicate", "2.5",  # public DTensor
                          "tp=1")
FSDP2 = Feature("the distributed optimizer (FSDP2)", "torch.distributed.fsdp.fully_shard", "2.6",
                "distributed_optimizer=off")
COMPILE = Feature("torch.compile", "torch.compile", "2.0", "compile=none")
GRAD_SCALER = Feature("gradient scaling (precision=fp16)", "torch.amp.GradScaler", "2.3", "precision=bf16 or fp32")
SDPA_KERNELS = Feature("a chosen attention kernel", "torch.nn.attention.sdpa_kernel", "2.3", "attention=auto")


def missing(features) -> list[Feature]:
    """The features of `features` this torch lacks, each once, in order."""
    seen: list[Feature] = []
    for f in features:
        if f not in seen and not f.present():
            seen.append(f)
    return seen


def require(features) -> None:
    """Refuse, as bad input in one line, a run that needs a feature this torch lacks (the first one missing)."""
    lacking = missing(features)
    if lacking:
        raise BadInput(lacking[0].problem())
