"""Where a sweep's points run: an executor behind a name (`caraml sweep --executor NAME`).

EXECUTORS names the class of each; its module is imported only when the sweep runs, so `--help`
stays instant (the executors bring the workloads, the results store, rich).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Protocol

from caraml.errors import BadInput, shown

if TYPE_CHECKING:
    from caraml.campaign.sweep import Plan

EXECUTORS: dict[str, str] = {  # name -> "module:class"
    "local": "caraml.campaign.local:LocalExecutor",
    "slurm": "caraml.campaign.slurm:SlurmExecutor",
}


class Executor(Protocol):
    name: str
    needs_system: bool  # the plan must name the compute nodes' system: this machine is not one of them

    def dry_run(self, plan: Plan, results: str, python: str | None) -> list[str]:
        """Prepare everything but run nothing; the lines that say what was prepared."""

    def run(self, plan: Plan, results: str, resume: bool, python: str | None) -> int:
        """Run (or submit) the plan's points, print how it went; the exit code of `caraml sweep`."""


# Only jobs a batch system holds outlive `caraml sweep`: collecting them (`--continue`) is SlurmExecutor.collect;
# a local sweep saves each point's record before it returns, so it leaves nothing to collect.


def get_executor(name: str) -> Executor:
    if name not in EXECUTORS:
        raise BadInput(f"unknown executor '{shown(name)}'; choose one of: {', '.join(EXECUTORS)}")
    module, cls = EXECUTORS[name].split(":")
    return getattr(importlib.import_module(module), cls)()
