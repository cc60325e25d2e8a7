"""Sweep state: which point went to which SLURM job, kept in `<results>/sweep-state.json`."""

from __future__ import annotations

import json
import os
from pathlib import Path

from caraml.errors import BadInput, shown

FILE = "sweep-state.json"
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


def save(results: str | Path, data: dict) -> None:
    p = path(results)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, p)  # readers never see half a file
