"""Choosing what to show: load a results folder, keep a workload and `--where` matches, group into points.

Every view (`result`, `compare`, `plot`, `report`) starts here, so they agree on what a filter means
and fail the same way on input that selects nothing.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from caraml.errors import BadInput, did_you_mean, shown
from caraml.results import columns as cols
from caraml.results import presets
from caraml.results import table as table_mod
from caraml.results.aggregate import Point, group, load, matches, parse_where, throughput_of
from caraml.results.table import Table, fit, render_tables, text_width


@dataclass
class Selection:
    results: str
    by_workload: dict[str, list[Point]]  # workload -> points, in table order
    skipped: list[str] = field(default_factory=list)  # record files left out, with why

    @property
    def points(self) -> list[Point]:
        return [p for pts in self.by_workload.values() for p in pts]


def columns_of(workload: str, points: list[Point]) -> list[cols.Column]:
    return cols.columns_for(workload, points[0].unit if points else None)


def select(results: str, workload: str | None = None, where: list[str] | None = None, warn=True) -> Selection:
    records, skipped = load(results, warn=warn)
    if not records:
        raise BadInput(f"no run records in {results}; run `caraml run ...` first or pass --results DIR")
    pairs = parse_where(where)
    if workload:
        records = [r for r in records if r.get("workload") == workload]
        if not records:
            present = sorted({str(r.get("workload")) for r in load(results, warn=False)[0]})
            raise BadInput(f"no records of workload '{shown(workload)}' in {results}; "
                           f"{did_you_mean(workload, present)}it has: " + ", ".join(present))
    # Status is a property of each run, so it filters runs before repeats are grouped.
    for _, wanted in [kv for kv in pairs if kv[0].lower() == "status"]:
        records = [r for r in records if matches(r.get("status"), wanted)]
    pairs = [kv for kv in pairs if kv[0].lower() != "status"]

    by_workload: dict[str, list[Point]] = {}
    for point in group(records):
        by_workload.setdefault(point.workload, []).append(point)
    for key, _ in pairs:
        if not any(_knows(name, points, key) for name, points in by_workload.items()):
            known = sorted({k for name, points in by_workload.items()
                            for k in cols.known_keys(points, columns_of(name, points))})
            hint = did_you_mean(key, known).rstrip() or ("use a column, a parameter or a record field "
                                                         "(launch.world_size, metrics.energy.reason), e.g. one of: "
                                                         + ", ".join(known))
            raise BadInput(f"--where: unknown key '{shown(key)}'; {hint}")
    everything = dict(by_workload)
    for name, points in list(by_workload.items()):
        columns = columns_of(name, points)
        kept = cols.where(points, columns, pairs)
        if kept:
            by_workload[name] = sorted(kept, key=cols.sort_key(columns))
        else:
            del by_workload[name]
    if not by_workload:
        text = " ".join(f"{k}={v}" for k, v in parse_where(where))
        raise BadInput(f"no runs in {results} match {shown(text) or 'the selection'}"
                       + (f" (workload {workload})" if workload else "") + _close_value(everything, pairs))
    return Selection(results, dict(sorted(by_workload.items())), skipped)


def _close_value(by_workload: dict[str, list[Point]], pairs: list[tuple[str, str]]) -> str:
    """"; did you mean V?" for the first --where pair that no run matches, V the closest of its key's values."""
    for key, wanted in pairs:
        values, found = set(), False
        for name, points in by_workload.items():
            columns = columns_of(name, points)
            found = found or bool(cols.where(points, columns, [(key, wanted)]))
            values |= {str(v) for known, v in (cols.lookup(p, columns, key) for p in points) if known and v is not None}
        if not found:
            hint = did_you_mean(wanted, sorted(values)).rstrip()
            return f"; {hint}" if hint else ""
    return ""


def _knows(workload: str, points: list[Point], key: str) -> bool:
    return key == "workload" or cols.resolve(columns_of(workload, points), key, points) is not None


def result_table(workload: str, points: list[Point], names: list[str] | None = None,
                 width: int | None = None) -> Table:
    """The table of a workload's points: the columns named, else the default ones and a column for each parameter
    that differs between the rows (those that differ only by the rows' presets as one Preset column; how a point
    was measured never). `width`: fit the text table to it (fit), the identity columns (system and the
    configuration that differs) first and kept, as are the columns named, throughput and status."""
    everything = columns_of(workload, points)
    columns = cols.choose(everything, names, workload, points)
    # rows that differ in a parameter no column shows would look alike; in the engine, even beside --columns
    extra = cols.telling_apart(everything, columns, points) if names else cols.varying(everything, columns, points)
    last_config = max((i for i, c in enumerate(columns) if c.config), default=-1)
    columns = columns[:last_config + 1] + extra + columns[last_config + 1:]
    folded: list[cols.Column] = []
    if not names:
        columns, folded = presets.fold(workload, columns, points)
    identity = {c.key for c in columns if c.config and (c.key in ("system", presets.KEY) or cols.differs(c, points))}
    if width:  # who each row is, before what it measured
        columns = [c for c in columns if c.key in identity] + [c for c in columns if c.key not in identity]
    gpus = cols.on_gpus(points)
    table = Table(title=workload, keys=[c.key for c in columns], headers=[c.header for c in columns],
                  styles=[c.style for c in columns], rows=[[cols.cell(c, p) for c in columns] for p in points],
                  extras=[{"workload": workload, "id": p.id, "run_ids": [r.get("run_id") for r in p.records]}
                          for p in points], text_headers=[cols.text_header(c, gpus) for c in columns],
                  notes=presets.notes(folded, points))
    _interrupted(table, points)
    if width:
        keep = set(table.keys) if names else {"throughput", "status"} | identity
        keep |= {k for k in _SPREADS if k in table.keys and any(_unsteady(k, v) for v in _column(table, k))}
        # a flag under the table needs its column
        table = fit(table, width, keep=keep, config={c.key for c in columns if c.config}, prefer=cols.HEADLINE)
    _flag(table, points)
    return table


INTERRUPTED = "interrupted: over its measured steps (the run stopped before its window ended)"


def _interrupted(table: Table, points: list[Point]) -> None:
    """The throughput of a row whose runs were all interrupted, over the steps they measured, marked '*' in the
    text table and the report (CSV, JSON and Markdown keep no figure: it is not a full window's)."""
    if "throughput" not in table.keys:
        return
    j = table.keys.index("throughput")
    for i, p in enumerate(points):
        cut = [v for v in (throughput_of(r) for r in p.records if r.get("status") == "interrupted") if v is not None]
        if table.rows[i][j] is None and cut:
            table.shows[(i, "throughput")] = statistics.median(cut)
            table.marks[(i, "throughput")] = "*"
    if any(k[1] == "throughput" for k in table.shows):
        table.notes.append(f"* {INTERRUPTED}")


# Spreads flagged in the text table: key -> (threshold, footnote after "! <Header> above N%: ").
_SPREADS = {
    "step_spread": (cols.STEADY_SPREAD, "step times varied that much in the measured window ((p90-p10)/median), "
                    "so the figures are unsteady; measure more steps or repeat"),
    "spread": (cols.REPEAT_SPREAD, "the repeats' throughputs differ that much ((max-min)/median), so the median is "
               "uncertain; look for a noisy neighbour, clocks or thermals, and repeat"),
    "caraml_cv": (cols.CARAML_SPREAD, "CARAML's figure is a mean over epochs or log intervals that differ that much "
                  "(standard deviation / mean; metrics.caraml_spread has their lowest and highest), so it depends on "
                  "which ones ran; run more of them or repeat"),
    "caraml_repeat_spread": (cols.REPEAT_SPREAD, "the repeats' CARAML figures differ that much ((max-min)/median), so "
                             "their median is uncertain; repeat more (caraml sweep ... repeats=N)"),
}


def _flag(table: Table, points: list[Point]) -> None:
    """Marks and footnotes of the text table: a spread above its threshold (step times, repeats), and why energy
    reads '-'."""
    keys = table.keys
    for key, (limit, why) in _SPREADS.items():
        if key not in keys:
            continue
        j = keys.index(key)
        flagged = [i for i, row in enumerate(table.rows) if _unsteady(key, row[j])]
        for i in flagged:
            table.marks[(i, key)] = "!"
        if flagged:
            table.notes.append(f"! {table.headers[j]} above {limit:.0%}: {why}")
    energy = [j for j, k in enumerate(keys) if k in cols.ENERGY_KEYS]
    reasons: dict[str, int] = {}
    for i, p in enumerate(points):
        e = p.energy()
        if any(table.rows[i][j] is None for j in energy) and not e.available:  # else the run's status says why
            short = _short(e.reason or "no energy reading")
            reasons[short] = reasons.get(short, 0) + 1
    for reason, n in reasons.items():
        table.notes.append(f"energy -: {reason} ({n} row{'s' if n > 1 else ''})")


def _unsteady(key: str, value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > _SPREADS[key][0]


def _column(table: Table, key: str) -> list:
    j = table.keys.index(key)
    return [row[j] for row in table.rows]


def _short(text: str, limit: int = 100) -> str:
    """`text` on one line of at most about `limit` characters; cut, it ends in '…' and closes the parentheses
    it cut into."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    cut = text[:limit - 1].rstrip()
    return cut + "…" + ")" * max(0, cut.count("(") - cut.count(")"))


def result_tables(points: list[Point], names: list[str] | None = None, width: int | None = None) -> list[Table]:
    by_workload: dict[str, list[Point]] = {}
    for p in points:
        by_workload.setdefault(p.workload, []).append(p)
    for name in names or []:  # a column must exist in at least one of the workloads shown
        if not any(cols.resolve(columns_of(w, pts), name, pts) for w, pts in by_workload.items()):
            keys = list(dict.fromkeys(c.key for w, pts in sorted(by_workload.items()) for c in columns_of(w, pts)))
            raise BadInput(f"unknown column '{shown(name)}'; {did_you_mean(name, keys)}choose from: "
                           + ", ".join(keys) + cols.FIELDS_HINT)
    tables = []
    for workload, pts in sorted(by_workload.items()):
        columns = columns_of(workload, pts)
        pts = sorted(pts, key=cols.sort_key(columns))
        mine = [n for n in names if cols.resolve(columns, n, pts)] if names else None
        tables += _fitted(workload, pts, mine, width)
    return tables


def _fitted(workload: str, points: list[Point], names: list[str] | None, width: int | None) -> list[Table]:
    """The workload's table; where it cannot fit `width` (its identity alone too wide), one table per system."""
    table = result_table(workload, points, names, width)
    systems = list(dict.fromkeys(p.system for p in points))
    if not width or text_width(table) <= width or len(systems) < 2:
        return [table]
    out = []
    for system in systems:
        one = result_table(workload, [p for p in points if p.system == system], names, width)
        one.title = f"{workload} on {system}"
        out.append(one)
    return out


def render(records: list[dict], fmt: str) -> str:
    """Records as one table per workload (repeats of a configuration collapsed); `caraml run` prints this (fitted
    to the width of the terminal, or to COLUMNS, as `caraml result` does)."""
    width = table_mod.terminal_width() if fmt == "table" else None
    return render_tables(result_tables(group(records), width=width), fmt)
