"""How a point's ranks start and find each other, which is what differs between where a sweep runs them: on this
machine alone (a local sweep, `caraml run --nproc-per-node`), or as a step of a SLURM job. An executor hands one
to the launchers in the Job, so that a launcher knows only its own command line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from caraml.errors import BadInput

if TYPE_CHECKING:
    from caraml.campaign.expand import SweepPoint


class ShellWord(str):
    """A word the job script's shell expands (`"$caraml_head"`): written as is, so never made from a value."""


class Rendezvous(Protocol):
    def torchrun(self, python: str, point: SweepPoint, run) -> list[str]:
        """The words that have torchrun start the point's ranks of `python -m caraml RUN...`."""

    def require_slurm_tasks(self, point: SweepPoint, launcher: str) -> None:
        """BadInput where there are no SLURM tasks to be the point's ranks."""


def standalone_torchrun(python: str, nproc: int, run) -> list[str]:
    """torchrun starting `nproc` ranks of `python -m caraml RUN...` on this machine alone."""
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", "-m", "caraml", *run]


class Standalone:
    """The ranks start here, under the sweep: torchrun meets on this machine alone; there are no SLURM tasks."""

    def torchrun(self, python: str, point: SweepPoint, run) -> list[str]:
        return standalone_torchrun(python, point.devices_per_node, run)

    def require_slurm_tasks(self, point: SweepPoint, launcher: str) -> None:
        raise BadInput(f"point {point.id}: launcher={launcher} starts its ranks as the tasks of a SLURM job; "
                       "run it with --executor slurm")


class SlurmStep:
    """The ranks start in a step of a SLURM job: they meet at the job's first host, and slurmstepd signals every
    process of the step."""

    def torchrun(self, python: str, point: SweepPoint, run) -> list[str]:
        # torchrun would die of SIGUSR2 (it has no handler) and take the workers with it: it ignores the
        # signal; the workers, signalled by slurmstepd like every process of the step, stop cleanly.
        return ["bash", "-c", 'trap "" USR2; exec "$@"', "caraml-torchrun", python, "-m", "torch.distributed.run",
                f"--nnodes={point.nodes}", f"--nproc-per-node={point.devices_per_node}", "--rdzv-backend=c10d",
                ShellWord('--rdzv-endpoint="$caraml_head":"$MASTER_PORT"'),  # the job script's port
                ShellWord('--rdzv-id="$SLURM_JOB_ID"'), "-m", "caraml", *run]

    def require_slurm_tasks(self, point: SweepPoint, launcher: str) -> None:
        return None
