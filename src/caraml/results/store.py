"""The results store: one JSON file per run (the truth) and a SQLite index beside them (for queries).

Layout of a results directory:
    runs/<run_id>.json    each run's full record, written atomically
    index.sqlite          one row per run: ids, workload, system, status, throughput, energy, path
A record file that is corrupt, half-written or of another shape is reported by name and skipped.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import sys
import tempfile
from pathlib import Path

from caraml.errors import BadInput, printable
from caraml.paths import safe_name

_COLUMNS = """
    run_id TEXT PRIMARY KEY, id TEXT, workload TEXT, system TEXT, status TEXT,
    throughput REAL, unit TEXT, energy_wh REAL, world_size INTEGER, started_at TEXT,
    params TEXT, path TEXT
"""
UNSAVED = "caraml-unsaved"  # folder in $TMPDIR for records the results folder would not take
NUMBER = (int, float)
# The fields readers index into, and the type each has when present (null always allowed): one record of
# another shape is skipped like a corrupt one instead of breaking every table of the folder.
SHAPE = {
    "id": str, "run_id": str, "workload": str, "status": str, "preset": str, "error": str, "started_at": str,
    "finished_at": str, "params": dict, "system": dict, "launch": dict, "metrics": dict, "env": dict,
    "system.tag": str, "launch.world_size": int, "launch.nodes": int, "env.slurm": dict,
    "metrics.throughput": dict, "metrics.throughput.value": NUMBER, "metrics.throughput.unit": str,
    "metrics.step_time_s": dict, "metrics.energy": dict, "metrics.energy.total_wh": NUMBER,
    "metrics.energy.phases": dict, "metrics.energy.phases.measure": dict, "metrics.energy.nodes": list,
    "metrics.energy.devices": list,
}


class Store:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.runs = self.root / "runs"
        self.index_path = self.root / "index.sqlite"

    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.index_path, timeout=60)
        con.execute(f"CREATE TABLE IF NOT EXISTS runs ({_COLUMNS})")
        return con

    def save(self, record: dict) -> Path:
        """Write the record (strict JSON); where the results folder fails (unwritable, disk full) the record goes
        to $TMPDIR/caraml-unsaved instead, named on stderr: a finished run is never lost. The path written."""
        name = safe_name(record["run_id"])
        path = self.runs / f"{name}.json"
        text = dumps(record, indent=1)
        try:
            self.runs.mkdir(parents=True, exist_ok=True)
            _write(path, text)
        except OSError as exc:
            return _save_elsewhere(path, text, exc)
        try:
            with self._connect() as con:
                con.execute("INSERT OR REPLACE INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", _row(record, path))
        except sqlite3.Error as exc:  # the record file is the truth; `caraml result` rebuilds the index
            print(f"caraml: warning: index {self.index_path} not updated ({exc}); the record is saved", file=sys.stderr)
        return path

    def load(self, warn=True, skipped: list[str] | None = None) -> list[dict]:
        """Every readable record, oldest first; unreadable files are named on stderr (and in `skipped`)."""
        records = []
        for path in sorted(self.runs.glob("*.json")) if self.runs.is_dir() else []:
            try:
                if not path.is_file():  # a FIFO would block the read for ever
                    raise ValueError("not a regular file")
                record = json.loads(path.read_text(), parse_constant=lambda _: None, parse_int=_int64)
                problem = shape_problem(record)
                if problem:
                    raise ValueError(problem)
            except (OSError, ValueError, RecursionError) as exc:  # RecursionError: JSON nested too deep
                if warn:
                    print(printable(f"caraml: skipping unreadable record {path}: {exc}"), file=sys.stderr)
                if skipped is not None:
                    skipped.append(f"{path}: {exc}")
                continue
            record["_path"] = str(path)
            records.append(record)
        records.sort(key=lambda r: r.get("started_at") or "")
        return records

    def reindex(self) -> int:
        """Rebuild the SQLite index from the record files."""
        records = self.load(warn=False)
        with self._connect() as con:
            con.execute("DELETE FROM runs")
            for r in records:
                con.execute("INSERT OR REPLACE INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", _row(r, Path(r["_path"])))
        return len(records)

    def sync_index(self) -> None:
        """Rebuild the index when it differs from the record files: a save whose index write failed, a record
        deleted and another added (the same count), a record edited since the index was written."""
        try:
            mtimes = {p.name: p.stat().st_mtime for p in self.runs.glob("*.json")} if self.runs.is_dir() else {}
            indexed = {Path(row[0]).name for row in self.query("SELECT path FROM runs")}
            if set(mtimes) != indexed or max(mtimes.values(), default=0) > self.index_path.stat().st_mtime:
                self.reindex()
        except (OSError, sqlite3.Error) as exc:
            print(f"caraml: warning: index {self.index_path} cannot be rebuilt ({exc})", file=sys.stderr)

    def query(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._connect() as con:
            return con.execute(sql, args).fetchall()


def _row(record: dict, path: Path) -> tuple:
    metrics = record.get("metrics") or {}
    tp = metrics.get("throughput") or {}
    energy = metrics.get("energy") or {}
    return (record.get("run_id") or path.stem, record.get("id"), record.get("workload"),
            (record.get("system") or {}).get("tag"), record.get("status"), tp.get("value"), tp.get("unit"),
            energy.get("total_wh"), (record.get("launch") or {}).get("world_size"), record.get("started_at"),
            json.dumps(record.get("params"), sort_keys=True), str(path))


def shape_problem(record) -> str | None:
    """What makes `record` no run record readers can use (see SHAPE); None when it is one."""
    if not isinstance(record, dict) or "workload" not in record:
        return "not a run record"
    for key, kind in SHAPE.items():
        value = record
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            return f"{key} is {type(value).__name__}, not {getattr(kind, '__name__', 'a number')}"
    return None


def _int64(text: str) -> int:
    """JSON integers as int64, as SQLite and every reader take them."""
    value = int(text) if len(text) <= 20 else None
    if value is None or not -2**63 <= value < 2**63:
        raise ValueError(f"integer {text[:30]} is out of range")
    return value


def finite(value):
    """`value` with NaN and infinities as None: records are strict JSON, which every reader parses."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(record, **kwargs) -> str:
    """A record (or records) as strict JSON."""
    return json.dumps(finite(record), allow_nan=False, default=str, **kwargs)


def _write(path: Path, text: str) -> None:
    """Atomically: readers never see half a record; a failed write leaves no temporary file."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def _save_elsewhere(path: Path, text: str, exc: OSError) -> Path:
    fallback = Path(tempfile.gettempdir()) / UNSAVED / path.name
    try:
        fallback.parent.mkdir(parents=True, exist_ok=True)
        _write(fallback, text)
    except OSError as again:
        raise BadInput(f"record {path} cannot be written ({exc.strerror or exc}), nor {fallback} "
                       f"({again.strerror or again})") from None
    print(f"caraml: warning: record {path} cannot be written ({exc.strerror or exc}); saved to {fallback} instead",
          file=sys.stderr)
    return fallback
