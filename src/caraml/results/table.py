"""Tables as text: a rich table for people, CSV, JSON or Markdown for other tools.

`Table` holds raw values; formatting happens only when rendering, so CSV and JSON carry exact
numbers and the text table carries readable ones.

Text from records is shown, never acted on: in the text table every character a terminal acts on (ESC, the
other C0 and C1 controls, line breaks) is written as its escape (`\\x1b`, `\\n`) and rich markup is plain
text; in Markdown `& < >` are entities, `\\ |` and a link's `](` are backslash-escaped and a line break is
`<br>`; CSV keeps line breaks and tabs (its quoting holds them) and writes the other control characters as
escapes, so that `cat` of the file cannot drive the terminal either; JSON escapes them itself.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field

from caraml.errors import printable

FORMATS = ("table", "csv", "json", "markdown")
RIGHT = ("int", "num", "pct", "gib", "ratio")


@dataclass
class Table:
    title: str
    keys: list[str]  # column keys (JSON field names)
    headers: list[str]  # what people read
    styles: list[str]
    rows: list[list] = field(default_factory=list)
    extras: list[dict] = field(default_factory=list)  # per-row fields only JSON shows (workload, run ids)


def format_value(value, style: str = "text") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    if style == "pct" and isinstance(value, (int, float)):
        return f"{100 * value:.1f}%"
    if style == "ratio" and isinstance(value, (int, float)):
        return f"{value:.2f}x"
    if style == "gib" and isinstance(value, (int, float)):
        return f"{value:.2f}"
    if isinstance(value, float):
        if value.is_integer() and style == "int":
            return f"{int(value):,}"
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:#.3g}"
    if isinstance(value, int):
        return f"{value:,}" if style in RIGHT else str(value)
    return str(value)


def shown(table: Table) -> list[list[str]]:
    return [[format_value(v, s) for v, s in zip(row, table.styles)] for row in table.rows]


def render_tables(tables: list[Table], fmt: str) -> str:
    if fmt == "json":
        out = []
        for t in tables:
            for i, row in enumerate(t.rows):
                item = dict(t.extras[i]) if i < len(t.extras) else {}
                item.update(zip(t.keys, row))
                out.append(item)
        return json.dumps(out, indent=1, default=str) + "\n"
    parts = [_render_one(t, fmt, titled=len(tables) > 1 or fmt != "csv") for t in tables]
    return ("\n" if fmt != "table" else "").join(parts)


def _render_one(table: Table, fmt: str, titled: bool) -> str:
    if fmt == "csv":
        out = io.StringIO()
        if titled:
            out.write(f"# {printable(table.title)}\n")
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([_csv(h) for h in table.headers])
        writer.writerows([["" if v is None else _csv(v) for v in row] for row in table.rows])
        return out.getvalue()
    cells = shown(table)
    if fmt == "markdown":
        align = ["---:" if s in RIGHT else "---" for s in table.styles]
        lines = [f"### {markdown_text(table.title)}", "", "| " + " | ".join(map(markdown_text, table.headers)) + " |",
                 "| " + " | ".join(align) + " |"]
        lines += ["| " + " | ".join(map(markdown_text, row)) + " |" for row in cells]
        return "\n".join(lines) + "\n"
    from rich.console import Console
    from rich.table import Table as RichTable
    from rich.text import Text

    rich_table = RichTable(title=Text(printable(table.title)), title_justify="left", show_lines=False)
    for header, style in zip(table.headers, table.styles):
        rich_table.add_column(Text(printable(header)), justify="right" if style in RIGHT else "left",
                              overflow="fold")
    for row in cells:
        rich_table.add_row(*(Text(printable(c)) for c in row))
    buffer = io.StringIO()
    Console(file=buffer, width=10_000, color_system=None).print(rich_table)
    return buffer.getvalue()


def _csv(value):
    return printable(value, keep="\n\t") if isinstance(value, str) else value


_MARKDOWN = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\\": "\\\\", "|": "\\|", "](": "]\\(", "\r\n": "<br>",
             "\n": "<br>"}
_MARKDOWN_RE = re.compile("|".join(map(re.escape, sorted(_MARKDOWN, key=len, reverse=True))))


def markdown_text(text: str) -> str:
    """`text` as one Markdown table cell that shows it: no HTML, no link, no cell or row of its own."""
    return printable(_MARKDOWN_RE.sub(lambda m: _MARKDOWN[m.group()], text))


def html_table(table: Table, css_class: str = "data") -> str:
    """The table as an HTML element (text escaped), for the report."""
    from html import escape

    head = "".join(f"<th>{escape(h)}</th>" for h in table.headers)
    body = []
    for row in shown(table):
        cells = "".join(f'<td class="{"num" if s in RIGHT else "txt"}">{escape(v)}</td>'
                        for v, s in zip(row, table.styles))
        body.append(f"<tr>{cells}</tr>")
    return (f'<table class="{css_class}"><caption>{escape(table.title)}</caption><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def render(records: list[dict], fmt: str) -> str:
    """Records as one table per workload (repeats of a configuration collapsed); `caraml run` prints this."""
    from caraml.results.aggregate import group
    from caraml.results.select import result_tables

    return render_tables(result_tables(group(records)), fmt)
