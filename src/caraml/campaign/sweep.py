"""A sweep: expand a suite to points, then run them here (one subprocess each) or submit them to SLURM,
and later collect what the SLURM jobs recorded (`caraml sweep --continue`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from caraml import systems, workloads
from caraml.campaign import expand as expand_mod, launch, slurm, state, suite as suite_mod
from caraml.campaign.expand import Point
from caraml.errors import BadInput
from caraml.results import record as rec
from caraml.results.store import Store


@dataclass
class Plan:
    suite: suite_mod.Suite
    system: str
    tags: list[str]
    points: list[Point] = field(default_factory=list)


def plan(suite_name: str, tags: list[str], system: str | None, overrides: dict[str, str],
         need_system: bool = False, preset: str | None = None) -> Plan:
    suite = suite_mod.load(suite_name)
    if preset is not None:  # a workload preset in place of the suite's (checked when the suite expands)
        suite.preset = preset
    expand_mod.check_tags(suite, tags)
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
    return Plan(suite, system, tags, expand_mod.expand(suite, set(tags), system))


def ok_ids(results: str) -> set[str]:
    return {r.get("id") for r in Store(results).load(warn=False) if r.get("status") == "ok"}


def check_runnable(p: Plan) -> None:
    wl = workloads.get(p.suite.workload)
    if not wl.built:
        raise BadInput(f"workload {wl.name} is not built yet in this version; its points can be listed with "
                       f"`caraml sweep {p.suite.name} --dry-run` but not run")


def missing_record(point: dict, status: str, error: str, job_id: str | None = None) -> dict:
    """A record for a point that ended without writing its own (died, killed, timed out)."""
    now = rec.now()
    profile = systems.get(point["system"])
    return {
        "schema": rec.SCHEMA_VERSION, "id": point["id"], "run_id": rec.run_id(point["id"], now),
        "workload": point["workload"], "status": status, "preset": point.get("preset"), "params": point["params"],
        "system": {"tag": point["system"], "detected": False, "profile": profile},
        "launch": {"world_size": point["world_size"], "nodes": point["nodes"],
                   "local_world_size": point["devices_per_node"], "backend": None,
                   "launcher": point.get("launcher", "torchrun") if point["world_size"] > 1 else "single",
                   "device": None},
        "metrics": {"energy": {"total_wh": None, "available": False, "reason": "the run wrote no record"}},
        "env": {"slurm": {"SLURM_JOB_ID": job_id} if job_id else None},
        "started_at": None, "finished_at": now, "error": error,
    }


# local ---------------------------------------------------------------------------------------------
def run_local(p: Plan, results: str, resume: bool, python: str | None = None) -> dict[str, int]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    check_runnable(p)
    for point in p.points:
        if point.nodes > 1:
            raise BadInput(f"point {point.id} asks for {point.nodes} nodes; run it with --executor slurm")
    done = ok_ids(results) if resume else set()
    logs = Path(results) / "sweep" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = launch.source_root() + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    counts: dict[str, int] = {}
    console = Console(stderr=True)
    columns = (TextColumn("sweep {task.fields[suite]}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[current]}"))
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("sweep", total=len(p.points), suite=p.suite.name, current="")
        for point in p.points:
            label = " ".join(f"{k}={v}" for k, v in point.shown.items() if k not in ("time_limit",))
            if point.id in done:
                counts["skipped"] = counts.get("skipped", 0) + 1
                bar.console.print(f"caraml: {point.id} already ok, skipped")
                bar.advance(task)
                continue
            bar.update(task, current=f"{point.id} {label}")
            status = _run_point(point, results, python, env, logs / f"{point.id}.log")
            counts[status] = counts.get(status, 0) + 1
            bar.console.print(f"caraml: {point.id} {status}: {label}")
            bar.advance(task)
    return counts


def _run_point(point: Point, results: str, python: str | None, env: dict, log: Path) -> str:
    """One point in a subprocess of its own, so a crash or OOM kill ends only that point."""
    cmd = launch.local_command(point, results, python)
    with open(log, "w") as err:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    record = None
    for line in reversed(proc.stdout.strip().splitlines()):
        try:
            record = json.loads(line)
            break
        except json.JSONDecodeError:
            continue
    if isinstance(record, dict) and "status" in record:
        return record["status"]
    tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    why = tail[-1] if tail else f"exit code {proc.returncode}"
    Store(results).save(missing_record(point.as_json(), "failed",
                                       f"the run ended (exit code {proc.returncode}) without a record: {why}"))
    return "failed"


# SLURM ---------------------------------------------------------------------------------------------
def job_paths(results: str, point: Point) -> tuple[Path, str]:
    root = Path(results).resolve() / "sweep"
    return root / "jobs" / f"{point.id}.sh", str(root / "logs" / f"{point.id}-%j.out")


def write_scripts(p: Plan, results: str, python: str | None) -> list[tuple[Point, Path]]:
    profile = systems.get(p.system)
    opts = slurm.JobOptions(results=str(Path(results).resolve()), python=python or sys.executable)
    out = []
    for point in p.points:
        script, log = job_paths(results, point)
        script.parent.mkdir(parents=True, exist_ok=True)
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        script.write_text(slurm.render(point, profile, opts, log))
        script.chmod(0o755)
        out.append((point, script))
    return out


def submit(p: Plan, results: str, resume: bool, python: str | None) -> dict[str, int]:
    check_runnable(p)
    slurm.require_commands()
    data = state.load(results)
    done = ok_ids(results) if resume else set()
    waiting = {e["point"]["id"] for e in data["jobs"].values() if e["state"] == "submitted"}
    counts = {"submitted": 0, "skipped": 0}
    for point, script in write_scripts(p, results, python):
        if point.id in done or (resume and point.id in waiting):
            counts["skipped"] += 1
            print(f"caraml: {point.id} {'already ok' if point.id in done else 'already submitted'}, skipped",
                  file=sys.stderr)
            continue
        job_id = slurm.submit(script)
        data["jobs"][job_id] = {"point": point.as_json() | {"shown": point.shown}, "script": str(script),
                                "suite": p.suite.name, "submitted_at": rec.now(), "state": "submitted",
                                "status": None}
        state.save(results, data)  # after each job: a failure later still leaves the earlier ones known
        counts["submitted"] += 1
        print(f"caraml: {point.id} submitted as job {job_id}", file=sys.stderr)
    return counts


def collect(results: str) -> dict:
    """`--continue`: records of finished jobs; a record for jobs that ended without one; what still waits."""
    slurm.require_commands(("squeue", "scontrol"))
    data = state.load(results)
    open_jobs = [j for j, e in data["jobs"].items() if e["state"] == "submitted"]
    if not data["jobs"]:
        raise BadInput(f"no submitted sweep in {results} (no {state.FILE}); submit with "
                       "`caraml sweep SUITE --executor slurm` first")
    waiting = slurm.queued(open_jobs)
    by_job = {}
    for r in Store(results).load(warn=False):
        job = ((r.get("env") or {}).get("slurm") or {}).get("SLURM_JOB_ID")
        if job:
            by_job[str(job)] = r
    report = {"collected": {}, "queued": {}}
    for job_id in open_jobs:
        entry = data["jobs"][job_id]
        if job_id in waiting:
            report["queued"][job_id] = waiting[job_id]
            continue
        record = by_job.get(job_id)
        if record is None:
            ended = slurm.final_state(job_id)
            status = "timeout" if ended.startswith("TIMEOUT") or ended == "DEADLINE" else "failed"
            record = missing_record(entry["point"], status,
                                    f"SLURM job {job_id} ended {ended} without writing a record", job_id)
            Store(results).save(record)
        entry.update(state="collected", status=record["status"])
        report["collected"][job_id] = record["status"]
    state.save(results, data)
    report["all"] = {j: e["status"] or "queued" for j, e in data["jobs"].items()}
    return report
