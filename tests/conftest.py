"""Shared helpers: run the real `caraml` command in a subprocess, from this source tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_cluster import slurm_cluster  # noqa: F401 (a session fixture: one cluster for all tests)

ROOT = Path(__file__).resolve().parents[1]
# In-process imports test this tree too, not an installed copy of caraml elsewhere.
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))
SHARED_DATA = ROOT.parent / "shared" / "data"


def _nvml_present() -> bool:
    """Whether this machine has a working NVIDIA driver: tests that expect "no GPU here" adapt to it."""
    try:
        from caraml.power.backends import nvml

        nvml.make("/sys").open()
        return True
    except Exception:  # noqa: BLE001 - any failure means no usable NVML
        return False


HAS_NVML = _nvml_present()


def cli_env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "2")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def caraml(*args, timeout=300, env=None, check=None) -> subprocess.CompletedProcess:
    """`python -m caraml ARGS` with this tree's sources; returns the finished process."""
    proc = subprocess.run([sys.executable, "-m", "caraml", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env or cli_env())
    if check is not None:
        assert proc.returncode == check, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def records_in(results: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((results / "runs").glob("*.json"))]


@pytest.fixture
def results(tmp_path) -> Path:
    return tmp_path / "results"
