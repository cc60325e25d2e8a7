"""From a suite, active tags and a system to the list of points: one run spec each, id = config hash."""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Any

from caraml import params as params_mod
from caraml import systems, workloads
from caraml.campaign import expr, launchers
from caraml.campaign.suite import LAUNCH_KEYS, Alternative, Suite, select, sweep_values
from caraml.errors import BadInput, did_you_mean, shown
from caraml.results.record import config_id
from caraml.settings import RUN_PARAMS, check_window

MAX_POINTS = 10_000  # a sweep beyond this is a typo more often than a plan (`caraml sweep --max-points N`)


@dataclass
class SweepPoint:
    """One point of a sweep: a workload configuration on a system, and how it is launched."""

    id: str
    workload: str
    system: str
    preset: str | None
    params: dict[str, Any]  # every effective workload parameter, typed
    nodes: int = 1
    devices_per_node: int = 1
    launcher: str = launchers.DEFAULT  # a name in launchers.LAUNCHERS
    time_limit: str | None = None
    shown: dict[str, Any] = field(default_factory=dict)  # what the suite set for this point (for people)
    repeats: int = 1  # runs of this point, each with a record of its own (launch.repeats)
    repeat: int = 1  # which of them this is (sweep.runs)

    @property
    def world_size(self) -> int:
        return self.nodes * self.devices_per_node

    @property
    def key(self) -> str:
        """The name of this run's job, script, log and lock: the id, and for a later repeat its number."""
        return self.id if self.repeat == 1 else f"{self.id}-r{self.repeat}"

    def as_json(self) -> dict:
        return {"id": self.id, "workload": self.workload, "system": self.system, "preset": self.preset,
                "nodes": self.nodes, "devices_per_node": self.devices_per_node, "world_size": self.world_size,
                "launcher": self.launcher, "time_limit": self.time_limit, "params": self.params,
                **({"repeat": self.repeat, "repeats": self.repeats} if self.repeats > 1 else {})}


def check_tags(suite: Suite, given: list[str]) -> list[str]:
    """The tags as the suite spells them: a tag given in another case is the suite's where only one tag matches
    (`--tag h100` is H100); an unknown one is bad input, with the closest known tag suggested."""
    known = suite.mentioned_tags() | set(systems.known_tags())
    out = []
    for tag in given:
        if tag not in known:
            same = [k for k in known if k.lower() == tag.lower()]
            if len(same) == 1:
                out.append(same[0])
                continue
            raise BadInput(f"unknown tag '{shown(tag)}' for suite {suite.name}; {did_you_mean(tag, known)}its tags: "
                           + ", ".join(sorted(suite.mentioned_tags())) + " (and the system tags)")
        out.append(tag)
    return out


def apply_overrides(suite: Suite, overrides: dict[str, str]) -> None:
    """`key=value` from the command line replaces the suite's value (a comma list is a sweep)."""
    declared = {p.name for p in _declared(suite)}
    for key, raw in overrides.items():
        section = ("launch" if key in LAUNCH_KEYS else "params" if key in declared
                   else "vars" if key in suite.entries["vars"] or key in suite.entries["derived"] else None)
        if section is None:
            raise BadInput(f"{shown(key)}={shown(raw)}: '{shown(key)}' is neither a parameter of {suite.workload} "
                           f"nor a variable of suite {suite.name}; parameters: {', '.join(sorted(declared))}")
        for body in suite.entries.values():
            body.pop(key, None)
        suite.entries[section][key] = [Alternative(raw)]


def _declared(suite: Suite):
    return workloads.get(suite.workload).params + RUN_PARAMS


def expand(suite: Suite, active: set[str], system: str, max_points: int = MAX_POINTS) -> list[SweepPoint]:
    wl = workloads.get(suite.workload)
    declared = {p.name: p for p in _declared(suite)}
    profile = systems.get(system)
    if suite.preset is not None:
        try:  # spelt as the workload spells it, in the points and their records
            suite.preset = workloads.preset_named(wl, suite.preset)
        except BadInput as exc:
            raise BadInput(f"suite {suite.name}: {exc}") from None
    preset = wl.presets.get(suite.preset) if suite.preset else None
    for name in suite.entries["params"]:
        if name not in declared:
            raise BadInput(f"suite {suite.name}: params.{name}: workload {wl.name} has no parameter '{shown(name)}'; "
                           f"its parameters: {', '.join(sorted(declared))}")
    active = set(active) | {system}

    axes: list[tuple[str, str, list[Any]]] = []
    for section in ("params", "vars", "launch"):
        for name, alts in suite.entries[section].items():
            found, value = select(alts, active)
            if found:
                axes.append((section, name, sweep_values(value)))
    if any(not values for _, _, values in axes):
        empty = next(f"{s}.{n}" for s, n, v in axes if not v)
        raise BadInput(f"suite {suite.name}: {empty} is an empty list, so the sweep has zero points")
    count = math.prod(len(values) for _, _, values in axes)  # before making any: 10**7 points take hours
    if count > max_points:
        raise BadInput(f"suite {suite.name} expands to {count} points, more than the limit of {max_points}; "
                       f"sweep fewer values, or pass --max-points {count} if you mean it")

    defaults = {p.name: p.default for p in declared.values()} | dict(preset or {})
    points: dict[str, SweepPoint] = {}
    for combo in itertools.product(*(values for _, _, values in axes)):
        chosen = {"params": {}, "vars": {}, "launch": {}}
        for (section, name, _), value in zip(axes, combo):
            chosen[section][name] = value
        point = _point(suite, wl, declared, profile, system, preset, defaults, chosen, active)
        same = points.setdefault(point.id, point)
        if same.repeats != point.repeats:
            raise BadInput(f"suite {suite.name}: repeats takes one value per point (here {same.repeats} and "
                           f"{point.repeats}): how often a point runs is not a configuration of its own")
        if same.params != point.params:  # differ only in how they are measured: one configuration, not two points
            diff = ", ".join(f"{k}={same.params[k]} vs {point.params[k]}" for k in same.params
                             if same.params[k] != point.params.get(k))
            raise BadInput(f"suite {suite.name}: two points differ only in measurement settings ({diff[:200]}); "
                           "they measure one configuration: give those settings one value")
    if not points:
        raise BadInput(f"suite {suite.name} expands to zero points with tags {', '.join(sorted(active))}")
    return list(points.values())


def _point(suite, wl, declared, profile, system, preset, defaults, chosen, active) -> SweepPoint:
    launch = chosen["launch"]
    launch.setdefault("nodes", 1)
    launch.setdefault("devices_per_node", max(1, int(profile.get("devices_per_node", 1))))
    names = {**defaults, **chosen["params"], **chosen["vars"], **launch, "system": system}
    names["devices"] = _count(launch["nodes"], "nodes") * _count(launch["devices_per_node"], "devices_per_node")
    names["cpus_per_task"] = _cpus_per_task(profile, launch, suite.workload)
    for name, alts in suite.entries["derived"].items():
        found, text = select(alts, active)
        if not found:
            continue
        value = expr.evaluate(str(text), names, f"suite {suite.name}: derived.{name}")
        names[name] = value
        section = "launch" if name in LAUNCH_KEYS else "params" if name in declared else "vars"
        chosen[section][name] = value
        if name in ("nodes", "devices_per_node", "launcher"):
            names["devices"] = _count(launch["nodes"], "nodes") * _count(launch["devices_per_node"], "devices_per_node")
            names["cpus_per_task"] = _cpus_per_task(profile, launch, suite.workload)
    nodes, per_node = _count(launch["nodes"], "nodes"), _count(launch["devices_per_node"], "devices_per_node")
    repeats = _count(launch.get("repeats", 1), "repeats")
    launcher = str(launch.get("launcher", launchers.DEFAULT))
    try:
        problem = launchers.get_launcher(launcher).problem(nodes, per_node)
    except BadInput as exc:
        raise BadInput(f"suite {suite.name}: {exc}") from None
    if problem:
        raise BadInput(f"suite {suite.name}: {problem} (nodes={nodes}, devices_per_node={per_node})")
    values = params_mod.resolve(list(declared.values()), chosen["params"], wl.name, preset)
    check_window(values, chosen["params"], f"suite {suite.name}: {wl.name}")
    problem = wl.launch_problem(values, nodes * per_node)
    if problem:
        raise BadInput(f"suite {suite.name}: {problem} (nodes={nodes}, devices_per_node={per_node})")
    cid = config_id(wl.identifying(values), system, {"world_size": nodes * per_node, "nodes": nodes})
    as_set = {**chosen["vars"], **{k: values[k] for k in chosen["params"]}, **launch}
    time_limit = launch.get("time_limit")
    time_limit_seconds(time_limit)  # a bad limit fails here, not in the job script
    return SweepPoint(id=cid, workload=wl.name, system=system, preset=suite.preset, params=values, nodes=nodes,
                 devices_per_node=per_node, launcher=launcher,
                 time_limit=None if time_limit is None else str(time_limit), shown=as_set, repeats=repeats)


def time_limit_seconds(text: str | None) -> float | None:
    """SLURM's time formats (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S) in seconds; None for no limit."""
    if text is None or str(text).strip().upper() in ("UNLIMITED", "INFINITE"):
        return None
    raw = str(text).strip()
    if not re.fullmatch(r"([0-9]{1,6}-)?[0-9]{1,9}(:[0-9]{1,9}){0,2}", raw):
        raise BadInput(f"time_limit={shown(raw)} is not a SLURM time limit; use MM, HH:MM:SS or D-HH:MM:SS, "
                       "e.g. 01:00:00")
    days, _, rest = raw.rpartition("-")
    parts, d = [int(x) for x in rest.split(":")], int(days or 0)
    if days:  # D-H, D-H:M, D-H:M:S
        h, m, sec = (parts + [0, 0])[:3]
    else:  # M, M:S, H:M:S
        h, m, sec = [0, *parts] if len(parts) == 2 else ([0, parts[0], 0] if len(parts) == 1 else parts)
    seconds = ((d * 24 + h) * 60 + m) * 60 + sec
    if seconds == 0:
        return None  # SLURM reads 0 as no limit
    return float(seconds)


def _count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not re.fullmatch(r"-?[0-9]{1,9}", str(value).strip()):
        raise BadInput(f"launch {name}={shown(value)} is not a whole number (plain digits, e.g. 4)")
    n = int(str(value))
    if n < 1:
        raise BadInput(f"launch {name}={shown(value)} must be at least 1")
    return n


def _cpus_per_task(profile: dict, launch: dict, workload: str) -> int:
    """The CPUs each task of the point's job gets, as its job script asks for them (caraml.campaign.slurm): the
    profile's site.cpus_per_task for one task per node (torchrun, single), a device's share of it for srun's task
    per device; 0 when the profile names none. Derived values may use it (`workers: cpus_per_task // 4`)."""
    raw = systems.site(profile, workload).get("cpus_per_task") or 0
    try:
        cpus = int(raw)
    except (TypeError, ValueError):
        raise BadInput(f"system {profile.get('tag')}: site.cpus_per_task={raw!r} is not a whole number") from None
    launcher = launchers.LAUNCHERS.get(str(launch.get("launcher", launchers.DEFAULT)))  # checked later
    if cpus and launcher is not None and launcher.task_per_device:
        return max(1, cpus // _count(launch["devices_per_node"], "devices_per_node"))
    return max(0, cpus)
