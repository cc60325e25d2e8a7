"""The local executor: a sweep's points one after the other on this machine, each in a subprocess of its own."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.progress import ProgressColumn
from rich.table import Column
from rich.text import Text

from caraml.campaign import launchers, sweep
from caraml.campaign.expand import SweepPoint, time_limit_seconds
from caraml.errors import BadInput, printable
from caraml.paths import ensure_writable_dir
from caraml.results import record as rec
from caraml.results.store import Store


class LocalExecutor:
    name, needs_system = "local", False

    def dry_run(self, plan: sweep.Plan, results: str, python: str | None) -> list[str]:
        return []  # the points are the plan: nothing to write before running them

    def run(self, plan: sweep.Plan, results: str, resume: bool, python: str | None) -> int:
        records: list[dict] = []
        try:
            counts = run_local(plan, results, resume, python, records)
        except SweepInterrupted as stop:
            print_points(records)
            done = ", ".join(f"{n} {k}" for k, n in sorted(stop.counts.items())) or "no points"
            print(f"caraml: sweep interrupted: {done}; {stop.left} points not run "
                  f"(rerun with --resume to skip the ok ones)", file=sys.stderr)
            return 130
        print_points(records)
        print("caraml: sweep done: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())), file=sys.stderr)
        return 0 if set(counts) <= {"ok", "skipped"} else 1


def print_points(records: list[dict]) -> None:
    """The sweep's points as `caraml result` shows them (one table per workload), on stdout as `caraml run`
    prints its table; only this sweep's records (and the ok ones of points it skipped). Fitted to the terminal, or
    to LOG_WIDTH columns in a log: it is a summary read by people; `caraml result --wide` shows every column."""
    from caraml.results.aggregate import group
    from caraml.results.record import validate
    from caraml.results.select import result_tables
    from caraml.results.table import render_tables, terminal_width

    records = [r for r in records if isinstance(r, dict) and not validate(r)]  # as `caraml result` reads them
    if records:
        width = terminal_width() or _env_width() or LOG_WIDTH
        sys.stdout.write(render_tables(result_tables(group(records), width=width), "table"))
        sys.stdout.flush()


LOG_WIDTH = 120  # the sweep's end table in a log file or pipe


def _env_width() -> int | None:
    """COLUMNS, where a job script or user sets it for logs."""
    value = os.environ.get("COLUMNS", "")
    return int(value) if value.isdigit() and int(value) >= 40 else None


STOP_GRACE_S = 60.0  # how long a stopped point may take to finish its step and save its record


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) stopped a local sweep; carries the counts of the points that ran."""

    def __init__(self, counts: dict[str, int], left: int):
        super().__init__()
        self.counts, self.left = counts, left


def run_local(p: sweep.Plan, results: str, resume: bool, python: str | None = None,
              records: list[dict] | None = None) -> dict[str, int]:
    """Run the plan's points here, one after the other; the counts per status. Each point's record (the one it
    saved, or for a point skipped as already ok its latest ok one) is appended to `records` when given."""
    sweep.check_runnable(p)
    for point in p.points:
        if point.nodes > 1:
            raise BadInput(f"point {point.id} asks for {point.nodes} nodes; run it with --executor slurm")
        time_limit_seconds(sweep.point_time_limit(point))  # a bad limit fails before anything runs
    ensure_writable_dir(results)
    done = _ok_records(results) if resume else {}
    logs = ensure_writable_dir(Path(results) / "sweep" / "logs")
    locks = ensure_writable_dir(Path(results) / "sweep" / "locks")
    env = dict(os.environ)
    env["PYTHONPATH"] = launchers.source_root() + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    counts: dict[str, int] = {}
    labels = point_labels(p.points)
    tally = Tally(total=len(p.points), to_run=sum(point.id not in done for point in p.points))
    display = _display(p.suite.name, tally)
    kept = records if records is not None else []
    # Ctrl-C, and a SIGTERM like it, stop the point and the sweep, whatever this process inherited: a shell starts
    # `caraml sweep &` with SIGINT ignored, and an ignored signal stays ignored across exec, in the points too. A
    # handler of this process's own is reset to the default in every child it starts.
    old = {sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with display:
            for n, point in enumerate(p.points, 1):
                label = labels[point.id]
                tag = f"[{n}/{tally.total}] {point.id}"
                if point.id in done:
                    counts["skipped"] = counts.get("skipped", 0) + 1
                    kept.append(done[point.id])
                    display.line(f"caraml: {tag} already ok, skipped" + (f": {label}" if label else ""))
                elif (lock := _claim(locks / f"{point.id}.lock")) is None:
                    counts["running"] = counts.get("running", 0) + 1
                    tally.passed_over()
                    display.line(f"caraml: {tag} is running elsewhere (an earlier sweep's point holds "
                                 f"{locks / point.id}.lock), not run again" + (f": {label}" if label else ""))
                else:
                    began = time.monotonic()
                    tally.starting(began)
                    display.starting(n, point.id, label)
                    try:
                        status, stopped, record = _run_point(point, results, python, env, logs / f"{point.id}.log",
                                                             lock)
                    finally:
                        os.close(lock)
                    counts[status] = counts.get(status, 0) + 1
                    kept.append(record)
                    took = time.monotonic() - began
                    tally.finished_one(took)
                    display.line(f"caraml: {tag} {status}: {headline(record)}" + (f"  {label}" if label else "")
                                 + f"  ({tally.clock(took)})")
                    if stopped:
                        raise SweepInterrupted(counts, tally.total - n)
                tally.passed += 1
                display.advance()
    except SweepInterrupted:
        raise
    except KeyboardInterrupt:  # between points
        raise SweepInterrupted(counts, tally.total - tally.passed) from None
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    return counts


def _ok_records(results: str) -> dict[str, dict]:
    """The latest ok record of each configuration (records from before a parameter was renamed count under
    today's id, as in sweep.ok_ids)."""
    from caraml.results.aggregate import current_id

    return {current_id(r): r for r in Store(results).load(warn=False) if r.get("status") == "ok"}


@dataclass
class Tally:
    """Where a sweep stands: points passed (n of N) and the durations of the points run, for the ETA."""

    total: int
    to_run: int  # points that will run (not skipped as already ok)
    passed: int = 0
    durations: list[float] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    left_over: int = 0  # points that were to run but were not (running elsewhere)
    running_since: float | None = None  # when the point now running started

    def starting(self, now: float | None = None) -> None:
        self.running_since = time.monotonic() if now is None else now

    def finished_one(self, seconds: float) -> None:
        self.durations.append(seconds)
        self.running_since = None

    def passed_over(self) -> None:
        self.left_over += 1

    def eta(self, now: float | None = None) -> float | None:
        """Seconds until the last point ends, from the mean duration of the points run so far (the point now
        running counted as that long, less what it has run); None before the first one ended."""
        if not self.durations:
            return None
        left = max(0, self.to_run - len(self.durations) - self.left_over)
        mean = sum(self.durations) / len(self.durations)
        ran = 0.0 if self.running_since is None else (time.monotonic() if now is None else now) - self.running_since
        return max(0.0, left * mean - min(mean, ran))

    def clock(self, took: float | None = None, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        elapsed, eta = now - self.started, self.eta(now)
        return ", ".join(([f"took {duration(took)}"] if took is not None else []) + [f"elapsed {duration(elapsed)}"]
                         + ([f"ETA {duration(eta)}"] if eta is not None else []))


def duration(seconds: float) -> str:
    """12s, 3m05s, 1h02m05s"""
    s = int(round(max(0.0, seconds)))
    h, m, s = s // 3600, s // 60 % 60, s % 60
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def point_labels(points: list[SweepPoint]) -> dict[str, str]:
    """Each point's label for people: `key=value` of the suite's values that differ between the sweep's points
    (the rest is the same for all of them); "" where nothing differs (a sweep of one point)."""
    keys = list(dict.fromkeys(k for point in points for k in point.shown if k != "time_limit"))
    missing = object()
    differ = [k for k in keys if len({repr(point.shown.get(k, missing)) for point in points}) > 1]
    return {point.id: printable(" ".join(f"{k}={point.shown[k]}" for k in differ if k in point.shown))
            for point in points}


def headline(record: dict, words: int = 12) -> str:
    """A record's headline figure: its throughput with unit ("1,234.5 images/s"), else its error's first words."""
    from caraml.results.table import format_value

    tp = (record.get("metrics") or {}).get("throughput") or {}
    value, unit = tp.get("value"), tp.get("unit")
    if record.get("status") == "ok" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return printable(f"{format_value(float(value))} {unit or ''}".strip())
    error = " ".join(str(record.get("error") or "no error given").split())
    cut = error.split(" ")
    return printable(" ".join(cut[:words]) + (" …" if len(cut) > words else ""))


def _display(suite: str, tally: Tally):
    """Rich's live bar where stderr is a terminal; plain lines otherwise (a log file, a pipe, the tests)."""
    return _RichDisplay(suite, tally) if sys.stderr.isatty() else _PlainDisplay(suite, tally)


class _PlainDisplay:
    def __init__(self, suite: str, tally: Tally):
        self.suite, self.tally = suite, tally

    def __enter__(self):
        skipped = self.tally.total - self.tally.to_run
        self.line(f"caraml: sweep {printable(self.suite)}: {self.tally.total} points"
                  + (f", {skipped} already ok" if skipped else ""))
        return self

    def __exit__(self, *exc) -> None:
        pass

    def line(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def starting(self, n: int, point_id: str, label: str) -> None:
        self.line(f"caraml: [{n}/{self.tally.total}] {point_id} running" + (f": {label}" if label else "")
                  + f"  ({self.tally.clock()})")

    def advance(self) -> None:
        pass


class _RichDisplay(_PlainDisplay):
    def __enter__(self):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.console = Console(stderr=True)
        columns = (TextColumn("sweep {task.fields[suite]}", markup=False, table_column=_fixed(9)),
                   BarColumn(bar_width=None, table_column=Column(no_wrap=True, min_width=20, max_width=40)),
                   MofNCompleteColumn(table_column=_fixed(5)), _ClockColumn(self.tally),
                   _LabelColumn(self.console))
        self.bar = Progress(*columns, console=self.console)
        self.bar.__enter__()
        self.task = self.bar.add_task("sweep", total=self.tally.total, suite=self.suite, current="")
        return self

    def __exit__(self, *exc) -> None:
        self.bar.__exit__(*exc)

    def line(self, text: str) -> None:
        self.bar.console.print(text, markup=False, highlight=False, emoji=False, soft_wrap=True)

    def starting(self, n: int, point_id: str, label: str) -> None:
        self.bar.update(self.task, current=f"{point_id} {label}".strip())

    def advance(self) -> None:
        self.bar.update(self.task, advance=1, current="")  # the point ended: its line is above the bar


def _fixed(width: int):
    return Column(no_wrap=True, min_width=width)


class _ClockColumn(ProgressColumn):
    """elapsed and ETA, ticking."""

    def __init__(self, tally: Tally):
        super().__init__()
        self.tally = tally

    def get_table_column(self) -> Column:
        return _fixed(len(self.tally.clock()))  # never cut

    def render(self, task) -> Text:
        return Text(self.tally.clock(), no_wrap=True)


class _LabelColumn(ProgressColumn):
    """The running point: as much as leaves the other columns their room in this terminal's width."""

    ROOM = 80  # what the other columns take at most

    def __init__(self, console):
        super().__init__()
        self.console = console

    def get_table_column(self) -> Column:
        return Column(no_wrap=True, overflow="ellipsis", max_width=max(10, self.console.width - self.ROOM))

    def render(self, task) -> Text:
        return Text(str(task.fields.get("current", "")), no_wrap=True, overflow="ellipsis")


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
        return record["status"], stopped, record
    if timed_out:
        status, error = "timeout", f"time limit {limit_text} reached; the run was stopped without saving a record"
    elif stopped:
        status, error = "interrupted", "the sweep was interrupted; the run ended without saving a record"
    else:
        tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        why = tail[-1] if tail else f"exit code {child.returncode}"
        status, error = "failed", f"the run ended (exit code {child.returncode}) without a record: {why}"
    record = sweep.missing_record(point.as_json(), status, error, started_at=started)
    Store(results).save(record)
    return status, stopped, record


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
