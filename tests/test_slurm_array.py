"""A sweep as one SLURM job array (`--executor slurm --array N`) against the real test cluster: submitted, run with at
most N tasks at once, collected as for one job per point."""

from __future__ import annotations

import json

import pytest
from conftest import HANG_S, caraml, cli_env, records_in
from slurm_cluster import needs_slurm
from slurm_cluster import queue as _queue
from slurm_cluster import wait_for as _wait

pytestmark = [needs_slurm, pytest.mark.subprocess]

SUITE = """
workload: image_classification
preset: smoke
params:
  warmup_steps: 1
  measure_steps: 2
  image_size: 32,40
launch:
  launcher: single
  time_limit: "00:10:00"
"""


def test_a_job_array_sweep_ends_with_ok_records(slurm_cluster, tmp_path):
    env = cli_env(SLURM_CONF=slurm_cluster["SLURM_CONF"])
    results = tmp_path / "results"
    suite = tmp_path / "array.yaml"
    suite.write_text(SUITE)
    sub = caraml("sweep", suite, "--system", "CPU", "--executor", "slurm", "--array", "1", "--results", results,
                 env=env, check=0)
    assert "2 jobs submitted" in sub.stderr
    [array] = (results / "sweep" / "jobs").glob("*-array-*.sh")
    assert "#SBATCH --array=0-1%1" in array.read_text()
    jobs = json.loads((results / "sweep-state.json").read_text())["jobs"]
    assert sorted(j.split("_")[1] for j in jobs) == ["0", "1"] and len({j.split("_")[0] for j in jobs}) == 1

    _wait(lambda: not _queue(env), HANG_S, "the array's tasks to end")
    out = caraml("sweep", "--continue", "--results", results, env=env, check=0).stdout
    assert all(f"job {job}: ok" in out for job in jobs), out
    records = records_in(results)
    assert sorted(r["params"]["image_size"] for r in records) == [32, 40]
    assert all(r["status"] == "ok" for r in records)
    assert {f"{r['env']['slurm']['SLURM_ARRAY_JOB_ID']}_{r['env']['slurm']['SLURM_ARRAY_TASK_ID']}"
            for r in records} == set(jobs)
    # --resume: both points are ok, nothing is submitted again
    again = caraml("sweep", suite, "--system", "CPU", "--executor", "slurm", "--array", "--results", results,
                   "--resume", env=env, check=0)
    assert "0 jobs submitted, 2 points skipped" in again.stderr
