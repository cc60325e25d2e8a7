"""`caraml power [--methods ...] [--interval-ms N] [--out DIR] -- CMD ...`: any command under the monitor.

Prints a per-device energy table at the end (stderr, so the command's own stdout stays its own),
writes the time series and energy.json into DIR, and exits with the command's exit code.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from caraml.errors import BadInput
from caraml.paths import ensure_writable_dir


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

    monitor = Monitor(args.methods, args.interval_ms, out_dir=out, name="power", profile_methods=profile,
                      idle_baseline_s=args.idle_baseline_s, fmt=args.format, phase="run").start()
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
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        monitor.mark("done")
        monitor.stop()
    energy = monitor.energy(window="run")
    energy["command"] = command
    energy["exit_code"] = code
    path = os.path.join(out, "energy.json")
    with open(path, "w") as f:
        json.dump(energy, f, indent=1, default=str)
    sys.stderr.write(energy_mod.table(energy))
    print(f"caraml power: energy written to {path}" + "".join(
        f", time series {n['timeseries']}" for n in energy["nodes"] if n.get("timeseries")), file=sys.stderr)
    return code if code >= 0 else 128 - code
