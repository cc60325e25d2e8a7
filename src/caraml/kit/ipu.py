"""What every workload's engine=poptorch needs before it builds anything: Graphcore's poptorch, and one process
(PopTorch drives all IPUs of a run from it, the replicas included)."""

from __future__ import annotations

from caraml.errors import BadInput

MISSING = ("engine=poptorch needs Graphcore's poptorch (the Poplar SDK), which is not importable here; run on a "
           "GC200 host inside the SDK's container (caraml container pull --system GC200), or give the workload's "
           "default engine (llm_training: native, image_classification: torch)")


def require_poptorch():
    """The poptorch module; BadInput in one line where it does not import."""
    try:
        import poptorch
    except ImportError:
        raise BadInput(MISSING) from None
    return poptorch


def require_one_process(world_size: int) -> None:
    """BadInput unless this run is one process (the IPUs are PopTorch's replicas, not ours)."""
    if world_size != 1:
        raise BadInput("engine=poptorch runs one process that drives all IPUs (replicas); launch one process")
