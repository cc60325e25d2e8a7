"""Listing records as rows: a table for people, CSV, JSON or Markdown for other tools."""

from __future__ import annotations

import csv
import io
import json

FORMATS = ("table", "csv", "json", "markdown")
KEY_PARAMS = ("model", "batch_size", "precision", "compile", "compile_mode", "channels_last", "data")


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)


def rows(records: list[dict]) -> tuple[list[str], list[list]]:
    """Header and raw values: workload, system, devices, key parameters, status, throughput, energy."""
    header = ["workload", "system", "devices", *KEY_PARAMS, "status", "throughput", "unit",
              "step_median_s", "mfu", "energy_wh"]
    body = []
    for r in records:
        m = r.get("metrics") or {}
        p = r.get("params") or {}
        tp = m.get("throughput") or {}
        steps = m.get("step_time_s") or {}
        body.append([r.get("workload"), (r.get("system") or {}).get("tag"),
                     (r.get("launch") or {}).get("world_size"), *[p.get(k) for k in KEY_PARAMS],
                     r.get("status"), tp.get("value"), tp.get("unit"), steps.get("median"), m.get("mfu"),
                     (m.get("energy") or {}).get("total_wh")])
    return header, body


def render(records: list[dict], fmt: str) -> str:
    if fmt == "json":
        return json.dumps([{k: v for k, v in r.items() if not k.startswith("_")} for r in records], indent=1,
                          default=str)
    header, body = rows(records)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(header)
        writer.writerows([["" if v is None else v for v in row] for row in body])
        return out.getvalue()
    shown = [[_fmt(v) for v in row] for row in body]
    if fmt == "markdown":
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in shown]
        return "\n".join(lines) + "\n"
    from rich.console import Console
    from rich.table import Table

    table = Table(show_lines=False)
    for name in header:
        table.add_column(name, justify="right" if name in ("throughput", "devices", "batch_size", "mfu",
                                                           "energy_wh", "step_median_s") else "left",
                         overflow="fold")
    for row in shown:
        table.add_row(*row)
    buffer = io.StringIO()
    Console(file=buffer, width=10_000).print(table)
    return buffer.getvalue()
