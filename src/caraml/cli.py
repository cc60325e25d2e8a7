"""The `caraml` command. Each subcommand imports what it needs when it runs, so `--help` stays instant."""

from __future__ import annotations

import argparse
import json
import sys

from caraml.errors import BadInput

DEFAULT_RESULTS = "caraml-results"


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2: the contract for bad input
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _run(args) -> int:
    from caraml.params import parse_assignments
    from caraml.runner import RunSpec, execute

    spec = RunSpec(workload=args.workload, params=parse_assignments(args.params), preset=args.preset,
                   system=args.system, results=args.results)
    record = execute(spec)
    from caraml.distributed import launch_env

    if launch_env().is_main:
        if args.json:
            print(json.dumps(record, default=str))
        else:
            _print_summary(record)
    if record["status"] == "interrupted" and not launch_env().is_main:
        # torchrun kills the other ranks when one exits non-zero: let rank 0 finish writing the record
        return 0
    return 0 if record["status"] == "ok" else 1


def _print_summary(record: dict) -> None:
    from caraml.results.table import render

    out = sys.stdout
    print(render([record], "table"), file=out, end="")
    if record.get("error"):
        print(f"caraml: {record['status']}: {record['error']}", file=sys.stderr)
    print(f"caraml: record saved to {record.get('path')}", file=sys.stderr)


def _result(args) -> int:
    from caraml.results.store import Store
    from caraml.results.table import render

    records = Store(args.results).load()
    if args.workload:
        records = [r for r in records if r.get("workload") == args.workload]
    if not records:
        raise BadInput(f"no run records in {args.results}" + (f" for workload {args.workload}" if args.workload
                                                               else "") + "; run `caraml run ...` first")
    sys.stdout.write(render(records, args.format))
    return 0


def _systems(args) -> int:
    from caraml import systems

    if args.tag:
        print(json.dumps(systems.get(args.tag), indent=1))
        return 0
    print(f"{'tag':<9} {'vendor':<9} {'dev/node':>8} {'mem GB':>7} {'bf16 TF':>8}  {'power':<12} accelerator")
    for tag in systems.known_tags():
        p = systems.get(tag)
        bf16 = p.get("peak_tflops", {}).get("bf16")
        print(f"{tag:<9} {p['vendor']:<9} {p['devices_per_node']:>8} {p['memory_per_device_gb']:>7g} "
              f"{bf16 if bf16 is not None else '-':>8}  {','.join(p['power_methods']):<12} {p['accelerator']}")
    return 0


def _env(args) -> int:
    from caraml.measure.env import collect

    print(json.dumps(collect(), indent=1, default=str))
    return 0


def _workloads(args) -> int:
    from caraml import workloads
    from caraml.measure.harness import HARNESS_PARAMS

    for name in workloads.names() if not args.name else [args.name]:
        wl = workloads.get(name)
        print(f"{wl.name}  ({wl.unit}/s) - {wl.description}")
        print(f"  presets: {', '.join(wl.presets)}")
        for p in wl.params + HARNESS_PARAMS:
            choices = f" [{'|'.join(map(str, p.choices))}]" if p.choices else ""
            print(f"  {p.name}={p.default}{choices}  {p.help}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="caraml", description="Benchmarks of AI workloads on accelerators: throughput and energy.")
    parser.add_argument("--version", action="version", version=f"caraml {__import__('caraml').__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="run one benchmark point and record it",
                         description="Run one benchmark point: caraml run WORKLOAD [key=value ...]")
    run.add_argument("workload", help="e.g. image_classification (see `caraml workloads`)")
    run.add_argument("params", nargs="*", metavar="key=value", help="parameters, e.g. batch_size=256 precision=bf16")
    run.add_argument("--preset", help="a named parameter set of the workload, e.g. smoke or default")
    run.add_argument("--system", help="system profile tag (default: detected from the device)")
    run.add_argument("--results", default=DEFAULT_RESULTS, help="results directory (default: %(default)s)")
    run.add_argument("--json", action="store_true", help="print exactly one JSON record on stdout")
    run.set_defaults(func=_run)

    result = sub.add_parser("result", help="list recorded runs")
    result.add_argument("--results", default=DEFAULT_RESULTS, help="results directory (default: %(default)s)")
    result.add_argument("--workload", help="only this workload")
    result.add_argument("--format", default="table", choices=("table", "csv", "json", "markdown"))
    result.set_defaults(func=_result)

    systems = sub.add_parser("systems", help="list system profiles, or show one")
    systems.add_argument("tag", nargs="?", help="show this profile in full")
    systems.set_defaults(func=_systems)

    env = sub.add_parser("env", help="print the environment manifest (versions, devices, driver, host)")
    env.set_defaults(func=_env)

    wls = sub.add_parser("workloads", help="list workloads with their parameters and presets")
    wls.add_argument("name", nargs="?")
    wls.set_defaults(func=_workloads)

    from caraml.campaign.cli import add_parsers as add_campaign_parsers  # sweep, container

    add_campaign_parsers(sub, DEFAULT_RESULTS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BadInput as exc:
        print(f"caraml: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("caraml: interrupted", file=sys.stderr)
        return 130
