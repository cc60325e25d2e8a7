"""The launcher and executor registries: the command line of each launcher, here and in a SLURM job step."""

from __future__ import annotations

import pytest

from caraml.campaign import launchers
from caraml.campaign.executors import EXECUTORS, get_executor
from caraml.campaign.expand import SweepPoint
from caraml.campaign.launchers import LAUNCHERS, Job, get_launcher, tasks_per_node
from caraml.campaign.rendezvous import ShellWord, SlurmStep, Standalone
from caraml.errors import BadInput

RUN = ("run", "image_classification", "batch_size=8", "--system", "CPU", "--results", "/r")
TORCHRUN = ["-m", "torch.distributed.run"]


def _job(nodes: int, per_node: int, slurm_step: bool, launcher: str = "torchrun") -> Job:
    point = SweepPoint(id="0123456789abcdef", workload="image_classification", system="CPU", preset=None,
                       params={"batch_size": 8}, nodes=nodes, devices_per_node=per_node, launcher=launcher)
    return Job(point, "/py", RUN, SlurmStep() if slurm_step else Standalone())


def test_registry_names_the_three_launchers():
    assert set(LAUNCHERS) == {"torchrun", "srun", "single"}
    assert all(LAUNCHERS[name].name == name for name in LAUNCHERS)
    with pytest.raises(BadInput, match=r"^launcher=mpirun is not valid; choose torchrun, srun or single$"):
        get_launcher("mpirun")


def test_single_is_one_process_here_and_in_a_job_step():
    for step in (False, True):
        assert get_launcher("single").command(_job(1, 1, step)) == ["/py", "-m", "caraml", *RUN]
    assert get_launcher("single").problem(1, 1) is None
    assert "2 devices" in get_launcher("single").problem(2, 1)
    assert "4 devices" in get_launcher("single").problem(1, 4)


@pytest.mark.parametrize("nodes", [1, 2])
def test_torchrun_standalone_here_and_at_the_first_host_in_a_job_step(nodes):
    torchrun = get_launcher("torchrun")
    if nodes == 1:  # only one node is ever local
        assert torchrun.command(_job(1, 4, False)) == [
            "/py", *TORCHRUN, "--standalone", "--nproc-per-node=4", "-m", "caraml", *RUN]
    words = torchrun.command(_job(nodes, 4, True))
    assert words == ["bash", "-c", 'trap "" USR2; exec "$@"', "caraml-torchrun", "/py", *TORCHRUN,
                     f"--nnodes={nodes}", "--nproc-per-node=4", "--rdzv-backend=c10d",
                     '--rdzv-endpoint="$caraml_head":"$MASTER_PORT"', '--rdzv-id="$SLURM_JOB_ID"', "-m", "caraml", *RUN]
    assert [w for w in words if isinstance(w, ShellWord)] == words[10:12]  # only these reach the shell unquoted
    assert tasks_per_node(torchrun, 4) == 1


@pytest.mark.parametrize("nodes", [1, 2])
def test_srun_is_a_task_per_device_ranked_by_slurm(nodes):
    srun = get_launcher("srun")
    words = srun.command(_job(nodes, 4, True, "srun"))
    assert words[:2] == ["bash", "-c"] and "export RANK=$SLURM_PROCID" in words[2]
    assert words[3:] == ["caraml-task", "/py", "-m", "caraml", *RUN]
    assert not any(isinstance(w, ShellWord) for w in words)
    assert tasks_per_node(srun, 4) == 4
    with pytest.raises(BadInput, match="--executor slurm"):
        srun.command(_job(nodes, 4, False, "srun"))


def test_local_runs_srun_points_with_torchrun_and_one_device_alone():
    assert launchers.local_launcher(_job(1, 1, False, "srun").point).name == "single"
    assert launchers.local_launcher(_job(1, 4, False, "srun").point).name == "torchrun"
    line = launchers.local_command(_job(1, 4, False, "srun").point, "/r", "/py")
    assert line[:5] == ["/py", *TORCHRUN, "--standalone", "--nproc-per-node=4"] and line[-1] == "--json"


def test_executor_registry():
    assert set(EXECUTORS) == {"local", "slurm"}
    for name in EXECUTORS:
        executor = get_executor(name)
        assert executor.name == name and callable(executor.dry_run) and callable(executor.run)
    assert get_executor("slurm").needs_system and not get_executor("local").needs_system
    with pytest.raises(BadInput) as exc:
        get_executor("pbs\nx")
    assert str(exc.value) == "unknown executor 'pbs\\nx'; choose one of: local, slurm"
    assert "\n" not in str(exc.value)


SUITE = """
workload: image_classification
preset: smoke
launch:
  launcher: single
  devices_per_node: {per_node}
"""


def _plan(tmp_path, per_node: int):
    from caraml.campaign import sweep

    path = tmp_path / "single.yaml"
    path.write_text(SUITE.format(per_node=per_node))
    return sweep.plan(str(path), [], "CPU", {})


def test_suite_launcher_names_come_from_the_registry(tmp_path):
    from caraml import systems
    from caraml.campaign import jobscript

    [point] = _plan(tmp_path, 1).points
    assert point.launcher == "single"
    script = jobscript.render(point, systems.get("CPU"), jobscript.JobOptions(results="/r", python="/py"), "/l")
    assert "#SBATCH --ntasks-per-node=1" in script
    assert "srun --nodes=1 --ntasks-per-node=1 --cpus-per-task=2 /py -m caraml run image_classification " in script
    with pytest.raises(BadInput, match="launcher=single runs one process, and the point has 2 devices"):
        _plan(tmp_path, 2)
