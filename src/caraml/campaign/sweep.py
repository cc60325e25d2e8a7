"""A sweep's plan: a suite expanded to points for a system; and what every executor shares (the records of
points that ended without writing one, the points already done). The executors run it: local.py, slurm.py."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from caraml import systems, workloads
from caraml.campaign import expand as expand_mod
from caraml.campaign import launchers
from caraml.campaign import suite as suite_mod
from caraml.campaign.expand import SweepPoint, time_limit_seconds  # noqa: F401 (callers import it from here)
from caraml.errors import BadInput
from caraml.results import record as rec
from caraml.results.store import Store


@dataclass
class Plan:
    suite: suite_mod.Suite
    system: str
    tags: list[str]
    points: list[SweepPoint] = field(default_factory=list)
    site: dict = field(default_factory=dict)  # site settings from the command line (--partition, ...) for SLURM jobs


def plan(suite_name: str, tags: list[str], system: str | None, overrides: dict[str, str],
         need_system: bool = False, preset: str | None = None, max_points: int = expand_mod.MAX_POINTS) -> Plan:
    suite = suite_mod.load(suite_name)
    if preset is not None:  # a workload preset in place of the suite's (checked when the suite expands)
        suite.preset = preset
    tags = expand_mod.check_tags(suite, tags)
    if system is None:  # JUBE style: the system is one of the tags (`--tag H100`)
        named = [t for t in tags if t in systems.known_tags()]
        if len(named) > 1:
            raise BadInput(f"tags name several systems ({', '.join(named)}); pass one with --system")
        if named:
            system = named[0]
        elif need_system:
            raise BadInput("--executor slurm needs the compute nodes' system: pass --system TAG "
                           f"(one of {', '.join(systems.known_tags())})")
        else:
            system = systems.detect()
    system = systems.get(system)["tag"]
    expand_mod.apply_overrides(suite, overrides)
    return Plan(suite, system, tags, expand_mod.expand(suite, set(tags), system, max_points))


def one_point(suite: str, overrides: dict[str, str], system: str, tags: list[str], preset: str | None) -> SweepPoint:
    """The single point the values select; a clear error naming what still varies otherwise."""
    found = plan(suite, tags, None if system == "auto" else system, overrides, preset=preset)
    if len(found.points) == 1:
        return found.points[0]
    varying = {}
    derived = set(found.suite.entries["derived"])  # these follow from the others
    for p in found.points:
        for key, value in p.shown.items():
            if key in derived:
                continue
            varying.setdefault(key, [])
            if value not in varying[key]:
                varying[key].append(value)
    open_keys = [f"{k} ({', '.join(map(str, v))})" for k, v in varying.items() if len(v) > 1]
    raise BadInput(f"suite {found.suite.name} has {len(found.points)} points for these values; give one value for: "
                   + "; ".join(open_keys))


def runs(points: list[SweepPoint]) -> list[SweepPoint]:
    """What the executors run: each point `repeats` times, one after the other (SweepPoint.repeat 1, 2, ...)."""
    return [replace(p, repeat=n) for p in points for n in range(1, p.repeats + 1)]


def ok_records(results: str) -> dict[str, list[dict]]:
    """The ok records of each configuration, oldest first (records from before a parameter was renamed count under
    today's id)."""
    from caraml.results.aggregate import current_id

    out: dict[str, list[dict]] = {}
    for r in sorted(Store(results).load(warn=False), key=lambda r: str(r.get("started_at") or "")):
        if r.get("status") == "ok":
            out.setdefault(current_id(r), []).append(r)
    return out


def still_to_run(runs_: list[SweepPoint], have: Counter) -> list[SweepPoint]:
    """The runs a --resume runs: repeat n of a configuration that already has `have[id]` (ok, or submitted and
    waiting) runs only when n is more than that."""
    return [r for r in runs_ if r.repeat > have[r.id]]


def check_runnable(p: Plan) -> None:
    workloads.require_built(workloads.get(p.suite.workload))


def check_system_here(p: Plan) -> None:
    """Refuse a sweep run on this machine whose system profile its device contradicts, once before the first
    point, as each point's own run would refuse it after its start-up."""
    from caraml.runner import device_for

    for choice in sorted({str(point.params.get("device", "auto")) for point in p.points}):
        systems.require_fits(systems.get(p.system), device_for(choice),
                             "run the sweep as this machine's {detected}: --system {detected} (or --tag {detected}"
                             f" in place of --tag {p.system})")


def missing_record(point: dict, status: str, error: str, job_id: str | None = None,
                   started_at: str | None = None) -> dict:
    """A record for a point that ended without writing its own (died, killed, timed out): the same layout as a
    run's record, with the point's effective parameters and launch, so tables and --resume treat it alike."""
    import caraml

    now = rec.now()
    profile = systems.get(point["system"])
    return rec.RunRecord(
        id=point["id"], workload=point["workload"], status=status, preset=point.get("preset"),
        params=point["params"], system={"tag": profile["tag"], "detected": False, "profile": profile},
        launch={"world_size": point["world_size"], "nodes": point["nodes"],
                "local_world_size": point["devices_per_node"], "backend": None,
                "launcher": point.get("launcher", launchers.DEFAULT) if point["world_size"] > 1 else "single",
                "device": None, "time_limit": point.get("time_limit")},
        metrics={"energy": {"total_wh": None, "available": False, "reason": "the run wrote no record"}},
        # only what the sweep itself knows: the run's own manifest died with it
        env={"caraml": caraml.__version__, "executor": "slurm" if job_id else "local",
             "slurm": {"SLURM_JOB_ID": job_id} if job_id else None},
        started_at=started_at or now, finished_at=now, error=error,
    ).to_dict()


def point_time_limit(point: SweepPoint) -> str:
    """The same limit the point's SLURM job script asks for."""
    site = systems.site(systems.get(point.system), point.workload)
    return str(point.time_limit or site.get("time_limit") or "01:00:00")
