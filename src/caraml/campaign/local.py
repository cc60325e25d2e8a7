"""The local executor: a sweep's points one after the other on this machine, each in a subprocess of its own."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from caraml.campaign import launchers, sweep
from caraml.campaign.expand import SweepPoint, time_limit_seconds
from caraml.errors import BadInput
from caraml.paths import ensure_writable_dir
from caraml.results import record as rec
from caraml.results.store import Store


class LocalExecutor:
    name, needs_system = "local", False

    def dry_run(self, plan: sweep.Plan, results: str, python: str | None) -> list[str]:
        return []  # the points are the plan: nothing to write before running them

    def run(self, plan: sweep.Plan, results: str, resume: bool, python: str | None) -> int:
        try:
            counts = run_local(plan, results, resume, python)
        except SweepInterrupted as stop:
            done = ", ".join(f"{n} {k}" for k, n in sorted(stop.counts.items())) or "no points"
            print(f"caraml: sweep interrupted: {done}; {stop.left} points not run "
                  f"(rerun with --resume to skip the ok ones)", file=sys.stderr)
            return 130
        print("caraml: sweep done: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())), file=sys.stderr)
        return 0 if set(counts) <= {"ok", "skipped"} else 1


STOP_GRACE_S = 60.0  # how long a stopped point may take to finish its step and save its record


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) stopped a local sweep; carries the counts of the points that ran."""

    def __init__(self, counts: dict[str, int], left: int):
        super().__init__()
        self.counts, self.left = counts, left


def run_local(p: sweep.Plan, results: str, resume: bool, python: str | None = None) -> dict[str, int]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    sweep.check_runnable(p)
    for point in p.points:
        if point.nodes > 1:
            raise BadInput(f"point {point.id} asks for {point.nodes} nodes; run it with --executor slurm")
        time_limit_seconds(sweep.point_time_limit(point))  # a bad limit fails before anything runs
    ensure_writable_dir(results)
    done = sweep.ok_ids(results) if resume else set()
    logs = ensure_writable_dir(Path(results) / "sweep" / "logs")
    locks = ensure_writable_dir(Path(results) / "sweep" / "locks")
    env = dict(os.environ)
    env["PYTHONPATH"] = launchers.source_root() + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
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
                elif (lock := _claim(locks / f"{point.id}.lock")) is None:
                    counts["running"] = counts.get("running", 0) + 1
                    bar.console.print(f"caraml: {point.id} is running elsewhere (an earlier sweep's point holds "
                                      f"{locks / point.id}.lock), not run again: {label}")
                else:
                    bar.update(task, current=f"{point.id} {label}")
                    try:
                        status, stopped = _run_point(point, results, python, env, logs / f"{point.id}.log", lock)
                    finally:
                        os.close(lock)
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


def _claim(path: Path) -> int | None:
    """The point's lock, taken (an open descriptor holding an exclusive flock); None while another process
    holds it: a point of an earlier sweep still running (an orphan, or another sweep's)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _run_point(point: SweepPoint, results: str, python: str | None, env: dict, log: Path,
               lock: int | None = None) -> tuple[str, bool]:
    """One point in a subprocess of its own, so a crash or OOM kill ends only that point. The status, and
    whether the user stopped the sweep during it.

    The point runs in a process group of its own (torchrun and its workers too): Ctrl-C reaches only the
    sweep, which passes exactly one SIGINT on and waits for the point to save its record; and the time
    limit can stop the whole group. Being out of the sweep's group, the point is asked to stop (SIGTERM, it
    saves an interrupted record) when the sweep dies, even by SIGKILL: it never runs on as an orphan beside the
    points of a `--resume`. The point inherits the lock the sweep took for it (`lock`, a descriptor), so a
    point still running when its sweep is gone (one that ignores SIGTERM) keeps later sweeps from running it
    again beside it."""
    cmd = launchers.local_command(point, results, python)
    limit_text = sweep.point_time_limit(point)
    limit = time_limit_seconds(limit_text)
    started = rec.now()
    stopped = timed_out = False
    with open(log, "w") as err:
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, process_group=0,
                                 preexec_fn=_dies_with_this_process(), pass_fds=() if lock is None else (lock,))
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
    Store(results).save(sweep.missing_record(point.as_json(), status, error, started_at=started))
    return status, stopped


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _dies_with_this_process():
    """A preexec_fn that has the child sent SIGTERM when this process ends (Linux's parent-death signal); None
    where prctl is not to be had. All it needs is looked up here: the child, forked from a process with
    threads, runs nothing but the calls."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    getppid, kill, sigterm = os.getppid, os.kill, signal.SIGTERM

    def set_parent_death_signal() -> None:
        prctl(PR_SET_PDEATHSIG, int(sigterm), 0, 0, 0)
        if getppid() != parent:  # the sweep died before the signal was set
            kill(os.getpid(), sigterm)

    return set_parent_death_signal


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
