"""Sweep state under concurrency (issue 20): two SLURM sweeps into one results folder lose no submitted job."""

from __future__ import annotations

import itertools
import json
import threading

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
