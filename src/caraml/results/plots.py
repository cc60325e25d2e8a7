"""Plots of points (matplotlib, Agg backend, no display needed), one figure per workload.

Kinds:
  throughput  throughput vs global batch size, one line per system (and per other differing setting)
  efficiency  units per Wh vs global batch size, same lines
  pareto      throughput vs units per Wh; the Pareto front (no other point is better in both) is marked
  scaling     throughput and parallel efficiency vs device count, against each line's smallest count
  power       one run's power time series per device, its phases shaded
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from caraml.errors import BadInput, printable, shown
from caraml.paths import safe_name
from caraml.results import columns as cols
from caraml.results.aggregate import Point
from caraml.results.energy import energy_of, read_timeseries

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


def _series(points: list[Point], without: tuple[str, ...]) -> dict[str, list[Point]]:
    """Lines: points grouped by system and every other configuration field that differs between them."""
    cfgs = [p.config(without=without) for p in points]
    varying = [k for k in dict.fromkeys(k for c in cfgs for k in c)
               if k != "system" and len({json.dumps(c.get(k), default=str) for c in cfgs}) > 1]
    lines: dict[str, list[Point]] = {}
    for p, c in zip(points, cfgs):
        name = _plain(" ".join([str(c.get("system"))] + [f"{k}={c.get(k)}" for k in varying]))
        lines.setdefault(name, []).append(p)
    return dict(sorted(lines.items()))


def _unit(points: list[Point]) -> str:
    return _plain((points[0].unit or "units").capitalize())


def _gbs(p: Point):
    return cols.GLOBAL_BATCH.get(p)


def _vs_batch(workload: str, points: list[Point], metric: str):
    plt = _pyplot()
    unit = _unit(points)
    pts = [p for p in points if getattr(p, metric) is not None and _gbs(p)]
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, line in _series(pts, BATCH_KEYS).items():
        line = sorted(line, key=_gbs)
        ax.plot([_gbs(p) for p in line], [getattr(p, metric) for p in line], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("global batch size")
    ax.set_ylabel(f"{unit}/s" if metric == "throughput" else f"{unit}/Wh")
    ax.set_title(f"{_plain(workload)}: {'throughput' if metric == 'throughput' else 'energy efficiency'} vs batch size")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def pareto_front(pairs: list[tuple[float, float]]) -> list[int]:
    """Indices of points no other point beats in both (x, y), larger being better; sorted by x."""
    front = []
    for i, (x, y) in enumerate(pairs):
        dominated = any((x2 >= x and y2 >= y) and (x2 > x or y2 > y) for x2, y2 in pairs)
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: pairs[i][0])


def _pareto(workload: str, points: list[Point]):
    plt = _pyplot()
    pts = [p for p in points if p.throughput is not None and p.units_per_wh is not None]
    if not pts:
        return None
    unit = _unit(pts)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, line in _series(pts, BATCH_KEYS).items():
        ax.scatter([p.units_per_wh for p in line], [p.throughput for p in line], label=name, s=30)
    pairs = [(p.units_per_wh, p.throughput) for p in pts]
    front = pareto_front(pairs)
    ax.plot([pairs[i][0] for i in front], [pairs[i][1] for i in front], color="black", linewidth=1,
            linestyle="--", marker="o", markerfacecolor="none", markersize=11, label="Pareto front")
    ax.set_xlabel(f"{unit}/Wh (energy efficiency)")
    ax.set_ylabel(f"{unit}/s")
    ax.set_title(f"{_plain(workload)}: throughput vs energy efficiency")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def scaling_lines(points: list[Point]) -> dict[str, list[tuple[int, float, float]]]:
    """Per line: (devices, throughput, parallel efficiency against the line's smallest device count)."""
    out = {}
    pts = [p for p in points if p.throughput is not None and p.devices]
    for name, line in _series(pts, ("devices", "nodes")).items():
        counts = sorted({p.devices for p in line})
        if len(counts) < 2:
            continue
        line = sorted(line, key=lambda p: p.devices)
        base = line[0]
        out[name] = [(p.devices, p.throughput, (p.throughput / base.throughput) / (p.devices / base.devices))
                     for p in line]
    return out


def _scaling(workload: str, points: list[Point]):
    lines = scaling_lines(points)
    if not lines:
        return None
    plt = _pyplot()
    unit = _unit(points)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    for name, rows in lines.items():
        devices = [r[0] for r in rows]
        left.plot(devices, [r[1] for r in rows], marker="o", label=name)
        left.plot(devices, [rows[0][1] * d / devices[0] for d in devices], linestyle=":", color="grey")
        right.plot(devices, [100 * r[2] for r in rows], marker="o", label=name)
    left.set_xscale("log", base=2)
    right.set_xscale("log", base=2)
    left.set(xlabel="devices", ylabel=f"{unit}/s", title=f"{_plain(workload)}: throughput (dotted: ideal)")
    right.set(xlabel="devices", ylabel="parallel efficiency %", title="efficiency vs the smallest count")
    right.axhline(100, color="grey", linestyle=":")
    right.set_ylim(bottom=0)
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
    right.legend(fontsize=7)
    fig.tight_layout()
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
        raise BadInput(f"unknown plot kind '{shown(kind)}'; choose one of: {', '.join(KINDS)}")
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
