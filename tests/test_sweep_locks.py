"""A local sweep's point locks: a point another sweep is running is waited for and counted by the record it saved;
a point whose sweep is gone is waited for while it saves its record, then run here; a lock that cannot be taken
is one line. The points themselves are stood in for (no process starts): what is pinned is the bookkeeping."""

from __future__ import annotations

import fcntl
import itertools
import os
import socket
import subprocess
import sys

import pytest
from conftest import cli, records_in

from caraml.campaign import children, local, locks, sweep
from caraml.errors import BadInput
from caraml.results.store import Store

SUITE = """
workload: image_classification
preset: smoke
params:
  model: resnet18
  image_size: 32,40
"""
GONE = 999_999_999  # above any pid_max: no process has it


def _plan(tmp_path):
    path = tmp_path / "two.yaml"
    path.write_text(SUITE)
    return sweep.plan(str(path), [], "CPU", {})


def _record(point, status: str) -> dict:
    record = sweep.missing_record(point.as_json(), "failed", "stand-in")
    record.update(status=status, error=None if status == "ok" else f"{status} stand-in")
    record["metrics"]["throughput"] = {"value": 10.0, "unit": "images/s"}
    return record


@pytest.fixture
def ran(monkeypatch):
    """The points this sweep ran itself (a stand-in saves an ok record for each)."""
    ran = []

    def run_point(point, results, python, env, log, lock):
        os.fstat(lock)  # the point is run holding its lock
        ran.append(point.id)
        record = _record(point, "ok")
        Store(results).save(record)
        return "ok", False, record

    monkeypatch.setattr(children, "run_point", run_point)
    return ran


def _hold(results, point, owner_pid: int):
    locks = results / "sweep" / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    held = open(locks / f"{point.id}.lock", "w")
    fcntl.flock(held, fcntl.LOCK_EX)
    held.write(f"{owner_pid} {socket.gethostname()}\n")
    held.flush()
    return held


def _when_waited_on(monkeypatch, then):
    """Run `then` the first time the sweep waits for a held lock (the holder ends at that moment)."""
    calls = []

    def pause(_seconds):
        if not calls:
            then()
        calls.append(1)

    monkeypatch.setattr(locks, "pause", pause)
    return calls


def test_a_point_another_sweep_runs_is_waited_for_and_its_ok_record_counts(tmp_path, results, monkeypatch, ran,
                                                                          capsys):
    plan = _plan(tmp_path)
    first, second = plan.points
    held = _hold(results, first, os.getpid())  # a sweep that is alive: this process
    claim = locks.claim

    def saved_just_before_the_lock_is_tried(path):  # the other point has saved its record, and not yet ended
        if first.id in path.name and not records_in(results):
            Store(results).save(_record(first, "ok"))
        return claim(path)

    monkeypatch.setattr(locks, "claim", saved_just_before_the_lock_is_tried)
    _when_waited_on(monkeypatch, held.close)
    assert local.LocalExecutor().run(plan, str(results), resume=False, python=None) == 0
    assert ran == [second.id]
    err = capsys.readouterr().err
    assert f"{first.id} is running elsewhere (sweep {os.getpid()} on " in err
    assert f"{first.id} ok, run elsewhere: 10.0 images/s" in err
    assert "caraml: sweep done: 2 ok" in err


def test_a_resume_waits_for_the_point_of_a_killed_sweep_and_then_runs_it(tmp_path, results, monkeypatch, ran,
                                                                         capsys):
    plan = _plan(tmp_path)
    first, second = plan.points
    held = _hold(results, first, GONE)  # its sweep was killed; the point is saving its interrupted record

    def point_saves_and_ends():
        Store(results).save(_record(first, "interrupted"))
        held.close()

    _when_waited_on(monkeypatch, point_saves_and_ends)
    assert local.LocalExecutor().run(plan, str(results), resume=True, python=None) == 0
    assert ran == [second.id, first.id]
    assert "caraml: sweep done: 2 ok" in capsys.readouterr().err
    assert sorted(r["status"] for r in records_in(results)) == ["interrupted", "ok", "ok"]


def test_an_ok_record_from_before_the_sweep_does_not_stand_for_the_held_point(tmp_path, results, monkeypatch, ran):
    plan = _plan(tmp_path)
    first, second = plan.points
    old = Store(results).save(_record(first, "ok"))
    os.utime(old, (1e9, 1e9))
    held = _hold(results, first, os.getpid())
    _when_waited_on(monkeypatch, held.close)  # the other sweep's point ended without a record (killed)
    assert local.LocalExecutor().run(plan, str(results), resume=False, python=None) == 0
    assert ran == [second.id, first.id]


def test_a_point_of_a_gone_sweep_holding_its_lock_past_the_grace_is_not_waited_for_ever(tmp_path, results,
                                                                                       monkeypatch, ran, capsys):
    plan = _plan(tmp_path)
    first, second = plan.points
    monkeypatch.setattr(children, "STOP_GRACE_S", 0.0)
    with _hold(results, first, GONE):  # an orphan that ignores SIGTERM
        calls = _when_waited_on(monkeypatch, lambda: None)
        assert local.LocalExecutor().run(plan, str(results), resume=True, python=None) == 1
    assert ran == [second.id] and calls
    err = capsys.readouterr().err
    assert f"{first.id} is still running elsewhere (its sweep is gone;" in err
    assert "caraml: sweep done: 1 ok, 1 running" in err


def test_a_lock_path_that_is_a_folder_is_one_line(tmp_path, results, ran):
    plan = _plan(tmp_path)
    lock = results / "sweep" / "locks" / f"{plan.points[0].id}.lock"
    lock.mkdir(parents=True)
    with pytest.raises(BadInput, match=f"lock {lock} cannot be opened \\(Is a directory\\); remove it"):
        local.run_local(plan, str(results), resume=False)
    assert ran == []
    proc = cli("sweep", tmp_path / "two.yaml", "--system", "CPU", "--results", results, check=2)
    assert proc.stderr.splitlines()[-1].startswith(f"caraml: error: lock {lock} cannot be opened"), proc.stderr
    assert "Traceback" not in proc.stderr and not (results / "runs").exists()


def test_a_held_lock_is_exclusive_even_within_one_process(tmp_path):
    path = tmp_path / "p.lock"
    fd = locks.claim(path)
    try:
        assert fd is not None and locks.claim(path) is None  # flock: each open file is its own holder
        assert locks.owner_of(path) == (os.getpid(), socket.gethostname())
    finally:
        os.close(fd)
    again = locks.claim(path)
    assert again is not None
    os.close(again)


@pytest.mark.subprocess
def test_a_sweep_on_another_host_is_taken_to_run_and_a_dead_one_here_is_gone():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # a pid that was this host's and is no more
    assert locks.alive((child.pid, "another-node-" + socket.gethostname()))
    assert not locks.alive((child.pid, socket.gethostname())) and not locks.alive(None)
    assert locks.alive((os.getpid(), socket.gethostname()))


def test_the_grace_for_a_gone_sweep_starts_again_whenever_it_is_seen_alive(tmp_path, monkeypatch):
    """A holder seen alive, then gone: its grace counts from when it was last seen gone, not from the first time."""
    seen_alive = iter([False, True, False, False, False, False, False, False])
    now = itertools.count(0, 10)  # each poll 10 s later
    tries = []
    monkeypatch.setattr(locks, "claim", lambda path: tries.append(path) and None)
    monkeypatch.setattr(locks, "owner_of", lambda path: (1, "host"))
    monkeypatch.setattr(locks, "alive", lambda owner: next(seen_alive))
    monkeypatch.setattr(locks.time, "monotonic", lambda: next(now))
    monkeypatch.setattr(locks, "pause", lambda s: None)
    assert locks.wait_for(tmp_path / "p.lock", grace_s=25) is None
    assert len(tries) == 6  # gone at 0, alive at 10, gone from 20: 30 s past it at 50
