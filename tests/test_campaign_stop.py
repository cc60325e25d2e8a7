"""A local sweep under a time limit and Ctrl-C: the point's record survives, the sweep goes on or stops cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import HANG_S, caraml, cli, cli_env, kill_tree, records_in, wait_until

SUITE = """
workload: image_classification
preset: smoke
params:
  model: resnet18
  image_size: 32,40
  warmup_steps: 1
vars:
  global_batch_size: 4
derived:
  batch_size: global_batch_size // devices
  measure_steps: "100000 if image_size == 32 else 2"  # the first point runs far past its time limit; \
the second is quick
  time_limit: "'{limit}' if measure_steps > 100 else '00:10:00'"  # the quick point has room on a busy machine
"""


def _suite(tmp_path, limit="00:00:15"):
    path = tmp_path / "long.yaml"
    path.write_text(SUITE.format(limit=limit))
    return path


@pytest.mark.subprocess
def test_point_past_its_time_limit_is_stopped_and_the_sweep_goes_on(tmp_path, results):
    # 100000 steps never end within 15 s: the point is still running when its limit hits, however loaded the
    # machine. Where it was then (measuring on an idle machine, maybe still in setup on a loaded one) the
    # record says; either way it stopped itself on SIGTERM and saved its record.
    proc = caraml("sweep", _suite(tmp_path), "--system", "CPU", "--results", results, check=1)
    by_steps = {r["params"]["measure_steps"]: r for r in records_in(results)}
    assert set(by_steps) == {100000, 2}
    long = by_steps[100000]
    assert long["status"] == "timeout", long["error"]
    assert "time limit 00:00:15 reached" in long["error"]
    assert "stopped by SIGTERM" in long["error"]
    if "during measure" in long["error"]:  # it stopped itself after a step and saved what it measured
        assert 0 < long["metrics"]["measured_steps"] < 100000
    assert by_steps[2]["status"] == "ok"
    assert "1 ok" in proc.stderr and "1 timeout" in proc.stderr


def _measuring(results) -> bool:
    return any("caraml: measuring" in p.read_text() for p in (results / "sweep" / "logs").glob("*.log"))


def _inheriting(disposition):
    """A preexec_fn that sets the SIGINT the sweep inherits, so that the test does not depend on how the suite was
    started: a shell's `cmd &` starts cmd with SIGINT ignored, and exec keeps it ignored."""
    return lambda: signal.signal(signal.SIGINT, disposition)


@pytest.mark.subprocess
@pytest.mark.parametrize("inherited", [signal.SIG_DFL, signal.SIG_IGN], ids=["sigint-default", "sigint-ignored"])
def test_ctrl_c_keeps_the_interrupted_record_and_stops_the_sweep(tmp_path, results, inherited):
    # A terminal's Ctrl-C goes to the whole foreground process group: start the sweep as such a group.
    sweep = subprocess.Popen([sys.executable, "-m", "caraml", "sweep", str(_suite(tmp_path, "01:00:00")),
                              "--system", "CPU", "--results", str(results)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(),
                             process_group=0, preexec_fn=_inheriting(inherited))
    try:
        # The stop is checked after each step, so a Ctrl-C once measuring has begun keeps at least one step.
        wait_until(lambda: _measuring(results), "'caraml: measuring' in the first point's log", proc=sweep)
        os.killpg(sweep.pid, signal.SIGINT)
        out, err = sweep.communicate(timeout=HANG_S)
    finally:
        if sweep.poll() is None:
            kill_tree(sweep)
    assert sweep.returncode == 130, err
    assert "Traceback" not in err
    assert "caraml: sweep interrupted: 1 interrupted; 1 points not run" in err
    assert "caraml: [1/2] " in err and " interrupted: " in err  # the point's line (test_sweep_progress.py)
    assert [ln for ln in out.splitlines() if ln.startswith("│") and " interrupted " in ln]  # the table of what ran
    records = records_in(results)
    assert len(records) == 1  # the second point did not run
    assert records[0]["status"] == "interrupted" and records[0]["params"]["measure_steps"] == 100000
    assert records[0]["metrics"]["measured_steps"] > 0


def _children(pid: int) -> list[int]:
    return [int(c) for task in Path(f"/proc/{pid}/task").iterdir()
            for c in (task / "children").read_text().split()]


def _gone(pid: int) -> bool:
    """The process has ended (a zombie that no init reaps has ended too)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.mark.subprocess
def test_a_sigkilled_sweep_takes_its_running_point_with_it(tmp_path, results):
    """The point runs in a process group of its own; when the sweep is SIGKILLed it must not run on (an orphan
    that a `--resume` would run again beside)."""
    sweep = subprocess.Popen([sys.executable, "-m", "caraml", "sweep", str(_suite(tmp_path, "01:00:00")),
                              "--system", "CPU", "--results", str(results)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
    point = None
    try:
        wait_until(lambda: _measuring(results), "'caraml: measuring' in the first point's log", proc=sweep)
        [point] = _children(sweep.pid)
        # the point holds its lock itself: were it to outlive its sweep, a --resume would leave it alone
        [lock] = (results / "sweep" / "locks").glob("*.lock")
        assert str(lock) in {os.readlink(fd) for fd in Path(f"/proc/{point}/fd").iterdir()}
        sweep.kill()
        sweep.communicate(timeout=HANG_S)
        wait_until(lambda: _gone(point), f"end of the point (pid {point}) after its sweep was SIGKILLed", timeout=120)
        [record] = records_in(results)  # stopped like a Ctrl-C: it saved what it had
        assert record["status"] == "interrupted" and record["params"]["measure_steps"] == 100000
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.communicate()
        if point is not None and not _gone(point):
            os.killpg(point, signal.SIGKILL)  # the point leads its own process group


@pytest.mark.subprocess
def test_hung_point_is_killed_after_the_grace_period_and_recorded_as_timeout(tmp_path, results, monkeypatch):
    """A point that ignores SIGTERM (an NCCL deadlock does) is killed; the sweep writes its record."""
    from caraml.campaign import children, local, sweep
    from caraml.results.record import validate

    hung = tmp_path / "hung-python"
    hung.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import signal, time; "
                    "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'\n")
    hung.chmod(0o755)
    monkeypatch.setattr(children, "STOP_GRACE_S", 1.0)
    plan = sweep.plan(str(_suite(tmp_path, "00:00:02")), [], "CPU", {"measure_steps": "100000", "image_size": "32"})
    start = time.monotonic()
    counts = local.run_local(plan, str(results), resume=False, python=str(hung))
    assert time.monotonic() - start < 300  # killed: the point alone would sleep 600 s
    assert counts == {"timeout": 1}
    [record] = records_in(results)
    assert record["status"] == "timeout" and "time limit 00:00:02 reached" in record["error"]
    assert validate(record) == []


def test_missing_record_follows_the_schema_and_carries_the_point(tmp_path):
    from caraml.campaign import sweep
    from caraml.results.record import validate

    plan = sweep.plan("image_classification", [], "CPU", {}, preset="smoke")
    point = plan.points[0]
    record = sweep.missing_record(point.as_json(), "failed", "SLURM job 7 ended NODE_FAIL without writing a record",
                                  "7", started_at="2025-01-02T03:04:05.000+00:00")
    assert validate(record) == []
    assert record["params"] == point.params  # every effective parameter, typed
    assert record["system"]["tag"] == "CPU" and record["system"]["profile"]["tag"] == "CPU"
    assert record["launch"]["world_size"] == point.world_size and record["launch"]["nodes"] == point.nodes
    assert record["started_at"] == "2025-01-02T03:04:05.000+00:00" and record["finished_at"]
    assert record["run_id"].startswith("20250102T030405000-")
    assert record["env"]["slurm"] == {"SLURM_JOB_ID": "7"} and record["error"].startswith("SLURM job 7")
    local = sweep.missing_record(point.as_json(), "timeout", "time limit reached")
    assert validate(local) == [] and local["started_at"] and local["env"]["slurm"] is None


@pytest.mark.parametrize("text, seconds", [("00:00:20", 20), ("01:00:00", 3600), ("20", 1200), ("5:30", 330),
                                           ("1-00", 86400), ("1-02:03", 93780), ("2-00:00:10", 172810),
                                           ("UNLIMITED", None), ("0", None)])
def test_time_limit_formats(text, seconds):
    from caraml.campaign.sweep import time_limit_seconds

    assert time_limit_seconds(text) == seconds


def test_bad_time_limit_is_one_line(tmp_path, results):
    proc = cli("sweep", _suite(tmp_path, "an hour"), "--system", "CPU", "--results", results, check=2)
    assert proc.stderr.strip() == ("caraml: error: time_limit=an hour is not a SLURM time limit; "
                                   "use MM, HH:MM:SS or D-HH:MM:SS, e.g. 01:00:00")
    assert not (results / "runs").exists()


@pytest.mark.parametrize("executor", ["slurm", "local"])
def test_unwritable_results_directory_is_one_line(tmp_path, executor):
    proc = cli("sweep", _suite(tmp_path), "--executor", executor, "--system", "CPU",
                  *(["--dry-run"] if executor == "slurm" else []), "--results", "/proc/x", check=2)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("caraml: error: results directory /proc/x cannot be written: ")
    assert lines[0].endswith("; pass --results DIR")
