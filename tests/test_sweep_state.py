"""Sweep state under concurrency: two SLURM sweeps into one results folder lose no submitted job."""

from __future__ import annotations

import itertools
import json
import threading

import pytest

from caraml.campaign import slurm, state, sweep

SUITE = """
workload: image_classification
preset: smoke
params:
  warmup_steps: 1
  measure_steps: {steps}
  image_size: 32,40,48,56,64
  batch_size: 4,8
"""


def test_two_sweeps_submitting_into_one_results_folder_lose_no_job(tmp_path, monkeypatch):
    results = str(tmp_path / "results")
    plans = []
    for steps in (3, 5):
        (tmp_path / f"s{steps}.yaml").write_text(SUITE.format(steps=steps))
        plans.append(sweep.plan(str(tmp_path / f"s{steps}.yaml"), [], "CPU", {}))
    ids = itertools.count(1000)
    lock = threading.Lock()
    both_loaded = threading.Barrier(2, timeout=60)  # each sweep has read the state before either saves

    def fake_sbatch(script):
        if not getattr(seen, "first", False):
            seen.first = True
            both_loaded.wait()
        with lock:
            return str(next(ids))

    seen = threading.local()
    monkeypatch.setattr(slurm, "sbatch", fake_sbatch)
    monkeypatch.setattr(slurm, "require_commands", lambda names=None: None)
    # Its write probe is named by process id: two sweeps are two processes, here two threads of one.
    probe_lock, probe = threading.Lock(), slurm.ensure_writable_dir

    def one_probe_at_a_time(*args, **kw):
        with probe_lock:
            return probe(*args, **kw)

    monkeypatch.setattr(slurm, "ensure_writable_dir", one_probe_at_a_time)
    errors = []

    def submit(plan):
        try:
            slurm.submit(plan, results, resume=False, python=None)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=submit, args=(p,)) for p in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    jobs = json.loads(state.path(results).read_text())["jobs"]
    assert len(jobs) == 20 == next(ids) - 1000  # every submitted job is known to the state
    assert {e["point"]["params"]["measure_steps"] for e in jobs.values()} == {3, 5}
    assert not list((tmp_path / "results").glob("*.tmp"))


def test_state_updates_from_two_threads_at_once_are_merged(tmp_path):
    results = tmp_path / "results"
    point = {"id": "p", "workload": "w", "system": "CPU", "params": {}, "world_size": 1, "nodes": 1,
             "devices_per_node": 1}
    start = threading.Barrier(2, timeout=60)

    def add(prefix):
        start.wait()
        for i in range(40):
            state.update(results, {f"{prefix}{i}": {"point": point, "state": "submitted", "submitted_at": "t"}})

    threads = [threading.Thread(target=add, args=(p,)) for p in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert len(state.load(results)["jobs"]) == 80


def _fake_slurm(tmp_path, monkeypatch, known: dict[str, str]):
    """squeue/scontrol/sacct on PATH that know the jobs `known` (job name -> job id), all PENDING."""
    import os
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = (f"#!{sys.executable}\nimport sys\nknown = {known!r}\nargs = sys.argv[1:]\n"
              "if '-n' in args: print(known.get(args[args.index('-n') + 1], ''))\n"
              "elif '--name' in args: pass\n"
              "elif '-j' in args: print('\\n'.join(f'{j} PENDING' for j in args[args.index('-j') + 1].split(',')"
              " if j in known.values()))\n")
    for name in ("squeue", "scontrol", "sacct"):
        (bin_dir / name).write_text(script)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def _one_point_plan(tmp_path):
    (tmp_path / "one.yaml").write_text(SUITE.replace("32,40,48,56,64", "32").replace("4,8", "4").format(steps=3))
    return sweep.plan(str(tmp_path / "one.yaml"), [], "CPU", {})


class Killed(BaseException):
    """The sweep's process dying (SIGKILL) at this point: nothing after it runs."""


def _as_if_its_sweep_died(results):
    """The submission was written down by a sweep process that is gone now (this test's own process stands
    for it while it runs; afterwards the owner is a process that has ended)."""
    import subprocess

    ended = subprocess.Popen(["true"])
    ended.wait()
    data = state.load(results)
    for entry in data["jobs"].values():
        entry["owner"]["pid"] = ended.pid
    state.save(results, data)


@pytest.mark.subprocess
def test_a_sweep_killed_between_sbatch_and_saving_the_job_id_loses_no_job(tmp_path, monkeypatch):
    """SIGKILL after sbatch submitted the job, before the state knew its id. --continue finds the
    job by its name and follows it; nothing is submitted twice."""
    results = str(tmp_path / "results")
    plan = _one_point_plan(tmp_path)
    [point] = plan.points

    def sbatch_then_killed(script):
        raise Killed  # sbatch ran (job 4242 exists in SLURM), then the sweep died before saving it

    monkeypatch.setattr(slurm, "require_commands", lambda names=(): None)
    monkeypatch.setattr(slurm, "sbatch", sbatch_then_killed)
    with pytest.raises(Killed):
        slurm.submit(plan, results, resume=False, python=None)
    _as_if_its_sweep_died(results)
    _fake_slurm(tmp_path, monkeypatch, {f"caraml-image_classification-{point.id}": "4242"})
    report = slurm.collect(results)
    assert report["queued"] == {"4242": "PENDING"}
    jobs = state.load(results)["jobs"]
    assert list(jobs) == ["4242"] and jobs["4242"]["state"] == "submitted"
    assert jobs["4242"]["point"]["id"] == point.id


@pytest.mark.subprocess
def test_a_sweep_killed_before_sbatch_submits_the_point_on_resume(tmp_path, monkeypatch):
    results = str(tmp_path / "results")
    plan = _one_point_plan(tmp_path)

    def killed_before_sbatch(script):
        raise Killed

    monkeypatch.setattr(slurm, "require_commands", lambda names=(): None)
    monkeypatch.setattr(slurm, "sbatch", killed_before_sbatch)
    with pytest.raises(Killed):
        slurm.submit(plan, results, resume=False, python=None)
    _as_if_its_sweep_died(results)
    _fake_slurm(tmp_path, monkeypatch, {})  # SLURM never saw it
    submitted = []
    monkeypatch.setattr(slurm, "sbatch", lambda script: submitted.append(script) or "5000")
    assert slurm.submit(plan, results, resume=True, python=None) == {"submitted": 1, "skipped": 0}
    assert len(submitted) == 1 and list(state.load(results)["jobs"]) == ["5000"]


def test_a_running_sweeps_submission_is_left_alone():
    """Another sweep, alive and between its sbatch and its save, wrote its submission down: not a leftover."""
    import os
    import socket

    from caraml.results.record import now

    mine = {"owner": {"host": socket.gethostname(), "pid": os.getpid()}, "submitted_at": now()}
    assert slurm._owner_gone(mine) is False
    elsewhere = {"owner": {"host": "another-node", "pid": 1}, "submitted_at": now()}
    assert slurm._owner_gone(elsewhere) is False
    assert slurm._owner_gone({**elsewhere, "submitted_at": "2026-01-01T00:00:00+00:00"}) is True
