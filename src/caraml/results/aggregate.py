"""From record files to points: repeats of one configuration (same record `id`) become one point.

A point carries every run of its configuration; metrics are the median over its successful runs,
and the spread of throughput across them says how much the repeats disagree.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from caraml.errors import BadInput, printable, shown
from caraml.params import as_today
from caraml.results.energy import Energy, energy_of, is_number
from caraml.results.record import config_id, validate
from caraml.settings import MEASUREMENT_KEYS


@dataclass
class Point:
    id: str
    workload: str
    records: list[dict] = field(default_factory=list)  # oldest first

    @property
    def ok(self) -> list[dict]:
        return [r for r in self.records if r.get("status") == "ok" and throughput_of(r) is not None]

    @property
    def rep(self) -> dict:
        """The run that stands for the configuration: the latest successful one, else the latest."""
        return (self.ok or self.records)[-1]

    @property
    def params(self) -> dict:
        """The representative run's parameters, under today's names (a record from before a parameter was
        renamed groups and compares with today's)."""
        return _as_today(self.workload, self.rep.get("params") or {})

    @property
    def system(self) -> str | None:
        return (self.rep.get("system") or {}).get("tag")

    @property
    def devices(self) -> int | None:
        return (self.rep.get("launch") or {}).get("world_size")

    @property
    def nodes(self) -> int | None:
        return (self.rep.get("launch") or {}).get("nodes")

    @property
    def unit(self) -> str | None:
        """The throughput unit without '/s', e.g. 'images'."""
        unit = ((self.rep.get("metrics") or {}).get("throughput") or {}).get("unit")
        return unit[:-2] if isinstance(unit, str) and unit.endswith("/s") else unit

    @property
    def status(self) -> str:
        """'ok' when every run succeeded; 'ok 2/3' when some did; else the latest run's status."""
        n_ok, n = len(self.ok), len(self.records)
        if n_ok == n:
            return "ok"
        if n_ok:
            return f"ok {n_ok}/{n}"
        return str(self.records[-1].get("status"))

    def median(self, get: Callable[[dict], Any]) -> float | None:
        values = [v for v in map(get, self.ok) if is_number(v)]
        return statistics.median(values) if values else None

    def spread(self, get: Callable[[dict], Any]) -> float | None:
        """(max - min) / median over the successful repeats; None with fewer than two."""
        values = [v for v in map(get, self.ok) if is_number(v)]
        if len(values) < 2:
            return None
        mid = statistics.median(values)
        return (max(values) - min(values)) / mid if mid else None

    @property
    def throughput(self) -> float | None:
        return self.median(throughput_of)

    @property
    def units_per_wh(self) -> float | None:
        return self.median(lambda r: energy_of(r).units_per_wh)

    def energy(self) -> Energy:
        return energy_of(self.rep)

    def config(self, without: tuple[str, ...] = ()) -> dict:
        """The configuration this point measures: system, devices, nodes and workload parameters."""
        out = {"system": self.system, "devices": self.devices, "nodes": self.nodes}
        out.update({k: v for k, v in self.params.items() if k not in MEASUREMENT_KEYS})
        return {k: v for k, v in out.items() if k not in without}


def current_id(record: dict) -> str | None:
    """A record's configuration id under today's parameter names and values. The stored id, unless the record
    predates a rename (FNO's amp, image classification's gradient_accumulation, the LLM's boolean compile):
    then the id a run of that configuration gets today, so old and new runs are one configuration in tables,
    comparisons and `sweep --resume`. The file itself is never changed."""
    params, wl = record.get("params"), _installed(record.get("workload"))
    if not isinstance(params, dict) or wl is None:
        return record.get("id")
    today = as_today(wl.params, params)
    if today == params:
        return record.get("id")
    launch, system = record.get("launch") or {}, record.get("system") or {}
    return config_id(wl.identifying(today), system.get("tag"),
                     {"world_size": launch.get("world_size"), "nodes": launch.get("nodes")})


def _as_today(workload: str, params: dict) -> dict:
    wl = _installed(workload)
    return params if wl is None else as_today(wl.params, params)


def _installed(workload):
    """The workload a record names, None for one this installation does not have (its records are read as they
    are)."""
    from caraml import workloads

    if not isinstance(workload, str):
        return None
    try:
        return workloads.get(workload)
    except BadInput:
        return None


def throughput_of(record: dict) -> float | None:
    value = ((record.get("metrics") or {}).get("throughput") or {}).get("value")
    return value if is_number(value) else None


def group(records: list[dict]) -> list[Point]:
    """One point per configuration id, in the order configurations were first run."""
    points: dict[str, Point] = {}
    for r in records:
        key = current_id(r) or r.get("run_id") or r.get("_path")
        points.setdefault(key, Point(id=key, workload=r.get("workload"))).records.append(r)
    return list(points.values())


def load(results: str, warn=True) -> tuple[list[dict], list[str]]:
    """Records of a results folder and the files skipped (unreadable or not following the schema)."""
    from caraml.results.store import Store

    store = Store(results)
    if not store.root.is_dir():
        raise BadInput(f"results directory {results} does not exist; run `caraml run ...` first or pass --results DIR")
    return readable(store, warn)


def readable(store, warn=True) -> tuple[list[dict], list[str]]:
    """The store's records that readers show and the files skipped ("PATH: why"), each named on stderr."""
    skipped = []
    kept = []
    for r in store.load(warn=warn, skipped=skipped):
        problems = validate(r)
        if problems:
            skipped.append(f"{r['_path']}: {'; '.join(problems)}")
            if warn:
                print(printable(f"caraml: skipping record {r['_path']}: {'; '.join(problems)}"), file=sys.stderr)
            continue
        kept.append(r)
    return kept, skipped


def parse_where(items: list[str] | None) -> list[tuple[str, str]]:
    pairs = []
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"--where {shown(item)!r} is not key=value, e.g. --where system=H100")
        pairs.append((key.strip(), value.strip()))
    return pairs


def matches(actual, wanted: str) -> bool:
    """Does a stored value equal a value typed on the command line (numbers, booleans, text)?"""
    if isinstance(actual, bool):
        return wanted.lower() in (("true", "on", "yes", "1") if actual else ("false", "off", "no", "0"))
    if is_number(actual):
        try:
            return float(wanted) == float(actual)
        except ValueError:
            return False
    return str(actual).lower() == wanted.lower()
