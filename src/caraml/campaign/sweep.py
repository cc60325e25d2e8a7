"""A sweep: expand a suite to points, then run them here (one subprocess each) or submit them to SLURM,
and later collect what the SLURM jobs recorded (`caraml sweep --continue`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from caraml import systems, workloads
from caraml.campaign import expand as expand_mod, launch, slurm, state, suite as suite_mod
from caraml.campaign.expand import Point, time_limit_seconds  # noqa: F401 (callers import it from here)
from caraml.errors import BadInput
from caraml.paths import ensure_writable_dir
from caraml.results import record as rec
from caraml.results.store import Store


@dataclass
class Plan:
    suite: suite_mod.Suite
    system: str
    tags: list[str]
    points: list[Point] = field(default_factory=list)


def plan(suite_name: str, tags: list[str], system: str | None, overrides: dict[str, str],
         need_system: bool = False, preset: str | None = None, max_points: int = expand_mod.MAX_POINTS) -> Plan:
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
    return Plan(suite, system, tags, expand_mod.expand(suite, set(tags), system, max_points))


def ok_ids(results: str) -> set[str]:
    return {r.get("id") for r in Store(results).load(warn=False) if r.get("status") == "ok"}


def check_runnable(p: Plan) -> None:
    workloads.require_built(workloads.get(p.suite.workload))


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
                "launcher": point.get("launcher", "torchrun") if point["world_size"] > 1 else "single",
                "device": None, "time_limit": point.get("time_limit")},
        metrics={"energy": {"total_wh": None, "available": False, "reason": "the run wrote no record"}},
        # only what the sweep itself knows: the run's own manifest died with it
        env={"caraml": caraml.__version__, "executor": "slurm" if job_id else "local",
             "slurm": {"SLURM_JOB_ID": job_id} if job_id else None},
        started_at=started_at or now, finished_at=now, error=error,
    ).to_dict()


def point_time_limit(point: Point) -> str:
    """The same limit the point's SLURM job script asks for."""
    site = systems.get(point.system).get("site", {})
    return str(point.time_limit or site.get("time_limit") or "01:00:00")


# local ---------------------------------------------------------------------------------------------
STOP_GRACE_S = 60.0  # how long a stopped point may take to finish its step and save its record


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) stopped a local sweep; carries the counts of the points that ran."""

    def __init__(self, counts: dict[str, int], left: int):
        super().__init__()
        self.counts, self.left = counts, left


def run_local(p: Plan, results: str, resume: bool, python: str | None = None) -> dict[str, int]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    check_runnable(p)
    for point in p.points:
        if point.nodes > 1:
            raise BadInput(f"point {point.id} asks for {point.nodes} nodes; run it with --executor slurm")
        time_limit_seconds(point_time_limit(point))  # a bad limit fails before anything runs
    ensure_writable_dir(results)
    done = ok_ids(results) if resume else set()
    logs = ensure_writable_dir(Path(results) / "sweep" / "logs")
    env = dict(os.environ)
    env["PYTHONPATH"] = launch.source_root() + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    counts: dict[str, int] = {}
    console = Console(stderr=True)
    columns = (TextColumn("sweep {task.fields[suite]}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[current]}"))
    finished = 0
    old_term = signal.signal(signal.SIGTERM, _raise_interrupt)  # a killed sweep stops its point like Ctrl-C
    try:
        with Progress(*columns, console=console) as bar:
            task = bar.add_task("sweep", total=len(p.points), suite=p.suite.name, current="")
            for point in p.points:
                label = " ".join(f"{k}={v}" for k, v in point.shown.items() if k not in ("time_limit",))
                if point.id in done:
                    counts["skipped"] = counts.get("skipped", 0) + 1
                    bar.console.print(f"caraml: {point.id} already ok, skipped")
                else:
                    bar.update(task, current=f"{point.id} {label}")
                    status, stopped = _run_point(point, results, python, env, logs / f"{point.id}.log")
                    counts[status] = counts.get(status, 0) + 1
                    bar.console.print(f"caraml: {point.id} {status}: {label}")
                    if stopped:
                        finished += 1
                        raise SweepInterrupted(counts, len(p.points) - finished)
                finished += 1
                bar.advance(task)
    except SweepInterrupted:
        raise
    except KeyboardInterrupt:  # between points
        raise SweepInterrupted(counts, len(p.points) - finished) from None
    finally:
        signal.signal(signal.SIGTERM, old_term)
    return counts


def _raise_interrupt(_signum, _frame):
    raise KeyboardInterrupt


def _run_point(point: Point, results: str, python: str | None, env: dict, log: Path) -> tuple[str, bool]:
    """One point in a subprocess of its own, so a crash or OOM kill ends only that point. The status, and
    whether the user stopped the sweep during it.

    The point runs in a process group of its own (torchrun and its workers too): Ctrl-C reaches only the
    sweep, which passes exactly one SIGINT on and waits for the point to save its record; and the time
    limit can stop the whole group."""
    cmd = launch.local_command(point, results, python)
    limit_text = point_time_limit(point)
    limit = time_limit_seconds(limit_text)
    started = rec.now()
    stopped = timed_out = False
    with open(log, "w") as err:
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, process_group=0)
        try:
            try:
                out, _ = child.communicate(timeout=limit)
            except subprocess.TimeoutExpired:
                timed_out = True
                out = _stop(child, signal.SIGTERM)
        except KeyboardInterrupt:
            stopped = True
            out = _stop(child, signal.SIGINT)
    record = _last_json(out)
    if isinstance(record, dict) and "status" in record:
        if timed_out and record["status"] == "interrupted":  # stopped by us at the limit: say so
            record["status"] = "timeout"
            record["error"] = f"time limit {limit_text} reached; {record.get('error') or 'stopped'}"
            Store(results).save(record)
        return record["status"], stopped
    if timed_out:
        status, error = "timeout", f"time limit {limit_text} reached; the run was stopped without saving a record"
    elif stopped:
        status, error = "interrupted", "the sweep was interrupted; the run ended without saving a record"
    else:
        tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        why = tail[-1] if tail else f"exit code {child.returncode}"
        status, error = "failed", f"the run ended (exit code {child.returncode}) without a record: {why}"
    Store(results).save(missing_record(point.as_json(), status, error, started_at=started))
    return status, stopped


def _stop(child: subprocess.Popen, sig: int) -> str:
    """Ask the point's process group to stop (it ends its step and saves its record); SIGKILL after
    STOP_GRACE_S. Another Ctrl-C meanwhile passes the signal on again (the run then stops at once). Its stdout."""
    out = ""
    deadline = time.monotonic() + STOP_GRACE_S
    _signal_group(child, sig)
    while True:
        try:
            out, _ = child.communicate(timeout=max(0.0, deadline - time.monotonic()))
            return out or ""
        except subprocess.TimeoutExpired:
            _signal_group(child, signal.SIGKILL)
            out, _ = child.communicate()
            return out or ""
        except KeyboardInterrupt:
            _signal_group(child, signal.SIGINT)


def _signal_group(child: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(child.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _last_json(out: str | None):
    for line in reversed((out or "").strip().splitlines()):
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            continue
    return None


# SLURM ---------------------------------------------------------------------------------------------
def job_paths(results: str, point: Point) -> tuple[Path, str]:
    root = Path(results).resolve() / "sweep"
    return root / "jobs" / f"{point.id}.sh", str(root / "logs" / f"{point.id}-%j.out")


def write_scripts(p: Plan, results: str, python: str | None) -> list[tuple[Point, Path]]:
    profile = systems.get(p.system)
    ensure_writable_dir(results)
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
                                    f"SLURM job {job_id} ended {ended} without writing a record", job_id,
                                    started_at=entry.get("submitted_at"))
            Store(results).save(record)
        entry.update(state="collected", status=record["status"])
        report["collected"][job_id] = record["status"]
    state.save(results, data)
    report["all"] = {j: e["status"] or "queued" for j, e in data["jobs"].items()}
    return report
