"""Reading a record's energy fields: the one place that knows their names.

Every table, comparison, plot and the report read energy through `energy_of(record)`, so a change
of field names in `metrics.energy` (written by `caraml.power.energy.combine`) is a change here only.
Absent or unavailable energy reads as None values with the record's stated reason, never as zero.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class Energy:
    available: bool
    total_wh: float | None = None  # energy of `window`: the measured window of a benchmark (whole run of a command)
    window: str | None = None  # the phase total_wh covers ("measure"; "all" or "run" for a whole run)
    run_wh: float | None = None  # the whole run as the monitor saw it, every phase
    measure_wh: float | None = None  # the measured (steady-state) window only
    units_per_wh: float | None = None  # throughput units per Wh of the measured window
    source: str | None = None  # "counter" (hardware energy counter) or "integrated" (sampled power)
    reason: str | None = None  # why energy is unavailable
    devices: list[dict] = field(default_factory=list)  # one row per device, energy_wh over `window`
    timeseries: tuple[Path, ...] = ()  # one power time series per node (columns of caraml.power.series)

    def per_device_wh(self, device_count: int | None) -> float | None:
        """Energy of one device: the mean of the devices counted in the total, else the total over the device count."""
        measured = [d.get("energy_wh") for d in self.devices
                    if is_number(d.get("energy_wh")) and d.get("in_total", True)]
        if measured:
            return sum(measured) / len(measured)
        if self.total_wh is not None and device_count:
            return self.total_wh / device_count
        return None


def energy_of(record: dict) -> Energy:
    metrics = record.get("metrics") or {}
    raw = metrics.get("energy")
    if not isinstance(raw, dict):
        return Energy(available=False, reason="the record has no energy measurement")
    number = lambda v: v if is_number(v) else None  # noqa: E731
    total = number(raw.get("total_wh"))
    phases = raw.get("phases") if isinstance(raw.get("phases"), dict) else {}
    measure = number((phases.get("measure") or {}).get("wh"))
    per_wh = number(raw.get("units_per_wh"))
    units = metrics.get("units")
    if per_wh is None and measure and is_number(units) and not raw.get("partial"):
        per_wh = units / measure  # same definition as the monitor's: units of the measured window per Wh
    available = bool(raw.get("available", total is not None)) and total is not None
    nodes = [n for n in raw.get("nodes") or [] if isinstance(n, dict)]
    series = tuple(p for p in (_timeseries_path(record, n.get("timeseries")) for n in nodes) if p is not None)
    return Energy(available=available, total_wh=total, window=raw.get("window"), run_wh=number(raw.get("run_wh")),
                  measure_wh=measure, units_per_wh=per_wh, source=raw.get("source"), reason=raw.get("reason"),
                  devices=[d for d in raw.get("devices") or [] if isinstance(d, dict)], timeseries=series)


def _timeseries_path(record: dict, value) -> Path | None:
    """A node's power time series; a relative path, or an absolute one that is gone because the results
    folder was moved, is looked up in the record file's folder (the monitor writes it beside the record)."""
    if not value or not isinstance(value, str):
        return None
    path = Path(value)
    where = record.get("_path") or record.get("path")
    if where and not path.is_absolute():
        return Path(where).parent / path
    if where and not path.exists() and (Path(where).parent / path.name).exists():
        return Path(where).parent / path.name
    return path


def read_timeseries(path: Path) -> list[dict]:
    """Rows of a power time-series CSV with typed time and power; rows that do not parse are left out.

    Counter-only devices (RAPL) have no power column value: their power is the counter's step over the
    time since the device's previous row, given to the later row.
    """
    rows, last_counter = [], {}
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            try:
                t = float(row["time_s"])
                device = row.get("device") or ""
                uuid = row.get("uuid") or device
                key = (row.get("host") or "", uuid)
                power = row.get("power_w") or ""
                if power:
                    watts = float(power)
                else:
                    joules = float(row["energy_j"])
                    before, last_counter[key] = last_counter.get(key), (t, joules)
                    if before is None or t <= before[0]:
                        continue
                    watts = (joules - before[1]) / (t - before[0])
            except (KeyError, TypeError, ValueError):
                continue
            rows.append({"time_s": t, "host": key[0], "device": device, "uuid": uuid, "power_w": watts,
                         "phase": row.get("phase") or ""})
    return rows
