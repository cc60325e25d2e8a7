"""Comparisons: the same configurations side by side across the values of one key (system, precision, ...).

Points are matched on their configuration without the compared key (and without measurement
settings such as measure_steps, see settings.MEASUREMENT_KEYS). A matched configuration that the
baseline and at least one other group ran becomes a row: each group's throughput and units per
Wh, and their ratios to the baseline. Every other configuration, and every configuration whose
runs all failed, is listed apart with the reason; nothing is dropped silently.

Scaling is `--by devices` (or `--by nodes`): the baseline is the smallest count, and each row also
gets the parallel efficiency (speedup over the baseline divided by the ratio of device counts).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from caraml.errors import BadInput, did_you_mean, shown
from caraml.results import columns as cols
from caraml.results import presets
from caraml.results.aggregate import Point, matches
from caraml.results.table import Table, fit, text_width

SCALING_KEYS = ("devices", "nodes")
RECORD_PATHS = {"launch.world_size": "devices", "launch.nodes": "nodes", "system.tag": "system"}


@dataclass
class Comparison:
    workload: str
    by: str
    unit: str
    baseline: object
    groups: list  # group values, baseline first
    rows: list[tuple[dict, dict]] = field(default_factory=list)  # (configuration, {group: Point})
    apart: list[tuple[dict, dict, str]] = field(default_factory=list)  # (configuration, {group: Point}, why)
    columns: list[cols.Column] = field(default_factory=list)  # configuration columns worth showing

    @property
    def scaling(self) -> bool:
        return self.by in SCALING_KEYS

    def speedup(self, row: dict, g) -> float | None:
        base, other = row.get(self.baseline), row.get(g)
        return _ratio(other.throughput if other else None, base.throughput if base else None)

    def energy_ratio(self, row: dict, g) -> float | None:
        base, other = row.get(self.baseline), row.get(g)
        return _ratio(other.units_per_wh if other else None, base.units_per_wh if base else None)

    def efficiency(self, row: dict, g) -> float | None:
        """Parallel efficiency against the baseline (smallest) device count: 1.0 is perfect scaling."""
        base, other = row.get(self.baseline), row.get(g)
        speed = self.speedup(row, g)
        if speed is None or not base.devices or not other.devices:
            return None
        return speed / (other.devices / base.devices)


def _ratio(a, b):
    return a / b if a is not None and b else None


def _natural(value):
    return (0, float(value), "") if isinstance(value, (int, float)) else (1, 0.0, str(value).lower())


def group_key(points: list[Point], columns: list[cols.Column], by: str) -> str:
    """The record field to compare by: system, devices, nodes or a parameter (a column naming one works too, and so
    do the record's own paths: params.precision, launch.world_size, launch.nodes, system.tag)."""
    by = RECORD_PATHS.get(by, by)
    if by.startswith("params.") and any(by[len("params."):] in p.params for p in points):
        by = by[len("params."):]
    if by in ("system", "devices", "nodes") or any(by in p.params for p in points):
        return by
    column = cols.find(columns, by)
    if column is not None and (column.param or column.key in ("system", "devices", "nodes")):
        return column.param or column.key
    choices = ["system", "devices", "nodes"] + sorted({k for p in points for k in p.config()} - {
        "system", "devices", "nodes"})
    hint = did_you_mean(by, choices).rstrip() or "choose one of: " + ", ".join(choices)
    raise BadInput(f"--by {shown(by)}: not a field of these runs; {hint}")


def compare(workload: str, points: list[Point], by: str, baseline: str | None = None) -> Comparison:
    columns = cols.columns_for(workload, points[0].unit if points else None)
    key = group_key(points, columns, by)
    without = SCALING_KEYS if key in SCALING_KEYS else (key,)

    # configuration -> group -> point; points equal but for measurement settings are merged.
    table: dict[str, dict] = {}
    configs: dict[str, dict] = {}
    for p in points:
        cfg = p.config(without=without)
        ident = json.dumps(cfg, sort_keys=True, default=str)
        configs[ident] = cfg
        g = p.config().get(key)
        cell = table.setdefault(ident, {})
        if g in cell:
            cell[g] = Point(id=f"{cell[g].id}+{p.id}", workload=p.workload,
                            records=sorted(cell[g].records + p.records, key=lambda r: r.get("started_at") or ""))
        else:
            cell[g] = p

    groups = sorted({g for cell in table.values() for g in cell}, key=_natural)
    if len(groups) < 2:
        raise BadInput(f"{workload}: comparing by {key} needs at least two groups; these runs all have "
                       f"{key}={groups[0] if groups else '-'} (widen --where or run more configurations)")
    if baseline is None:
        base = groups[0]
    else:
        found = [g for g in groups if matches(g, baseline)]
        if not found:
            raise BadInput(f"--baseline {shown(baseline)}: no {workload} runs with {key}={shown(baseline)}; "
                           "choose one of: " + ", ".join(map(str, groups)))
        base = found[0]
    groups = [base] + [g for g in groups if g != base]

    unit = (points[0].unit or "units").capitalize()
    out = Comparison(workload, key, unit, base, groups)
    for ident, cell in table.items():
        ok = {g: p for g, p in cell.items() if p.throughput is not None}
        failed = sorted((g for g in cell if g not in ok), key=_natural)
        reasons = []
        if base in ok and len(ok) >= 2:
            out.rows.append((configs[ident], ok))
        elif base not in cell:
            reasons.append(f"no {key}={base} (baseline) run")
        elif len(cell) < 2:
            reasons.append(f"only {key}={base} ran it")
        if failed:
            reasons.append("no successful run for " + ", ".join(f"{key}={g} ({cell[g].status})" for g in failed))
        if reasons:
            out.apart.append((configs[ident], cell, "; ".join(reasons)))
    out.columns = _shown_columns(columns, key, [cell for cell in table.values()])
    return out


def _shown_columns(columns: list[cols.Column], key: str, cells: list[dict]) -> list[cols.Column]:
    """Configuration columns whose value is one and the same for every group of a configuration."""
    kept = []
    for c in columns:
        if not (c.config and c.default) or c.param == key or c.key == key:
            continue
        if c.default == "if-any" and not any(c.get(p) is not None for cell in cells for p in cell.values()):
            continue  # e.g. FNO's Version, which older records do not have
        if c.default == "if-differs" and not cols.differs(c, [p for cell in cells for p in cell.values()]):
            continue  # one engine throughout
        if key in SCALING_KEYS and c.key in SCALING_KEYS:
            continue
        if all(len({json.dumps(c.get(p), default=str) for p in cell.values()}) == 1 for cell in cells):
            kept.append(c)
    return kept


def label(cmp: Comparison, g) -> str:
    return str(g) if cmp.by == "system" else f"{cmp.by}={g}"


def short_label(cmp: Comparison, g) -> str:
    """A group as the text headers name it, under a title that names the key: 'fp16', 'H100', '4 devices'."""
    if cmp.by in SCALING_KEYS:
        return f"{g} {cmp.by}"
    return str(g) if cmp.by == "system" or (isinstance(g, str) and g) else f"{cmp.by}={g}"


def _merged(cmp: Comparison, cell: dict) -> Point:
    """Every run of a configuration's groups as one point: its configuration cells show their values joined."""
    return Point(id="", workload=cmp.workload, records=[r for p in cell.values() for r in p.records])


def _extra_columns(cmp: Comparison) -> list[cols.Column]:
    """Columns of the parameters that tell configurations apart but have none of their own (how a point was
    measured is no part of it)."""
    covered = {c.param or c.key for c in cmp.columns} | {a for c in cmp.columns for a in c.aliases} | {
        cmp.by, *SCALING_KEYS} | cols.not_identifying(cmp.workload)
    cfgs = [cfg for cfg, _ in cmp.rows] + [cfg for cfg, _, _ in cmp.apart]
    keys = sorted({k for cfg in cfgs for k in cfg} - covered)
    points = [p for cell in _cells(cmp) for p in cell.values()]
    every = cols.columns_for(cmp.workload, cmp.unit.lower())
    out = [cols.resolve(every, "params." + k, points) for k in keys
           if len({json.dumps(cfg.get(k), default=str) for cfg in cfgs}) > 1]
    return [c for c in out if c is not None]


def _cells(cmp: Comparison) -> list[dict]:
    return [cell for _, cell in cmp.rows] + [cell for _, cell, _ in cmp.apart]


def config_columns(cmp: Comparison) -> tuple[list[cols.Column], list[cols.Column]]:
    """The configuration columns of the comparison's tables (those that differ only by the runs' presets as one
    Preset column) and those folded into it (presets.fold)."""
    merged = [_merged(cmp, cell) for cell in _cells(cmp)]
    return presets.fold(cmp.workload, cmp.columns + _extra_columns(cmp), merged)


def _group_columns(cmp: Comparison, groups: list) -> tuple[list[str], list[str], list[str], list[str]]:
    """(keys, CARAML-style headers, headers with their convention, styles) of the groups' figures."""
    keys, headers, text, styles = [], [], [], []
    for g in groups:
        name, short = label(cmp, g), short_label(cmp, g)
        keys += [f"{name}:throughput", f"{name}:units_per_wh"]
        headers += [f"{name} {cmp.unit}/s", f"{name} {cmp.unit}/Wh"]
        text += [f"{short} {cmp.unit}/s (steady)", f"{short} {cmp.unit}/Wh"]
        styles += ["num", "num"]
        if g != cmp.baseline:
            keys += [f"{name}:speedup", f"{name}:energy_ratio"]
            headers += [f"{name} ×speed", f"{name} ×{cmp.unit}/Wh"]
            text += [f"{short} ×speed", f"{short} ×{cmp.unit}/Wh"]
            styles += ["ratio", "ratio"]
            if cmp.scaling:
                keys.append(f"{name}:efficiency")
                headers.append(f"{name} efficiency")
                text.append(f"{short} efficiency")
                styles.append("pct")
    return keys, headers, text, styles


def tables(cmp: Comparison, groups: list | None = None, apart: bool = True) -> list[Table]:
    """The comparison's table (only `groups` beside the baseline, where given) and, with `apart`, its
    configurations not compared."""
    columns, folded = config_columns(cmp)
    # a group with no configuration in common with the baseline has no figures here (it is among those apart)
    groups = [cmp.baseline] + [g for g in (groups or cmp.groups) if g != cmp.baseline
                               and any(g in cell for _, cell in cmp.rows)]
    gpus = cols.on_gpus([p for cell in _cells(cmp) for p in cell.values()])
    cfg_keys, cfg_headers = [c.key for c in columns], [c.header for c in columns]
    cfg_text, cfg_styles = [cols.text_header(c, gpus) for c in columns], [c.style for c in columns]
    keys, headers, text, styles = _group_columns(cmp, groups)
    base = label(cmp, cmp.baseline)
    main = Table(title=f"{cmp.workload}: by {cmp.by}, ratios (×) to the baseline {base}", keys=cfg_keys + keys,
                 headers=cfg_headers + headers, styles=cfg_styles + styles, text_headers=cfg_text + text,
                 notes=presets.notes(folded, [_merged(cmp, cell) for _, cell in cmp.rows]))
    for _, cell in cmp.rows:
        row = [cols.cell(c, _merged(cmp, cell)) for c in columns]
        for g in groups:
            p = cell.get(g)
            row += [p.throughput if p else None, p.units_per_wh if p else None]
            if g != cmp.baseline:
                row += [cmp.speedup(cell, g), cmp.energy_ratio(cell, g)]
                if cmp.scaling:
                    row.append(cmp.efficiency(cell, g))
        main.rows.append(row)
        main.extras.append({"workload": cmp.workload, "by": cmp.by, "baseline": cmp.baseline})
    out = [main]
    if cmp.apart and apart:
        apart = Table(title=f"{cmp.workload}: not compared", keys=cfg_keys + ["groups", "why"],
                      headers=cfg_headers + ["Ran on", "Why not compared"], styles=cfg_styles + ["text", "text"],
                      text_headers=cfg_text + ["Ran on", "Why not compared"],
                      notes=presets.notes(folded, [_merged(cmp, cell) for _, cell, _ in cmp.apart]))
        for _, cell, why in cmp.apart:
            apart.rows.append([cols.cell(c, _merged(cmp, cell)) for c in columns]
                              + [", ".join(label(cmp, g) for g in cell), why])
            apart.extras.append({"workload": cmp.workload, "by": cmp.by, "not_compared": True})
        out.append(apart)
    return out


# A narrowed comparison keeps each group's throughput; of the rest it keeps longest, in this order:
KEPT_LONGEST = ("speedup", "efficiency", "units_per_wh", "energy_ratio")


def fit_text(cmp: Comparison, width: int | None) -> list[Table]:
    """The comparison's tables narrowed to `width` (table.fit): the configuration columns that tell rows apart
    and each group's throughput stay, configuration columns the same in every row leave first (into a footnote),
    then the groups' lesser figures; where even so the table is too wide, one table per group beside the
    baseline."""
    out = tables(cmp)
    if not width:
        return out
    fitted = _fit(cmp, out, width)
    if text_width(fitted[0]) <= width or len(cmp.groups) < 3:
        return fitted
    parts = []
    ran = [g for g in cmp.groups[1:] if any(g in cell for _, cell in cmp.rows)]
    for g in ran:
        parts += _fit(cmp, tables(cmp, [g], apart=g == ran[-1]), width)
    return parts


def _fit(cmp: Comparison, tables_: list[Table], width: int) -> list[Table]:
    out = []
    for t in tables_:
        figures = [k for k in t.keys if ":" in k]
        config = [k for k in t.keys if k not in figures and k not in ("groups", "why")]
        # the configuration that tells this table's rows apart stays, as do each group's throughput
        identity = {k for i, k in enumerate(t.keys) if k in config and (k == "system" or len(
            {json.dumps(row[i], default=str) for row in t.rows}) > 1)}
        keep = identity | {k for k in figures if k.endswith(":throughput")} | {"groups", "why"}
        prefer = [k for kind in KEPT_LONGEST for k in figures if k.endswith(":" + kind)]
        out.append(fit(t, width, keep=keep, config=set(config), prefer=prefer, hint="--wide shows them"))
    return out


def as_json(cmp: Comparison) -> dict:
    def group_view(cell, g):
        p = cell[g]
        view = {"throughput": p.throughput, "units_per_wh": p.units_per_wh, "runs": len(p.records),
                "status": p.status, "ids": p.id.split("+")}
        if g != cmp.baseline and p.throughput is not None and cmp.baseline in cell:
            view.update(speedup=cmp.speedup(cell, g), energy_ratio=cmp.energy_ratio(cell, g))
            if cmp.scaling:
                view["efficiency"] = cmp.efficiency(cell, g)
        return view

    return {"workload": cmp.workload, "by": cmp.by, "baseline": cmp.baseline, "groups": cmp.groups,
            "unit": cmp.unit.lower(),
            "rows": [{"config": cfg, "groups": {str(g): group_view(cell, g) for g in cmp.groups if g in cell}}
                     for cfg, cell in cmp.rows],
            "not_compared": [{"config": cfg, "groups": {str(g): group_view(cell, g) for g in cell}, "why": why}
                             for cfg, cell, why in cmp.apart]}
