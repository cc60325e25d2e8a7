#!/usr/bin/env bash
# Installs everything the tests need on a fresh Debian machine (as root) and runs them.
# System packages: SLURM (the tests start a cluster of two nodes on this host), JUBE, chromium (report check).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v slurmctld >/dev/null || need+=(slurmctld slurmd slurm-client munge)
command -v jube >/dev/null || need+=(jube)
command -v chromium >/dev/null || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q torch==2.14.1 torchvision==0.29.1 -e '.[test,hdf5]'
# The linter first: seconds, and a finding fails the run before the tests start (rules: pyproject.toml).
.venv/bin/ruff check --output-format concise .
# Everything: the fast selection on both cores, then the slow SLURM/JUBE/browser tests in one process
# (they share one SLURM cluster). Plain `pytest` runs the fast selection alone; the inner loop while editing:
# pytest -m "not subprocess and not multiprocess" (markers: tests/conftest.py, pyproject.toml).
.venv/bin/python -m pytest -q -n 2 -m "not slow" "$@"
exec .venv/bin/python -m pytest -q -m slow "$@"
