"""`caraml result`, `compare`, `plot` and `report`: argument wiring and printing; the work is in the modules."""

from __future__ import annotations

import json
import sys

from caraml.errors import BadInput, did_you_mean, printable, shown


def add_parsers(sub, results_default: str) -> None:
    result = sub.add_parser("result", help="tables of recorded runs, one per workload",
                            description="Tables of recorded runs, one per workload; repeats of a configuration "
                                        "are one row (median, with their spread).")
    _selection_args(result, results_default)
    result.add_argument("--columns", action="append", metavar="a,b,...",
                        help="show these columns (keys or headers, e.g. system,throughput,units_per_wh)")
    result.add_argument("--wide", action="store_true",
                        help="every default column; without it a table on a terminal fits its width (columns "
                             "left out are named under it); files and pipes always get every default column")
    result.add_argument("--format", default="table", choices=("table", "csv", "json", "markdown", "rows-json"),
                        help="json: the records themselves; rows-json: the table rows as JSON objects. Text from "
                             "records is shown as text in every format: control characters (an escape code) as "
                             "escapes such as \\x1b (csv keeps line breaks, quoted); markdown cells escape HTML, "
                             "pipes and links")
    result.set_defaults(func=_result)

    compare = sub.add_parser("compare", help="the same configurations side by side across systems, precisions, ...",
                             description="One row per configuration that the compared groups share: each group's "
                                         "throughput and units per Wh, and the ratios to the baseline group. "
                                         "Configurations only one group ran are listed apart. --by devices (or "
                                         "nodes) is the scaling view: baseline the smallest count, with parallel "
                                         "efficiency. --reference NAME puts your runs of a published reference's "
                                         "configuration beside its systems, with the ratio yours / theirs.")
    compare.add_argument("--by", help="system, devices, nodes, or any parameter, e.g. precision")
    compare.add_argument("--reference", metavar="NAME",
                         help="a published reference instead of --by: " + ", ".join(_reference_names()))
    compare.add_argument("--baseline", help="the group the others are divided by (default: the first, e.g. the "
                                            "smallest device count)")
    _selection_args(compare, results_default)
    compare.add_argument("--format", default="table", choices=("table", "csv", "json", "markdown"))
    compare.add_argument("--wide", action="store_true", help="every column; without it a table on a terminal fits "
                                                             "its width")
    compare.set_defaults(func=_compare)

    plot = sub.add_parser("plot", help="plots (PNG and SVG): throughput, efficiency, pareto, scaling, power",
                          description="throughput: throughput vs global batch size per system; efficiency: units "
                                      "per Wh vs global batch size; pareto: throughput vs units per Wh with the "
                                      "Pareto front marked; scaling: throughput and parallel efficiency vs devices; "
                                      "power: a run's power time series with its phases shaded.")
    plot.add_argument("kind", help="throughput, efficiency, pareto, scaling or power")
    _selection_args(plot, results_default)
    plot.add_argument("--run", help="power: only this run (run_id or its prefix, or a config id)")
    plot.add_argument("--out", default="caraml-plots", help="folder for the images (default: %(default)s)")
    plot.set_defaults(func=_plot)

    report = sub.add_parser("report", help="one self-contained HTML file: tables, comparisons, plots, environments")
    _selection_args(report, results_default)
    report.add_argument("--out", default="report.html", help="the HTML file to write (default: %(default)s)")
    report.set_defaults(func=_report)


def _result(args) -> int:
    from caraml.results.select import result_tables, select
    from caraml.results.store import Store, dumps
    from caraml.results.table import render_tables, terminal_width

    selection = select(args.results, args.workload, args.where)
    Store(args.results).sync_index()
    if args.format == "json":  # the records themselves, for other tools
        records = [{k: v for k, v in r.items() if not k.startswith("_")} for p in selection.points for r in p.records]
        print(dumps(records, indent=1))
        return 0
    fmt = "json" if args.format == "rows-json" else args.format
    width = terminal_width() if fmt == "table" and not args.wide else None
    sys.stdout.write(render_tables(result_tables(selection.points, _names(args.columns), width), fmt))
    return 0


def _compare(args) -> int:
    from caraml.results.compare import as_json, compare, fit_text
    from caraml.results.select import select
    from caraml.results.table import render_tables, terminal_width

    if args.reference is not None:
        return _compare_reference(args)
    if not args.by:
        raise BadInput("compare needs --by FIELD (e.g. --by system) or --reference NAME (e.g. --reference "
                       + (_reference_names() or ["NAME"])[0] + ")")
    selection = select(args.results, args.workload, args.where)
    done, problems = [], []
    for workload, points in selection.by_workload.items():
        try:
            done.append(compare(workload, points, args.by, args.baseline))
        except BadInput as exc:
            problems.append(exc)
    if not done:
        raise problems[0]
    for exc in problems:  # other workloads were compared; say why these were not
        print(printable(f"caraml: not compared: {exc}"), file=sys.stderr)
    if args.format == "json":
        print(json.dumps([as_json(c) for c in done], indent=1, default=str))
    else:
        width = terminal_width() if args.format == "table" and not args.wide else None
        sys.stdout.write(render_tables([t for c in done for t in fit_text(c, width)], args.format))
    return 0


def _compare_reference(args) -> int:
    from caraml.results import reference, reference_view
    from caraml.results.select import select
    from caraml.results.table import fit, render_tables, terminal_width

    if args.by or args.baseline:
        raise BadInput("--reference compares with a published reference's systems; leave out --by and --baseline")
    ref = reference.load(args.reference)  # an unknown name is refused before the records are read
    if args.workload and args.workload != ref.workload:
        raise BadInput(f"--reference {ref.name} is of workload {ref.workload}, not --workload {shown(args.workload)}")
    cmp = reference.compare_reference(ref, select(args.results, None, args.where).points, args.results)
    if args.format == "json":
        print(json.dumps(reference_view.as_json(cmp), indent=1, default=str))
        return 0
    table = reference_view.table(cmp)
    width = terminal_width() if args.format == "table" and not args.wide else None
    if width:
        table = fit(table, width, keep={k for k in table.keys if ":" in k or k == "yours"}, config=set(table.keys),
                    hint="--wide shows them")
    sys.stdout.write(render_tables([table], args.format))
    return 0


def _reference_names() -> list[str]:
    from caraml.results.reference import names

    return names()


def _plot(args) -> int:
    from pathlib import Path

    from caraml.results.plots import KINDS, figures, save
    from caraml.results.select import select

    if args.kind not in KINDS:  # before loading anything
        raise BadInput(f"unknown plot kind '{shown(args.kind)}'; {did_you_mean(args.kind, KINDS)}choose one of: "
                       f"{', '.join(KINDS)}")
    selection = select(args.results, args.workload, args.where)
    for stem, fig in figures(args.kind, selection.by_workload, args.run):
        for path in save(fig, Path(args.out), stem):
            print(path)
    return 0


def _report(args) -> int:
    from caraml.results.report import write_report

    path = write_report(args.results, args.out, args.workload, args.where)
    print(path)
    return 0


def _names(values: list[str] | None) -> list[str] | None:
    """--columns a,b --columns c -> [a, b, c]"""
    return [n.strip() for v in values or [] for n in v.split(",") if n.strip()] or None


def _selection_args(parser, results_default: str) -> None:
    parser.add_argument("--results", default=results_default, help="results directory (default: %(default)s)")
    parser.add_argument("--workload", help="only this workload")
    parser.add_argument("--where", action="append", metavar="key=value",
                        help="only runs where a column or parameter has this value (repeatable), e.g. system=H100")
