"""Sweep state: which point went to which SLURM job, kept in `<results>/sweep-state.json`.

Several sweeps may submit into one results folder at once: each change is a read-merge-write of the jobs it
touches, under an exclusive lock (flock on `<results>/sweep-state.lock`), through a temporary file of its own,
so no sweep's jobs are lost to another's save.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from caraml.errors import BadInput, shown

FILE = "sweep-state.json"
LOCK = "sweep-state.lock"
POINT = {"id": str, "workload": str, "system": str, "params": dict, "world_size": int, "nodes": int,
         "devices_per_node": int}  # what a record for a job that wrote none is made of


def path(results: str | Path) -> Path:
    return Path(results) / FILE


def load(results: str | Path) -> dict:
    p = path(results)
    if not p.exists():
        return {"jobs": {}}
    try:
        data = json.loads(p.read_text())
        problem = _shape_problem(data)
        if problem:
            raise ValueError(problem)
    except (OSError, ValueError, RecursionError) as exc:
        raise BadInput(f"sweep state {p} cannot be read ({shown(exc)}); move it away to start afresh") from None
    return data


def _shape_problem(data) -> str | None:
    """What `collect` could not use in a state file ({"jobs": {job id: {"state", "point": {...}}}}); None if nothing."""
    if not isinstance(data, dict) or not isinstance(data.setdefault("jobs", {}), dict):
        return 'not {"jobs": {...}}'
    for job, entry in data["jobs"].items():
        point = entry.get("point") if isinstance(entry, dict) else None
        if (not isinstance(point, dict) or not isinstance(entry.get("state"), str)
                or not isinstance(entry.get("submitted_at") or "", str)):
            return f"job {shown(job, 30)} has no point, state or submission time"
        for key, kind in POINT.items():
            if not isinstance(point.get(key), kind) or isinstance(point.get(key), bool):
                return f"job {shown(job, 30)}: point.{key} is not {kind.__name__}"
    return None


@contextlib.contextmanager
def locked(results: str | Path) -> Iterator[None]:
    """Hold the results folder's sweep-state lock (other sweeps' saves wait for it)."""
    folder = path(results).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = open(folder / LOCK, "a")
    except OSError as exc:
        raise BadInput(f"sweep state lock {folder / LOCK} cannot be opened ({exc.strerror or exc}); pass another "
                       "--results DIR") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def update(results: str | Path, jobs: dict, drop: tuple[str, ...] = ()) -> dict:
    """Merge these job entries (job id -> entry) into the state on disk, and remove the `drop` keys, under the
    lock; the merged state. Entries of other jobs, saved meanwhile by another sweep, are kept."""
    with locked(results):
        data = load(results)
        for key in drop:
            data["jobs"].pop(key, None)
        data["jobs"].update(jobs)
        _write(results, data)
    return data


# A submission is written down before sbatch runs, under this key and state, with the job's name: a sweep
# killed between sbatch and saving the job id leaves it, and the next --continue or --resume finds the job by
# its name in SLURM's queue or accounting.
SUBMITTING = "submitting"


def intent_key(point_id: str) -> str:
    return f"{SUBMITTING}:{point_id}"


def save(results: str | Path, data: dict) -> None:
    """Replace the whole state (under the lock); sweeps that add or change jobs use update()."""
    with locked(results):
        _write(results, data)


def _write(results: str | Path, data: dict) -> None:
    p = path(results)
    try:
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")  # a name of its own
    except OSError as exc:
        raise _unwritable(p, exc) from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(data, indent=1, default=str))
        os.chmod(tmp, 0o644)
        os.replace(tmp, p)  # readers never see half a file
    except OSError as exc:  # a full disk: the state on disk stays as it was
        Path(tmp).unlink(missing_ok=True)
        raise _unwritable(p, exc) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _unwritable(p: Path, exc: OSError) -> BadInput:
    return BadInput(f"sweep state {p} cannot be written ({exc.strerror or exc}); free space there or pass "
                    "another --results DIR")
