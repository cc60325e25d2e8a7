"""`caraml launch`: one point of a suite, fixed by key=value values, as a launch line, a SLURM job script,
or a description. This is what an outside orchestrator (the JUBE configurations in jube/) asks for, so
the system specifics (devices per node, partition, container, rendezvous) come from the system profile
and the suite's derived values, rendered by the same code as `caraml sweep`.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from caraml.campaign import launch, slurm, sweep
from caraml.campaign.expand import Point
from caraml.errors import BadInput


def add_parser(sub, results_default: str) -> None:
    p = sub.add_parser(
        "launch", help="print how one point of a suite runs: a launch line, a SLURM job script, or the point",
        description="caraml launch SUITE [key=value ...] --system TAG [--tag T ...] [--script|--show]. The values "
                    "must fix exactly one point of the suite (values not given keep the suite's). Without "
                    "--script or --show: the command line that runs the point on this machine and prints its "
                    "record as JSON.")
    p.add_argument("suite", help="a shipped suite (caraml sweep --list) or a suite file (YAML)")
    p.add_argument("params", nargs="*", metavar="key=value", help="parameters and suite variables of the point")
    p.add_argument("--system", default="auto", help="system profile tag, or auto to detect this machine's "
                                                    "(default: %(default)s)")
    p.add_argument("--tag", action="append", default=[], help="activate a suite tag (repeatable), e.g. --tag ddp")
    p.add_argument("--preset", help="use this workload preset instead of the suite's, e.g. smoke")
    p.add_argument("--results", default=results_default, help="results directory the run saves its record in "
                                                             "(default: %(default)s)")
    p.add_argument("--python", help="interpreter the point runs with (default: this one)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--script", action="store_true", help="print the SLURM batch script of the point")
    what.add_argument("--show", action="store_true", help="print the point as JSON (parameters, launch, id)")
    p.add_argument("--point-file", help="also write the point as JSON (as --show prints it) to this file")
    p.add_argument("--record", help="with --script: the job writes the run record (JSON) to this file")
    p.add_argument("--done-file", help="with --script: the job creates this file when it ends, however it ends")
    p.add_argument("--log", help="with --script: the job's output file (default: caraml-<id>-%%j.out here)")
    p.set_defaults(func=launch_command)


def one_point(suite: str, overrides: dict[str, str], system: str, tags: list[str], preset: str | None) -> Point:
    """The single point the values select; a clear error naming what still varies otherwise."""
    plan = sweep.plan(suite, tags, None if system == "auto" else system, overrides, preset=preset)
    if len(plan.points) == 1:
        return plan.points[0]
    varying = {}
    derived = set(plan.suite.entries["derived"])  # these follow from the others
    for p in plan.points:
        for key, value in p.shown.items():
            if key in derived:
                continue
            varying.setdefault(key, [])
            if value not in varying[key]:
                varying[key].append(value)
    open_keys = [f"{k} ({', '.join(map(str, v))})" for k, v in varying.items() if len(v) > 1]
    raise BadInput(f"suite {plan.suite.name} has {len(plan.points)} points for these values; give one value for: "
                   + "; ".join(open_keys))


def launch_command(args) -> int:
    from caraml.params import parse_assignments

    script_only = [name for name in ("record", "done_file", "log") if getattr(args, name)]
    if script_only and not args.script:
        raise BadInput(f"--{script_only[0].replace('_', '-')} goes with --script (it shapes the SLURM job)")
    point = one_point(args.suite, parse_assignments(args.params), args.system, args.tag, args.preset)
    results = str(Path(args.results).resolve())
    described = json.dumps(point.as_json() | {"shown": point.shown, "results": results}, indent=1, default=str)
    if args.point_file:
        try:
            Path(args.point_file).write_text(described + "\n")
        except OSError as exc:
            raise BadInput(f"--point-file {args.point_file} cannot be written: {exc.strerror or exc}") from None
    if args.show:
        print(described)
        return 0
    if not args.script:
        print(" ".join(shlex.quote(w) for w in launch.local_command(point, results, args.python)))
        return 0
    from caraml import systems

    opts = slurm.JobOptions(results=results, python=args.python or sys.executable,
                            record=_absolute(args.record), done_file=_absolute(args.done_file))
    log = _absolute(args.log) or str(Path(f"caraml-{point.id}-%j.out").resolve())
    sys.stdout.write(slurm.render(point, systems.get(point.system), opts, log))
    return 0


def _absolute(path: str | None) -> str:
    """Job scripts run elsewhere (the batch host, the job's cwd): every path in them is absolute."""
    return str(Path(path).resolve()) if path else ""
