"""The local executor: a sweep's points one after the other on this machine, each in a subprocess of its own."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections import Counter
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
from caraml.settings import MeasureSettings


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
    """Run the plan's points here, one after the other, each its repeats times; the counts per status. Each run's
    record (the one it saved, or for a run skipped as already ok an ok one of its configuration) is appended to
    `records` when given."""
    sweep.check_runnable(p)
    sweep.check_system_here(p)
    for point in p.points:
        if point.nodes > 1:
            raise BadInput(f"point {point.id} asks for {point.nodes} nodes; run it with --executor slurm")
        time_limit_seconds(sweep.point_time_limit(point))  # a bad limit fails before anything runs
    ensure_writable_dir(results)
    done = sweep.ok_records(results) if resume else {}
    runs = sweep.runs(p.points)
    todo = {run.key for run in sweep.still_to_run(runs, Counter({k: len(v) for k, v in done.items()}))}
    logs = ensure_writable_dir(Path(results) / "sweep" / "logs")
    locks = ensure_writable_dir(Path(results) / "sweep" / "locks")
    env = dict(os.environ)
    env["PYTHONPATH"] = launchers.source_root() + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    counts: dict[str, int] = {}
    labels = point_labels(runs)
    tally = Tally(total=len(runs), to_run=len(todo), window_cap_s=window_cap([r for r in runs if r.key in todo]))
    display = _display(p.suite.name, tally)
    kept = records if records is not None else []
    sweep_began = time.time()

    def run_here(n: int, point: SweepPoint, lock: int) -> None:
        tag, label = f"[{n}/{tally.total}] {point.id}", labels[point.key]
        began = time.monotonic()
        tally.starting(began)
        display.starting(n, point.id, label)
        try:
            status, stopped, record = _run_point(point, results, python, env, logs / f"{point.key}.log", lock)
        finally:
            os.close(lock)
        counts[status] = counts.get(status, 0) + 1
        kept.append(record)
        took = time.monotonic() - began
        tally.finished_one(took)
        display.line(f"caraml: {tag} {status}: {headline(record)}" + (f"  {label}" if label else "")
                     + f"  ({tally.clock(took)})")
        if (elsewhere := _saved_elsewhere(record, results)) is not None:
            display.line(printable(f"caraml: {tag} record saved to {elsewhere}: the results folder "
                                   "would not take it (a full disk?)"))
        tally.passed += 1
        display.advance()
        if stopped:
            raise SweepInterrupted(counts, tally.total - tally.passed)

    def passed_over(status: str, record: dict | None, line: str) -> None:
        counts[status] = counts.get(status, 0) + 1
        if record is not None:
            kept.append(record)
        tally.passed_over()
        display.line(line)
        tally.passed += 1
        display.advance()

    held: list[tuple[int, SweepPoint]] = []  # points another process was running: waited for after the others
    # Ctrl-C, and a SIGTERM like it, stop the point and the sweep, whatever this process inherited: a shell starts
    # `caraml sweep &` with SIGINT ignored, and an ignored signal stays ignored across exec, in the points too. A
    # handler of this process's own is reset to the default in every child it starts.
    old = {sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with display:
            for n, point in enumerate(runs, 1):
                label = labels[point.key]
                tag = f"[{n}/{tally.total}] {point.id}"
                if point.key not in todo:
                    counts["skipped"] = counts.get("skipped", 0) + 1
                    kept.append(done[point.id][-point.repeat])  # the newest ok ones
                    display.line(f"caraml: {tag} already ok, skipped" + (f": {label}" if label else ""))
                    tally.passed += 1
                    display.advance()
                elif (lock := _claim(locks / f"{point.key}.lock")) is None:
                    held.append((n, point))
                    display.line(f"caraml: {tag} is running elsewhere ({_holder(locks / f'{point.key}.lock')}; lock "
                                 f"{locks / point.key}.lock): waited for after the other points"
                                 + (f": {label}" if label else ""))
                else:
                    run_here(n, point, lock)
            for n, point in held:
                tag, label = f"[{n}/{tally.total}] {point.id}", labels[point.key]
                lock = _wait_for(locks / f"{point.key}.lock")
                if lock is None:
                    passed_over("running", None, f"caraml: {tag} is still running elsewhere (its sweep is gone; "
                                f"it holds {locks / point.key}.lock), not run" + (f": {label}" if label else ""))
                    continue
                record = _newest_since(results, point.id, sweep_began)
                if record is not None and record.get("status") == "ok":
                    os.close(lock)
                    passed_over("ok", record, f"caraml: {tag} ok, run elsewhere: {headline(record)}"
                                + (f"  {label}" if label else ""))
                else:
                    run_here(n, point, lock)
    except SweepInterrupted:
        raise
    except KeyboardInterrupt:  # between points
        raise SweepInterrupted(counts, tally.total - tally.passed) from None
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    return counts


def _saved_elsewhere(record: dict, results: str) -> str | None:
    """Where a point saved its record when that is not the results folder (Store.save's fallback)."""
    path = record.get("path") if isinstance(record, dict) else None
    if not isinstance(path, str) or Path(path).parent.resolve() == Store(results).runs.resolve():
        return None
    return path


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
    # The points measure until steady, each window at most this long (measure_max_seconds): the ETA's upper bound
    window_cap_s: float | None = None

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

    def eta_upper(self, now: float | None = None) -> float | None:
        """With until-steady windows, the most the points left may take: each its mean duration so far (which
        holds a window no longer than the cap) plus a whole window of window_cap_s; None without a cap or before
        the first point ended."""
        if self.window_cap_s is None or not self.durations:
            return None
        left = max(0, self.to_run - len(self.durations) - self.left_over)
        mean = sum(self.durations) / len(self.durations)
        ran = 0.0 if self.running_since is None else (time.monotonic() if now is None else now) - self.running_since
        return max(0.0, left * (mean + self.window_cap_s) - min(mean + self.window_cap_s, ran))

    def clock(self, took: float | None = None, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        elapsed, eta, upper = now - self.started, self.eta(now), self.eta_upper(now)
        return ", ".join(([f"took {duration(took)}"] if took is not None else []) + [f"elapsed {duration(elapsed)}"]
                         + ([f"ETA {duration(eta)}" + (f" (at most {duration(upper)})" if upper is not None else "")]
                            if eta is not None else []))


def window_cap(points: list[SweepPoint]) -> float | None:
    """The longest measure_max_seconds of the points that measure until steady (None: none does)."""
    caps = [float(p.params.get("measure_max_seconds", MeasureSettings.measure_max_seconds)) for p in points
            if p.params.get("measure") == "until-steady"]
    return max(caps) if caps else None


def duration(seconds: float) -> str:
    """12s, 3m05s, 1h02m05s"""
    s = int(round(max(0.0, seconds)))
    h, m, s = s // 3600, s // 60 % 60, s % 60
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def point_labels(points: list[SweepPoint]) -> dict[str, str]:
    """Each run's label for people (by SweepPoint.key): `key=value` of the suite's values that differ between the
    sweep's points (the rest is the same for all of them), and which repeat it is; "" where nothing differs (a
    sweep of one point, run once)."""
    keys = list(dict.fromkeys(k for point in points for k in point.shown if k not in ("time_limit", "repeats")))
    missing = object()
    differ = [k for k in keys if len({repr(point.shown.get(k, missing)) for point in points}) > 1]
    return {point.key: printable(" ".join([f"{k}={point.shown[k]}" for k in differ if k in point.shown]
                                          + ([f"repeat {point.repeat}/{point.repeats}"] if point.repeats > 1 else [])))
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
    """The point's lock, taken (an open descriptor holding an exclusive flock, the file naming this sweep); None
    while another process holds it: another sweep's point, or a point whose sweep is gone (still saving its
    record, or an orphan)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise BadInput(f"lock {path} cannot be opened ({exc.strerror or exc}); remove it, or pass another "
                       f"--results DIR") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
    except OSError:  # a full disk: the lock holds all the same, only its owner goes unnamed
        pass
    return fd


def _owner(path: Path) -> tuple[int, str] | None:
    """The sweep that took the lock (pid, host) as its file says; None where it says none."""
    try:
        pid, host = path.read_text().split()
        return int(pid), host
    except (OSError, ValueError):
        return None


def _holder(path: Path) -> str:
    """Who holds a point's lock, for people: "sweep 12 on node1 runs it", "its sweep 12 on node1 is gone"."""
    owner = _owner(path)
    if owner is None:
        return "its sweep is not named"
    pid, host = owner
    return f"sweep {pid} on {host} runs it" if _alive(owner) else f"its sweep {pid} on {host} is gone"


def _alive(owner: tuple[int, str] | None) -> bool:
    """Whether the sweep that took a lock still runs (a sweep on another host is taken to)."""
    if owner is None:
        return False
    pid, host = owner
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


WAIT_POLL_S = 0.5  # how often a held lock is tried again


def _wait_for(path: Path) -> int | None:
    """The point's lock once its holder lets it go: a point of another sweep is waited for as long as that
    sweep runs (it keeps the point's time limit); a point whose sweep is gone was sent SIGTERM when its sweep
    died, and is given STOP_GRACE_S to save its record. None when it still holds the lock then."""
    gone_since = None
    while (lock := _claim(path)) is None:
        now = time.monotonic()
        if _alive(_owner(path)):
            gone_since = None
        elif gone_since is None:
            gone_since = now
        elif now - gone_since > STOP_GRACE_S:
            return None
        _pause(WAIT_POLL_S)
    return lock


def _pause(seconds: float) -> None:
    time.sleep(seconds)


def _newest_since(results: str, point_id: str, since: float) -> dict | None:
    """The newest readable record of the point's configuration saved since `since` (a time.time()): the one the
    process that held its lock saved (run ids end in the configuration's id and begin with the start time)."""
    from caraml.results.store import shape_problem

    runs = Path(results) / "runs"
    paths = sorted(runs.glob(f"*-{point_id}.json"), reverse=True) if runs.is_dir() else []
    for path in paths:
        try:
            if path.stat().st_mtime < since - 1:  # 1 s: file times lag the clock by a tick
                continue
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not shape_problem(record):
            return record
    return None


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
