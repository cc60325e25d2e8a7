"""A SLURM sweep whose results folder fills up or cannot take its files: one line, exit 2, and no submitted job
goes unnamed (the state write after sbatch failing says which job was submitted and how it is found again)."""

from __future__ import annotations

import errno

import pytest
from conftest import cli

from caraml.campaign import slurm, state, sweep
from caraml.errors import BadInput

SUITE = """
workload: image_classification
preset: smoke
params:
  image_size: 32
"""


@pytest.fixture
def plan(tmp_path):
    (tmp_path / "one.yaml").write_text(SUITE)
    return sweep.plan(str(tmp_path / "one.yaml"), [], "CPU", {})


@pytest.fixture
def submitted(monkeypatch):
    jobs = []
    monkeypatch.setattr(slurm, "require_commands", lambda names=None: None)
    monkeypatch.setattr(slurm, "sbatch", lambda script: jobs.append(script) or "4242")
    return jobs


def _disk_full_after(monkeypatch, writes: int):
    """The state's writes fail with ENOSPC after the first `writes` of them."""
    real, done = state.tempfile.mkstemp, []

    def mkstemp(*args, **kwargs):
        if len(done) >= writes:
            raise OSError(errno.ENOSPC, "No space left on device")
        done.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(state.tempfile, "mkstemp", mkstemp)


def test_a_full_disk_before_sbatch_is_one_line_and_submits_nothing(tmp_path, plan, submitted, monkeypatch):
    results = tmp_path / "results"
    _disk_full_after(monkeypatch, 0)
    with pytest.raises(BadInput, match=f"sweep state {results / state.FILE} cannot be written "
                                       r"\(No space left on device\)"):
        slurm.submit(plan, str(results), resume=False, python=None)
    assert submitted == []
    proc = cli("sweep", tmp_path / "one.yaml", "--executor", "slurm", "--system", "CPU", "--results", results,
               check=2)
    assert proc.stderr.startswith("caraml: error: sweep state ") and proc.stderr.count("\n") == 1, proc.stderr
    assert not list(results.glob(".sweep-state*"))


def test_a_full_disk_after_sbatch_names_the_submitted_job(tmp_path, plan, submitted, monkeypatch):
    results = tmp_path / "results"
    _disk_full_after(monkeypatch, 1)  # the submission is written down; the job id is not
    with pytest.raises(BadInput) as refused:
        slurm.submit(plan, str(results), resume=False, python=None)
    assert len(submitted) == 1
    message = str(refused.value)
    assert "cannot be written (No space left on device)" in message
    assert f"job 4242 ({plan.points[0].id}) was submitted" in message and "--continue" in message
    [entry] = state.load(results)["jobs"].values()  # the submission, findable by its job name
    assert entry["state"] == state.SUBMITTING and entry["job_name"]


def test_a_job_folder_that_cannot_be_made_is_one_line(tmp_path, plan, submitted):
    results = tmp_path / "results"
    (results / "sweep").mkdir(parents=True)
    (results / "sweep" / "jobs").write_text("a file where the job scripts go")
    for dry in ([], ["--dry-run"]):
        proc = cli("sweep", tmp_path / "one.yaml", "--executor", "slurm", "--system", "CPU", "--results", results,
                   *dry, check=2)
        assert proc.stderr.startswith(f"caraml: error: job script {results.resolve() / 'sweep' / 'jobs'}"), proc.stderr
        assert proc.stderr.count("\n") == 1
    assert submitted == []
