"""Supervision of a local sweep's point: its own subprocess and process group, its time limit, stopping it (and
killing it after a grace), its log, and its record (or one written for it when it left none)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

from caraml.campaign import launchers, sweep
from caraml.campaign.expand import SweepPoint, time_limit_seconds
from caraml.results import record as rec
from caraml.results.store import Store

STOP_GRACE_S = 60.0  # how long a stopped point may take to finish its step and save its record


def run_point(point: SweepPoint, results: str, python: str | None, env: dict, log: Path,
               lock: int | None = None) -> tuple[str, bool, dict]:
    """One point in a subprocess of its own, so a crash or OOM kill ends only that point. The status,
    whether the user stopped the sweep during it, and the point's record.

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
    with _point_log(log) as err:
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
        return record["status"], stopped, record
    if timed_out:
        status, error = "timeout", f"time limit {limit_text} reached; the run was stopped without saving a record"
    elif stopped:
        status, error = "interrupted", "the sweep was interrupted; the run ended without saving a record"
    else:
        tail = [ln for ln in _tail(log).splitlines() if ln.strip()]
        why = tail[-1] if tail else f"exit code {child.returncode}"
        status, error = "failed", f"the run ended (exit code {child.returncode}) without a record: {why}"
    record = sweep.missing_record(point.as_json(), status, error, started_at=started)
    Store(results).save(record)
    return status, stopped, record


@contextlib.contextmanager
def _point_log(path: Path):
    """The point's stderr: its log file, or nothing where the file cannot be made (a full disk): the point runs
    all the same, its record is what counts. (A log whose writes fail later costs the point nothing either: a
    run's failed stderr writes drop its stderr, caraml.console.)"""
    try:
        log = open(path, "w")  # noqa: SIM115 - closed below, once the point has ended
    except OSError as exc:
        print(f"caraml: warning: point log {path} cannot be written ({exc.strerror or exc}); the point runs "
              "without it", file=sys.stderr)
        yield subprocess.DEVNULL
        return
    with log:
        yield log


LOG_TAIL_BYTES = 65536  # how much of a point's log is read for its last line


def _tail(path: Path) -> str:
    """The end of a point's log: a regular file's last LOG_TAIL_BYTES; "" for anything else or a failed read."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno())
            if not stat.S_ISREG(size.st_mode):
                return ""
            f.seek(max(0, size.st_size - LOG_TAIL_BYTES))
            return f.read(LOG_TAIL_BYTES).decode(errors="replace")
    except OSError:
        return ""


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
