"""Adding a workload is one package and nothing else: tests/plugins/caraml_toy, found through the
`caraml.workloads` entry point, runs, records, tabulates and sweeps like a built-in one."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT, caraml, cli_env

from caraml.results.record import validate

pytestmark = pytest.mark.subprocess
PLUGINS = ROOT / "tests" / "plugins"


def _env():
    env = cli_env()
    env["PYTHONPATH"] = f"{PLUGINS}:{env['PYTHONPATH']}"
    return env


def test_a_fourth_workload_runs_from_its_own_package(results):
    env = _env()
    listed = caraml("workloads", env=env, check=0).stdout
    assert "toy_regression  (samples/s)" in listed and "features=32" in listed
    proc = caraml("run", "toy_regression", "--preset", "smoke", "precision=bf16", "--results", results, "--json",
                  env=env, check=0)
    record = json.loads(proc.stdout)
    assert validate(record) == [] and record["status"] == "ok"
    assert record["params"]["features"] == 8 and record["params"]["measure_steps"] == 5
    assert record["metrics"]["throughput"]["unit"] == "samples/s"
    assert record["metrics"]["final_loss"] is not None
    assert record["metrics"]["flops_per_unit"] > 0 and record["metrics"]["precision_in_use"] == "bf16"
    # its headline parameters are named in the run's first line
    assert "batch_size=16" in proc.stderr and "precision=bf16" in proc.stderr
    table = caraml("result", "--results", results, "--workload", "toy_regression", env=env, check=0).stdout
    assert "BatchSize" in table and "Loss" in table
    bad = caraml("run", "toy_regression", "features=0", "--results", results, env=env, check=2)
    assert bad.stderr.strip().count("\n") == 0 and "features=0" in bad.stderr


def test_the_fourth_workload_is_not_known_to_caraml_itself():
    """The recipe needs nothing inside caraml: without the plugin folder on the path, it is unknown."""
    code = "from caraml import workloads; print('toy_regression' in workloads.names())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), check=True)
    assert out.stdout.strip() == "False"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), check=True)
    assert out.stdout.strip() == "True"
