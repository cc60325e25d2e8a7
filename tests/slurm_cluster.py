"""A real SLURM cluster for the tests: slurmctld and two slurmd started by a session fixture.

Tests that use it are marked `slurm` (conftest adds it for the fixture; `needs_slurm` is the same marker),
which skips them without slurmctld or root and makes them slow; the daemons run as root with auth/none, on free
ports, with their state in a temporary folder, and are stopped by their pid files when the session ends.

Two nodes on this one host: `slurmd -N n1` and `slurmd -N n2` (NodeHostname=localhost, a port each). The default
partition `debug` holds n1 alone, so one-node jobs run one after another as on a one-node cluster; the partition
`multi` (MULTI) holds both, for jobs across two nodes. A task prolog gives each task CARAML_HOSTNAME=its node's
name, so each emulated node has a name of its own in records and energy files (the host name is the same).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from ports import free_port

needs_slurm = pytest.mark.slurm  # conftest skips it without slurmctld or root


MULTI = "multi"  # the partition of both nodes
NODES = ("n1", "n2")


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("slurm")
    for d in ("state", "spool", "log"):
        (root / d).mkdir()
    prolog = root / "task-prolog.sh"  # its `export` lines set the task's environment
    prolog.write_text('#!/bin/sh\necho "export CARAML_HOSTNAME=$SLURMD_NODENAME"\n')
    prolog.chmod(0o755)
    conf = root / "slurm.conf"
    conf.write_text(f"""ClusterName=caramltest
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SlurmctldPort={free_port()}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.%n.log
TaskProlog={prolog}
ReturnToService=2
MinJobAge=600
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
NodeName=n1 NodeHostname=localhost Port={free_port()} CPUs=2 State=UNKNOWN
NodeName=n2 NodeHostname=localhost Port={free_port()} CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=n1 Default=YES MaxTime=INFINITE State=UP
PartitionName={MULTI} Nodes=n[1-2] MaxTime=INFINITE State=UP
""")
    env = dict(os.environ, SLURM_CONF=str(conf))
    subprocess.run(["slurmctld", "-i"], env=env, check=True)
    for node in NODES:
        subprocess.run(["slurmd", "-N", node], env=env, check=True)
    try:
        deadline = time.time() + 180  # bounds a hang: the nodes register within seconds
        while time.time() < deadline:
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=env, capture_output=True, text=True).stdout
            if {line.split()[0] for line in out.splitlines() if line.endswith(" idle")} == set(NODES):
                break
            time.sleep(0.5)
        else:
            pytest.fail("the SLURM nodes did not become idle:\n" + (root / "log" / "slurmctld.log").read_text()[-2000:])
        yield env
    finally:
        stopped = []
        # stop exactly the daemons started here
        for name in (*(f"slurmd.{node}.pid" for node in NODES), "slurmctld.pid"):
            pid_file = root / name
            if pid_file.exists():
                try:
                    pid = int(pid_file.read_text().strip())
                    os.kill(pid, signal.SIGTERM)
                    stopped.append(pid)
                except (ProcessLookupError, ValueError):
                    pass
        deadline = time.time() + 30  # until they are gone (the next session may reuse the ports), not a fixed second
        while time.time() < deadline and any(_alive(pid) for pid in stopped):
            time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (the daemons are not our children, so rarely) counts as gone
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}")


def queue(env) -> list[str]:
    return subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True).stdout.split()
