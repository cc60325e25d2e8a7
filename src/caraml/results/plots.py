"""Plots of points (matplotlib, Agg backend, no display needed), one figure per workload.

Kinds:
  throughput  throughput vs global batch size, one line per configuration (see Lines below)
  efficiency  units per Wh vs global batch size, same lines
  pareto      throughput vs units per Wh; the Pareto front (no other point is better in both) is marked
  scaling     throughput and parallel efficiency vs device count, against each line's smallest count
  power       one run's power time series per device, its phases shaded

Lines (lines_of): a line per configuration once the numeric settings that change with x (grad_accumulation in
an LLM global-batch sweep, a learning rate scaled with the batch, nodes with devices) are taken out, in x order;
labelled by the system and the fewest other settings that tell the lines apart. What else differs goes to a
caption under the plot; measurement settings never appear. A point is the median of its repeats, its error bar
their lowest and highest. The legend sits outside the axes, the layout is matplotlib's constrained layout.
"""

from __future__ import annotations

import io
import itertools
import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from caraml.errors import BadInput, did_you_mean, printable, shown
from caraml.paths import safe_name
from caraml.results import columns as cols
from caraml.results.aggregate import Point, throughput_of
from caraml.results.energy import energy_of, is_number, read_timeseries

KINDS = ("throughput", "efficiency", "pareto", "scaling", "power")
BATCH_KEYS = ("batch_size", "global_batch_size", "micro_batch_size")
PHASE_COLOURS = {"warmup": "#f4c27a", "measure": "#9fd39b", "done": "#d0d0d0", "setup": "#c6d8f0"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["text.usetex"] = False
    import matplotlib.pyplot as plt

    return plt


def _plain(text) -> str:
    """A name from a record as plain text in a figure: `M$\\foo$` must not be parsed as mathtext (and fail).
    Escaping `$` rather than turning mathtext off keeps the log axes' tick labels (2^3) rendered. Control
    characters are shown as escapes: an SVG holding one is not XML, and no font has a glyph for it."""
    return printable(str(text)).replace("$", r"\$")


# Keys that are hardware, never a setting that changes along a line.
NEVER_ALONG = ("system", "devices")
CAPTION_WIDTH = 110  # characters of a caption line at the figures' widths


def _key(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _numeric(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _violations(cfgs, xs, key, by) -> int | None:
    """How often `key` is not a monotone function of x within the groups `by` makes (None: it never changes in a
    group, so it does not change along a line)."""
    groups: dict[tuple, list[tuple[float, object]]] = {}
    for c, x in zip(cfgs, xs):
        if c.get(key) is not None:
            groups.setdefault(tuple(_key(c.get(k)) for k in by), []).append((x, c.get(key)))
    bad, changes = 0, False
    for pairs in groups.values():
        at: dict[float, set] = {}
        for x, v in pairs:
            at.setdefault(x, set()).add(v)
        bad += sum(len(vs) - 1 for vs in at.values())
        seq = [min(at[x]) for x in sorted(at)]
        changes = changes or len(set(seq)) > 1
        steps = [b - a for a, b in zip(seq, seq[1:]) if b != a]
        bad += 0 if all(d > 0 for d in steps) or all(d < 0 for d in steps) else 1
    return bad if changes else None


def _along(cfgs, xs, varying, never) -> list[str]:
    """The varying numeric settings that change with x along each line (grad_accumulation with the global batch,
    a learning rate scaled with it, nodes with devices): part of the line, not lines of their own. Greedy: the key
    that breaks most often is taken out of the candidates until every candidate is a monotone function of x."""
    cand = [k for k in varying if k not in never and all(_numeric(c.get(k)) for c in cfgs if c.get(k) is not None)]
    while cand:
        by = [k for k in varying if k not in cand]
        scores = {k: _violations(cfgs, xs, k, by) for k in cand}
        # a key that never changes within a line separates lines (or says what a line's other keys say)
        worst = max(cand, key=lambda k: (float("inf") if scores[k] is None else scores[k],
                                         -len({_key(c.get(k)) for c in cfgs})))
        if scores[worst] == 0:
            return cand
        cand.remove(worst)
    return cand


def _shortest(configs: list[dict], keys: list[str], fixed: list[str]) -> list[str]:
    """`fixed` and the fewest of `keys` whose values with them still tell every line apart (earlier keys
    preferred)."""
    distinct = len({tuple(_key(c.get(k)) for k in fixed + keys) for c in configs})
    for size in range(0, min(len(keys), 4) + 1):  # more than four never happens in practice; bounds the search
        for subset in itertools.combinations(keys, size):
            if len({tuple(_key(c.get(k)) for k in fixed + list(subset)) for c in configs}) == distinct:
                return fixed + list(subset)
    return fixed + keys


def _order(v) -> tuple:
    """Numbers in numeric order (2 before 10), before text; nothing last."""
    return (0, v, "") if _numeric(v) else (2, 0, "") if v is None else (1, 0, str(v))


def _value(v) -> str:
    return "-" if v in (None, "") else f"{v:g}" if isinstance(v, float) else str(v)


@dataclass
class Lines:
    """Points grouped into lines: label -> points in x order, and the caption: what differs but is not a label."""

    series: dict[str, list[Point]] = field(default_factory=dict)
    caption: list[str] = field(default_factory=list)


def lines_of(points: list[Point], x: Callable[[Point], float], x_name: str, never=NEVER_ALONG,
             hidden: tuple[str, ...] = BATCH_KEYS, line: str = "line") -> Lines:
    """Lines of points against x: a line per configuration once the settings that change with x are taken out,
    labelled by the fewest settings that tell the lines apart; the other settings that differ go to the caption
    (measurement settings never appear: Point.config leaves them out). `hidden`: settings x already says."""
    cfgs = [p.config() for p in points]
    xs = [x(p) for p in points]
    varying = [k for k in dict.fromkeys(k for c in cfgs for k in c) if len({_key(c.get(k)) for c in cfgs}) > 1]
    along = _along(cfgs, xs, varying, never)
    apart = [k for k in varying if k not in along]
    groups: dict[tuple, list[int]] = {}
    for i, c in enumerate(cfgs):
        groups.setdefault(tuple(_key(c.get(k)) for k in apart), []).append(i)
    heads = [cfgs[idx[0]] for idx in groups.values()]
    label_keys = _shortest(heads, [k for k in apart if k != "system"], ["system"])
    out = Lines()
    for idx, head in sorted(zip(groups.values(), heads), key=lambda g: [_order(g[1].get(k)) for k in label_keys]):
        name = ", ".join(_value(head.get(k)) if k == "system" else f"{k}={_value(head.get(k))}" for k in label_keys)
        out.series[_plain(name)] = sorted((points[i] for i in idx), key=x)
    rest = [k for k in apart if k not in label_keys]
    if rest:
        def values(k):
            seen = sorted({_key(c.get(k)): c.get(k) for c in heads}.values(), key=_order)
            listed = ", ".join(_value(v) for v in seen[:6])
            return f"{k} {listed}" + (f" ... ({len(seen)} values)" if len(seen) > 6 else "")
        out.caption.append(f"also differ between {line}s: " + "; ".join(values(k) for k in rest))
    shown_along = [k for k in along if k not in hidden]
    where = "along each line" if line == "line" else f"within each {line}"
    if shown_along:
        def span(k):
            values = sorted({c.get(k) for c in cfgs if c.get(k) is not None})
            return f"{k} {_value(values[0])}..{_value(values[-1])}"
        out.caption.append(f"change with {x_name} {where}: " + ", ".join(span(k) for k in shown_along))
    if any(len(p.ok) > 1 for p in points):
        most = max(len(p.ok) for p in points)
        out.caption.append(f"points: median of the repeats; bars: their lowest and highest (up to {most} runs)")
    return out


def _unit(points: list[Point]) -> str:
    return _plain((points[0].unit or "units").capitalize())


def _gbs(p: Point):
    return cols.GLOBAL_BATCH.get(p)


LEGEND_WRAP = 34  # characters of a legend label's line


def _legend_columns(n: int) -> int:
    return 1 if n <= 16 else 2


def _ticks(ax, xs) -> None:
    """Ticks at the x values run (a few of them), written as numbers: 20, not between 2^4 and 2^5."""
    values = sorted({x for x in xs if x})
    if 0 < len(values) <= 10:
        ax.set_xticks(values, [_value(v) for v in values])
        ax.minorticks_off()


def _thousands(*axes) -> None:
    """Large figures with thousands separators (720,000, not 700000 beside 7e5)."""
    from matplotlib.ticker import StrMethodFormatter

    for axis in axes:
        low, high = axis.get_view_interval()
        if max(abs(low), abs(high)) >= 10_000:
            axis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))


def _figure(width: float, lines: Lines, height: float = 4.6, ncols: int = 1, extra: int = 0):
    """A figure tall enough for its legend beside the axes (a legend line of 8 pt takes about 0.21 in)."""
    labels = [len(textwrap.wrap(name, LEGEND_WRAP)) or 1 for name in lines.series] + [1] * extra
    rows = -(-sum(labels) // _legend_columns(len(labels)))
    plt = _pyplot()
    fig, axes = plt.subplots(1, ncols, figsize=(width, max(height, 0.21 * rows + 0.7)), layout="constrained")
    return fig, axes


def _title(ax, text: str, width: int = 60) -> None:
    ax.set_title("\n".join(textwrap.wrap(text, width)) or text)


def _finish(fig, axes, lines: Lines) -> None:
    """The legend outside the axes, on the right (never over a label); the caption under the plot."""
    handles, labels = axes[0].get_legend_handles_labels()
    for ax in axes[1:]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if handles:
        fig.legend(handles, ["\n".join(textwrap.wrap(lab, LEGEND_WRAP)) or lab for lab in labels],
                   loc="outside right upper", fontsize=8, ncols=_legend_columns(len(labels)))
    if lines.caption:
        text = "\n".join(line for part in lines.caption for line in textwrap.wrap(_plain(part), CAPTION_WIDTH))
        fig.supxlabel(text, fontsize=8, x=0.0, ha="left", color="#444")


def _spread(p: Point, get: Callable[[dict], Any], mid: float) -> tuple[float, float]:
    """How far below and above the median the point's runs went (0, 0 for one run)."""
    values = [v for v in map(get, p.ok) if is_number(v)]
    return (mid - min(values), max(values) - mid) if len(values) > 1 else (0.0, 0.0)


def _get(metric: str) -> Callable[[dict], Any]:
    return throughput_of if metric == "throughput" else (lambda r: energy_of(r).units_per_wh)


def _vs_batch(workload: str, points: list[Point], metric: str):
    unit = _unit(points)
    pts = [p for p in points if getattr(p, metric) is not None and _gbs(p)]
    if not pts:
        return None
    lines = lines_of(pts, _gbs, "global batch size")
    fig, ax = _figure(10, lines)
    caraml = False
    for name, line in lines.series.items():
        ys = [getattr(p, metric) for p in line]
        err = list(zip(*(_spread(p, _get(metric), y) for p, y in zip(line, ys))))
        drawn = ax.errorbar([_gbs(p) for p in line], ys, yerr=err if any(any(e) for e in err) else None,
                            marker="o", capsize=3, label=name)
        caraml = caraml or (metric == "throughput" and _caraml_line(ax, line, drawn.lines[0].get_color(), name))
    ax.set_xscale("log", base=2)
    _ticks(ax, [_gbs(p) for p in pts])
    ax.set_xlabel("global batch size")
    ax.set_ylabel(f"{unit}/Wh" if metric != "throughput" else f"{unit}/s (steady; dashed: CARAML's)" if caraml
                  else f"{unit}/s (steady)")
    _title(ax, f"{_plain(workload)}: {'throughput' if metric == 'throughput' else 'energy efficiency'} "
           "vs global batch size")
    ax.grid(True, alpha=0.3)
    _thousands(ax.xaxis, ax.yaxis)
    _finish(fig, [ax], lines)
    return fig


def _caraml_line(ax, line: list[Point], color, name: str) -> bool:
    """CARAML's figure of the line's points (a mean over epochs or log intervals), dashed beside our steady one,
    where they have it: the table shows both, so the plot does too. Whether it drew one."""
    xs = [(_gbs(p), p.median(cols.caraml_figure_of)) for p in line]
    xs = [(x, y) for x, y in xs if y is not None]
    if xs:
        ax.plot([x for x, _ in xs], [y for _, y in xs], color=color, linestyle="--", marker="s", markersize=4,
                label=f"{name} (CARAML)")
    return bool(xs)


def pareto_front(pairs: list[tuple[float, float]]) -> list[int]:
    """Indices of points no other point beats in both (x, y), larger being better; sorted by x."""
    front = []
    for i, (x, y) in enumerate(pairs):
        dominated = any((x2 >= x and y2 >= y) and (x2 > x or y2 > y) for x2, y2 in pairs)
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: pairs[i][0])


def _pareto(workload: str, points: list[Point]):
    pts = [p for p in points if p.throughput is not None and p.units_per_wh is not None]
    if not pts:
        return None
    unit = _unit(pts)
    lines = lines_of(pts, _gbs, "global batch size", line="colour")
    lines.caption.insert(0, "next to each point: its global batch size")
    fig, ax = _figure(10, lines, extra=1)
    labels: list[tuple[str, float, float]] = []
    for name, line in lines.series.items():
        xs, ys = [p.units_per_wh for p in line], [p.throughput for p in line]
        xerr = list(zip(*(_spread(p, _get("units_per_wh"), v) for p, v in zip(line, xs))))
        yerr = list(zip(*(_spread(p, throughput_of, v) for p, v in zip(line, ys))))
        ax.errorbar(xs, ys, xerr=xerr if any(any(e) for e in xerr) else None,
                    yerr=yerr if any(any(e) for e in yerr) else None, marker="o", linestyle="none", capsize=2,
                    label=name)
        labels += [(_value(_gbs(p)), px, py) for p, px, py in zip(line, xs, ys) if _gbs(p)]
    _label_points(fig, ax, labels)
    pairs = [(p.units_per_wh, p.throughput) for p in pts]
    front = pareto_front(pairs)
    ax.plot([pairs[i][0] for i in front], [pairs[i][1] for i in front], color="black", linewidth=1,
            linestyle="--", marker="o", markerfacecolor="none", markersize=11, label="Pareto front")
    ax.set_xlabel(f"{unit}/Wh (energy efficiency)")
    ax.set_ylabel(f"{unit}/s")
    _title(ax, f"{_plain(workload)}: throughput vs energy efficiency")
    ax.grid(True, alpha=0.3)
    _thousands(ax.xaxis, ax.yaxis)
    _finish(fig, [ax], lines)
    return fig


LABEL_FONT = 7  # points
# Where a point's label may go, in points from the point, tried in order: right-up first, then around it.
LABEL_OFFSETS = ((4, 4), (4, -11), (-4, 4), (-4, -11), (4, 15), (-4, 15), (4, -22), (-4, -22), (12, -4),
                 (-12, -4), (4, 26), (-4, 26), (4, -33), (-4, -33))


def place_labels(anchors: list[tuple[float, float]], sizes: list[tuple[float, float]],
                 offsets=LABEL_OFFSETS) -> list[tuple[float, float]]:
    """An offset per label (points, from its anchor; a negative x puts the label left of it) such that no two
    labels overlap where that can be done within `offsets`; else the first. Anchors and sizes in points."""
    placed: list[tuple[float, float, float, float]] = []
    chosen = []
    for (ax_, ay), (w, h) in zip(anchors, sizes):
        boxes = []
        for dx, dy in offsets:
            x0 = ax_ + dx if dx >= 0 else ax_ + dx - w
            boxes.append(((dx, dy), (x0, ay + dy, x0 + w, ay + dy + h)))
        free = [b for b in boxes if not any(_overlap(b[1], o) for o in placed)]
        offset, box = (free or boxes)[0]
        placed.append(box)
        chosen.append(offset)
    return chosen


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _label_points(fig, ax, labels: list[tuple[str, float, float]]) -> None:
    """Each point's label next to it, moved around the point where it would cover another label."""
    if not labels:
        return
    ax.autoscale_view()
    to_points = 72.0 / fig.dpi
    anchors = [tuple(v * to_points for v in ax.transData.transform((x, y))) for _, x, y in labels]
    sizes = [(0.6 * LABEL_FONT * len(text), LABEL_FONT) for text, _, _ in labels]  # a digit is about 0.6 em wide
    for (text, x, y), (dx, dy) in zip(labels, place_labels(anchors, sizes)):
        ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=LABEL_FONT, color="#555",
                    ha="left" if dx >= 0 else "right")


def _scaling_of(points: list[Point]) -> tuple[Lines, dict[str, list[tuple[Point, float]]]]:
    pts = [p for p in points if p.throughput is not None and p.devices]

    def of(pts):
        # a parallel layout that changes with the device count is another configuration (as compare says)
        return lines_of(pts, lambda p: p.devices, "devices", never=("system", "tp", "pp"), hidden=("devices",))

    # labels and caption from the lines shown: those with two device counts or more
    lines = of([p for line in of(pts).series.values() if len({p.devices for p in line}) > 1 for p in line])
    out = {}
    for name, line in lines.series.items():
        if len({p.devices for p in line}) < 2:
            continue
        base = line[0]
        out[name] = [(p, base.throughput * p.devices / base.devices) for p in line]
    return lines, out


def scaling_lines(points: list[Point]) -> dict[str, list[tuple[int, float, float]]]:
    """Per line: (devices, throughput, parallel efficiency against the line's smallest device count)."""
    return {name: [(p.devices, p.throughput, p.throughput / ideal) for p, ideal in rows]
            for name, rows in _scaling_of(points)[1].items()}


def _scaling(workload: str, points: list[Point]):
    lines, rows_of = _scaling_of(points)
    if not rows_of:
        return None
    unit = _unit(points)
    fig, (left, right) = _figure(13, Lines(series=dict.fromkeys(rows_of)), ncols=2)
    for name, rows in rows_of.items():
        devices = [p.devices for p, _ in rows]
        ys = [p.throughput for p, _ in rows]
        err = list(zip(*(_spread(p, throughput_of, y) for (p, _), y in zip(rows, ys))))
        shown_err = err if any(any(e) for e in err) else None
        drawn = left.errorbar(devices, ys, yerr=shown_err, marker="o", capsize=3, label=name)
        left.plot(devices, [ideal for _, ideal in rows], linestyle=":", color=drawn.lines[0].get_color())
        eff = [100 * p.throughput / ideal for p, ideal in rows]
        right.errorbar(devices, eff, yerr=None if shown_err is None else
                       [[100 * e / ideal for e, (_, ideal) in zip(side, rows)] for side in err],
                       marker="o", capsize=3, label=name)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        _ticks(ax, [p.devices for rows in rows_of.values() for p, _ in rows])
        ax.grid(True, alpha=0.3)
    left.set(xlabel="devices", ylabel=f"{unit}/s")
    _title(left, f"{_plain(workload)}: throughput (dotted: ideal)")
    right.set(xlabel="devices", ylabel="parallel efficiency %")
    _title(right, "parallel efficiency vs the smallest count", 45)
    right.axhline(100, color="grey", linestyle=":")
    right.set_ylim(bottom=0)
    _thousands(left.yaxis)
    _finish(fig, [left], Lines(caption=lines.caption))
    return fig


def power_figure(record: dict):
    """A run's power per device over time, phases shaded; None when the run has no readable time series.

    One line per device (host and UUID: four identical GPUs are four lines), from every node's series;
    each node's clock starts at its own monitor's start. Phases are shaded from the first node's series.
    """
    energy = energy_of(record)
    per_node = [read_timeseries(path) for path in energy.timeseries if path.is_file()]
    per_node = [rows for rows in per_node if rows]
    if not per_node:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    seen = set()
    for phase, lo, hi in phase_spans(per_node[0]):
        if phase:
            ax.axvspan(lo, hi, color=PHASE_COLOURS.get(phase, "#e0e0e0"), alpha=0.5,
                       label=None if phase in seen else f"phase: {phase}")
            seen.add(phase)
    for name, series in sorted(device_lines([r for rows in per_node for r in rows]).items()):
        ax.plot([r["time_s"] for r in series], [r["power_w"] for r in series], label=name, linewidth=1.2)
    total = (f", {energy.total_wh:.3g} Wh in {energy.window or 'the run'} ({energy.source})"
             if energy.total_wh is not None else "")
    ax.set(xlabel="time (s)", ylabel="power (W)",
           title=_plain(f"{record.get('workload')} on {(record.get('system') or {}).get('tag')}") + "\n"
           + _plain(f"{record.get('run_id')}{total}"))
    ax.title.set_fontsize(9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def device_lines(rows: list[dict]) -> dict[str, list[dict]]:
    """Rows grouped by device (host and UUID), in time order, labelled by host, name and short UUID."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["host"], r.get("uuid") or r["device"]), []).append(r)
    lines = {}
    for (host, uuid), series in groups.items():
        name = series[0]["device"]
        label = _plain(f"{host} {name if uuid == name else f'{name} {uuid[:12]}'}".strip())
        if label in lines:  # two UUIDs alike in their first characters
            label = _plain(f"{host} {name} {uuid}".strip())
        lines[label] = sorted(series, key=lambda r: r["time_s"])
    return lines


def phase_spans(rows: list[dict]) -> list[tuple[str, float, float]]:
    """(phase, start, end) in time order; a phase lasts until the next one starts."""
    marks: list[tuple[float, str]] = []
    for t, phase in sorted({(r["time_s"], r["phase"]) for r in rows}):
        if not marks or marks[-1][1] != phase:
            marks.append((t, phase))
    end = max(r["time_s"] for r in rows)
    return [(phase, t, marks[i + 1][0] if i + 1 < len(marks) else end) for i, (t, phase) in enumerate(marks)]


def figures(kind: str, by_workload: dict[str, list[Point]], run: str | None = None) -> list[tuple[str, object]]:
    """(file stem, figure) for each workload (or run, for power) that has data for this kind."""
    if kind not in KINDS:
        raise BadInput(f"unknown plot kind '{shown(kind)}'; {did_you_mean(kind, KINDS)}choose one of: "
                       f"{', '.join(KINDS)}")
    out = []
    if kind == "power":
        records = [r for pts in by_workload.values() for p in pts for r in p.records]
        if run:
            records = [r for r in records if str(r.get("run_id", "")).startswith(run) or r.get("id") == run]
            if not records:
                raise BadInput(f"--run {shown(run)}: no selected run has this run_id (or config id)")
        for r in records:
            fig = power_figure(r)
            if fig is not None:
                out.append((f"power-{r.get('run_id')}", fig))
        if not out:
            raise BadInput("no selected run has a power time series (metrics.energy.nodes[].timeseries); "
                           "power is recorded only when a power monitor ran")
        return out
    make = {"throughput": lambda w, p: _vs_batch(w, p, "throughput"),
            "efficiency": lambda w, p: _vs_batch(w, p, "units_per_wh"),
            "pareto": _pareto, "scaling": _scaling}[kind]
    for workload, points in by_workload.items():
        fig = make(workload, points)
        if fig is not None:
            out.append((f"{kind}-{workload}", fig))
    if not out:
        need = {"throughput": "successful runs", "efficiency": "runs with energy measurements (units per Wh)",
                "pareto": "runs with both throughput and energy measurements",
                "scaling": "a configuration run at two or more device counts"}[kind]
        raise BadInput(f"nothing to plot for '{kind}': it needs {need}, and the selected runs have none")
    return out


def save(fig, out_dir: Path, stem: str) -> list[Path]:
    """PNG and SVG of a figure in `out_dir` (the stem holds names from records: made safe); the figure is closed."""
    stem = safe_name(stem)
    paths = [out_dir / f"{stem}.png", out_dir / f"{stem}.svg"]
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fig.savefig(paths[0], dpi=110)
        fig.savefig(paths[1])
    except OSError as exc:
        raise BadInput(f"--out {out_dir}: cannot write the plots there ({exc.strerror or exc}); "
                       "pass --out with a folder") from None
    finally:
        _pyplot().close(fig)
    return paths


def png_bytes(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    _pyplot().close(fig)
    return buffer.getvalue()
