"""Published references: figures a project published, shipped as data files with their source, the configuration
they were measured in and the convention they were counted by (references/NAME.yaml), and the user's records of
that same configuration beside them, with the ratio yours / theirs per global batch.

Only records whose parameters equal the reference's `configuration` (its preset's shape, batch layout, precision,
recompute, and the counting convention) stand beside it: a figure counted another way, or of another model, says
nothing against the published one. Where no record qualifies, the refusal names what differs and what to run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from caraml.errors import BadInput, did_you_mean, shown

if TYPE_CHECKING:
    from caraml.results.aggregate import Point
# The results modules are imported where they are used: `caraml --help` lists the names() and imports no more.

FOLDER = Path(__file__).parent / "references"
# Settings that change along a global-batch sweep, or that say where a run ran: never what tells user lines apart.
ALONG = ("global_batch_size", "grad_accumulation", "system", "devices", "nodes")


@dataclass(frozen=True)
class RefSystem:
    name: str
    label: str
    devices: int
    points: dict[int, float]  # global batch size -> the published figure


@dataclass(frozen=True)
class Reference:
    name: str
    title: str
    workload: str
    metric: str  # the record's metrics key of the compared figure
    unit: str
    source: dict
    configuration: dict  # parameter -> the value a record must have
    convention: dict
    preset: str  # the workload's preset of this configuration
    run: str  # the command that makes a record of this configuration
    systems: tuple[RefSystem, ...]

    def source_line(self) -> str:
        s = self.source
        return f"{s['repo']} at {s['commit'][:12]}, {s['file']}"


def names() -> list[str]:
    return sorted(p.stem for p in FOLDER.glob("*.yaml"))


@lru_cache(maxsize=None)
def load(name: str) -> Reference:
    """The shipped reference `name`; an unknown name is one line with the closest known one."""
    known = names()
    if name not in known:
        raise BadInput(f"--reference {shown(name)}: no such published reference; {did_you_mean(name, known)}"
                       f"known: {', '.join(known)}")
    import yaml

    data = yaml.safe_load((FOLDER / f"{name}.yaml").read_text(encoding="utf-8"))
    systems = tuple(RefSystem(s["name"], s["label"], int(s["devices"]),
                              {int(g): float(v) for g, v in s["points"].items()}) for s in data["systems"])
    return Reference(data["name"], data["title"], data["workload"], data["metric"], data["unit"], data["source"],
                     dict(data["configuration"]), data["convention"], data["preset"], data["run"],
                     systems)


def differences(ref: Reference, params: dict) -> list[str]:
    """The reference's settings that `params` does not have, each as `key=yours (reference: theirs)`."""
    from caraml.results.aggregate import matches

    out = []
    for key, wanted in ref.configuration.items():
        if key not in params:
            out.append(f"{key} not recorded (reference: {wanted})")
        elif not matches(params[key], str(wanted)):
            out.append(f"{key}={params[key]} (reference: {wanted})")
    return out


def figure_of(ref: Reference, point: Point) -> float | None:
    """The point's figure by the reference's convention: the median over its successful runs."""
    return point.median(lambda r: (r.get("metrics") or {}).get(ref.metric))


@dataclass
class Row:
    """One of the user's points beside the reference: its line (system, devices, settings), global batch, figure."""

    system: str | None
    devices: int | None
    settings: str  # what tells this line from the user's other lines ("" when nothing does)
    global_batch: int | None
    value: float
    runs: int
    ids: list[str] = field(default_factory=list)

    @property
    def line(self) -> str:
        devices = f"{self.devices} device{'s' if self.devices != 1 else ''}"
        return f"{self.system} ({devices}{', ' + self.settings if self.settings else ''})"


@dataclass
class ReferenceComparison:
    reference: Reference
    rows: list[Row]

    def theirs(self, system: RefSystem, row: Row) -> float | None:
        return system.points.get(row.global_batch) if row.global_batch is not None else None

    def ratio(self, system: RefSystem, row: Row) -> float | None:
        theirs = self.theirs(system, row)
        return row.value / theirs if theirs else None


def compare_reference(ref: Reference, points: list[Point], results: str) -> ReferenceComparison:
    """The user's points of the reference's configuration beside it; BadInput (one line) where none is."""
    from caraml.results import columns as cols
    from caraml.results.energy import is_number

    mine = [p for p in points if p.workload == ref.workload]
    if not mine:
        raise BadInput(f"--reference {ref.name}: no {ref.workload} records in {results}; run `{ref.run}`")
    same = [p for p in mine if not differences(ref, p.params)]
    usable = [p for p in same if is_number(figure_of(ref, p))]
    if not usable:
        raise BadInput(_refusal(ref, mine, same, results))
    split = _distinguishing(usable)
    rows = [Row(p.system, p.devices, ", ".join(f"{k}={p.config().get(k)}" for k in split), cols.GLOBAL_BATCH.get(p),
                figure_of(ref, p), len(p.ok), p.id.split("+")) for p in usable]
    rows.sort(key=lambda r: (str(r.system), r.devices or 0, r.settings, r.global_batch or 0))
    return ReferenceComparison(ref, rows)


def _refusal(ref: Reference, mine: list[Point], same: list[Point], results: str) -> str:
    from caraml.results import columns as cols

    head = f"--reference {ref.name}: no {ref.workload} record in {results} "
    if same:
        states = sorted({p.status for p in same})
        return (head + f"has {ref.metric} in the reference's configuration ({len(same)} such configuration(s), "
                f"status {', '.join(states)}); run `{ref.run}`")
    closest = min(mine, key=lambda p: len(differences(ref, p.params)))
    where = f"{closest.system}, {closest.devices} device(s), global batch {cols.GLOBAL_BATCH.get(closest)}"
    return (head + f"is of the reference's configuration: the closest ({where}) has "
            f"{'; '.join(differences(ref, closest.params))}; run `{ref.run}`")


def _distinguishing(points: list[Point]) -> list[str]:
    """The settings, besides system and devices, whose values differ among the points (compile=..., backend=...)."""
    from caraml.settings import MEASUREMENT_KEYS

    configs = [p.config() for p in points]
    keys = dict.fromkeys(k for c in configs for k in c if k not in ALONG and k not in MEASUREMENT_KEYS)
    return [k for k in keys if len({str(c.get(k)) for c in configs}) > 1]
