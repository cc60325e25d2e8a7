"""Energy files as CARAML writes them with jpwr, for CARAML's analysis scripts (`energy_files=caraml`).

From each node's power time series (caraml.power.series) this writes, per node rank r (CARAML runs one task
per node, and its rank names the files):

- `<SYSTEM>_power.<r>.csv`: jpwr's power table, a row per sample: the row number, `timestamps` (Unix
  seconds), one column of watts per device named as jpwr names it (`pynvml:0`, `rocm:0`, `gh:Module Power
  Socket 0`; `gc:0` for IPUs, `rapl:package-0` for RAPL zones, which jpwr lacks), then `nodename` and `rank`;
- `<SYSTEM>_power.<r>.energy.csv`: jpwr's energy per device in Wh by its rule, the sum over samples of
  P_i * (t_i - t_(i-1)), then `nodename` and `rank` (a pandas Series as CSV);
- `<SYSTEM>_power.<r>.energy-from-counter.csv`: the hardware counters' Wh, for devices that have one;

and `combined_energy.csv`, one row per node rank, as CARAML's combine_energy.py makes it from the energy files.
A device without a power reading (RAPL) gets its power from counter differences. The window is the whole run,
from the monitor's start to its stop, as jpwr's scope in CARAML spans its whole training; note that each node's
file holds all devices of its node, so summing the files counts each device once.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

from caraml.paths import safe_name
from caraml.power import series as series_mod

JPWR_METHOD = {"nvml": "pynvml", "amd": "rocm", "grace": "gh", "ipu": "gc", "rapl": "rapl"}
WINDOW = ("the whole run (monitor start to stop), Wh per device by jpwr's rule: sum of P_i * (t_i - t_(i-1)) "
          "over the samples")


def column_names(devices: list[dict]) -> dict[tuple[str, str], str]:
    """(backend, uuid) -> jpwr's column name: `method:index` by order per backend, named channels by name."""
    out, counts = {}, {}
    for d in devices:
        backend = d["backend"]
        method = JPWR_METHOD.get(backend, backend)
        if backend == "grace":
            name = f"{method}:{d['name']}"
        elif backend == "rapl":
            name = f"{method}:{d['uuid']}"
        else:
            index = counts.get(backend, 0)
            counts[backend] = index + 1
            name = f"{method}:{index}"
        out[(backend, d["uuid"])] = name
    return out


def _float(text: str) -> float | None:
    try:
        return float(text) if text not in ("", None) else None
    except ValueError:
        return None


def power_table(rows: list[dict], names: dict[tuple[str, str], str], started_wall: float):
    """The samples of one node as jpwr's wide table: (timestamps, {column: [W or None]}, {column: [J or None]})."""
    times: list[float] = []
    power: dict[str, list] = {n: [] for n in names.values()}
    energy: dict[str, list] = {n: [] for n in names.values()}
    current = None
    for row in rows:
        if row["time_s"] != current:  # one sample: every device read at the same time
            current = row["time_s"]
            times.append(started_wall + float(current))
            for n in names.values():
                power[n].append(None)
                energy[n].append(None)
        name = names.get((row["backend"], row["uuid"]))
        if name is not None:
            power[name][-1] = _float(row["power_w"])
            energy[name][-1] = _float(row["energy_j"])
    for name, ps in power.items():  # counter-only devices (RAPL): power between consecutive reads
        if all(p is None for p in ps):
            power[name] = _counter_power(times, energy[name])
    return times, power, energy


def _counter_power(times: list[float], joules: list) -> list:
    out = [None] * len(times)
    for i in range(1, len(times)):
        a, b = joules[i - 1], joules[i]
        if a is not None and b is not None and times[i] > times[i - 1]:
            out[i] = (b - a) / (times[i] - times[i - 1])
    if len(out) > 1:
        out[0] = out[1]  # the first sample has no interval before it; jpwr never integrates it anyway
    return out


def jpwr_wh(times: list[float], watts: list) -> float | None:
    """jpwr's energy: sum over i >= 1 of P_i * (t_i - t_(i-1)), in Wh; None without readings."""
    terms = [watts[i] * (times[i] - times[i - 1]) for i in range(1, len(times)) if watts[i] is not None]
    return sum(terms) / 3600.0 if terms else None


def counter_wh(joules: list) -> float | None:
    values = [j for j in joules if j is not None]
    return (values[-1] - values[0]) / 3600.0 if len(values) > 1 else None


def _num(value) -> str:
    return "" if value is None else repr(float(value))


def write_node(node: dict, rank: int, system: str, folder: Path) -> dict:
    """One node's three files; returns {"power": path, "energy": path, ..., "values": {column: Wh}}."""
    rows = series_mod.read_csv(node["timeseries"])
    names = column_names(node.get("devices") or [])
    times, power, joules = power_table(rows, names, float(node.get("started_wall") or 0.0))
    host, columns = node.get("host", ""), list(power)
    stem = folder / f"{safe_name(system)}_power.{rank}"
    with open(f"{stem}.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["", "timestamps", *columns, "nodename", "rank"])
        for i, t in enumerate(times):
            out.writerow([i, repr(t), *(_num(power[c][i]) for c in columns), host, rank])
    values = {c: jpwr_wh(times, power[c]) for c in columns}
    with open(f"{stem}.energy.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["", "0"])
        out.writerows([c, _num(v)] for c, v in values.items())
        out.writerows([["nodename", host], ["rank", rank]])
    files = {"power": f"{stem}.csv", "energy": f"{stem}.energy.csv"}
    counted = {c: counter_wh(joules[c]) for c in columns}
    counted = {c: v for c, v in counted.items() if v is not None}
    if counted:
        files["energy_from_counter"] = f"{stem}.energy-from-counter.csv"
        with open(files["energy_from_counter"], "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["", "0"])
            out.writerows([c, _num(v)] for c, v in counted.items())
    return {**files, "host": host, "rank": rank, "values": values}


def write_combined(written: list[dict], path: Path) -> None:
    """combine_energy.py's table: index, nodename, rank, the energy Series' unnamed column (its name, 0), then
    every device column in order of first appearance, one row per node rank."""
    columns: list[str] = []
    for w in written:
        columns += [c for c in w["values"] if c not in columns]
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["", "nodename", "rank", "", *columns])
        for i, w in enumerate(written):
            out.writerow([i, w["host"], w["rank"], 0, *(_num(w["values"].get(c)) for c in columns)])


def write_run(nodes: list[dict], runs_dir: str | os.PathLike, run_id: str, system: str) -> dict:
    """Every node's files and the combined one in `<runs_dir>/<run_id>.caraml-energy/`; what was written, and
    what could not be (a node whose time series this process cannot read)."""
    folder = Path(runs_dir) / f"{safe_name(run_id)}.caraml-energy"  # names from records never leave runs_dir
    written, missing = [], []
    for fallback, node in enumerate(nodes):
        rank = int(node.get("node_rank", fallback))
        path = node.get("timeseries")
        if not node.get("available", True) or not path or not str(path).endswith(".csv"):
            missing.append(f"node rank {rank} ({node.get('host')}): no CSV time series "
                           f"({node.get('reason') or path or 'none written'})")
            continue
        try:
            folder.mkdir(parents=True, exist_ok=True)
            written.append(write_node(node, rank, system, folder))
        except OSError as exc:
            missing.append(f"node rank {rank} ({node.get('host')}): {path} unreadable here ({exc.strerror or exc})")
    out = {"folder": str(folder), "format": "CARAML (jpwr) CSV", "window": WINDOW,
           "nodes": [{k: w[k] for k in w if k != "values"} for w in written]}
    if written:
        combined = folder / "combined_energy.csv"
        write_combined(written, combined)
        out["combined"] = str(combined)
    if missing:
        out["missing"] = missing
    return out
