"""`caraml row RECORD.json`: one run record as its row of the workload's results table, `key=value` per line.

For tools that read text with regular expressions (JUBE's patterns): every column of the workload's
table (the same keys as `caraml result --columns`), raw numbers, booleans as true/false, nothing after
`=` for a missing value; then the record's status, run id and error.
"""

from __future__ import annotations

import json
from pathlib import Path

from caraml.errors import BadInput, printable


def add_parser(sub) -> None:
    p = sub.add_parser("row", help="print a run record as key=value lines: its row of the results table",
                       description="caraml row RECORD.json: the record (as `caraml run --json` prints it) as one "
                                   "key=value line per column of its workload's results table.")
    p.add_argument("record", help="a file holding the record JSON")
    p.set_defaults(func=row_command)


def read_record(path: str) -> dict:
    """The record in a file that holds it, possibly after other output: the last line that is a JSON record."""
    from caraml.results.store import shape_problem

    file = Path(path)
    try:
        text = file.read_text(errors="replace")
    except OSError as exc:
        raise BadInput(f"record file {path} cannot be read ({exc.strerror}); the run wrote no record there") from None
    for line in reversed(text.strip().splitlines()):
        try:
            record = json.loads(line, parse_constant=lambda _: None)
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(record, dict) and "workload" in record and "status" in record:
            problem = shape_problem(record)
            if problem:
                raise BadInput(f"record file {path} holds a record of another shape: {problem}")
            return record
    if not text.strip():
        raise BadInput(f"record file {path} is empty: the run wrote no record (see its error output or job log)")
    raise BadInput(f"record file {path} holds no run record (a JSON object with 'workload' and 'status')")


def text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return printable(" ".join(str(value).split()))  # one line of text, whatever the value holds


def lines(record: dict) -> list[str]:
    from caraml.results.aggregate import group
    from caraml.results.columns import columns_for
    from caraml.results.select import result_table

    points = group([record])
    workload = str(record["workload"])
    columns = columns_for(workload, points[0].unit)
    table = result_table(workload, points, [c.key for c in columns])
    out = [f"{key}={text(value)}" for key, value in zip(table.keys, table.rows[0])]
    out += [f"workload={text(workload)}", f"run_id={text(record.get('run_id'))}",
            f"error={text(record.get('error'))}"]
    return out


def row_command(args) -> int:
    print("\n".join(lines(read_record(args.record))))
    return 0
