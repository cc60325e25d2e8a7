"""A sweep repeats each point `repeats` times (`caraml sweep SUITE repeats=N`, or the suite's launch.repeats): each
repeat a run and a record of its own, all of one configuration id; --resume runs only the repeats still missing."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from conftest import caraml, cli, records_in

from caraml.campaign import suite as suite_mod
from caraml.campaign import sweep
from caraml.campaign.expand import apply_overrides, expand
from caraml.errors import BadInput

TINY = """
workload: image_classification
preset: smoke
params:
  model: resnet18
  image_size: 32
  warmup_steps: 1
  measure_steps: 2
  batch_size: 4
launch:
  repeats: {repeats}
"""


def _suite(tmp_path, repeats="2", extra=""):
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY.format(repeats=repeats) + extra)
    return path


def test_each_point_runs_its_repeats_under_one_id(tmp_path):
    [point] = expand(suite_mod.load(str(_suite(tmp_path, "3"))), set(), "CPU")
    runs = sweep.runs([point])
    assert [r.repeat for r in runs] == [1, 2, 3] and {r.id for r in runs} == {point.id}
    assert [r.key for r in runs] == [point.id, f"{point.id}-r2", f"{point.id}-r3"]  # their files and jobs
    assert point.shown["repeats"] == 3 and runs[1].as_json()["repeat"] == 2


def test_repeats_from_the_command_line_replace_the_suites(tmp_path):
    suite = suite_mod.load(str(_suite(tmp_path, "3")))
    apply_overrides(suite, {"repeats": "5"})
    [point] = expand(suite, set(), "CPU")
    assert point.repeats == 5 and len(sweep.runs([point])) == 5
    from caraml.show import point_view

    plan = sweep.plan(str(_suite(tmp_path, "3")), [], "CPU", {"repeats": "5"})
    assert point_view(plan, "1")["launch"]["repeats"] == 5  # `caraml sweep --show` says so


def test_a_suite_without_repeats_runs_each_point_once(tmp_path):
    path = tmp_path / "once.yaml"
    path.write_text(TINY.replace("launch:\n  repeats: {repeats}\n", ""))
    [point] = expand(suite_mod.load(str(path)), set(), "CPU")
    [run] = sweep.runs([point])
    assert (run.repeat, run.key, "repeat" in run.as_json()) == (1, point.id, False)


@pytest.mark.parametrize("value, message", [("0", "repeats=0 must be at least 1"),
                                            ("two", "repeats=two is not a whole number"),
                                            ("2,3", "repeats takes one value")])
def test_bad_repeats_are_one_line(tmp_path, value, message):
    suite = suite_mod.load(str(_suite(tmp_path)))
    apply_overrides(suite, {"repeats": value})
    with pytest.raises(BadInput, match=re.escape(message)):
        expand(suite, set(), "CPU")


def test_resume_runs_the_repeats_still_missing():
    runs = [r for p in _points("a", 3) + _points("b", 1) for r in sweep.runs([p])]
    todo = sweep.still_to_run(runs, Counter({"a": 1, "b": 1}))
    assert [(r.id, r.repeat) for r in todo] == [("a", 2), ("a", 3)]
    assert sweep.still_to_run(runs, Counter()) == runs


def _points(point_id, repeats):
    from caraml.campaign.expand import SweepPoint

    return [SweepPoint(id=point_id, workload="image_classification", system="CPU", preset=None, params={},
                       repeats=repeats)]


def test_slurm_gives_each_repeat_a_job_of_its_own(tmp_path, monkeypatch):
    from caraml.campaign import slurm

    monkeypatch.setattr(slurm, "max_array_size", lambda: slurm.DEFAULT_MAX_ARRAY_SIZE)  # no cluster to ask here
    results = tmp_path / "results"
    cli("sweep", _suite(tmp_path, "2"), "--system", "CPU", "--executor", "slurm", "--dry-run", "--results", results,
        check=0)
    scripts = sorted((results / "sweep" / "jobs").glob("*.sh"))
    names = sorted((re.search(r"--job-name=(\S+)", s.read_text()).group(1) for s in scripts), key=len)
    assert len(scripts) == 2 and names[1] == names[0] + "-r2"  # a job each, found again by its name
    array = cli("sweep", _suite(tmp_path, "2"), "--system", "CPU", "--executor", "slurm", "--dry-run", "--array",
                "--results", tmp_path / "arrays", check=0)
    assert "1 job array script(s)" in array.stderr
    [script] = (tmp_path / "arrays" / "sweep" / "jobs").glob("*array*.sh")
    assert "--array=0-1" in script.read_text()


@pytest.mark.subprocess
def test_a_local_sweep_saves_a_record_per_repeat_and_resumes_the_missing_ones(tmp_path, results):
    suite = _suite(tmp_path, "2")
    proc = caraml("sweep", suite, "--system", "CPU", "--results", results, check=0)
    assert "2 ok" in proc.stderr
    first = records_in(results)
    assert len(first) == 2 and len({r["id"] for r in first}) == 1 and len({r["run_id"] for r in first}) == 2
    again = caraml("sweep", suite, "repeats=3", "--system", "CPU", "--results", results, "--resume", check=0)
    assert "2 skipped" in again.stderr and "1 ok" in again.stderr
    assert len(records_in(results)) == 3
    table = caraml("result", "--results", results, "--format", "rows-json", check=0).stdout
    assert '"runs": 3' in table  # one configuration, its three repeats in one row
