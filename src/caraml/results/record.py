"""The run record: one JSON object per run, the contract every other part reads."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping

SCHEMA_VERSION = 1
# diverged: the run completed and measured, but its figures describe no training (a loss that is not finite at the
# end, or an optimizer that never stepped); the record keeps the metrics and says why in `error`
STATUSES = ("ok", "oom", "failed", "interrupted", "timeout", "diverged")
# No machine runs a thousand trillion units (images, tokens, samples) a second: a rate above it is an edited or
# broken record, as is one of 0 or less.
MAX_THROUGHPUT = 1e15
REQUIRED = ("schema", "id", "run_id", "workload", "status", "params", "system", "launch", "metrics",
            "env", "started_at", "finished_at", "error")


def config_id(identifying: Mapping[str, Any], system: str | None, launch: Mapping[str, Any]) -> str:
    """Stable hash of the configuration alone: the workload's identifying values (Workload.identifying: its name
    and parameters, measurement settings left out), the system's tag, the launch's devices and nodes. The same
    point gets the same id however it is measured, so `result`, `compare` and `--resume` agree on what "the same
    point" is."""
    canonical = json.dumps({**identifying, "system": system, "world_size": launch["world_size"],
                            "nodes": launch["nodes"]}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def run_id(cid: str, started_at: str) -> str:
    stamp = started_at.replace("-", "").replace(":", "").replace(".", "")[:18]
    return f"{stamp}-{cid}"


def validate(record: dict) -> list[str]:
    """What is missing or wrong in a record; empty when it follows the schema."""
    problems = [f"missing '{k}'" for k in REQUIRED if k not in record]
    if record.get("status") not in STATUSES:
        problems.append(f"status {record.get('status')!r} is not one of {', '.join(STATUSES)}")
    metrics = record.get("metrics") or {}
    tp = metrics.get("throughput") if isinstance(metrics.get("throughput"), dict) else {}
    value = tp.get("value")
    if record.get("status") == "ok" and (not isinstance(value, (int, float)) or not tp.get("unit")):
        problems.append("ok record without throughput value and unit")
    elif isinstance(value, (int, float)) and not 0 < value <= MAX_THROUGHPUT:  # NaN fails too
        problems.append(f"throughput {value:g} is no measured rate (above 0, at most {MAX_THROUGHPUT:g} per second)")
    return problems


@dataclass
class RunRecord:
    """The one way records are made (by runs, by sweeps for points that left none, by tests)."""

    id: str
    workload: str
    status: str
    params: dict[str, Any]
    system: dict[str, Any]
    launch: dict[str, Any]
    started_at: str
    run_id: str = ""
    preset: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    finished_at: str | None = None
    error: str | None = None
    traceback: str | None = None
    schema: int = SCHEMA_VERSION

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {', '.join(STATUSES)}")
        self.run_id = self.run_id or run_id(self.id, self.started_at)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if out["traceback"] is None:
            del out["traceback"]
        return out
