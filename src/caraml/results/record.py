"""The run record: one JSON object per run, the contract every other part reads."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone

SCHEMA_VERSION = 1
STATUSES = ("ok", "oom", "failed", "interrupted", "timeout")
REQUIRED = ("schema", "id", "run_id", "workload", "status", "params", "system", "launch", "metrics",
            "env", "started_at", "finished_at", "error")


def config_id(workload: str, params: dict, system_tag: str, world_size: int, nodes: int) -> str:
    """Stable hash of the full configuration: the same point always gets the same id."""
    canonical = json.dumps({"workload": workload, "params": params, "system": system_tag,
                            "world_size": world_size, "nodes": nodes}, sort_keys=True, separators=(",", ":"))
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
    if record.get("status") == "ok":
        tp = metrics.get("throughput") or {}
        if not isinstance(tp.get("value"), (int, float)) or not tp.get("unit"):
            problems.append("ok record without throughput value and unit")
    return problems
