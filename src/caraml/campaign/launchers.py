"""How a point's command line is made: `python -m caraml run ...`, started by one of the launchers.

A launcher is one `command(job)` method (ReFrame's shape) registered by name in LAUNCHERS; a suite's
`launch.launcher` names one. The same launcher makes the line a local sweep runs and the one a SLURM
job script writes: the job's rendezvous (caraml.campaign.rendezvous), which the executor chooses, is what
differs between the two.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import caraml
from caraml.campaign.rendezvous import Rendezvous, Standalone
from caraml.errors import BadInput, shown

if TYPE_CHECKING:
    from caraml.campaign.expand import SweepPoint

DEFAULT = "torchrun"  # a suite that names no launcher


@dataclass(frozen=True)
class Job:
    """One point as one launch: the interpreter its ranks run, caraml's arguments, and where it runs."""

    point: SweepPoint
    python: str
    run: tuple[str, ...]  # the words after `-m caraml`
    rendezvous: Rendezvous  # how its ranks start and meet: on this machine alone, or in a SLURM job's step


class Launcher(Protocol):
    name: str
    task_per_device: bool  # SLURM starts one task per device (the launcher spawns no ranks), else one per node

    def command(self, job: Job) -> list[str]:
        """The words that run the job's point; a job script quotes each but a ShellWord."""

    def problem(self, nodes: int, devices_per_node: int) -> str | None:
        """Why this launcher cannot start a point of this shape; None when it can."""


class Single:
    """One process, no launcher: `python -m caraml run ...` (under SLURM, srun's one task)."""

    name, task_per_device = "single", False

    def command(self, job: Job) -> list[str]:
        return [job.python, "-m", "caraml", *job.run]

    def problem(self, nodes: int, devices_per_node: int) -> str | None:
        if nodes * devices_per_node > 1:
            return f"launcher=single runs one process, and the point has {nodes * devices_per_node} devices"
        return None


class Torchrun:
    """torchrun spawns one rank per device: standalone on this machine, or one agent per node of a SLURM job
    meeting at the job's first host."""

    name, task_per_device = "torchrun", False

    def command(self, job: Job) -> list[str]:
        return job.rendezvous.torchrun(job.python, job.point, job.run)

    def problem(self, nodes: int, devices_per_node: int) -> str | None:
        return None


class Srun:
    """srun starts one task per device: each is a rank, numbered from SLURM's variables."""

    name, task_per_device = "srun", True

    def command(self, job: Job) -> list[str]:
        job.rendezvous.require_slurm_tasks(job.point, self.name)
        ranks = ('export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS '
                 'LOCAL_WORLD_SIZE=$SLURM_NTASKS_PER_NODE; exec "$@"')
        return ["bash", "-c", ranks, "caraml-task", job.python, "-m", "caraml", *job.run]

    def problem(self, nodes: int, devices_per_node: int) -> str | None:
        return None


LAUNCHERS: dict[str, Launcher] = {launcher.name: launcher for launcher in (Torchrun(), Srun(), Single())}


def get_launcher(name: str) -> Launcher:
    try:
        return LAUNCHERS[name]
    except KeyError:
        raise BadInput(f"launcher={shown(name)} is not valid; choose {_one_of(list(LAUNCHERS))}") from None


def _one_of(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def tasks_per_node(launcher: Launcher, devices_per_node: int) -> int:
    return devices_per_node if launcher.task_per_device else 1


def local_launcher(point: SweepPoint) -> Launcher:
    """What starts the point on this machine: srun needs a SLURM job, so torchrun standalone spawns its
    ranks here whichever launcher the suite names for the cluster."""
    return LAUNCHERS["single" if point.world_size == 1 else "torchrun"]


def source_root() -> str:
    """The folder holding this `caraml` package: put on PYTHONPATH so workers run this very tree."""
    return str(Path(caraml.__file__).resolve().parents[1])


def value_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def caraml_run_args(point: SweepPoint, results: str, json_out: bool = False) -> list[str]:
    """Arguments after `python -m caraml` (or after torchrun's `-m caraml`)."""
    args = ["run", point.workload]
    args += [f"{k}={value_text(v)}" for k, v in point.params.items() if v is not None and k not in _quiet(point)]
    if point.preset:
        args += ["--preset", point.preset]
    args += ["--system", point.system, "--results", results]
    return args + (["--json"] if json_out else [])


def _quiet(point: SweepPoint) -> set[str]:
    """Parameters the run gets anyway (newer ones at their default, not set by the preset): not written out; nor
    the fixed window's length where the point measures until steady (the run would refuse it as a conflict)."""
    from caraml import workloads
    from caraml.params import quiet_defaults
    from caraml.settings import RUN_PARAMS

    wl = workloads.get(point.workload)
    quiet = quiet_defaults(wl.params + RUN_PARAMS, point.params) - set(wl.presets.get(point.preset or "", {}))
    if point.params.get("measure") == "until-steady":
        quiet |= {"measure_steps", "measure_seconds"}
    return quiet


def local_command(point: SweepPoint, results: str, python: str | None = None) -> list[str]:
    """The line that runs the point on this machine and prints its record as JSON."""
    job = Job(point, python or sys.executable, tuple(caraml_run_args(point, results, json_out=True)), Standalone())
    return local_launcher(point).command(job)
