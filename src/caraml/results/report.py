"""One self-contained HTML report: tables, comparisons, plots (PNG embedded as base64) and each run's
environment manifest. No scripts, no external files: it opens in a browser from disk with no server.
"""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from datetime import datetime, timezone
from html import escape
from pathlib import Path

from caraml.errors import BadInput, printable
from caraml.results import plots
from caraml.results.compare import compare
from caraml.results.compare import tables as comparison_tables
from caraml.results.select import Selection, result_table, select
from caraml.results.table import Table, html_table

COMPARE_BY = ("system", "precision", "compile_mode", "devices")
MAX_POWER_PLOTS = 12

CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em 2em; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 2px solid #ccc; padding-bottom: 0.2em; margin-top: 1.6em; }
table.data { border-collapse: collapse; margin: 0.8em 0 1.2em; font-size: 0.85em; }
table.data caption { text-align: left; font-weight: 600; padding: 0.3em 0; }
table.data th, table.data td { border: 1px solid #ccc; padding: 0.25em 0.5em; }
table.data th { background: #eef2f7; }
table.data td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.data tbody tr:nth-child(even) { background: #fafafa; }
div.wide { overflow-x: auto; max-width: 100%; margin: 0.8em 0 1.2em; }
div.wide table.data { margin: 0; }
table.data th:first-child, table.data td:first-child { position: sticky; left: 0; z-index: 1; background: #fff;
  box-shadow: 1px 0 0 #ccc; }
table.data th:first-child { background: #eef2f7; }
table.data tbody tr:nth-child(even) td:first-child { background: #fafafa; }
figure { display: inline-block; margin: 0.5em 1em 0.5em 0; }
figure img { max-width: 100%; border: 1px solid #ddd; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; font-size: 0.8em; }
.note { color: #8a5a00; } .meta { color: #555; }
"""


HEADLINE = ("throughput", "units_per_wh", "speedup", "energy_ratio", "efficiency")


def _headline_first(table: Table) -> Table:
    """The table with its headline columns (throughput, units per Wh, a comparison's ratios) right after the first
    column: in a wide table they are on screen without scrolling."""
    head = [i for i, k in enumerate(table.keys) if i and k.rpartition(":")[2] in HEADLINE]
    order = [0] + head + [i for i in range(1, len(table.keys)) if i not in head] if table.keys else []
    pick = (lambda xs: [xs[i] for i in order])
    return replace(table, keys=pick(table.keys), headers=pick(table.headers), styles=pick(table.styles),
                   text_headers=pick(table.text_headers) if table.text_headers else None,
                   rows=[pick(r) for r in table.rows])


def _table(table: Table) -> str:
    """A table in a box of its own that scrolls sideways when the table is wider than the page; its first
    column stays in view."""
    return f'<div class="wide">{html_table(_headline_first(table))}</div>'


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode()
    return (f'<figure><img alt="{escape(alt)}" src="data:image/png;base64,{data}">'
            f'<figcaption>{escape(alt)}</figcaption></figure>')


def _section_workload(workload: str, points) -> list[str]:
    parts = [f'<h2 id="{escape(workload)}">{escape(workload)}</h2>', _table(result_table(workload, points))]
    notes: list[str] = []
    for by in COMPARE_BY:
        try:
            cmp = compare(workload, points, by)
        except BadInput:
            continue  # one group only, or the field does not exist: nothing to compare
        if cmp.rows:  # a comparison without a single shared configuration says nothing here
            parts.append(f"<h3>Compared by {escape(by)}</h3>")
            parts += [_table(t) for t in comparison_tables(cmp)]
    for kind in ("throughput", "efficiency", "pareto", "scaling"):
        try:
            for stem, fig in plots.figures(kind, {workload: points}):
                parts.append(_img(plots.png_bytes(fig), stem))
        except BadInput as exc:
            notes.append(str(exc))
    if notes:
        parts.append("<ul class=\"note\">" + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>")
    return parts


def _section_references(selection: Selection) -> list[str]:
    """Each published reference that some of the selected runs share the configuration of: your points over its
    systems', and the table of ratios. A reference no run matches is left out (`caraml compare --reference` says
    why)."""
    from caraml.results import reference, reference_view

    parts = []
    for name in reference.names():
        ref = reference.load(name)
        try:
            cmp = reference.compare_reference(ref, selection.points, str(selection.results))
        except BadInput:
            continue
        parts += [f"<h3>{escape(ref.title)}</h3>",
                  f"<p class=\"meta\">Published: {escape(ref.source_line())}. Your runs of its configuration "
                  f"(preset {escape(ref.preset)}: <code>{escape(ref.run)}</code>), counted as it is counted: "
                  f"{escape(ref.convention['record'])}. × = yours / theirs.</p>",
                  _img(plots.png_bytes(reference_view.figure(cmp)), f"reference-{ref.name}"),
                  _table(reference_view.table(cmp))]
    return (['<h2 id="references">Published references</h2>'] + parts) if parts else []


def _section_power(selection: Selection) -> list[str]:
    records = [r for p in selection.points for r in p.records]
    parts = []
    for r in records:
        if len(parts) >= MAX_POWER_PLOTS:
            break
        fig = plots.power_figure(r)
        if fig is not None:
            parts.append(_img(plots.png_bytes(fig), f"power-{r.get('run_id')}"))
    return (["<h2 id=\"power\">Power over time</h2>"] + parts) if parts else []


def _section_runs(selection: Selection) -> list[str]:
    parts = ['<h2 id="runs">Runs and their environments</h2>']
    for p in selection.points:
        for r in p.records:
            summary = (f"{r.get('run_id')} — {r.get('workload')} on {(r.get('system') or {}).get('tag')}, "
                       f"status {r.get('status')}")
            body = {"params": r.get("params"), "launch": r.get("launch"), "env": r.get("env")}
            if r.get("error"):
                body["error"] = r.get("error")
            parts.append(f"<details class=\"run\"><summary>{escape(summary)}</summary>"
                         f"<pre>{escape(json.dumps(body, indent=1, default=str))}</pre></details>")
    return parts


def build(selection: Selection) -> str:
    n_runs = sum(len(p.records) for p in selection.points)
    systems = sorted({str(p.system) for p in selection.points})
    made = datetime.now(timezone.utc).isoformat(timespec="seconds")
    body = [f"<h1>CARAML results</h1><p class=\"meta\">{n_runs} runs, {len(selection.points)} configurations, "
            f"workloads: {escape(', '.join(selection.by_workload))}; systems: {escape(', '.join(systems))}; "
            f"from {escape(str(selection.results))}; made {made}</p>"]
    if selection.skipped:
        body.append("<p class=\"note\">Record files skipped:</p><ul class=\"note\">"
                    + "".join(f"<li>{escape(s)}</li>" for s in selection.skipped) + "</ul>")
    for workload, points in selection.by_workload.items():
        body += _section_workload(workload, points)
    body += _section_references(selection)
    body += _section_power(selection)
    body += _section_runs(selection)
    # control characters from records (not allowed in HTML, and a NUL or an escape is never meant) as escapes
    return printable("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>CARAML results</title>"
                     f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n", keep="\n\t")


def write_report(results: str, out: str, workload: str | None = None, where: list[str] | None = None) -> Path:
    selection = select(results, workload, where)
    html = build(selection)
    path = Path(out)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(html, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        raise BadInput(f"--out {out}: cannot write the report ({exc.strerror})") from None
    return path
