"""caraml inside the image: the wheel folder, the prepared environment (a real venv with --system-site-packages and a
real pip install from the wheel folder, no index), its cache per image, what --dry-run says is missing.

Apptainer is not installed here: a stand-in `apptainer` on PATH runs the command on this machine, and the "image's
python" is this venv's base interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import caraml, cli_env

pytestmark = pytest.mark.subprocess

FAKE_APPTAINER = """#!/bin/bash
# apptainer stand-in: `exec [--nv|--rocm|--bind LIST] IMAGE CMD...` runs CMD here; the image must exist
[ "$1" = exec ] || { echo "fake apptainer: only exec" >&2; exit 64; }
shift
while [ "${1#--}" != "$1" ]; do if [ "$1" = --bind ]; then shift 2; else shift; fi; done
[ -f "$1" ] || { echo "fake apptainer: no image $1" >&2; exit 255; }
shift
exec "$@"
"""

DEP_SETUP = ("from setuptools import setup\n"
             "setup(name='caraml-test-dep', version='1.0', py_modules=['caraml_test_dep'])\n")


@pytest.fixture
def site(tmp_path):
    """A profile FAKE whose image is tmp/img.sif (not yet there), with the stand-in apptainer on PATH and a dependency
    wheel the image lacks, found without an index."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "apptainer").write_text(FAKE_APPTAINER)
    (tmp_path / "bin" / "apptainer").chmod(0o755)
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    base = getattr(sys, "_base_executable", sys.executable)  # the "image's" python: not this venv's packages
    (profiles / "FAKE.toml").write_text(f"""tag = "FAKE"
vendor = "cpu"
accelerator = "a CPU in an image"
devices_per_node = 1
[site]
container_image = "{tmp_path / 'img.sif'}"
container_dir = "{tmp_path / 'containers'}"
container_python = "{base}"
container_packages = ["caraml-test-dep"]
""")
    env = cli_env(CARAML_SYSTEMS_PATH=profiles, PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
                  PIP_NO_INDEX="1", PIP_FIND_LINKS=tmp_path / "index")
    return tmp_path, env


def _one_line(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_prepare_makes_one_environment_per_image_and_jobs_use_it(site):
    tmp, env = site
    dep = tmp / "dep"  # the dependency's wheel, in the "index" (a folder: PIP_NO_INDEX, PIP_FIND_LINKS)
    dep.mkdir()
    (dep / "setup.py").write_text(DEP_SETUP)
    (dep / "caraml_test_dep.py").write_text("VALUE = 42\n")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--wheel-dir",
                    tmp / "index", dep], check=True, capture_output=True)
    suite = tmp / "s.yaml"
    suite.write_text("workload: image_classification\npreset: smoke\n")
    dry = ["sweep", suite, "--system", "FAKE", "--executor", "slurm", "--dry-run", "--results", tmp / "r"]

    # no image yet: --dry-run says so in one line, prepare refuses in one line
    assert f"caraml: image {tmp / 'img.sif'} is not pulled: caraml container pull --system FAKE" in \
        caraml(*dry, env=env, check=0).stderr.splitlines()
    refused = caraml("container", "prepare", "--system", "FAKE", env=env, check=2)
    assert _one_line(refused).startswith(f"caraml: error: image {tmp / 'img.sif'} is not pulled")
    (tmp / "img.sif").write_text("an image")

    # the wheel folder: caraml's wheel built here, its dependencies fetched by the image's pip (here: no index)
    assert "caraml container wheels" in _one_line(caraml("container", "prepare", "--system", "FAKE", env=env, check=2))
    caraml("container", "wheels", "--system", "FAKE", env=env, check=0)
    wheels = sorted(p.name for p in (tmp / "containers" / "wheels").iterdir())
    assert [w.split("-")[0] for w in wheels] == ["caraml", "caraml_test_dep"], wheels

    notes = caraml(*dry, env=env, check=0).stderr
    assert "is not prepared" in notes and "caraml container prepare --system FAKE" in notes
    made = caraml("container", "prepare", "--system", "FAKE", env=env, check=0).stderr
    [envdir] = (tmp / "containers" / "envs").glob("img-*[!k]")  # not the .lock file
    assert f"environment {envdir} prepared" in made and (envdir / ".caraml-ready").is_file()
    assert "pyvenv.cfg" in os.listdir(envdir) and "include-system-site-packages = true" in (
        envdir / "pyvenv.cfg").read_text()

    # caraml and the dependency come from the environment, without PYTHONPATH
    plain = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    where = subprocess.run([envdir / "bin" / "python", "-c", "import caraml, caraml_test_dep; print(caraml.__file__);"
                            " print(caraml_test_dep.VALUE)"], capture_output=True, text=True, env=plain, check=True)
    first, value = where.stdout.split()
    assert Path(first).is_relative_to(envdir) and value == "42"

    # cached: a second prepare does nothing; the job script runs the environment's python in the image
    again = caraml("container", "prepare", "--system", "FAKE", env=env, check=0).stderr
    assert "was already prepared" in again and "+ apptainer" not in again
    notes = caraml(*dry, env=env, check=0).stderr
    assert "not prepared" not in notes and "not pulled" not in notes
    [script] = (tmp / "r" / "sweep" / "jobs").glob("*.sh")
    assert f"caraml-torchrun {envdir}/bin/python -m torch.distributed.run " in script.read_text()

    # a re-pulled image (another mtime) is another environment
    later = time.time() + 10
    os.utime(tmp / "img.sif", (later, later))
    assert "is not prepared" in caraml(*dry, env=env, check=0).stderr


def test_print_shows_the_commands(site):
    tmp, env = site
    (tmp / "img.sif").write_text("an image")  # the environment's folder is named after the image and the wheel
    (tmp / "containers" / "wheels").mkdir(parents=True)
    (tmp / "containers" / "wheels" / "caraml-0.1-py3-none-any.whl").write_bytes(b"a wheel")
    out = caraml("container", "prepare", "--system", "FAKE", "--print", env=env, check=0).stdout.splitlines()
    assert len(out) == 3 and all(line.startswith("apptainer exec --bind ") for line in out)
    assert " -m venv --system-site-packages --without-pip " in out[0]
    assert "-m pip install --no-index --find-links" in out[1] and out[1].endswith("--no-deps caraml")
    assert out[2].endswith(" caraml-test-dep")
    wheels = caraml("container", "wheels", "--system", "FAKE", "--print", env=env, check=0).stdout.splitlines()
    assert " -m pip wheel --no-deps " in wheels[0] and " -m pip download --only-binary=:all: " in wheels[1]
