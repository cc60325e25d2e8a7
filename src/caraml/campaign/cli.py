"""`caraml sweep`, `caraml container` and `caraml launch`: argument wiring and printing; the work is in the modules.

`caraml launch` prints how one point of a suite runs: a launch line, a SLURM job script, or a description.
This is what an outside orchestrator (the JUBE configurations in jube/) asks for, so the system specifics
(devices per node, partition, container, rendezvous) come from the system profile and the suite's derived
values, rendered by the same code as `caraml sweep`.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from caraml.campaign.executors import EXECUTORS
from caraml.errors import BadInput, printable, shown


def add_parsers(sub, results_default: str) -> None:
    _add_sweep_parser(sub, results_default)
    _add_container_parser(sub)
    _add_launch_parser(sub, results_default)


def _add_sweep_parser(sub, results_default: str) -> None:
    sweep = sub.add_parser("sweep", help="expand a suite into points and run them here or under SLURM",
                           description="caraml sweep SUITE [key=value ...] [--tag T ...] [--system TAG] "
                                       "[--executor local|slurm] [--dry-run] [--resume]; caraml sweep --continue")
    sweep.add_argument("suite", nargs="?", help="a shipped suite (see --list) or a suite file (YAML)")
    sweep.add_argument("overrides", nargs="*", metavar="key=value",
                       help="replace a suite value (a comma list is a sweep), e.g. measure_steps=5; repeats=N runs "
                            "each point N times, a record each")
    sweep.add_argument("--tag", action="append", default=[], help="activate a tag (repeatable), e.g. --tag bf16")
    sweep.add_argument("--system", help="system profile tag of the machines that run the points")
    sweep.add_argument("--executor", choices=tuple(EXECUTORS), default="local")
    sweep.add_argument("--dry-run", action="store_true", help="print the points (and write SLURM scripts); run nothing")
    sweep.add_argument("--json", action="store_true", help="with --dry-run: one JSON array of the points")
    sweep.add_argument("--show", metavar="ID", help="print one point's resolved parameters (its number in --dry-run's "
                       "list, its id or a prefix), marked suite/preset/default; run nothing (with --json: one object)")
    sweep.add_argument("--resume", action="store_true", help="skip points whose record is ok")
    sweep.add_argument("--continue", dest="collect", action="store_true",
                       help="collect the records of submitted SLURM jobs; report what is still queued")
    sweep.add_argument("--list", action="store_true", help="list the shipped suites")
    sweep.add_argument("--max-points", type=whole_above_0, default=10_000, metavar="N",  # expand.MAX_POINTS
                       help="refuse a suite that expands to more points than this (default: %(default)s)")
    sweep.add_argument("--python", help="interpreter the points run with (default: this one)")
    sweep.add_argument("--results", default=results_default, help="results directory (default: %(default)s)")
    sweep.add_argument("--array", nargs="?", const=0, type=_throttle, metavar="N",
                       help="with --executor slurm: one job array per sweep (per job shape) instead of one job per "
                            "point; N runs at most N of its points at once (sbatch --array=...%%N)")
    _add_site_arguments(sweep)
    sweep.set_defaults(func=sweep_command)


SITE_FLAGS = ("account", "partition", "qos", "reservation", "constraint")


def _add_site_arguments(parser) -> None:
    group = parser.add_argument_group("site settings of the SLURM jobs (over the system profile's)")
    for key in SITE_FLAGS:
        group.add_argument(f"--{key}", help=f"sbatch --{key} of every job")
    group.add_argument("--exclusive", action="store_const", const=True, default=None,
                       help="sbatch --exclusive: whole nodes for each job")


def site_overrides(args) -> dict:
    """The site settings given on the command line, each checked: a bad one is one line (exit 2)."""
    from caraml.campaign.jobscript import site_value_problem

    given = {key: getattr(args, key) for key in (*SITE_FLAGS, "exclusive") if getattr(args, key) is not None}
    for key, value in given.items():
        problem = site_value_problem(key, value) if value != "" else f"it must not be empty (leave --{key} out)"
        if problem:
            raise BadInput(f"--{key} '{shown(value, 80)}' is not valid; {problem}")
    return given


def _add_container_parser(sub) -> None:
    cont = sub.add_parser("container", help="Apptainer images of the system profiles")
    cont_sub = cont.add_subparsers(dest="action", required=True, parser_class=type(cont))
    pull = cont_sub.add_parser("pull", help="apptainer pull the image the system profile names")
    pull.add_argument("--system", required=True, help="system profile tag")
    pull.add_argument("--print", action="store_true", help="print the command instead of running it")
    pull.set_defaults(func=container_command)
    wheels = cont_sub.add_parser("wheels", help="fill the wheel folder jobs' environments are installed from: "
                                 "caraml's wheel and its small dependencies for the image's Python (needs network)")
    prepare = cont_sub.add_parser("prepare", help="make the image's environment (venv over its python and torch, "
                                  "caraml from the wheel folder); job scripts run with it; cached per image")
    for parser in (wheels, prepare):
        parser.add_argument("--system", required=True, help="system profile tag")
        parser.add_argument("--workload", help="a workload whose own site settings name another image")
        parser.add_argument("--print", action="store_true", help="print the commands instead of running them")
        parser.set_defaults(func=container_command)


def _add_launch_parser(sub, results_default: str) -> None:
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
    _add_site_arguments(p)
    p.set_defaults(func=launch_command)


def whole_above_0(text: str) -> int:
    import argparse

    if not (text.isascii() and text.isdigit() and int(text) > 0):
        raise argparse.ArgumentTypeError(f"'{text[:50]}' is not a whole number above 0")
    return int(text)


def _throttle(text: str) -> int:
    """--array N: at most SLURM's largest MaxArraySize (a throttle beyond any array is a typo)."""
    import argparse

    from caraml.campaign.slurm import MAX_ARRAY_SIZE

    n = whole_above_0(text)
    if n > MAX_ARRAY_SIZE:
        raise argparse.ArgumentTypeError(f"'{text[:50]}' is more tasks at once than any job array holds; give a whole "
                                         f"number from 1 to {MAX_ARRAY_SIZE}")
    return n


def sweep_command(args) -> int:
    from caraml.campaign import suite as suite_mod
    from caraml.campaign import sweep
    from caraml.campaign.executors import get_executor
    from caraml.params import parse_assignments

    if args.list:
        for name, path in sorted(suite_mod.shipped().items()):
            s = suite_mod.load(str(path))
            print(f"{name:<22} {s.workload:<22} tags: {', '.join(sorted(s.tags))}")
            print(f"  {' '.join(s.description.split())}")
        return 0
    if args.collect:  # jobs outlive the sweep only under SLURM, whatever --executor says (see executors.py)
        return get_executor("slurm").collect(args.results)
    if not args.suite:
        raise BadInput("name a suite (caraml sweep --list shows the shipped ones) or use --continue")
    if args.json and not args.dry_run and args.show is None:
        raise BadInput("--json goes with --dry-run (a real sweep saves records; see `caraml result`)")
    site = site_overrides(args)
    if args.executor != "slurm" and (site or args.array is not None):
        flag = "--array" if args.array is not None else f"--{next(iter(site))}"
        raise BadInput(f"{flag} shapes SLURM jobs: it goes with --executor slurm")
    executor = get_executor(args.executor)
    if args.array is not None:
        executor.array = args.array
    if args.python is not None and args.executor == "local":  # a SLURM job's interpreter lives on the nodes
        _check_python(args.python)
    plan = sweep.plan(args.suite, args.tag, args.system, parse_assignments(args.overrides),
                      need_system=executor.needs_system, max_points=args.max_points)
    plan.site = site
    if args.show is not None:
        from caraml.show import show_point

        return show_point(plan, args.show, args.json)
    if not args.dry_run:
        return executor.run(plan, args.results, args.resume, args.python)
    notes = executor.dry_run(plan, args.results, args.python)
    estimates = _estimates(plan)
    if args.json:
        print(json.dumps([{**p.as_json(), **({"estimate": estimates[p.id]} if p.id in estimates else {})}
                          for p in plan.points], default=str))
    else:
        from caraml.estimate import short

        for i, p in enumerate(plan.points, 1):
            est = f"  [{short(estimates[p.id])}]" if p.id in estimates else ""
            print(f"{i:>4} {p.id}  " + printable(" ".join(f"{k}={v}" for k, v in p.shown.items())) + est)
        runs = len(sweep.runs(plan.points))
        print(printable(f"caraml: {len(plan.points)} points of suite {plan.suite.name} on {plan.system}"
                        + (f" with tags {', '.join(plan.tags)}" if plan.tags else "")
                        + (f", {runs} runs with their repeats" if runs > len(plan.points) else "")), file=sys.stderr)
    for note in notes:
        print(printable(f"caraml: {note}"), file=sys.stderr)
    return 0


def _estimates(plan) -> dict:
    """caraml plan's estimate of each point whose workload has one (memory, fit, time), by point id."""
    from caraml import estimate, systems, workloads

    profile, out = systems.get(plan.system), {}
    for p in plan.points:
        if p.workload in estimate.ESTIMATED:
            wl = workloads.get(p.workload)
            try:
                out[p.id] = estimate.estimate(wl, p.params, profile, p.world_size)
            except BadInput:  # a layout the point itself will refuse: the dry run lists it, its run says why
                continue
    return out


def _check_python(python: str) -> None:
    import shutil

    if not shutil.which(python):
        raise BadInput(f"--python {shown(python)}: no such executable here; pass the path of a Python interpreter "
                       f"with caraml installed (e.g. {sys.executable})")


def container_command(args) -> int:
    import shutil
    import subprocess

    from caraml import systems
    from caraml.campaign import container

    profile = systems.get(args.system)
    profile = {**profile, "site": systems.site(profile, getattr(args, "workload", None))}
    if args.action == "pull":
        cmds = [container.pull_command(profile)]
    elif args.action == "wheels":
        cmds = container.wheel_commands(profile)
    else:
        container.check_preparable(profile)  # the environment's folder is named after the image and the wheel
        cmds = container.prepare_commands(profile, container.env_dir(profile))
    if args.print:
        for cmd in cmds:
            print(container.command_text(cmd))
        return 0
    if args.action == "wheels":
        print(f"caraml: wheel folder {container.make_wheels(profile)} is ready", file=sys.stderr)
        return 0
    if args.action == "prepare":
        env, made = container.prepare(profile)
        print(f"caraml: environment {env} " + ("prepared" if made else "was already prepared"), file=sys.stderr)
        return 0
    cmd = cmds[0]
    if shutil.which("apptainer") is None:
        raise BadInput("apptainer is not on PATH; install Apptainer (or load its module) to pull "
                       f"{cmd[-1]}, or use --print to see the command")
    Path(cmd[2]).parent.mkdir(parents=True, exist_ok=True)
    return subprocess.run(cmd).returncode


def launch_command(args) -> int:
    from caraml.campaign import jobscript, launchers, sweep
    from caraml.params import parse_assignments

    site = site_overrides(args)
    script_only = [name for name in ("record", "done_file", "log") if getattr(args, name)] + list(site)
    if script_only and not args.script:
        raise BadInput(f"--{script_only[0].replace('_', '-')} goes with --script (it shapes the SLURM job)")
    point = sweep.one_point(args.suite, parse_assignments(args.params), args.system, args.tag, args.preset)
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
        print(" ".join(shlex.quote(w) for w in launchers.local_command(point, results, args.python)))
        return 0
    from caraml import systems

    opts = jobscript.JobOptions(results=results, python=args.python or sys.executable,
                                record=_absolute(args.record), done_file=_absolute(args.done_file), site=site)
    log = _absolute(args.log) or str(Path(f"caraml-{point.id}-%j.out").resolve())
    profile = systems.get(point.system)
    sys.stdout.write(jobscript.render(point, profile, opts, log))
    from caraml.campaign import container

    for line in container.missing({**profile, "site": systems.site(profile, point.workload, site)}):
        print(f"caraml: {line}", file=sys.stderr)  # the script is still printed: it runs once this is done
    return 0


def _absolute(path: str | None) -> str:
    """Job scripts run elsewhere (the batch host, the job's cwd): every path in them is absolute."""
    return str(Path(path).resolve()) if path else ""
