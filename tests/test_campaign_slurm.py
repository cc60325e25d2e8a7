"""End to end against a real single-node SLURM cluster started here: submit, signal, collect."""

from __future__ import annotations

import subprocess

import pytest
from conftest import HANG_S, caraml, cli_env, records_in
from slurm_cluster import needs_slurm
from slurm_cluster import queue as _queue
from slurm_cluster import wait_for as _wait

pytestmark = [needs_slurm, pytest.mark.multiprocess]  # slurm: slow, subprocess; jobs run torchrun


def test_sweep_on_slurm_ok_interrupted_and_lost(slurm_cluster, tmp_path):
    env = cli_env(SLURM_CONF=slurm_cluster["SLURM_CONF"])
    results = tmp_path / "results"
    suite = tmp_path / "two.yaml"
    suite.write_text("""
workload: image_classification
preset: smoke
params:
  warmup_steps: 1
  measure_steps: 3
  image_size: 32,40
derived:   # the second point would run ten minutes: it is stopped by the warning signal
  measure_seconds: "0 if image_size == 32 else 600"
launch:
  devices_per_node: 2      # torchrun, two gloo processes per job
  time_limit: "00:15:00"
""")
    caraml("sweep", suite, "--system", "CPU", "--executor", "slurm", "--results", results, env=env, check=0)
    scripts = sorted((results / "sweep" / "jobs").glob("*.sh"))
    assert len(scripts) == 2 and "--signal=B:USR2@120" in scripts[0].read_text()
    state = __import__("json").loads((results / "sweep-state.json").read_text())
    jobs = {e["point"]["params"]["measure_seconds"]: job for job, e in state["jobs"].items()}
    short, long = jobs[0.0], jobs[600.0]

    logs = results / "sweep" / "logs"
    # What --signal=B:USR2@120 does before the time limit, sent now: to the batch shell only.
    _wait(lambda: any("measuring" in p.read_text() for p in logs.glob(f"*-{long}.out")), HANG_S,
          "the long job to measure")
    subprocess.run(["scancel", "--batch", "--signal=USR2", long], env=env, check=True)
    _wait(lambda: not _queue(env), HANG_S, "both jobs to end")

    out = caraml("sweep", "--continue", "--results", results, env=env, check=0).stdout
    assert f"job {short}: ok" in out and f"job {long}: interrupted" in out
    records = {r["env"]["slurm"]["SLURM_JOB_ID"]: r for r in records_in(results)}
    assert records[short]["status"] == "ok" and records[short]["launch"]["world_size"] == 2
    stopped = records[long]
    assert stopped["status"] == "interrupted" and "SIGUSR2" in stopped["error"]
    assert stopped["metrics"]["throughput"]["value"] > 0  # what it measured before the signal is kept

    # A job that ends without a record (cancelled while queued) is recorded as failed by --continue;
    # --resume skips the ok point and resubmits the rest.
    site = tmp_path / "site"
    site.mkdir()
    (site / "CPU.toml").write_text('[site]\nsbatch_lines = ["--begin=now+1hour"]\n')
    env2 = dict(env, CARAML_SYSTEMS_PATH=str(site))
    sub = caraml("sweep", suite, "--system", "CPU", "--executor", "slurm", "--results", results, "--resume",
                 env=env2, check=0)
    assert "1 jobs submitted, 1 points skipped" in sub.stderr
    waiting = _queue(env)
    assert len(waiting) == 1
    assert f"job {waiting[0]}: still PENDING" in caraml("sweep", "--continue", "--results", results, env=env,
                                                       check=0).stdout
    subprocess.run(["scancel", waiting[0]], env=env, check=True)
    _wait(lambda: not _queue(env), HANG_S, "the cancelled job to leave the queue")
    out = caraml("sweep", "--continue", "--results", results, env=env, check=0).stdout
    assert f"job {waiting[0]}: failed" in out
    lost = [r for r in records_in(results) if r["env"]["slurm"]["SLURM_JOB_ID"] == waiting[0]]
    assert len(lost) == 1 and "CANCELLED" in lost[0]["error"]
