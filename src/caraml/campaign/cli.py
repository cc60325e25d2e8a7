"""`caraml sweep` and `caraml container`: argument wiring and printing; the work is in the modules."""

from __future__ import annotations

import json
import sys

from caraml.errors import BadInput


def add_parsers(sub, results_default: str) -> None:
    sweep = sub.add_parser("sweep", help="expand a suite into points and run them here or under SLURM",
                           description="caraml sweep SUITE [key=value ...] [--tag T ...] [--system TAG] "
                                       "[--executor local|slurm] [--dry-run] [--resume]; caraml sweep --continue")
    sweep.add_argument("suite", nargs="?", help="a shipped suite (see --list) or a suite file (YAML)")
    sweep.add_argument("overrides", nargs="*", metavar="key=value",
                       help="replace a suite value (a comma list is a sweep), e.g. measure_steps=5")
    sweep.add_argument("--tag", action="append", default=[], help="activate a tag (repeatable), e.g. --tag bf16")
    sweep.add_argument("--system", help="system profile tag of the machines that run the points")
    sweep.add_argument("--executor", choices=("local", "slurm"), default="local")
    sweep.add_argument("--dry-run", action="store_true", help="print the points (and write SLURM scripts); run nothing")
    sweep.add_argument("--json", action="store_true", help="with --dry-run: one JSON array of the points")
    sweep.add_argument("--resume", action="store_true", help="skip points whose record is ok")
    sweep.add_argument("--continue", dest="collect", action="store_true",
                       help="collect the records of submitted SLURM jobs; report what is still queued")
    sweep.add_argument("--list", action="store_true", help="list the shipped suites")
    sweep.add_argument("--max-points", type=_positive, default=10_000, metavar="N",  # expand.MAX_POINTS
                       help="refuse a suite that expands to more points than this (default: %(default)s)")
    sweep.add_argument("--python", help="interpreter the points run with (default: this one)")
    sweep.add_argument("--results", default=results_default, help="results directory (default: %(default)s)")
    sweep.set_defaults(func=sweep_command)

    cont = sub.add_parser("container", help="Apptainer images of the system profiles")
    cont_sub = cont.add_subparsers(dest="action", required=True, parser_class=type(cont))
    pull = cont_sub.add_parser("pull", help="apptainer pull the image the system profile names")
    pull.add_argument("--system", required=True, help="system profile tag")
    pull.add_argument("--print", action="store_true", help="print the command instead of running it")
    pull.set_defaults(func=container_command)


def _positive(text: str) -> int:
    import argparse

    if not (text.isascii() and text.isdigit() and int(text) > 0):
        raise argparse.ArgumentTypeError(f"'{text[:50]}' is not a whole number above 0")
    return int(text)


def sweep_command(args) -> int:
    from caraml.campaign import suite as suite_mod, sweep
    from caraml.params import parse_assignments

    if args.list:
        for name, path in sorted(suite_mod.shipped().items()):
            s = suite_mod.load(str(path))
            print(f"{name:<22} {s.workload:<22} tags: {', '.join(sorted(s.tags))}")
            print(f"  {' '.join(s.description.split())}")
        return 0
    if args.collect:
        return _report(sweep.collect(args.results))
    if not args.suite:
        raise BadInput("name a suite (caraml sweep --list shows the shipped ones) or use --continue")
    if args.json and not args.dry_run:
        raise BadInput("--json goes with --dry-run (a real sweep saves records; see `caraml result`)")
    plan = sweep.plan(args.suite, args.tag, args.system, parse_assignments(args.overrides),
                      need_system=args.executor == "slurm", max_points=args.max_points)
    if args.dry_run:
        if args.executor == "slurm":
            scripts = sweep.write_scripts(plan, args.results, args.python)
        if args.json:
            print(json.dumps([p.as_json() for p in plan.points], default=str))
        else:
            for i, p in enumerate(plan.points, 1):
                print(f"{i:>4} {p.id}  " + " ".join(f"{k}={v}" for k, v in p.shown.items()))
            print(f"caraml: {len(plan.points)} points of suite {plan.suite.name} on {plan.system}"
                  + (f" with tags {', '.join(plan.tags)}" if plan.tags else ""), file=sys.stderr)
        if args.executor == "slurm":
            print(f"caraml: {len(scripts)} job scripts written to {scripts[0][1].parent}", file=sys.stderr)
        return 0
    if args.executor == "slurm":
        counts = sweep.submit(plan, args.results, args.resume, args.python)
        print(f"caraml: {counts['submitted']} jobs submitted, {counts['skipped']} points skipped; "
              f"collect them with `caraml sweep --continue --results {args.results}`", file=sys.stderr)
        return 0
    try:
        counts = sweep.run_local(plan, args.results, args.resume, args.python)
    except sweep.SweepInterrupted as stop:
        done = ", ".join(f"{n} {k}" for k, n in sorted(stop.counts.items())) or "no points"
        print(f"caraml: sweep interrupted: {done}; {stop.left} points not run "
              f"(rerun with --resume to skip the ok ones)", file=sys.stderr)
        return 130
    print("caraml: sweep done: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())), file=sys.stderr)
    return 0 if set(counts) <= {"ok", "skipped"} else 1


def _report(report: dict) -> int:
    for job, status in report["collected"].items():
        print(f"job {job}: {status}")
    for job, where in report["queued"].items():
        print(f"job {job}: still {where}")
    statuses = list(report["all"].values())
    summary = ", ".join(f"{statuses.count(s)} {s}" for s in sorted(set(statuses)))
    print(f"caraml: {len(statuses)} jobs: {summary}", file=sys.stderr)
    return 0


def container_command(args) -> int:
    import shutil
    import subprocess
    from pathlib import Path

    from caraml import systems
    from caraml.campaign import container

    cmd = container.pull_command(systems.get(args.system))
    if args.print:
        print(" ".join(__import__("shlex").quote(w) for w in cmd))
        return 0
    if shutil.which("apptainer") is None:
        raise BadInput("apptainer is not on PATH; install Apptainer (or load its module) to pull "
                       f"{cmd[-1]}, or use --print to see the command")
    Path(cmd[2]).parent.mkdir(parents=True, exist_ok=True)
    return subprocess.run(cmd).returncode
