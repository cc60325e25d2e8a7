"""The SLURM executor: one batch job per point (its script from jobscript.py), submitted with sbatch; later,
`caraml sweep --continue` collects what the jobs recorded, and records the jobs that ended without a record."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from caraml import systems
from caraml.campaign import jobscript, state, sweep
from caraml.campaign.expand import SweepPoint
from caraml.errors import BadInput
from caraml.paths import ensure_writable_dir
from caraml.results import record as rec
from caraml.results.store import Store

SUBMIT_COMMANDS = ("sbatch", "squeue", "scontrol")


class SlurmExecutor:
    name, needs_system = "slurm", True

    def dry_run(self, plan: sweep.Plan, results: str, python: str | None) -> list[str]:
        scripts = write_scripts(plan, results, python)
        return [f"{len(scripts)} job scripts written to {scripts[0][1].parent}"]

    def run(self, plan: sweep.Plan, results: str, resume: bool, python: str | None) -> int:
        counts = submit(plan, results, resume, python)
        print(f"caraml: {counts['submitted']} jobs submitted, {counts['skipped']} points skipped; "
              f"collect them with `caraml sweep --continue --results {results}`", file=sys.stderr)
        return 0

    def collect(self, results: str) -> int:
        report = collect(results)
        for job, status in report["collected"].items():
            print(f"job {job}: {status}")
        for job, where in report["queued"].items():
            print(f"job {job}: still {where}")
        statuses = list(report["all"].values())
        summary = ", ".join(f"{statuses.count(s)} {s}" for s in sorted(set(statuses)))
        print(f"caraml: {len(statuses)} jobs: {summary}", file=sys.stderr)
        return 0


def job_paths(results: str, point: SweepPoint) -> tuple[Path, str]:
    root = Path(results).resolve() / "sweep"
    return root / "jobs" / f"{point.id}.sh", str(root / "logs" / f"{point.id}-%j.out")


def write_scripts(p: sweep.Plan, results: str, python: str | None) -> list[tuple[SweepPoint, Path]]:
    profile = systems.get(p.system)
    ensure_writable_dir(results)
    opts = jobscript.JobOptions(results=str(Path(results).resolve()), python=python or sys.executable)
    out = []
    for point in p.points:
        script, log = job_paths(results, point)
        script.parent.mkdir(parents=True, exist_ok=True)
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        script.write_text(jobscript.render(point, profile, opts, log))
        script.chmod(0o755)
        out.append((point, script))
    return out


def submit(p: sweep.Plan, results: str, resume: bool, python: str | None) -> dict[str, int]:
    sweep.check_runnable(p)
    require_commands()
    data = recover_submissions(results)
    done = sweep.ok_ids(results) if resume else set()
    waiting = {e["point"]["id"] for e in data["jobs"].values() if e["state"] == "submitted"}
    counts = {"submitted": 0, "skipped": 0}
    for point, script in write_scripts(p, results, python):
        if point.id in done or (resume and point.id in waiting):
            counts["skipped"] += 1
            print(f"caraml: {point.id} {'already ok' if point.id in done else 'already submitted'}, skipped",
                  file=sys.stderr)
            continue
        entry = {"point": point.as_json() | {"shown": point.shown}, "script": str(script), "suite": p.suite.name,
                 "submitted_at": rec.now(), "state": state.SUBMITTING, "status": None,
                 "job_name": jobscript.job_name(point), "owner": {"host": socket.gethostname(), "pid": os.getpid()}}
        intent = state.intent_key(point.id)
        state.update(results, {intent: entry})  # before sbatch: a kill right after it still leaves the job findable
        job_id = sbatch(script)
        # after each job: a failure later still leaves the earlier ones known
        state.update(results, {job_id: entry | {"state": "submitted"}}, drop=(intent,))
        counts["submitted"] += 1
        print(f"caraml: {point.id} submitted as job {job_id}", file=sys.stderr)
    return counts


def collect(results: str) -> dict:
    """`--continue`: records of finished jobs; a record for jobs that ended without one; what still waits."""
    require_commands(("squeue", "scontrol"))
    data = recover_submissions(results)
    open_jobs = [j for j, e in data["jobs"].items() if e["state"] == "submitted"]
    if not data["jobs"]:
        raise BadInput(f"no submitted sweep in {results} (no {state.FILE}); submit with "
                       "`caraml sweep SUITE --executor slurm` first")
    waiting = queued(open_jobs)
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
            ended = final_state(job_id)
            status = "timeout" if ended.startswith("TIMEOUT") or ended == "DEADLINE" else "failed"
            record = sweep.missing_record(entry["point"], status,
                                    f"SLURM job {job_id} ended {ended} without writing a record", job_id,
                                    started_at=entry.get("submitted_at"))
            Store(results).save(record)
        entry.update(state="collected", status=record["status"])
        report["collected"][job_id] = record["status"]
    # only the collected jobs: those another sweep submitted meanwhile stay in the state
    data = state.update(results, {job: data["jobs"][job] for job in report["collected"]})
    report["all"] = {j: e["status"] or "queued" for j, e in data["jobs"].items()}
    return report


def recover_submissions(results: str) -> dict:
    """The state, with submissions a killed sweep left between sbatch and saving the job id resolved: a job
    SLURM knows by the point's job name becomes `submitted` under its id; one SLURM never saw is dropped (the
    point was not submitted; --resume submits it)."""
    data = state.load(results)
    intents = {k: e for k, e in data["jobs"].items() if e.get("state") == state.SUBMITTING and _owner_gone(e)}
    for key, entry in intents.items():
        job_id = job_by_name(entry["job_name"]) if isinstance(entry.get("job_name"), str) else None
        found = {job_id: entry | {"state": "submitted"}} if job_id else {}
        data = state.update(results, found, drop=(key,))
        print(f"caraml: {entry['point']['id']} " + (f"was submitted as job {job_id} by a sweep that stopped before "
              "saving it" if job_id else "was never submitted (its sweep stopped before sbatch)"), file=sys.stderr)
    return data


INTENT_STALE_S = 600  # an sbatch takes seconds: a submission from another host older than this was left behind


def _owner_gone(entry: dict) -> bool:
    """Whether the sweep that wrote this submission down has stopped (another sweep running now may be between
    its sbatch and its save: its submission is not to be touched)."""
    owner = entry.get("owner") if isinstance(entry.get("owner"), dict) else {}
    if owner.get("host") == socket.gethostname() and isinstance(owner.get("pid"), int):
        try:
            os.kill(owner["pid"], 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False
    try:
        started = datetime.fromisoformat(entry["submitted_at"])
    except (KeyError, TypeError, ValueError):
        return True
    return (datetime.now(timezone.utc) - started).total_seconds() > INTENT_STALE_S


# the SLURM commands -------------------------------------------------------------------------------
def job_by_name(name: str) -> str | None:
    """The newest job of this name that SLURM's queue or, once it ended, its accounting knows; None if neither."""
    proc = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True)
    ids = proc.stdout.split() if proc.returncode == 0 else []
    if not ids and shutil.which("sacct"):
        proc = subprocess.run(["sacct", "-n", "-X", "-P", "--name", name, "-o", "JobID"], capture_output=True,
                              text=True)
        ids = proc.stdout.split() if proc.returncode == 0 else []
    ids = [i for i in ids if i.isdigit()]
    return max(ids, key=int) if ids else None
def require_commands(names=SUBMIT_COMMANDS) -> None:
    missing = [n for n in names if shutil.which(n) is None]
    if missing:
        raise BadInput(f"--executor slurm needs the SLURM commands {', '.join(missing)}, which are not on PATH; "
                       "run on a SLURM login node, or use --executor local (or --dry-run to write the scripts)")


def sbatch(script: Path) -> str:
    """sbatch the script; the job id."""
    proc = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BadInput(f"sbatch refused {script}: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    return proc.stdout.strip().split(";")[0]


def queued(job_ids: list[str]) -> dict[str, str]:
    """Job id -> state (PENDING, RUNNING, ...) for the jobs SLURM still holds in its queue."""
    if not job_ids:
        return {}
    proc = subprocess.run(["squeue", "-h", "-o", "%i %T", "-j", ",".join(job_ids)], capture_output=True, text=True)
    out = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] not in ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "OUT_OF_MEMORY",
                                                "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE"):
            out[parts[0]] = parts[1]
    return out


def final_state(job_id: str) -> str:
    """How a job ended (COMPLETED, TIMEOUT, CANCELLED, FAILED, ...), from scontrol or sacct; UNKNOWN if neither
    knows."""
    proc = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True)
    m = re.search(r"\bJobState=(\S+)", proc.stdout)
    if m:
        return m.group(1)
    if shutil.which("sacct"):
        proc = subprocess.run(["sacct", "-j", job_id, "-n", "-X", "-P", "-o", "State"], capture_output=True, text=True)
        words = proc.stdout.split()
        if proc.returncode == 0 and words:
            return words[0]
    return "UNKNOWN"
