"""`caraml power [--methods ...] [--interval-ms N] [--out DIR] -- CMD ...`: any command under the monitor.

Prints a per-device energy table at the end (stderr, so the command's own stdout stays its own), or, when no
device could be measured, one line saying why; writes the time series and energy.json (with the command's
duration, start and end) into DIR, and exits with the command's exit code. An earlier call's energy.json or time
series in DIR is never overwritten: the call is refused before the command starts (exit 2) unless --overwrite.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from caraml.errors import BadInput, printable, shown
from caraml.paths import ensure_writable_dir

ENERGY_FILE = "energy.json"


def add_parser(sub) -> None:
    import argparse

    power = sub.add_parser("power", help="run any command under the power monitor and report its energy",
                           description="Run CMD under the power monitor: caraml power [options] -- CMD ...")
    power.add_argument("--methods", default="auto", help="auto, or a comma list of nvml,amd,grace,rapl,ipu")
    power.add_argument("--interval-ms", type=float, default=100.0, help="sampling interval (default: %(default)g)")
    power.add_argument("--out", default="caraml-power", help="folder for the time series and energy.json "
                       "(default: %(default)s)")
    power.add_argument("--format", default="csv", choices=("csv", "hdf5", "parquet"), help="time-series file format")
    power.add_argument("--idle-baseline-s", type=float, default=0.0, help="seconds of idle power sampled first")
    power.add_argument("--system", help="system profile whose power_methods 'auto' uses (default: all methods)")
    power.add_argument("--overwrite", action="store_true",
                       help="replace the energy.json and time series an earlier call left in --out (without it, "
                            "such a folder is refused before the command starts)")
    power.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command and its arguments")
    power.set_defaults(func=run)


def run(args) -> int:
    from caraml import systems
    from caraml.power import energy as energy_mod
    from caraml.power.monitor import Monitor, check_interval, resolve_methods

    command = list(args.cmd)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise BadInput("no command to measure: put it after --, e.g. caraml power -- python train.py")
    check_interval(args.interval_ms)
    profile = systems.get(args.system).get("power_methods") if args.system else None
    resolve_methods(args.methods, profile)  # unknown names: bad input before anything starts
    out = os.path.abspath(args.out)
    ensure_writable_dir(out, "output directory", option="--out")
    if not args.overwrite:
        _refuse_earlier(out)

    monitor = Monitor(args.methods, args.interval_ms, out_dir=out, name="power", profile_methods=profile,
                      idle_baseline_s=args.idle_baseline_s, fmt=args.format, phase="run").start()
    started_at, start = _now(), time.monotonic()
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        monitor.stop()
        raise BadInput(f"command {command[0]!r} cannot be started: {exc.strerror}") from None

    def forward(signum, _frame):  # the command decides what a stop means; we wait for it
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = child.wait()
        duration = time.monotonic() - start
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        monitor.mark("done")
        monitor.stop()
    energy = monitor.energy(window="run")
    energy["command"] = command
    energy["exit_code"] = code
    energy["duration_s"] = round(duration, 3)  # the command's wall time, start to exit
    energy["started_at"], energy["finished_at"] = started_at, _now()
    path = os.path.join(out, ENERGY_FILE)
    with open(path, "w") as f:
        json.dump(energy, f, indent=1, default=str)
    if energy.get("devices"):
        sys.stderr.write(energy_mod.table(energy))
    else:  # an empty table says nothing: say why nothing was measured
        print(printable("caraml power: no device measured: " + shown(energy.get("reason") or "energy unavailable",
                                                                     2000)), file=sys.stderr)
    print(f"caraml power: the command ran {duration:.2f} s ({_exit_text(code)}); energy written to {path}" + "".join(
        f", time series {n['timeseries']}" for n in energy["nodes"] if n.get("timeseries")), file=sys.stderr)
    return code if code >= 0 else 128 - code


def _refuse_earlier(out: str) -> None:
    """Bad input when `out` holds what an earlier call wrote (energy.json, the monitor's power.* time series)."""
    earlier = sorted(n for n in os.listdir(out) if n == ENERGY_FILE or n.startswith("power."))
    if earlier:
        raise BadInput(f"--out {shown(out)} already holds {shown(', '.join(earlier[:3]), 120)} from an earlier "
                       "call; pass another --out, or --overwrite to replace them")


def _now() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _exit_text(code: int) -> str:
    return f"exit code {code}" if code >= 0 else f"killed by signal {-code}"
