"""Reading a record's energy fields: the one place that knows their names.

Every table, comparison, plot and the report read energy through `energy_of(record)`, so a change
of field names in `metrics.energy` is a change here only. Absent or unavailable energy reads as
None values with the record's stated reason, never as zero.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Energy:
    available: bool
    total_wh: float | None = None  # the whole run as the monitor saw it
    measure_wh: float | None = None  # the measured (steady-state) window only
    units_per_wh: float | None = None  # throughput units per Wh of the measured window
    source: str | None = None  # "counter" (hardware energy counter) or "integrated" (sampled power)
    reason: str | None = None  # why energy is unavailable
    devices: list[dict] = field(default_factory=list)
    timeseries: Path | None = None  # CSV: time_s, host, device, power_w, phase

    def per_device_wh(self, device_count: int | None) -> float | None:
        """Energy of one device: the mean of the devices measured, else the total over the device count."""
        measured = [d.get("energy_wh") for d in self.devices if _number(d.get("energy_wh"))]
        if measured:
            return sum(measured) / len(measured)
        if self.total_wh is not None and device_count:
            return self.total_wh / device_count
        return None


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def energy_of(record: dict) -> Energy:
    metrics = record.get("metrics") or {}
    raw = metrics.get("energy")
    if not isinstance(raw, dict):
        return Energy(available=False, reason="the record has no energy measurement")
    total = raw.get("total_wh") if _number(raw.get("total_wh")) else None
    phases = raw.get("phases") if isinstance(raw.get("phases"), dict) else {}
    measure = (phases.get("measure") or {}).get("energy_wh")
    measure = measure if _number(measure) else None
    per_wh = raw.get("units_per_wh") if _number(raw.get("units_per_wh")) else None
    units = metrics.get("units")
    if per_wh is None and measure and _number(units):
        per_wh = units / measure  # same definition as the monitor's: units of the measured window per Wh
    available = bool(raw.get("available", total is not None)) and total is not None
    return Energy(available=available, total_wh=total, measure_wh=measure, units_per_wh=per_wh,
                  source=raw.get("source"), reason=raw.get("reason"),
                  devices=[d for d in raw.get("devices") or [] if isinstance(d, dict)],
                  timeseries=_timeseries_path(record, raw.get("timeseries")))


def _timeseries_path(record: dict, value) -> Path | None:
    """The power CSV; a relative path is relative to the record file's folder."""
    if not value or not isinstance(value, str):
        return None
    path = Path(value)
    if not path.is_absolute():
        where = record.get("_path") or record.get("path")
        if where:
            path = Path(where).parent / path
    return path


def read_timeseries(path: Path) -> list[dict]:
    """Rows of a power time-series CSV with typed time and power; rows that do not parse are left out."""
    rows = []
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            try:
                rows.append({"time_s": float(row["time_s"]), "host": row.get("host") or "",
                             "device": row.get("device") or "", "power_w": float(row["power_w"]),
                             "phase": row.get("phase") or ""})
            except (KeyError, TypeError, ValueError):
                continue
    return rows
