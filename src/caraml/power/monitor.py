"""The parent side of the power monitor: `Monitor` starts `python -m caraml.power.sampler` (a process of
its own, one per node), sends it phase marks and reads its node summary at the end.

It never lets the monitor break the benchmark: a backend that dies mid-run is recorded, a monitor that dies or
hangs is killed after a timeout, and what was lost is said in the result.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

from caraml.distributed import node_name
from caraml.errors import BadInput
from caraml.power import backends as backends_mod
from caraml.power import energy as energy_mod
from caraml.power import series as series_mod

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


def resolve_methods(spec: str, profile_methods: list[str] | None = None) -> tuple[list[str], bool]:
    """'auto' -> the profile's methods (all known ones without a profile); 'a,b' -> checked list, explicit."""
    spec = (spec or "auto").strip()
    if spec == "auto":
        return list(profile_methods or backends_mod.METHODS), False
    methods = [m.strip() for m in spec.split(",") if m.strip()]
    unknown = [m for m in methods if m not in backends_mod.METHODS]
    if unknown or not methods:
        raise BadInput(f"power method '{','.join(unknown) or spec}' is not known; use auto, off or a comma list of: "
                       + ", ".join(backends_mod.METHODS))
    return list(dict.fromkeys(methods)), True


def check_interval(interval_ms: float) -> None:
    if not interval_ms >= 1.0:
        raise BadInput(f"power interval {interval_ms:g} ms is too small; use at least 1 ms (default 100)")


class Monitor:
    """Parent handle of one node's monitor process: start(), mark(phase), stop() -> node summary."""

    def __init__(self, methods: str = "auto", interval_ms: float = 100.0, out_dir: str | None = None,
                 name: str = "power", profile_methods: list[str] | None = None, idle_baseline_s: float = 0.0,
                 fmt: str = "csv", root: str | None = None, phase: str = "setup",
                 start_timeout_s: float = START_TIMEOUT_S, stop_timeout_s: float = STOP_TIMEOUT_S):
        self.methods, self.explicit = resolve_methods(methods, profile_methods)
        check_interval(interval_ms)
        series_mod.check_format(fmt)
        self.interval_ms, self.idle_baseline_s, self.fmt, self.root = interval_ms, idle_baseline_s, fmt, root
        self.phase, self.start_timeout_s, self.stop_timeout_s = phase, start_timeout_s, stop_timeout_s
        self.host = node_name()
        self.out_dir = out_dir
        self.name = name
        self.proc: subprocess.Popen | None = None
        self.failure: str | None = None
        self.current = phase
        self.summary: dict | None = None
        self._scratch = None

    def _paths(self) -> tuple[str | None, str]:
        """Time series beside the caller's outputs (when asked); the summary in a scratch folder of ours."""
        import tempfile

        timeseries = None
        if self.out_dir:
            os.makedirs(self.out_dir, exist_ok=True)
            timeseries = os.path.join(self.out_dir, f"{self.name}.{self.host}.csv")
        self._scratch = tempfile.mkdtemp(prefix="caraml-power-")
        return timeseries, os.path.join(self._scratch, "summary.json")

    def start(self) -> "Monitor":
        """Start sampling; BadInput when an explicitly asked method is missing, else failures are recorded."""
        timeseries, self.summary_path = self._paths()
        config = {"methods": self.methods, "explicit": self.explicit, "interval_ms": self.interval_ms,
                  "root": self.root, "timeseries": timeseries, "summary": self.summary_path, "format": self.fmt,
                  "phase": "idle" if self.idle_baseline_s > 0 else self.phase, "host": self.host}
        env = dict(os.environ)
        src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")  # the same caraml as ours
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "caraml.power.sampler", json.dumps(config)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        except OSError as exc:
            self.failure = f"monitor process could not start: {exc}"
            return self
        line = self._readline(self.start_timeout_s)
        kind, _, payload = line.partition(" ")
        if kind == "ready":
            if self.idle_baseline_s > 0:
                time.sleep(self.idle_baseline_s)
                self.mark(self.phase)
            return self
        if kind == "unavailable":
            status = json.loads(payload)["backends"]
            self._reap(timeout=5)
            why = "; ".join(f"{m}: {s.removeprefix('unavailable: ')}" for m, s in status.items() if s != "ok")
            if self.explicit:
                raise BadInput(f"power method asked for is not available on this machine: {why}")
            self.failure = f"no power method works here ({why})"
            return self
        self._reap(timeout=1)
        self.failure = (f"monitor did not start within {self.start_timeout_s:g} s" if not line
                        else f"monitor said {line[:200]!r} at start")
        return self

    def _readline(self, timeout: float) -> str:
        fd, buf, deadline = self.proc.stdout.fileno(), b"", time.monotonic() + timeout
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return ""
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
        return buf.split(b"\n", 1)[0].decode(errors="replace").strip()

    def _send(self, line: str) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.proc.stdin.write((line + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def mark(self, phase: str) -> None:
        self.current = phase
        self._send(f"mark {phase}")

    def _reap(self, timeout: float) -> int | None:
        """Wait for the monitor to exit; kill it when it does not. Never blocks longer than timeout + 5 s."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            return None

    def stop(self) -> dict:
        """Stop sampling; the node summary, or {'available': False, 'reason': ...}."""
        if self.summary is not None:
            return self.summary
        if self.failure is None and self.proc is not None:
            died = self.proc.poll()
            self._send("stop")
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            code = died if died is not None else self._reap(self.stop_timeout_s)
            if code is None:
                self.failure = f"monitor hung; killed after {self.stop_timeout_s:g} s"
            elif code != 0:
                self.failure = f"monitor process died ({_exit_text(code)}) during {self.current}"
            else:
                try:
                    with open(self.summary_path) as f:
                        self.summary = json.load(f)
                except (OSError, ValueError) as exc:
                    self.failure = f"monitor left no readable summary: {exc}"
        if self.proc is not None:
            for pipe in (self.proc.stdin, self.proc.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass
        if self._scratch:
            import shutil

            shutil.rmtree(self._scratch, ignore_errors=True)
        if self.summary is None:
            self.summary = {"available": False, "host": self.host, "reason": self.failure or "monitor not started",
                            "methods": self.methods}
        return self.summary

    def energy(self, units: float | None = None, unit: str | None = None, window: str = "measure") -> dict:
        """This node's energy table (stop() first)."""
        return energy_mod.combine([self.stop()], units, unit, window)


def _exit_text(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


