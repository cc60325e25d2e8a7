"""Sweep state: which point went to which SLURM job, kept in `<results>/sweep-state.json`."""

from __future__ import annotations

import json
import os
from pathlib import Path

from caraml.errors import BadInput

FILE = "sweep-state.json"


def path(results: str | Path) -> Path:
    return Path(results) / FILE


def load(results: str | Path) -> dict:
    p = path(results)
    if not p.exists():
        return {"jobs": {}}
    try:
        data = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInput(f"sweep state {p} cannot be read ({exc}); move it away to start afresh") from None
    data.setdefault("jobs", {})
    return data


def save(results: str | Path, data: dict) -> None:
    p = path(results)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, p)  # readers never see half a file
