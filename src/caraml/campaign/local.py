"""The local executor: a sweep's points one after the other on this machine, each in a subprocess of its own
(caraml.campaign.children), each under its lock (caraml.campaign.locks), shown as it goes
(caraml.campaign.progress)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path

from caraml.campaign import children, launchers, locks, progress, sweep
from caraml.campaign.expand import SweepPoint, time_limit_seconds
from caraml.errors import BadInput, printable
from caraml.paths import ensure_writable_dir
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
    _check_runs_here(p)
    ensure_writable_dir(results)
    run = _LocalSweep(p, results, resume, python, records if records is not None else [])
    # Ctrl-C, and a SIGTERM like it, stop the point and the sweep, whatever this process inherited: a shell starts
    # `caraml sweep &` with SIGINT ignored, and an ignored signal stays ignored across exec, in the points too. A
    # handler of this process's own is reset to the default in every child it starts.
    old = {sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with run.display:
            held: list[tuple[int, SweepPoint]] = []  # points another process was running: waited for at the end
            for n, point in enumerate(run.runs, 1):
                if not run.first_try(n, point):
                    held.append((n, point))
            for n, point in held:
                run.after_the_others(n, point)
    except SweepInterrupted:
        raise
    except KeyboardInterrupt:  # between points
        raise SweepInterrupted(run.counts, run.left()) from None
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    return run.counts


def _check_runs_here(p: sweep.Plan) -> None:
    """Refuse a plan this machine cannot run, before anything runs."""
    sweep.check_runnable(p)
    sweep.check_system_here(p)
    for point in p.points:
        if point.nodes > 1:
            raise BadInput(f"point {point.id} asks for {point.nodes} nodes; run it with --executor slurm")
        time_limit_seconds(sweep.point_time_limit(point))  # a bad limit fails before anything runs


def _point_env() -> dict[str, str]:
    """The points' environment: this one, with this very tree first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = launchers.source_root() + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class _LocalSweep:
    """One local sweep under way: its runs, what it has counted and kept, and how it shows where it stands."""

    def __init__(self, p: sweep.Plan, results: str, resume: bool, python: str | None, kept: list[dict]):
        self.results, self.python, self.kept = results, python, kept
        self.done = sweep.ok_records(results) if resume else {}
        self.runs = sweep.runs(p.points)
        self.todo = {run.key for run in sweep.still_to_run(self.runs,
                                                            Counter({k: len(v) for k, v in self.done.items()}))}
        self.logs = ensure_writable_dir(Path(results) / "sweep" / "logs")
        self.locks = ensure_writable_dir(Path(results) / "sweep" / "locks")
        self.env = _point_env()
        self.counts: dict[str, int] = {}
        self.labels = progress.point_labels(self.runs)
        self.tally = progress.Tally(total=len(self.runs), to_run=len(self.todo),
                                    window_cap_s=progress.window_cap([r for r in self.runs if r.key in self.todo]))
        self.display = progress.display(p.suite.name, self.tally)
        self.began = time.time()

    def left(self) -> int:
        return self.tally.total - self.tally.passed

    def first_try(self, n: int, point: SweepPoint) -> bool:
        """Skip the point, or run it; False when another process holds it (to be waited for after the others)."""
        label, tag = self.labels[point.key], self._tag(n, point)
        if point.key not in self.todo:
            self._count("skipped")
            self.kept.append(self.done[point.id][-point.repeat])  # the newest ok ones
            self.display.line(f"caraml: {tag} already ok, skipped" + (f": {label}" if label else ""))
            self._passed()
            return True
        lock = locks.claim(self.locks / f"{point.key}.lock")
        if lock is None:
            self.display.line(f"caraml: {tag} is running elsewhere ({locks.holder(self.locks / f'{point.key}.lock')}; "
                              f"lock {self.locks / point.key}.lock): waited for after the other points"
                              + (f": {label}" if label else ""))
            return False
        self.run_here(n, point, lock)
        return True

    def after_the_others(self, n: int, point: SweepPoint) -> None:
        """A point another process held: counted as ok when it saved an ok record meanwhile, else run here."""
        tag, label = self._tag(n, point), self.labels[point.key]
        lock = locks.wait_for(self.locks / f"{point.key}.lock", children.STOP_GRACE_S)
        if lock is None:
            self._passed_over("running", None, f"caraml: {tag} is still running elsewhere (its sweep is gone; "
                              f"it holds {self.locks / point.key}.lock), not run" + (f": {label}" if label else ""))
            return
        record = _newest_since(self.results, point.id, self.began)
        if record is not None and record.get("status") == "ok":
            os.close(lock)
            self._passed_over("ok", record, f"caraml: {tag} ok, run elsewhere: {progress.headline(record)}"
                              + (f"  {label}" if label else ""))
        else:
            self.run_here(n, point, lock)

    def run_here(self, n: int, point: SweepPoint, lock: int) -> None:
        tag, label = self._tag(n, point), self.labels[point.key]
        began = time.monotonic()
        self.tally.starting(began)
        self.display.starting(n, point.id, label)
        try:
            status, stopped, record = children.run_point(point, self.results, self.python, self.env,
                                                         self.logs / f"{point.key}.log", lock)
        finally:
            os.close(lock)
        self._count(status)
        self.kept.append(record)
        took = time.monotonic() - began
        self.tally.finished_one(took)
        self.display.line(f"caraml: {tag} {status}: {progress.headline(record)}" + (f"  {label}" if label else "")
                          + f"  ({self.tally.clock(took)})")
        if (elsewhere := _saved_elsewhere(record, self.results)) is not None:
            self.display.line(printable(f"caraml: {tag} record saved to {elsewhere}: the results folder "
                                        "would not take it (a full disk?)"))
        self._passed()
        if stopped:
            raise SweepInterrupted(self.counts, self.left())

    def _passed_over(self, status: str, record: dict | None, line: str) -> None:
        self._count(status)
        if record is not None:
            self.kept.append(record)
        self.tally.passed_over()
        self.display.line(line)
        self._passed()

    def _count(self, status: str) -> None:
        self.counts[status] = self.counts.get(status, 0) + 1

    def _passed(self) -> None:
        self.tally.passed += 1
        self.display.advance()

    def _tag(self, n: int, point: SweepPoint) -> str:
        return f"[{n}/{self.tally.total}] {point.id}"


def _raise_interrupt(_signum, _frame):
    raise KeyboardInterrupt


def _saved_elsewhere(record: dict, results: str) -> str | None:
    """Where a point saved its record when that is not the results folder (Store.save's fallback)."""
    path = record.get("path") if isinstance(record, dict) else None
    if not isinstance(path, str) or Path(path).parent.resolve() == Store(results).runs.resolve():
        return None
    return path


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
