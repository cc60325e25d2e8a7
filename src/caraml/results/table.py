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
from dataclasses import dataclass, field, replace

from caraml.errors import printable

FORMATS = ("table", "csv", "json", "markdown")
RIGHT = ("int", "num", "pct", "gib", "ratio", "pm")


@dataclass
class Table:
    title: str
    keys: list[str]  # column keys (JSON field names)
    headers: list[str]  # CARAML's names, as CSV and JSON keep them
    styles: list[str]
    rows: list[list] = field(default_factory=list)
    extras: list[dict] = field(default_factory=list)  # per-row fields only JSON shows (workload, run ids)
    # headers with their convention, e.g. 'Timesteps/s (steady)': the text table, Markdown and HTML show these
    # (CSV and JSON keep CARAML's bare headers)
    text_headers: list[str] | None = None
    # Only the text table and HTML show these (CSV, JSON and Markdown keep exact values):
    marks: dict = field(default_factory=dict)  # (row index, column key) -> a marker after the value, e.g. '!'
    shows: dict = field(default_factory=dict)  # (row index, column key) -> the value shown instead of the row's
    notes: list[str] = field(default_factory=list)  # footnote lines under the table
    width: int | None = None  # the width the text table was fitted to (fit); its footnotes wrap there
    wrap: bool = False  # headers wider than their column's values break onto two lines (fit sets it)
    compact: bool = False  # no padding around the cells, for a table whose identity columns are wide (fit sets it)
    max_widths: dict = field(default_factory=dict)  # column key -> the most characters a line of it takes (fit)


MIN_WIDTH = 40  # a COLUMNS below this is a mistake, not a width to fit


def terminal_width() -> int | None:
    """The width text tables fit to: COLUMNS wherever it is set (a terminal, a file, a pipe), else the terminal's
    size when stdout is a terminal; None (every default column) for a file or a pipe without COLUMNS, so that what
    scripts read is stable."""
    import os
    import shutil
    import sys

    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) >= MIN_WIDTH:
        return int(columns)
    isatty = getattr(sys.stdout, "isatty", None)
    return shutil.get_terminal_size().columns if isatty and isatty() else None


def text_width(table: Table) -> int:
    """The width of the rich table drawn for `table`: each column its widest line plus padding and a border."""
    widths = _column_widths(table)
    return max(sum(widths) + (1 if table.compact else 3) * len(widths) + 1, len(printable(table.title)))


def _column_widths(table: Table) -> list[int]:
    cells = _text_cells(table)
    out = []
    for i, head in enumerate(text_heads(table)):
        widest = max([len(line) for line in head.split("\n")] + [len(printable(row[i])) for row in cells])
        limit = table.max_widths.get(table.keys[i])
        out.append(min(widest, limit) if limit else widest)
    return out


def text_heads(table: Table) -> list[str]:
    """The headers of the text table: with their convention, on two lines where `wrap` and a header is wider than
    its column's values."""
    heads = [printable(h) for h in table.text_headers or table.headers]
    if not table.wrap:
        return heads
    cells = _text_cells(table)
    widest = [max([0] + [len(printable(row[i])) for row in cells]) for i in range(len(heads))]
    return [two_lines(h) if len(h) > w else h for h, w in zip(heads, widest)]


_BREAK = re.compile(r" |(?<=/)|(?<=[a-z])(?=[A-Z(])|(?<=_)")


def two_lines(header: str) -> str:
    """`header` broken onto two lines where the longer line is shortest: at a space, else after a slash or an
    underscore or between a lowercase and an uppercase letter ('GlobalBatchSize' -> 'Global' / 'BatchSize')."""
    best, score = header, len(header)
    for m in _BREAK.finditer(header):
        first, second = header[:m.start()].rstrip(), header[m.end():].lstrip()
        # a break at a space reads best: another costs two characters more
        mine = max(len(first), len(second)) + (0 if header[m.start():m.end()] == " " else 2)
        if first and second and mine < score:
            best, score = f"{first}\n{second}", mine
    return best


def fit(table: Table, width: int, keep=(), config=(), prefer=(), hint="--wide or --columns shows them") -> Table:
    """`table` narrowed to `width` columns of text: first the configuration columns (`config`) whose value is the
    same in every row leave (a footnote lists them with their value), then long headers break onto two lines,
    then columns leave from the right, those in `prefer` last; `keep` stay (a footnote names those left out); last,
    long text columns wrap their lines. Footnotes wrap at `width`."""
    table = replace(table, width=width)
    if text_width(table) <= width:
        return table
    names_of = dict(zip(table.keys, table.text_headers or table.headers))
    full = table

    def same(k):
        i = full.keys.index(k)
        return k in config and len({json.dumps(r[i], default=str) for r in full.rows}) == 1

    def with_value(k):
        i = full.keys.index(k)
        return f"{names_of[k]} {format_value(full.rows[0][i], full.styles[i])}" if full.rows else names_of[k]

    notes = []
    if len(table.rows) > 1:
        constant = [k for k in table.keys if k not in keep and same(k)]
        if constant:
            table = _without(table, constant)
            notes.append("same in every row: " + ", ".join(map(with_value, constant)))
    wrapped = replace(table, wrap=True)
    table, hidden = _drop(wrapped, width, keep, prefer)
    table = squeeze(table, width)
    if text_width(table) > width:  # what tells the rows apart is too wide even so: cells without padding
        table, hidden = _drop(replace(wrapped, compact=True), width, keep, prefer)
        table = squeeze(table, width)
    order = full.keys
    if hidden:
        notes.append(f"not shown, to fit {width} columns: " + ", ".join(
            with_value(k) if same(k) else names_of[k] for k in order if k in hidden) + f" ({hint})")
    return replace(table, notes=notes + table.notes)


def _drop(table: Table, width: int, keep, prefer) -> tuple[Table, list[str]]:
    """`table` without columns from the right, those in `prefer` last (the first of them last of all), until it
    fits `width`; `keep` stay."""
    hidden, prefer = [], tuple(prefer)
    order = list(table.keys)
    for k in [k for k in reversed(order) if k not in prefer] + [k for k in prefer[::-1] if k in order]:
        if text_width(table) <= width:
            break
        if k not in keep:
            hidden.append(k)
            table = _without(table, [k])
    return table, hidden


def squeeze(table: Table, width: int, narrowest: int = 10) -> Table:
    """`table` with its widest text columns wrapping their lines until it fits `width` (none below `narrowest`)."""
    table = replace(table, max_widths=dict(table.max_widths))
    while text_width(table) > width:
        widths = _column_widths(table)
        text = [i for i, s in enumerate(table.styles) if s not in RIGHT and widths[i] > narrowest]
        if not text:
            break
        i = max(text, key=lambda j: widths[j])
        table.max_widths[table.keys[i]] = max(narrowest, widths[i] - (text_width(table) - width))
    return table


def _head(table: Table, key: str) -> str:
    return (table.text_headers or table.headers)[table.keys.index(key)]


def _style(table: Table, key: str) -> str:
    return table.styles[table.keys.index(key)]


def _without(table: Table, keys) -> Table:
    idx = [i for i, k in enumerate(table.keys) if k not in keys]

    def pick(items):
        return [items[i] for i in idx] if items is not None else None

    return replace(table, keys=pick(table.keys), headers=pick(table.headers), styles=pick(table.styles),
                   text_headers=pick(table.text_headers), rows=[pick(r) for r in table.rows],
                   marks={k: v for k, v in table.marks.items() if k[1] not in keys},
                   shows={k: v for k, v in table.shows.items() if k[1] not in keys})


def people_headers(table: Table) -> list[str]:
    """The headers people read, in the text table, Markdown and HTML alike: with their convention
    ('Images/s (steady)', 'Images/second (CARAML)'); CSV and JSON keep CARAML's bare names."""
    return table.text_headers or table.headers


def _text_cells(table: Table) -> list[list[str]]:
    cells = shown(table)
    for (i, key), value in table.shows.items():
        if key in table.keys and i < len(cells):
            j = table.keys.index(key)
            cells[i][j] = format_value(value, table.styles[j])
    for (i, key), mark in table.marks.items():
        if key in table.keys and i < len(cells):
            j = table.keys.index(key)
            cells[i][j] = f"{cells[i][j]} {mark}"
    return cells


def format_value(value, style: str = "text") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    if style == "pct" and isinstance(value, (int, float)):
        return f"{100 * value:.1f}%"
    if style == "pm" and isinstance(value, (int, float)):  # a relative half-width: ±1.2 %
        return f"±{100 * value:.1f} %"
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
        heads = " | ".join(map(markdown_text, people_headers(table)))
        lines = [f"### {markdown_text(table.title)}", "", f"| {heads} |", "| " + " | ".join(align) + " |"]
        lines += ["| " + " | ".join(map(markdown_text, row)) + " |" for row in cells]
        return "\n".join(lines) + "\n"
    from rich.box import SQUARE
    from rich.console import Console
    from rich.table import Table as RichTable
    from rich.text import Text

    cells = _text_cells(table)
    rich_table = RichTable(title=Text(printable(table.title)), title_justify="left", show_lines=False,
                           **({"padding": 0, "box": SQUARE} if table.compact else {}))
    for key, header, style in zip(table.keys, text_heads(table), table.styles):
        rich_table.add_column(Text(header), justify="right" if style in RIGHT else "left", overflow="fold",
                              max_width=table.max_widths.get(key))
    for row in cells:
        rich_table.add_row(*(Text(printable(c)) for c in row))
    buffer = io.StringIO()
    Console(file=buffer, width=10_000, color_system=None).print(rich_table)
    import textwrap

    notes = [printable(n) for n in table.notes]
    if table.width:
        notes = [line for n in notes
                 for line in textwrap.wrap(n, table.width, subsequent_indent="  ", break_on_hyphens=False)]
    return buffer.getvalue() + "".join(n + "\n" for n in notes)


def _csv(value):
    return printable(value, keep="\n\t") if isinstance(value, str) else value


_MARKDOWN = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\\": "\\\\", "|": "\\|", "](": "]\\(", "\r\n": "<br>",
             "\n": "<br>"}
_MARKDOWN_RE = re.compile("|".join(map(re.escape, sorted(_MARKDOWN, key=len, reverse=True))))


def markdown_text(text: str) -> str:
    """`text` as one Markdown table cell that shows it: no HTML, no link, no cell or row of its own."""
    return printable(_MARKDOWN_RE.sub(lambda m: _MARKDOWN[m.group()], text))


def html_table(table: Table, css_class: str = "data") -> str:
    """The table as an HTML element (text escaped), for the report; its marks after their values and its footnotes
    under it, as in the text table."""
    from html import escape

    head = "".join(f"<th>{escape(h)}</th>" for h in people_headers(table))
    body = []
    for row in _text_cells(table):
        cells = "".join(f'<td class="{"num" if s in RIGHT else "txt"}">{escape(v)}</td>'
                        for v, s in zip(row, table.styles))
        body.append(f"<tr>{cells}</tr>")
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in table.notes)
    return (f'<table class="{css_class}"><caption>{escape(table.title)}</caption><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>{notes}")
