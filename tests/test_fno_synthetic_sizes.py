"""`caraml data fno-synthetic` on a grid too large for the memory or the disk: one line that names the grid (or the
particles) and a size that fits, before anything is allocated or written."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import cli, cli_env

from caraml.errors import BadInput
from caraml.workloads.fno import files
from caraml.workloads.fno.problems import PROBLEMS

RBC2D, PIC1D = PROBLEMS["RBC2D"], PROBLEMS["PIC1D"]
GIB = 2 ** 30


def _nothing_in(folder) -> bool:
    return not folder.exists() or not any(folder.iterdir())


@pytest.fixture
def nothing_made(monkeypatch):
    """No random sample is made (a refusal comes first; a write would take gigabytes here)."""
    import numpy as np

    def refuse(*args, **kwargs):
        raise AssertionError("a sample was about to be made")

    monkeypatch.setattr(np.random, "default_rng", refuse)


def test_a_sample_larger_than_the_memory_is_refused_before_it_is_made(tmp_path, monkeypatch, nothing_made):
    monkeypatch.setattr(files, "available_memory", lambda: 3 * GIB)
    monkeypatch.setattr(files, "_free_space", lambda folder: 10 ** 15)
    with pytest.raises(BadInput) as refused:
        files.write_synthetic(RBC2D, tmp_path / "out", samples=2, spatial=(20000, 20000))
    message = str(refused.value)
    assert message.startswith("--grid 20000x20000: one RBC2D sample takes 11.9 GiB of memory to write, more than "
                              "the 2.4 GiB"), message
    assert "; use a smaller grid, e.g. --grid " in message and "--samples" not in message
    assert _nothing_in(tmp_path / "out")
    monkeypatch.setattr(files, "available_memory", lambda: 3 * GIB)
    with pytest.raises(BadInput, match="^--particles 1000000000: one PIC1D sample takes .* e.g. --particles "):
        files.write_synthetic(PIC1D, tmp_path / "out", samples=2, spatial=(10 ** 9,))


def test_the_suggested_grid_fits(tmp_path, monkeypatch, nothing_made):
    monkeypatch.setattr(files, "available_memory", lambda: 3 * GIB)
    with pytest.raises(BadInput) as refused:
        files.write_synthetic(RBC2D, tmp_path, samples=2, spatial=(20000, 20000))
    grid = tuple(int(n) for n in str(refused.value).rsplit("--grid ", 1)[1].split("x"))
    assert files.sample_memory(RBC2D, grid) <= files.MEMORY_SHARE * 3 * GIB and grid[0] == grid[1] > 1000


@pytest.mark.subprocess
def test_a_grid_past_a_memory_limit_is_one_line_exit_2(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(["bash", "-c", 'ulimit -v 3000000; exec "$@"', "limited", sys.executable, "-m", "caraml",
                           "data", "fno-synthetic", "RBC2D", "--grid", "20000x20000", "--samples", "2", "--out",
                           str(out)], capture_output=True, text=True, env=cli_env(), timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("caraml: error: --grid 20000x20000: one RBC2D sample takes"), proc.stderr
    assert _nothing_in(out)


def test_a_grid_two_samples_of_which_do_not_fit_on_the_disk_names_the_grid(tmp_path, monkeypatch, nothing_made):
    monkeypatch.setattr(files, "_free_space", lambda folder: 10 * GIB)
    monkeypatch.setattr(files, "available_memory", lambda: None)
    with pytest.raises(BadInput) as refused:
        files.write_synthetic(RBC2D, tmp_path, samples=2, spatial=(100000, 100000))
    message = str(refused.value)
    assert "--samples 2" not in message.split(";")[-1] and "use a smaller grid, e.g. --grid " in message, message
    grid = tuple(int(n) for n in message.rsplit("--grid ", 1)[1].split("x"))
    assert files.synthetic_bytes(RBC2D, 2, grid) <= 10 * GIB
    proc = cli("data", "fno-synthetic", "PIC1D", "--particles", "10000000000000", "--samples", "2", "--out", tmp_path,
               check=2)
    assert "e.g. --particles " in proc.stderr and "at most --samples 2" not in proc.stderr, proc.stderr
