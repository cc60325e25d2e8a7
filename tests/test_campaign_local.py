"""A real local sweep: each point a `caraml run` subprocess; a failing point is recorded; --resume skips ok ones."""

from __future__ import annotations

import pytest
from conftest import caraml, records_in

pytestmark = pytest.mark.subprocess


def test_local_sweep_records_failures_and_resumes(tmp_path, results):
    suite = tmp_path / "tiny.yaml"
    suite.write_text("""
workload: image_classification
preset: smoke
params:
  model: resnet18
  image_size: 32
  warmup_steps: 1
  measure_steps: 2
  precision: fp32,tf32   # tf32 does not exist on a CPU: that point fails, the sweep goes on
vars:
  global_batch_size: 8
derived:
  batch_size: global_batch_size // devices
""")
    from caraml.campaign import suite as suite_mod
    from caraml.campaign.expand import expand

    points = [p.as_json() for p in expand(suite_mod.load(str(suite)), set(), "CPU")]
    assert len(points) == 2
    proc = caraml("sweep", suite, "--system", "CPU", "--results", results, check=1)
    assert "1 ok" in proc.stderr and "1 failed" in proc.stderr
    by_id = {r["id"]: r for r in records_in(results)}
    assert set(by_id) == {p["id"] for p in points}  # the point id is the record's configuration hash
    statuses = sorted(r["status"] for r in by_id.values())
    assert statuses == ["failed", "ok"]
    failed = next(r for r in by_id.values() if r["status"] == "failed")
    assert "tf32" in failed["error"] and failed["params"]["precision"] == "tf32"

    again = caraml("sweep", suite, "--system", "CPU", "--results", results, "--resume", check=1)
    assert "1 skipped" in again.stderr and "1 failed" in again.stderr
    assert len(records_in(results)) == 3  # the ok point was not rerun; the failed one was
