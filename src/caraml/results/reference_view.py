"""A reference comparison (caraml.results.reference) as people and tools read it: a table (one row per point of
yours, the reference systems' figures at its global batch and the ratio yours / theirs), JSON, and a plot of your
points over the reference systems' (matplotlib, as the other plots)."""

from __future__ import annotations

import textwrap

from caraml.results import plots
from caraml.results.reference import ReferenceComparison
from caraml.results.table import Table

YOURS = ("#000000", "#e6007e", "#0050b4", "#008c3c", "#8c4600")  # strong colours: your lines stand out


def table(cmp: ReferenceComparison) -> Table:
    ref = cmp.reference
    keys = ["system", "devices", "settings", "global_batch_size", "yours"]
    headers = ["System", "Devices", "Settings", "GlobalBatchSize", f"Yours {ref.unit}"]
    styles = ["text", "int", "text", "int", "num"]
    if not any(r.settings for r in cmp.rows):  # one line of yours per system and device count: no column for it
        del keys[2], headers[2], styles[2]
    for s in ref.systems:
        keys += [f"{s.name}:theirs", f"{s.name}:ratio"]
        headers += [f"{s.name} ({s.devices})", f"×{s.name}"]
        styles += ["num", "ratio"]
    out = Table(title=f"{ref.title}: yours beside the published points, × = yours / theirs", keys=keys,
                headers=headers, styles=styles)
    for row in cmp.rows:
        cells = [row.system, row.devices] + ([row.settings] if "settings" in keys else []) + [row.global_batch,
                                                                                              row.value]
        for s in ref.systems:
            cells += [cmp.theirs(s, row), cmp.ratio(s, row)]
        out.rows.append(cells)
        out.extras.append({"reference": ref.name, "runs": row.runs, "ids": row.ids})
    out.notes = [f"published: {ref.source_line()}; devices of theirs in parentheses",
                 f"convention: {ref.convention['record']}"]
    return out


def as_json(cmp: ReferenceComparison) -> dict:
    ref = cmp.reference
    return {"reference": ref.name, "title": ref.title, "workload": ref.workload, "unit": ref.unit,
            "source": ref.source, "configuration": ref.configuration, "convention": ref.convention,
            "rows": [{"system": r.system, "devices": r.devices, "settings": r.settings,
                      "global_batch_size": r.global_batch, "value": r.value, "runs": r.runs, "ids": r.ids,
                      "references": {s.name: {"devices": s.devices, "value": cmp.theirs(s, r),
                                              "ratio": cmp.ratio(s, r)} for s in ref.systems}}
                     for r in cmp.rows]}


def figure(cmp: ReferenceComparison):
    """Your points (solid, filled) over the reference systems' (dashed, open), figure vs global batch size."""
    ref = cmp.reference
    plt = plots._pyplot()
    fig, ax = plt.subplots(figsize=(10, 4.8), layout="constrained")
    for i, s in enumerate(ref.systems):
        batches = sorted(s.points)
        ax.plot(batches, [s.points[g] for g in batches], linestyle="--", marker="s", markerfacecolor="none",
                color=f"C{i}", alpha=0.6,
                label=f"{s.label} ({s.devices} GPU{'s' if s.devices != 1 else ''}), published")
    lines: dict[str, list] = {}
    for row in cmp.rows:
        if row.global_batch is not None:
            lines.setdefault(row.line, []).append(row)
    for i, (name, rows) in enumerate(lines.items()):
        ax.plot([r.global_batch for r in rows], [r.value for r in rows], linestyle="-", linewidth=2.5, marker="o",
                markersize=7, color=YOURS[i % len(YOURS)], label=f"yours: {plots._plain(name)}", zorder=3)
    batches = sorted({g for s in ref.systems for g in s.points} | {r.global_batch for r in cmp.rows
                                                                   if r.global_batch})
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches, [str(g) for g in batches])
    ax.minorticks_off()
    ax.set_xlabel("global batch size")
    ax.set_ylabel(ref.unit)
    ax.set_ylim(bottom=0)
    ax.set_title("\n".join(textwrap.wrap(f"{ref.title}: yours over the published points", 70)))
    ax.grid(True, alpha=0.3)
    fig.legend(loc="outside right upper", fontsize=8)
    fig.supxlabel("\n".join(textwrap.wrap(f"published: {ref.source_line()}. Counted by {ref.convention['record']}",
                                          plots.CAPTION_WIDTH)), fontsize=8, x=0.0, ha="left", color="#444")
    return fig
