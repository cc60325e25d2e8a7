"""The command lines a point runs as: `python -m caraml run ...`, alone or under torchrun."""

from __future__ import annotations

import sys
from pathlib import Path

import caraml
from caraml.campaign.expand import Point


def source_root() -> str:
    """The folder holding this `caraml` package: put on PYTHONPATH so workers run this very tree."""
    return str(Path(caraml.__file__).resolve().parents[1])


def value_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def caraml_run_args(point: Point, results: str, json_out: bool = False) -> list[str]:
    """Arguments after `python -m caraml` (or after torchrun's `-m caraml`)."""
    args = ["run", point.workload]
    args += [f"{k}={value_text(v)}" for k, v in point.params.items() if v is not None]
    if point.preset:
        args += ["--preset", point.preset]
    args += ["--system", point.system, "--results", results]
    return args + (["--json"] if json_out else [])


def local_command(point: Point, results: str, python: str | None = None) -> list[str]:
    """One process, or torchrun standalone with one process per device on this machine."""
    python = python or sys.executable
    run = caraml_run_args(point, results, json_out=True)
    if point.world_size == 1:
        return [python, "-m", "caraml", *run]
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={point.devices_per_node}",
            "-m", "caraml", *run]
