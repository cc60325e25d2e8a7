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


def sample_node(config: dict) -> int:
    """The monitor process's life: open the backends, sample until told to stop, write the node summary."""
    host = config.get("host") or socket.gethostname()
    explicit = config.get("explicit", False)
    active, devices, status = open_backends(config["methods"], config.get("root"))
    missing = {m: s for m, s in status.items() if s != "ok"}
    if not active or (explicit and missing):
        _say("unavailable", {"backends": status, "explicit": explicit})
        return 3
    _say("ready", {"backends": status, "devices": [d["key"] for d in devices]})

    sampling = Sampling(active, devices, host, config.get("phase", "setup"), config.get("timeseries"))
    end = _sample_until_stopped(sampling, config["interval_ms"] / 1000.0, _Parent(sys.stdin.fileno()))
    info = sampling.close_backends()
    ts_path = sampling.close_series(config.get("format", "csv"))
    _write_atomically(config["summary"], _node_summary(config, sampling, end, info, ts_path, status))
    return 0


def open_backends(methods: list[str], root: str | None) -> tuple[list, list[dict], dict[str, str]]:
    """The backends that open here, their devices, and per method "ok" or why it is unavailable."""
    active, devices, status = [], [], {}
    for method in methods:
        try:
            backend = backends_mod.make(method, root)
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
    return active, devices, status


class Sampling:
    """The samples of one node so far: every device's (time, power, energy) lists and the phase marks."""

    def __init__(self, active: list, devices: list[dict], host: str, phase: str, ts_path: str | None):
        self.start_wall, self.start = time.time(), time.monotonic()
        self.active, self.host, self.phase, self.ts_path = active, host, phase, ts_path
        self.by_key = {d["key"]: d for d in devices}
        self.data = {key: ([], [], []) for key in self.by_key}
        self.phases: list[tuple[str, float]] = [(phase, 0.0)]
        self.failed: dict[str, str] = {}  # backend -> why it stopped
        self.out = series_mod.CsvSeries(ts_path) if ts_path else None

    def sample(self) -> float:
        """Read every working backend once; returns the sample's time."""
        t = time.monotonic() - self.start
        rows = []
        for backend in list(self.active):
            try:
                readings = backend.read()
            except Exception as exc:  # noqa: BLE001 - record, drop this backend, keep sampling the others
                self.failed[backend.name] = (f"{backend.name} failed at t={t:.1f}s during {self.phase}: "
                                             f"{type(exc).__name__}: {exc}")
                self.active.remove(backend)
                continue
            for key, (power, energy) in readings.items():
                ts, ps, es = self.data[key]
                ts.append(t)
                ps.append(power)
                es.append(energy)
                d = self.by_key[key]
                rows.append((d["backend"], d["name"], d["uuid"], power, energy))
        if self.out:
            self.out.write(t, self.phase, self.host, rows)
        return t

    def mark(self, phase: str) -> None:
        """A new phase starts with a sample of its own, so its boundary is an exact sample time."""
        self.phase = phase
        self.phases.append((phase, self.sample()))

    def close_backends(self) -> dict[str, dict]:
        """Each working backend's end-of-run values per device key; the backends closed."""
        info = {}
        for backend in self.active:
            try:
                info.update(backend.info())
            except Exception:  # noqa: BLE001
                pass
            try:
                backend.close()
            except Exception:  # noqa: BLE001
                pass
        return info

    def close_series(self, fmt: str) -> str | None:
        """The time series file closed and converted to `fmt`; returns its path."""
        if not self.out:
            return self.ts_path
        self.out.close()
        try:
            return series_mod.convert(self.ts_path, fmt)
        except Exception as exc:  # noqa: BLE001 - keep the CSV
            print(f"caraml power: time series kept as CSV ({exc})", file=sys.stderr)
            return self.ts_path


class _Parent:
    """The parent's commands on our stdin, one per line (`mark NAME`, `stop`); end of file: the parent is gone."""

    def __init__(self, fd: int):
        self.fd, self.pending = fd, b""

    def wait(self, timeout: float) -> bool:
        return bool(select.select([self.fd], [], [], timeout)[0])

    def lines(self) -> list[str] | None:
        """The complete lines read now (a partial one waits for its end); None at end of file."""
        chunk = os.read(self.fd, 4096)
        if not chunk:
            return None
        self.pending += chunk
        out = []
        while b"\n" in self.pending:
            line, self.pending = self.pending.split(b"\n", 1)
            out.append(line.decode().strip())
        return out


def _sample_until_stopped(sampling: Sampling, interval: float, parent: _Parent) -> float:
    """Sample at a fixed interval, obeying the parent in between; returns the time of the last sample."""
    next_t = time.monotonic()
    while True:
        sampling.sample()
        next_t += interval
        now = time.monotonic()
        if next_t < now:  # sampling fell behind (slow reads): skip ahead instead of bursting
            next_t = now + interval
        if not _obey_until(next_t, sampling, parent):
            break
    return sampling.sample()


def _obey_until(due: float, sampling: Sampling, parent: _Parent) -> bool:
    """Carry out the parent's commands until the next sample is due; False once told to stop or orphaned."""
    while (wait := due - time.monotonic()) > 0:
        if not parent.wait(wait):
            break
        lines = parent.lines()
        if lines is None:  # parent gone: finish with what we have
            return False
        stopping = False
        for line in lines:  # all of them: a mark sent with the stop still counts
            word, _, arg = line.partition(" ")
            if word == "mark" and arg:
                sampling.mark(arg)
            elif word == "stop":
                stopping = True
        if stopping:
            return False
    return True


def _node_summary(config: dict, sampling: Sampling, end: float, info: dict[str, dict], ts_path: str | None,
                  status: dict[str, str]) -> dict:
    """The node summary the parent reads: energy per device and phase, and how each backend fared."""
    spans = energy_mod.windows(sampling.phases, end)
    devices = []
    for key, d in sampling.by_key.items():
        if key in info:
            d = dict(d, info=dict(d["info"], at_end=info[key]))
        ts, ps, es = sampling.data[key]
        devices.append(energy_mod.device_summary(d, ts, ps, es, spans, sampling.failed.get(d["backend"])))
    for method, why in sampling.failed.items():
        status[method] = f"failed: {why}"
    return {"available": True, "host": sampling.host, "clock": "time.monotonic", "started_wall": sampling.start_wall,
            "interval_ms": config["interval_ms"], "methods": config["methods"], "backends": status,
            "phases": spans, "devices": devices, "timeseries": ts_path,
            "samples": max((len(v[0]) for v in sampling.data.values()), default=0)}


def _write_atomically(path: str, summary: dict) -> None:
    """Whole or not at all: the parent never reads half a summary."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(summary, f)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Ctrl-C goes to the whole process group, and in a SLURM step slurmstepd signals every process of the
    # step (SIGUSR2 at --signal time, SIGTERM at scancel or the time limit): the parent handles those and
    # stops us, and we stop by ourselves when its end of our stdin closes, so none of them may kill us first.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    return sample_node(json.loads(argv[0]))


if __name__ == "__main__":
    sys.exit(main())
