"""The results store: one JSON file per run (the truth) and a SQLite index beside them (for queries).

Layout of a results directory:
    runs/<run_id>.json    each run's full record, written atomically
    index.sqlite          one row per run: ids, workload, system, status, throughput, energy, path
A record file that is corrupt or half-written is reported by name and skipped.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

from caraml.errors import BadInput

_COLUMNS = """
    run_id TEXT PRIMARY KEY, id TEXT, workload TEXT, system TEXT, status TEXT,
    throughput REAL, unit TEXT, energy_wh REAL, world_size INTEGER, started_at TEXT,
    params TEXT, path TEXT
"""


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
        try:
            self.runs.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInput(f"results directory {self.root} cannot be written: {exc.strerror}") from None
        path = self.runs / f"{record['run_id']}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(record, indent=1, default=str))
        os.replace(tmp, path)
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
                record = json.loads(path.read_text())
                if not isinstance(record, dict) or "workload" not in record:
                    raise ValueError("not a run record")
            except (OSError, ValueError) as exc:
                if warn:
                    print(f"caraml: skipping unreadable record {path}: {exc}", file=sys.stderr)
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
        """Rebuild the index when it misses records (e.g. a save whose index write failed)."""
        try:
            files = len(list(self.runs.glob("*.json"))) if self.runs.is_dir() else 0
            if files and self.query("SELECT COUNT(*) FROM runs")[0][0] != files:
                self.reindex()
        except sqlite3.Error as exc:
            print(f"caraml: warning: index {self.index_path} cannot be rebuilt ({exc})", file=sys.stderr)

    def query(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._connect() as con:
            return con.execute(sql, args).fetchall()


def _row(record: dict, path: Path) -> tuple:
    metrics = record.get("metrics") or {}
    tp = metrics.get("throughput") or {}
    energy = metrics.get("energy") or {}
    return (record.get("run_id") or path.stem, record.get("id"), record.get("workload"), (record.get("system") or {}).get("tag"),
            record.get("status"), tp.get("value"), tp.get("unit"), energy.get("total_wh"),
            (record.get("launch") or {}).get("world_size"), record.get("started_at"),
            json.dumps(record.get("params"), sort_keys=True), str(path))
