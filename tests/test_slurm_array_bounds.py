"""What sbatch would refuse or read otherwise, settled when the scripts are written: a job array no longer than the
cluster's MaxArraySize (split into several), a throttle SLURM can hold, and a results folder whose '%' sbatch would
expand in `#SBATCH --output=` (written '%%')."""

from __future__ import annotations

import re

import pytest
from conftest import cli

from caraml.campaign import slurm, sweep

SUITE = """
workload: image_classification
preset: smoke
params:
  image_size: 32,40,48,56,64,72,80
"""


@pytest.fixture
def suite(tmp_path):
    path = tmp_path / "seven.yaml"
    path.write_text(SUITE)
    return path


def _array_scripts(results):
    return sorted((results / "sweep" / "jobs").glob("*-array-*.sh"))


def test_a_throttle_beyond_any_max_array_size_is_one_line(tmp_path, suite):
    proc = cli("sweep", suite, "--executor", "slurm", "--system", "CPU", "--dry-run", "--array",
               "99999999999999999999999", "--results", tmp_path / "r", check=2)
    assert proc.stderr.count("\n") == 1 and "--array" in proc.stderr and "4000001" in proc.stderr, proc.stderr
    assert not (tmp_path / "r").exists()


def test_an_array_longer_than_max_array_size_is_split(tmp_path, suite, monkeypatch):
    monkeypatch.setattr(slurm, "max_array_size", lambda: 3)  # indices 0..2
    results = tmp_path / "r"
    proc = cli("sweep", suite, "--executor", "slurm", "--system", "CPU", "--dry-run", "--array", "--results", results,
               check=0)
    assert "3 job array script(s)" in proc.stderr, proc.stderr
    scripts = _array_scripts(results)
    ranges = sorted(re.search(r"#SBATCH --array=(\S+)", s.read_text()).group(1) for s in scripts)
    assert ranges == ["0-0", "0-2", "0-2"]
    points = [p for s in scripts for p in re.findall(r"/jobs/(\w+)\.sh", s.read_text())]
    assert len(points) == len(set(points)) == 7


def test_max_array_size_is_read_from_slurm(monkeypatch):
    class Done:
        returncode, stdout = 0, "MaxArraySize            = 40001\nMaxJobCount = 10000\n"

    monkeypatch.setattr(slurm.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(slurm.subprocess, "run", lambda *a, **k: Done())
    assert slurm.max_array_size() == 40001
    monkeypatch.setattr(slurm.shutil, "which", lambda name: None)
    assert slurm.max_array_size() == slurm.DEFAULT_MAX_ARRAY_SIZE == 1001


def test_a_percent_in_the_results_folder_reaches_sbatch_doubled(tmp_path, suite, monkeypatch):
    monkeypatch.setattr(slurm, "max_array_size", lambda: slurm.DEFAULT_MAX_ARRAY_SIZE)
    results = tmp_path / "100%j done"
    cli("sweep", suite, "--executor", "slurm", "--system", "CPU", "--dry-run", "--array", "--results", results,
        check=0)
    script = sorted((results / "sweep" / "jobs").glob("*.sh"))[0].read_text()
    [output] = re.findall(r"^#SBATCH --output=(.*)$", script, re.M)
    assert "100%%j done/sweep/logs/" in output and output.rstrip("'").endswith("-%j.out"), output
    [array] = _array_scripts(results)
    [output] = re.findall(r"^#SBATCH --output=(.*)$", array.read_text(), re.M)
    assert "100%%j done/sweep/logs/array-%A_%a.out" in output, output
    assert (results / "sweep" / "logs").is_dir()  # the folder itself, '%' as it is
    plan = sweep.plan(str(suite), [], "CPU", {"image_size": "32"})
    line = slurm.jobscript.sbatch_lines(plan.points[0], {}, str(tmp_path / "a%b" / "x-%j.out"))[-1]
    assert line.endswith("a%%b/x-%j.out"), line
