"""The monitor process itself: `python -m caraml.power.sampler CONFIG_JSON`, one per node.

It opens its backends and answers one line on stdout, `ready {...}` or `unavailable {...}`; then it
samples every device at a fixed interval and takes one extra sample at each phase mark it reads on
stdin (`mark NAME`), so phase boundaries are exact sample times. At `stop`, or when stdin closes
because the parent died, it writes the node summary JSON and exits. Clock: time.monotonic() of this
process (CLOCK_MONOTONIC, shared by all processes of the node), seconds from its start; the wall
time of that start is in the summary.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time

from caraml.power import backends as backends_mod
from caraml.power import energy as energy_mod
from caraml.power import series as series_mod


def _say(kind: str, payload: dict) -> None:
    sys.stdout.write(f"{kind} {json.dumps(payload)}\n")
    sys.stdout.flush()


def run_monitor(config: dict) -> int:
    host = config.get("host") or socket.gethostname()
    interval = config["interval_ms"] / 1000.0
    explicit = config.get("explicit", False)
    active, devices, status = [], [], {}
    for method in config["methods"]:
        try:
            backend = backends_mod.make(method, config.get("root"))
            found = backend.open()
        except backends_mod.Unavailable as exc:
            status[method] = f"unavailable: {exc}"
            continue
        except Exception as exc:  # noqa: BLE001 - a broken library is "unavailable", with its words
            status[method] = f"unavailable: {type(exc).__name__}: {exc}"
            continue
        status[method] = "ok"
        active.append(backend)
        devices.extend(d.as_dict() for d in found)
    missing = {m: s for m, s in status.items() if s != "ok"}
    if not active or (explicit and missing):
        _say("unavailable", {"backends": status, "explicit": explicit})
        return 3
    _say("ready", {"backends": status, "devices": [d["key"] for d in devices]})

    start_wall, start = time.time(), time.monotonic()
    by_key = {d["key"]: d for d in devices}
    data = {key: ([], [], []) for key in by_key}
    phase = config.get("phase", "setup")
    phases: list[tuple[str, float]] = [(phase, 0.0)]
    failed: dict[str, str] = {}  # backend -> why it stopped
    ts_path = config.get("timeseries")
    out = series_mod.CsvSeries(ts_path) if ts_path else None

    def sample():
        t = time.monotonic() - start
        rows = []
        for backend in list(active):
            try:
                readings = backend.read()
            except Exception as exc:  # noqa: BLE001 - record, drop this backend, keep sampling the others
                failed[backend.name] = f"{backend.name} failed at t={t:.1f}s during {phase}: {type(exc).__name__}: {exc}"
                active.remove(backend)
                continue
            for key, (power, energy) in readings.items():
                ts, ps, es = data[key]
                ts.append(t)
                ps.append(power)
                es.append(energy)
                d = by_key[key]
                rows.append((d["backend"], d["name"], d["uuid"], power, energy))
        if out:
            out.write(t, phase, host, rows)
        return t

    stdin = sys.stdin.fileno()
    pending = b""
    next_t = time.monotonic()
    stopping = False
    while not stopping:
        sample()
        next_t += interval
        now = time.monotonic()
        if next_t < now:  # sampling fell behind (slow reads): skip ahead instead of bursting
            next_t = now + interval
        while True:
            wait = next_t - time.monotonic()
            if wait <= 0:
                break
            ready, _, _ = select.select([stdin], [], [], wait)
            if not ready:
                break
            chunk = os.read(stdin, 4096)
            if not chunk:  # parent gone: finish with what we have
                stopping = True
                break
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                word, _, arg = line.decode().strip().partition(" ")
                if word == "mark" and arg:
                    phase = arg
                    t = sample()
                    phases.append((phase, t))
                elif word == "stop":
                    stopping = True
            if stopping:
                break
    end = sample()
    info = {}
    for backend in active:
        try:
            info.update(backend.info())
        except Exception:  # noqa: BLE001
            pass
        try:
            backend.close()
        except Exception:  # noqa: BLE001
            pass
    if out:
        out.close()
        try:
            ts_path = series_mod.convert(ts_path, config.get("format", "csv"))
        except Exception as exc:  # noqa: BLE001 - keep the CSV
            print(f"caraml power: time series kept as CSV ({exc})", file=sys.stderr)
    spans = energy_mod.windows(phases, end)
    summary_devices = []
    for key, d in by_key.items():
        if key in info:
            d = dict(d, info=dict(d["info"], at_end=info[key]))
        ts, ps, es = data[key]
        summary_devices.append(energy_mod.device_summary(d, ts, ps, es, spans, failed.get(d["backend"])))
    for method, why in failed.items():
        status[method] = f"failed: {why}"
    summary = {"available": True, "host": host, "clock": "time.monotonic", "started_wall": start_wall,
               "interval_ms": config["interval_ms"], "methods": config["methods"], "backends": status,
               "phases": spans, "devices": summary_devices, "timeseries": ts_path,
               "samples": max((len(v[0]) for v in data.values()), default=0)}
    tmp = config["summary"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(summary, f)
    os.replace(tmp, config["summary"])
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Ctrl-C goes to the whole process group, and in a SLURM step slurmstepd signals every process of the
    # step (SIGUSR2 at --signal time, SIGTERM at scancel or the time limit): the parent handles those and
    # stops us, and we stop by ourselves when its end of our stdin closes, so none of them may kill us first.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    return run_monitor(json.loads(argv[0]))


if __name__ == "__main__":
    sys.exit(main())
