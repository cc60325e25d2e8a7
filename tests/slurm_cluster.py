"""A real single-node SLURM cluster for the tests: slurmctld and slurmd started by a session fixture.

Tests that use it carry `needs_slurm`; the daemons run as root with auth/none, on free ports, with
their state in a temporary folder, and are stopped by their pid files when the session ends.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time

import pytest

needs_slurm = pytest.mark.skipif(shutil.which("slurmctld") is None or os.geteuid() != 0,
                                 reason="needs Debian's slurmctld/slurmd and root")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("slurm")
    for d in ("state", "spool", "log"):
        (root / d).mkdir()
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
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ReturnToService=2
MinJobAge=600
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
NodeName=localhost CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
""")
    env = dict(os.environ, SLURM_CONF=str(conf))
    subprocess.run(["slurmctld", "-i"], env=env, check=True)
    subprocess.run(["slurmd"], env=env, check=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            out = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True).stdout
            if out.strip() == "idle":
                break
            time.sleep(0.5)
        else:
            pytest.fail("the SLURM node did not become idle:\n" + (root / "log" / "slurmctld.log").read_text()[-2000:])
        yield env
    finally:
        for name in ("slurmd.pid", "slurmctld.pid"):  # stop exactly the daemons started here
            pid_file = root / name
            if pid_file.exists():
                try:
                    os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
                except (ProcessLookupError, ValueError):
                    pass
        time.sleep(1)


def wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}")


def queue(env) -> list[str]:
    return subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True).stdout.split()
