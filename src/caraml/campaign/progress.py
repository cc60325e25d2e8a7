"""A local sweep's progress for people: where it stands (points passed, durations, ETA), each point's label and
headline figure, shown as a live bar in a terminal or as plain lines in a log."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from rich.progress import ProgressColumn
from rich.table import Column
from rich.text import Text

from caraml.campaign.expand import SweepPoint
from caraml.errors import printable


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
        most = sum(self.durations) / len(self.durations) + self.window_cap_s
        ran = 0.0 if self.running_since is None else (time.monotonic() if now is None else now) - self.running_since
        return max(0.0, left * most - min(most, ran))

    def clock(self, took: float | None = None, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        elapsed, eta, upper = now - self.started, self.eta(now), self.eta_upper(now)
        return ", ".join(([f"took {duration(took)}"] if took is not None else []) + [f"elapsed {duration(elapsed)}"]
                         + ([f"ETA {duration(eta)}" + (f" (at most {duration(upper)})" if upper is not None else "")]
                            if eta is not None else []))


def window_cap(points: list[SweepPoint]) -> float | None:
    """The longest measure_max_seconds of the points that measure until steady (None: none does)."""
    from caraml.settings import MeasureSettings

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


def display(suite: str, tally: Tally):
    """Rich's live bar where stderr is a terminal; plain lines otherwise (a log file, a pipe, the tests)."""
    return RichDisplay(suite, tally) if sys.stderr.isatty() else PlainDisplay(suite, tally)


class PlainDisplay:
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


class RichDisplay(PlainDisplay):
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
