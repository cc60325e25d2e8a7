#!/usr/bin/env bash
# Installs everything the tests need on a fresh Debian machine (as root) and runs them.
# System packages: SLURM (the tests start a cluster of two nodes on this host), JUBE, chromium (report check).
# Installs wait on the network and the disk, tests on the two cores: each install runs beside work that needs the
# cores (its output in a log, shown when it fails), and the run waits for it where its result is first needed.
set -euo pipefail
cd "$(dirname "$0")/.."
logs=$(mktemp -d)
trap 'wait; rm -rf "$logs"' EXIT  # a failure stops the run, not an install half done
started() {  # NAME PID: a background step's process, for finished
  eval "pid_$1=$2"
}
finished() {  # NAME: wait for a background step; its log and a failure when it failed
  local pid_var="pid_$1"
  wait "${!pid_var}" || { echo "test.sh: $1 failed:" >&2; cat "$logs/$1.log" >&2; exit 1; }
}

need=()
command -v slurmctld >/dev/null || need+=(slurmctld slurmd slurm-client munge)
command -v jube >/dev/null || need+=(jube)
command -v chromium >/dev/null || need+=(chromium)
{
  if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
  fi
} >"$logs/apt.log" 2>&1 &
started apt $!

# The site containers' Pythons and PyTorch (NGC 24.02: Python 3.10, torch 2.3; CARAML's ROCm image: Python 3.9): the
# in-process tests and the job command (tests/test_torch_features.py) once more under the oldest supported Python
# (3.9) with torch 2.3, in one venv. PyPI's torch 2.3.1 brings its CUDA libraries (~2.5 GB to download, ~5 GB in the
# venv, about 80 s on this machine's kind); no CPU-only torch 2.3 is on PyPI, and the wheel does not import without
# them. Installed beside the main venv's install and the fast selection; a failed download is tried once more (pip's
# own retries cover a dropped connection, not a failed one), and the free disk is logged: a full disk also fails it.
OLD_TORCH=(torch==2.3.1 torchvision==0.18.1 "numpy<2")
pyenv_python() {  # VERSION: pyenv's interpreter of that version, else pythonVERSION on the PATH
  local found
  found=$(ls -d "$HOME"/.pyenv/versions/"$1".*/bin/python 2>/dev/null | sort -V | tail -1)
  [ -n "$found" ] || found=$(command -v "python$1") || { echo "test.sh: no Python $1 (pyenv or python$1)" >&2; exit 1; }
  echo "$found"
}
{
  [ -x .venv-py39/bin/python ] || "$(pyenv_python 3.9)" -m venv .venv-py39
  # The packages named, not `-e .`: an optional workload dependency that needs a newer Python must not stop this run.
  old_install=(.venv-py39/bin/pip install -q --no-cache-dir "${OLD_TORCH[@]}" pyyaml rich nvidia-ml-py matplotlib
               tokenizers h5py tomli pytest pytest-xdist)
  "${old_install[@]}" || { df -h . >&2; echo "test.sh: once more" >&2; "${old_install[@]}"; }
} >"$logs/old_pythons.log" 2>&1 &
started old_pythons $!

[ -x .venv/bin/python ] || python3 -m venv .venv
# The test extra brings torchao (pinned there): precision=fp8's conversion and float8 products run on the CPU too.
.venv/bin/pip install -q torch==2.14.1 torchvision==0.29.1 -e '.[test,hdf5]'
# megatron-core for the tests of llm_training's engine=megatron-core (its weight map, both backends' losses on the
# CPU): its metadata asks for Python >= 3.12, but it ships a cp311 wheel and the parts used import and run on 3.11.
.venv/bin/pip install -q --no-deps --ignore-requires-python megatron-core==0.19.2

# The linter first: seconds, and a finding fails the run before the tests start (rules: pyproject.toml).
.venv/bin/ruff check --output-format concise .
finished apt  # before any test: whether SLURM, JUBE, chromium are there decides what runs
# Everything: the fast selection on both cores, then the slow SLURM/JUBE/browser tests, those on the SLURM cluster in
# one worker (they share it; its jobs leave a core idle a third of the time), JUBE on the CPU and the browser in the
# other. Plain `pytest` runs the fast selection alone; the inner loop while editing:
# pytest -m "not subprocess and not multiprocess" (markers: tests/conftest.py, pyproject.toml).
.venv/bin/python -m pytest -q -n 2 -m "not slow" "$@"
.venv/bin/python -m pytest -q -n 2 --dist loadgroup -m slow "$@"

# Under the old Python, the processes starting tests (launchers, SLURM, torchrun ranks: most of the suite's time,
# the same code run from other processes) are left out; the job command's test starts its processes with 3.9.
finished old_pythons
.venv-py39/bin/python -m pytest -q -n 2 -m "not slow and not subprocess and not multiprocess" "$@"
CARAML_OLD_PYTHON=.venv-py39/bin/python .venv-py39/bin/python -m pytest -q -m "not slow" \
  tests/test_torch_features.py "$@"
