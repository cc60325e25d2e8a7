"""Points and groups of the comparison scripts (bench/), run in order under a time budget.

A point is a name, caraml parameters over its group's common ones, bench-only knobs (set in the point's process
before the Bench is built) and the wall seconds it is expected to take. A group is a table of points as data. A
point starts only while the budget has its expected seconds left, else it is recorded as skipped (never started);
after each point the rows so far are written, so a run cut short still leaves its JSON.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from caraml.errors import BadInput


@dataclass(frozen=True)
class Point:
    name: str
    params: tuple = ()  # caraml parameters over the group's common ones
    knobs: dict = field(default_factory=dict)  # bench-only settings, applied in the point's process
    expect_s: float = 90.0  # wall seconds it needs (start, compile, warm-up, window, profile)
    by_default: bool = True  # False: runs only when --only names it


@dataclass(frozen=True)
class Group:
    name: str
    points: tuple  # of Point, in the order they run
    aliases: tuple = ()  # older names still accepted on the command line
    budget_s: float = 330.0  # the default budget of the whole group

    def point(self, name: str) -> Point:
        return next(p for p in self.points if p.name == name)

    def names(self) -> list[str]:
        return [p.name for p in self.points]


def find_group(groups: tuple, name: str) -> Group:
    """The group called `name` or one of its aliases; BadInput naming the choices otherwise."""
    for group in groups:
        if name == group.name or name in group.aliases:
            return group
    known = ", ".join(n for g in groups for n in (g.name, *g.aliases))
    raise BadInput(f"unknown group {name}; choose from: {known}")


def select(group: Group, only: str | None) -> list[Point]:
    """The points `--only` names (comma-separated), in the order given; without it, the group's default points."""
    if not only:
        return [p for p in group.points if p.by_default]
    names = [n for n in only.split(",") if n]
    unknown = [n for n in names if n not in group.names()]
    if unknown:
        raise BadInput(f"unknown point(s) {', '.join(unknown)} in group {group.name}; choose from: "
                       f"{', '.join(group.names())}")
    return [group.point(n) for n in names]


def plan(point: Point, budget: float, elapsed: float) -> tuple:
    """Whether the next point starts: (True, seconds it may take) or (False, why it is skipped)."""
    left = budget - elapsed
    if left < point.expect_s:
        return False, f"skipped: needs ≈ {point.expect_s:.0f} s, {max(left, 0):.0f} s of the {budget:.0f} s budget left"
    return True, left


def run_points(points: list[Point], run_one: Callable, budget: float | None, saved: Callable,
               clock: Callable = time.monotonic) -> list[dict]:
    """Each point in order: `run_one(point, seconds)` -> its row when the budget has its expected seconds left, a
    skipped row otherwise; `saved(rows)` after each. budget None: no budget (a check of the script, not timed)."""
    start, rows = clock(), []
    for point in points:
        go, value = (True, 600.0) if budget is None else plan(point, budget, clock() - start)
        rows.append(run_one(point, value) if go else
                    {"name": point.name, "status": value, "expected_s": point.expect_s})
        saved(rows)
    return rows


@dataclass(frozen=True)
class Column:
    """One column of a results table: its title, width and format, and the row's value (a key or a function)."""

    title: str
    width: int  # text is padded to it (and cut, with `cut`); numbers are right-aligned in it
    fmt: str  # "s": text; else a number's format, e.g. ".1f"
    value: str | Callable
    cut: bool = False

    def cell(self, row: dict) -> str:
        v = self.value(row) if callable(self.value) else row.get(self.value)
        if self.fmt == "s":
            text = str(v if v is not None else "-")
            return format(text[:self.width] if self.cut else text, f"<{self.width}")
        return format(v, f"{self.width}{self.fmt}") if isinstance(v, (int, float)) else format("-", f">{self.width}")


def table_lines(rows: list[dict], columns: tuple, notes: Callable | None = None) -> list[str]:
    """A header line, then one line per row; a row that is not ok gets its status and error on a line below, and
    `notes(row)` (lines) follow each row."""
    lines = [" ".join(format(c.title, f"<{c.width}" if c.fmt == "s" else f">{c.width}") for c in columns)]
    for row in rows:
        lines.append(" ".join(c.cell(row) for c in columns).rstrip())
        if row.get("status") != "ok":
            lines.append(f"    {row.get('status')} {str(row.get('error') or '')[-600:]}".rstrip())
        lines += notes(row) if notes else []
    return lines


def write_report(out: Path, stem: str, report: dict, lines: list[str] | None = None) -> Path:
    """OUT/STEM.json (and OUT/STEM.txt with the table's lines, when given); the JSON's path."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(report, indent=1, default=str))
    if lines is not None:
        (out / f"{stem}.txt").write_text("\n".join(lines) + "\n")
    return out / f"{stem}.json"


def refuse(script: str, problem: BadInput) -> int:
    """Bad input on a script's command line: one line on stderr; the exit code 2."""
    print(f"{script}: {problem}", file=sys.stderr)
    return 2
