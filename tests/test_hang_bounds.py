"""The suite's bound on a hang: a command that hangs is ended with every process it started (torchrun's ranks sit in
sessions of their own, their DataLoader workers under them), and fails only the tests that read it."""

from __future__ import annotations

import sys

import pytest
from conftest import HUNG, hung, run, run_all, wait_until

# torchrun's shape: a launcher, a "rank" in a session of its own, a "worker" under it; each says its pid, all hang
RANK = "import os, subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import os, time; " \
       "print(os.getpid(), flush=True); time.sleep(3600)']); print(os.getpid(), flush=True); time.sleep(3600)"
LAUNCHER = [sys.executable, "-c", "import subprocess, sys, time; "
            f"subprocess.Popen([sys.executable, '-c', {RANK!r}], start_new_session=True); time.sleep(3600)"]
BOUND_S = 20  # long enough for three interpreters to start on a loaded machine; the processes sleep an hour


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # ended, its parent yet to reap it
    except FileNotFoundError:
        return True


@pytest.mark.subprocess
def test_a_hung_command_ends_with_all_it_started_and_fails_only_its_own_results():
    got = run_all({"hangs": LAUNCHER, "ends": [sys.executable, "-c", "print('done')"]}, parallel=2, timeout=BOUND_S)
    assert got["ends"].returncode == 0 and got["ends"].stdout == "done\n" and not hung(got["ends"])
    hanging = got["hangs"]
    assert hung(hanging) and hanging.returncode != 0, hanging.stderr
    pids = [int(line) for line in hanging.stdout.split()]  # the rank's and the worker's, through the shared stdout
    assert len(pids) == 2, hanging.stdout
    for pid in pids:
        wait_until(lambda pid=pid: _gone(pid), f"the end of process {pid}", timeout=30)


@pytest.mark.subprocess
def test_run_fails_the_test_of_a_command_that_hangs():
    with pytest.raises(pytest.fail.Exception, match=HUNG):
        run([sys.executable, "-c", "import time; time.sleep(3600)"], timeout=2)
