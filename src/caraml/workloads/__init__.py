"""The workload registry: a name maps to a module that defines `WORKLOAD`.

Modules are imported only when asked for, and declaring a workload's parameters never imports
torch, so that listing, validation and sweep expansion stay fast.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from caraml.errors import BadInput
from caraml.params import Param

REGISTRY = {
    "image_classification": "caraml.workloads.image_classification",
    "llm_training": "caraml.workloads.llm_training",
    "fno": "caraml.workloads.fno",
}


@dataclass(frozen=True)
class Workload:
    name: str
    unit: str  # what throughput counts, per second: "images", "tokens", "timesteps"
    params: list[Param]
    presets: dict[str, dict[str, Any]]
    build: Callable[..., Any] | None  # (params, device, dist) -> Bench; None: declared (sweeps expand), not built
    check_device: Callable[..., None] | None = None  # (params, device): BadInput if it can't run there
    description: str = ""
    # (params, devices) -> error message or None: launch-shape checks such as tp*pp dividing devices
    check_launch: Callable[[dict[str, Any], int], str | None] | None = None


def require_built(wl: Workload) -> None:
    """Refuse, as bad input, to run a workload whose parameters are declared but which is not built yet."""
    if wl.build is None:
        raise BadInput(f"workload {wl.name} is not built yet in this version; its sweeps can be expanded "
                       f"(caraml sweep {wl.name} --dry-run) but not run")


def names() -> list[str]:
    return sorted(REGISTRY)


def get(name: str) -> Workload:
    if name not in REGISTRY:
        raise BadInput(f"unknown workload '{name}'; choose one of: " + ", ".join(names()))
    return importlib.import_module(REGISTRY[name]).WORKLOAD
