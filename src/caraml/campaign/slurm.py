"""The SLURM executor: one batch job per point (its script from jobscript.py), or with `--array` one job array per
job shape whose tasks run those same scripts, submitted with sbatch; later, `caraml sweep --continue` collects what
the jobs recorded, and records the jobs that ended without a record. An array's task is known as JOB_TASK
(`1234_0`), as SLURM names it."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from caraml import systems
from caraml.campaign import container, jobscript, state, sweep
from caraml.campaign.expand import SweepPoint
from caraml.errors import BadInput
from caraml.paths import ensure_writable_dir
from caraml.results import record as rec
from caraml.results.store import Store

SUBMIT_COMMANDS = ("sbatch", "squeue", "scontrol")


class SlurmExecutor:
    name, needs_system = "slurm", True
    array: int | None = None  # --array [N]: one job array per job shape, at most N of its tasks at once (0: no limit)

    def dry_run(self, plan: sweep.Plan, results: str, python: str | None) -> list[str]:
        scripts = write_scripts(plan, results, python)
        notes = [f"{len(scripts)} job scripts written to {scripts[0][1].parent}"]
        if self.array is not None:
            arrays = write_arrays(plan, results, scripts, self.array)
            notes.append(f"{len(arrays)} job array script(s): " + ", ".join(str(a) for a, _ in arrays))
        return notes + container.missing(job_profile(plan))

    def run(self, plan: sweep.Plan, results: str, resume: bool, python: str | None) -> int:
        counts = submit(plan, results, resume, python, self.array)
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
    return root / "jobs" / f"{point.key}.sh", str(root / "logs" / f"{point.key}-%j.out")


def job_profile(p: sweep.Plan) -> dict:
    """The system profile with the site settings the plan's jobs get (its workload's own, the command line's)."""
    profile = systems.get(p.system)
    return {**profile, "site": systems.site(profile, p.suite.workload, p.site)}


def write_scripts(p: sweep.Plan, results: str, python: str | None) -> list[tuple[SweepPoint, Path]]:
    """A job script for each run: each point's repeats are jobs of their own (names and logs by SweepPoint.key)."""
    profile = systems.get(p.system)
    ensure_writable_dir(results)
    opts = jobscript.JobOptions(results=str(Path(results).resolve()), python=python or sys.executable, site=p.site)
    out = []
    for point in sweep.runs(p.points):
        script, log = job_paths(results, point)
        text = jobscript.render(point, profile, opts, log)
        with _writing(script):
            script.parent.mkdir(parents=True, exist_ok=True)
            Path(log).parent.mkdir(parents=True, exist_ok=True)
            script.write_text(text)
            script.chmod(0o755)
        out.append((point, script))
    return out


@contextlib.contextmanager
def _writing(script: Path) -> Iterator[None]:
    """A job script's folder or file that cannot be written (a full disk, a file in a folder's place): one line."""
    try:
        yield
    except OSError as exc:
        raise BadInput(f"job script {script} cannot be written ({exc.strerror or exc}); free space there or pass "
                       "another --results DIR") from None


def write_arrays(p: sweep.Plan, results: str, scripts: list[tuple[SweepPoint, Path]], throttle: int
                 ) -> list[tuple[Path, list[tuple[SweepPoint, Path]]]]:
    """One job array per job shape (nodes, tasks, CPUs, time, queue: the points' #SBATCH lines but name and log):
    task i runs the i-th point's own job script, whose #SBATCH lines are then comments."""
    profile = systems.get(p.system)
    opts = jobscript.JobOptions(results=str(Path(results).resolve()), python="", site=p.site)
    groups: dict[tuple[str, ...], list[tuple[SweepPoint, Path]]] = {}
    for point, script in scripts:
        lines = jobscript.sbatch_lines(point, jobscript.job_site(point, profile, opts), "")
        shape = tuple(x for x in lines if not x.startswith(("--job-name=", "--output=")))
        groups.setdefault(shape, []).append((point, script))
    root = Path(results).resolve() / "sweep"
    out = []
    size = max_array_size()  # SLURM's array indices run up to MaxArraySize - 1: a longer array is split
    arrays = [(shape, members[i:i + size]) for shape, members in groups.items() for i in range(0, len(members), size)]
    for shape, members in arrays:
        name = array_name(p, [point for point, _ in members])
        limit = f"%{throttle}" if throttle else ""
        text = "\n".join([
            "#!/bin/bash",
            f"# caraml job array: {len(members)} points of suite {jobscript.q(p.suite.name)} on {p.system}; "
            "task i runs the i-th point's job script",
            f"#SBATCH --job-name={name}",
            *[f"#SBATCH {line}" for line in shape],
            f"#SBATCH --array=0-{len(members) - 1}{limit}",
            f"#SBATCH --output={jobscript.q(jobscript.output_pattern(str(root / 'logs' / 'array-%A_%a.out')))}",
            "",
            "caraml_points=(" + " ".join(jobscript.q(str(script)) for _, script in members) + ")",
            '# exec: the point\'s script becomes the batch shell, so the warning signal reaches its trap',
            'exec bash "${caraml_points[$SLURM_ARRAY_TASK_ID]}"',
            "",
        ])
        path = root / "jobs" / f"{name}.sh"
        with _writing(path):
            path.write_text(text)
            path.chmod(0o755)
        out.append((path, members))
    return out


MAX_ARRAY_SIZE = 4_000_001  # the largest MaxArraySize SLURM allows (slurm.conf)
DEFAULT_MAX_ARRAY_SIZE = 1001  # SLURM's default, where this machine cannot ask


def max_array_size() -> int:
    """The cluster's MaxArraySize (`scontrol show config`): job arrays hold indices 0 .. MaxArraySize - 1."""
    if shutil.which("scontrol"):
        try:
            proc = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:  # no controller answering: SLURM's default
            return DEFAULT_MAX_ARRAY_SIZE
        found = re.search(r"^MaxArraySize\s*=\s*(\d+)", proc.stdout, re.M) if proc.returncode == 0 else None
        if found and int(found.group(1)) > 0:
            return int(found.group(1))
    return DEFAULT_MAX_ARRAY_SIZE


def array_name(p: sweep.Plan, points: list[SweepPoint]) -> str:
    digest = hashlib.sha256(" ".join(point.key for point in points).encode()).hexdigest()[:16]
    return f"caraml-{p.suite.workload}-array-{digest}"


def _entry(p: sweep.Plan, point: SweepPoint, script: Path, job_name: str) -> dict:
    return {"point": point.as_json() | {"shown": point.shown}, "script": str(script), "suite": p.suite.name,
            "submitted_at": rec.now(), "state": state.SUBMITTING, "status": None, "job_name": job_name,
            "owner": {"host": socket.gethostname(), "pid": os.getpid()}}


def ensure_container(p: sweep.Plan) -> None:
    """Before anything is submitted: the image must be pulled; its environment is prepared here when it is not."""
    profile = job_profile(p)
    for line in container.missing(profile):
        if "not pulled" in line:
            raise BadInput(line)
        print(f"caraml: {line}; preparing it now", file=sys.stderr)
        container.prepare(profile)


def submit(p: sweep.Plan, results: str, resume: bool, python: str | None, array: int | None = None
           ) -> dict[str, int]:
    sweep.check_runnable(p)
    require_commands()
    ensure_container(p)
    data = recover_submissions(results)
    scripts = write_scripts(p, results, python)
    done: Counter = Counter()
    have: Counter = Counter()
    if resume:  # a run counts as done when its configuration has that many ok records and submitted jobs
        done = Counter({k: len(v) for k, v in sweep.ok_records(results).items()})
        have = done + Counter(e["point"]["id"] for e in data["jobs"].values() if e["state"] == "submitted")
    wanted = {point.key for point in sweep.still_to_run([point for point, _ in scripts], have)}
    counts = {"submitted": 0, "skipped": 0}
    todo = []
    for point, script in scripts:
        if point.key not in wanted:
            counts["skipped"] += 1
            print(f"caraml: {point.key} {'already ok' if point.repeat <= done[point.id] else 'already submitted'}, "
                  "skipped", file=sys.stderr)
            continue
        todo.append((point, script))
    if array is not None:
        for script, members in (write_arrays(p, results, todo, array) if todo else []):
            counts["submitted"] += _submit_array(p, results, script, members)
        return counts
    for point, script in todo:
        entry = _entry(p, point, script, jobscript.job_name(point))
        intent = state.intent_key(point.key)
        state.update(results, {intent: entry})  # before sbatch: a kill right after it still leaves the job findable
        job_id = sbatch(script)
        # after each job: a failure later still leaves the earlier ones known
        _note_submitted(results, {job_id: entry | {"state": "submitted"}}, (intent,), f"job {job_id} ({point.id})")
        counts["submitted"] += 1
        print(f"caraml: {point.key} submitted as job {job_id}", file=sys.stderr)
    return counts


def _submit_array(p: sweep.Plan, results: str, script: Path, members: list[tuple[SweepPoint, Path]]) -> int:
    name = array_name(p, [point for point, _ in members])
    entries = {state.intent_key(point.key): _entry(p, point, path, name) | {"array_index": i}
               for i, (point, path) in enumerate(members)}
    state.update(results, entries)
    job_id = sbatch(script)
    _note_submitted(results, {f"{job_id}_{e['array_index']}": e | {"state": "submitted"} for e in entries.values()},
                    tuple(entries), f"job array {job_id} ({len(members)} points)")
    for i, (point, _) in enumerate(members):
        print(f"caraml: {point.key} submitted as job {job_id}_{i}", file=sys.stderr)
    return len(members)


def _note_submitted(results: str, jobs: dict, intents: tuple[str, ...], what: str) -> None:
    """Write down jobs sbatch has just accepted in place of their submissions; where the state cannot be written,
    the one line says which job was submitted (its submission, written before, lets --continue find it)."""
    try:
        state.update(results, jobs, drop=intents)
    except BadInput as exc:
        raise BadInput(f"{exc}; {what} was submitted: `caraml sweep --continue --results {results}` finds it by "
                       "its job name once the state can be written") from None


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
        slurm_env = (r.get("env") or {}).get("slurm") or {}
        if slurm_env.get("SLURM_JOB_ID"):
            by_job[str(slurm_env["SLURM_JOB_ID"])] = r
        if slurm_env.get("SLURM_ARRAY_JOB_ID") and slurm_env.get("SLURM_ARRAY_TASK_ID") is not None:
            by_job[f"{slurm_env['SLURM_ARRAY_JOB_ID']}_{slurm_env['SLURM_ARRAY_TASK_ID']}"] = r
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
        if job_id and isinstance(entry.get("array_index"), int):  # a task of a job array
            job_id = f"{job_id}_{entry['array_index']}"
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
    """The newest job of this name that SLURM's queue or, once it ended, its accounting knows; None if neither.
    For a job array: the array's job id (%F; sacct's `1234_0` cut at the task)."""
    proc = subprocess.run(["squeue", "-h", "-n", name, "-o", "%F"], capture_output=True, text=True)
    ids = proc.stdout.split() if proc.returncode == 0 else []
    if not ids and shutil.which("sacct"):
        proc = subprocess.run(["sacct", "-n", "-X", "-P", "--name", name, "-o", "JobID"], capture_output=True,
                              text=True)
        ids = [i.split("_")[0] for i in proc.stdout.split()] if proc.returncode == 0 else []
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
    # -r: an array's pending tasks one per line (`1234_5`), not folded into `1234_[5-9]`
    proc = subprocess.run(["squeue", "-h", "-r", "-o", "%i %T", "-j", ",".join(job_ids)], capture_output=True,
                          text=True)
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
