"""The `caraml` command. Each subcommand imports what it needs when it runs, so `--help` stays instant."""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

from caraml import distributed
from caraml.errors import BadInput, missing_package, printable, shown

DEFAULT_RESULTS = "caraml-results"


QUIET_RANK_WAIT_S = 10.0  # how long a rank other than 0 waits for the launcher to end it (see _quiet_rank)
_RANKED = False  # whether this process runs `caraml run`, the command a launcher starts once per rank


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2: the contract for bad input
        if not _quiet_rank():  # every rank has the same arguments: rank 0 says what is wrong with them
            print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _quiet_rank() -> bool:
    """Whether this process is a rank other than 0 of a torchrun/srun launch, where every rank finds the same
    fault in the same arguments: rank 0 says it, once; this rank says nothing and stays until the launcher ends
    it (torchrun ends every rank once one fails) so that rank 0 fails first and its line is not cut short, at
    most QUIET_RANK_WAIT_S (a launcher that lets the others run on); then it exits 2 as well."""
    import signal
    import time

    from caraml.measure.stops import STOP_SIGNALS

    try:
        if not _RANKED or int(os.environ.get("WORLD_SIZE", "1")) <= 1 or int(os.environ.get("RANK", "0")) == 0:
            return False
    except ValueError:
        return False
    old = {sig: signal.signal(sig, signal.SIG_DFL) for sig in STOP_SIGNALS}  # the launcher's SIGTERM ends it
    try:
        time.sleep(QUIET_RANK_WAIT_S)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    return True


def _run(args) -> int:
    from caraml.params import parse_assignments
    from caraml.runner import RunSpec, execute, resolve

    ranks = getattr(args, "nproc_per_node", None) or 1
    try:  # what only the arguments and the world size decide: every rank finds the same fault (see _quiet_rank)
        if ranks > 1 and "WORLD_SIZE" in os.environ:
            raise BadInput(f"--nproc-per-node {ranks} starts torchrun, and this is already a rank of a launch "
                           f"(WORLD_SIZE={shown(os.environ['WORLD_SIZE'])}); leave --nproc-per-node out")
        spec = RunSpec(workload=args.workload, params=parse_assignments(args.params), preset=args.preset,
                       system=args.system, results=args.results, force_system=args.force_system,
                       quiet=getattr(args, "quiet", False), log_format=getattr(args, "log_format", "text"))
        world = ranks if ranks > 1 else int(os.environ.get("WORLD_SIZE", "1"))
        if world > 1:
            run = resolve(spec)
            run.workload.parallel_dims(run.config, world)
    except BadInput as exc:
        exc.every_rank = True
        raise
    if ranks > 1:
        _start_ranks(ranks, args.argv)
    record = execute(spec)
    from caraml.distributed import launch_env

    if launch_env().is_main:
        if args.json:
            from caraml.results.store import dumps

            print(dumps(record))
        else:
            _print_summary(record)
    if record["status"] in ("interrupted", "diverged") and not launch_env().is_main:
        # torchrun kills the other ranks when one exits non-zero: let rank 0 finish writing the record
        return 0
    return 0 if record["status"] == "ok" else 1


def _start_ranks(ranks: int, argv: list[str]) -> None:
    """`caraml run ... --nproc-per-node N`, checked: this process becomes torchrun (standalone), which starts the N
    ranks here; its output and exit code are the run's. (A refused rank cannot make a plain `torchrun` exit 2: its
    agent reports any rank's non-zero exit as its own failure, ChildFailedError, with a traceback and exit 1.)"""
    from caraml.campaign.rendezvous import standalone_torchrun

    sys.stdout.flush()
    sys.stderr.flush()
    command = standalone_torchrun(sys.executable, ranks, [*argv, "--nproc-per-node=1"])  # each rank: one process
    os.execv(command[0], command)


def _print_summary(record: dict) -> None:
    from caraml.results.select import render

    out = sys.stdout
    print(render([record], "table"), file=out, end="")
    if record.get("error"):
        print(printable(f"caraml: {record['status']}: {record['error']}"), file=sys.stderr)
    print(printable(f"caraml: record saved to {record.get('path')}"), file=sys.stderr)


def _systems(args) -> int:
    from caraml import systems

    if args.tag:
        print(json.dumps(systems.get(args.tag), indent=1))
        return 0
    tags = systems.known_tags()  # before the header: a bad profile is the only line
    print(f"{'tag':<9} {'vendor':<9} {'dev/node':>8} {'mem GB':>7} {'bf16 TF':>8}  {'power':<12} accelerator")
    for tag in tags:
        p = systems.get(tag)
        bf16 = p.get("peak_tflops", {}).get("bf16")
        print(printable(f"{tag:<9} {p['vendor']:<9} {p['devices_per_node']:>8} {p['memory_per_device_gb']:>7g} "
                        f"{bf16 if bf16 is not None else '-':>8}  {','.join(p['power_methods']):<12} "
                        f"{p['accelerator']}"))
    return 0


def _env(args) -> int:
    from caraml.measure.env import collect

    print(json.dumps(collect(), indent=1, default=str))
    return 0


def _workloads(args) -> int:
    from caraml import workloads
    from caraml.settings import RUN_PARAMS

    for name in workloads.names() if not args.name else [args.name]:
        wl = workloads.get(name)
        print(f"{wl.name}  ({wl.unit}/s) - {wl.description}")
        print(f"  presets: {', '.join(wl.presets)}")
        for p in wl.params + RUN_PARAMS:
            choices = f" [{'|'.join(map(str, p.choices))}]" if p.choices else ""
            print(f"  {p.name}={p.default}{choices}  {p.help}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="caraml", description="Benchmarks of AI workloads on accelerators: throughput and energy.")
    parser.add_argument("--version", action="version", version=f"caraml {__import__('caraml').__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    # each adds its subcommands; this order is the order of `caraml --help`
    _add_run_parser(sub)
    from caraml.campaign.cli import add_parsers as add_campaign_parsers  # sweep, container, launch
    from caraml.data.cli import add_parser as add_data_parser  # data prepare, info, fno-synthetic
    from caraml.estimate.cli import add_parser as add_plan_parser  # plan (an estimate on paper)
    from caraml.power.command import add_parser as add_power_parser  # power -- CMD
    from caraml.results.cli import add_parsers as add_results_parsers  # result, compare, plot, report
    from caraml.results.row import add_parser as add_row_parser  # row (a record as key=value lines)
    from caraml.show import add_parser as add_show_parser  # show (resolved parameters, a stored run's)

    add_results_parsers(sub, DEFAULT_RESULTS)
    _add_machine_parsers(sub)  # systems, env
    add_power_parser(sub)
    _add_workloads_parser(sub)
    add_show_parser(sub, DEFAULT_RESULTS)

    add_campaign_parsers(sub, DEFAULT_RESULTS)
    add_row_parser(sub)
    add_data_parser(sub)
    add_plan_parser(sub)
    return parser


def _add_run_parser(sub) -> None:
    from caraml.campaign.cli import whole_above_0

    run = sub.add_parser("run", help="run one benchmark point and record it",
                         description="Run one benchmark point: caraml run WORKLOAD [key=value ...]")
    run.add_argument("workload", help="e.g. image_classification (see `caraml workloads`)")
    run.add_argument("params", nargs="*", metavar="key=value", help="parameters, e.g. batch_size=256 precision=bf16")
    run.add_argument("--preset", help="a named parameter set of the workload, e.g. smoke or default")
    run.add_argument("--system", help="system profile tag (default: detected from the device)")
    run.add_argument("--force-system", action="store_true",
                     help="record the run as --system even where the device contradicts it (said in the record)")
    run.add_argument("--results", default=DEFAULT_RESULTS, help="results directory (default: %(default)s)")
    run.add_argument("--json", action="store_true", help="print exactly one JSON record on stdout")
    run.add_argument("-q", "--quiet", action="store_true",
                     help="no live log on stderr: only errors and the final summary")
    run.add_argument("--nproc-per-node", type=whole_above_0, metavar="N",
                     help="run N processes on this machine under torchrun (standalone; data, tensor, pipeline "
                          "parallel), the parameters and the layout checked first: bad input is one line, exit 2, "
                          "before any process starts")
    run.add_argument("--log-format", choices=("text", "json"), default="text",
                     help="the live log on stderr: text lines, or MLPerf-style JSON events one per line "
                          "(always written to runs/RUN_ID.events.jsonl as well)")
    run.set_defaults(func=_run)


def _add_machine_parsers(sub) -> None:
    systems = sub.add_parser("systems", help="list system profiles, or show one")
    systems.add_argument("tag", nargs="?", help="show this profile in full")
    systems.set_defaults(func=_systems)

    env = sub.add_parser("env", help="print the environment manifest (versions, devices, driver, host)")
    env.set_defaults(func=_env)


def _add_workloads_parser(sub) -> None:
    wls = sub.add_parser("workloads", help="list workloads with their parameters and presets")
    wls.add_argument("name", nargs="?")
    wls.set_defaults(func=_workloads)


SAVED_ELSEWHERE = ("run", "sweep")  # commands whose work is the records they save: stdout only describes it


def _robust_output(command: str | None) -> None:
    """Text any terminal can show: a record's non-ASCII name must not end `caraml result` under LANG=C. Output
    that cannot be written (a full disk, a reader that left) never ends a run or a sweep (caraml.console)."""
    from caraml.console import forgive

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError):  # replaced by something without reconfigure (a test's capture)
            pass
    forgive(stdout=command in SAVED_ELSEWHERE)


def main(argv: list[str] | None = None) -> int:
    global _RANKED
    command = next(iter(sys.argv[1:] if argv is None else argv), None)
    _RANKED = command == "run"  # the command torchrun and srun start
    if _RANKED:
        from caraml.measure.stops import catch_early

        catch_early()  # a stop during start-up must still leave a record
    _robust_output(command)
    parser = build_parser()
    # key=value pairs may come before or after options (`run W --preset smoke batch_size=8`).
    args, extra = parser.parse_known_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    listed = "params" if hasattr(args, "params") else "overrides" if hasattr(args, "overrides") else None
    if extra and listed and all("=" in e and not e.startswith("-") for e in extra):
        setattr(args, listed, list(getattr(args, listed) or []) + extra)
    elif extra:
        parser.error("unrecognized arguments: " + shown(" ".join(extra)))
    for option in ("results", "out"):  # Path("") is the current folder: never what was meant
        if isinstance(getattr(args, option, None), str) and not getattr(args, option).strip():
            parser.error(f"--{option} is empty; pass a path, e.g. --{option} "
                         + (DEFAULT_RESULTS if option == "results" else "PATH"))
    try:
        code = args.func(args)
    except BadInput as exc:
        if not (getattr(exc, "every_rank", False) and _quiet_rank()):
            print(f"caraml: error: {shown(exc, 2000)}", file=sys.stderr)  # one line, even around a long value
        code = 2
    except KeyboardInterrupt:
        print("caraml: interrupted", file=sys.stderr)
        code = 130
    except BrokenPipeError:  # `caraml result | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    except Exception as exc:
        missing = missing_package(exc) if isinstance(exc, ModuleNotFoundError) else None
        if missing:  # an install to make, said in one line
            print(f"caraml: error: {missing}", file=sys.stderr)
            code = 2
        elif not distributed.group_started():
            raise
        else:  # said as Python would, then ended by end_rank: not through the interpreter's teardown
            traceback.print_exc()
            code = 1
    distributed.end_rank(code)  # a process with a process group (a rank) ends here, its output flushed
    if argv is None and _RANKED:  # the process's own `caraml run` (not a caller's main([...]))
        from caraml.measure.stops import stop_came

        if stop_came():  # A stopped run has saved its record and said so: the process ends now rather than at the
            # interpreter's exit, which joins what the run left working (inductor's compile threads finishing
            # their queue: 15-21 s after a stop during max-autotune on the CPU).
            distributed.end_now(code)
    return code
