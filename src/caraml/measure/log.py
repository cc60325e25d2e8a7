"""The live log of one run: each phase announced with its elapsed time, one line per logging interval.

Text (default): `caraml: ...` lines on stderr, the fields Megatron/torchtitan users scan for (step n/N, step time,
units/s, TFLOP/s, MFU, peak memory). Where stderr is a terminal, the interval line is a rich live line that is
rewritten in place; elsewhere (tests, CI, log files) every line is a plain line.
JSON (`--log-format json`): MLPerf-style events, one JSON object per line on stderr: `run_start`, `phase_start`,
`phase_end`, `throughput`, `run_stop`. Quiet (`-q`): nothing but errors and the final summary.
Every run's events also go to `runs/<run_id>.events.jsonl` beside its record, whatever the format.
Only rank 0 logs. The log's writes hold a lock (the heartbeat writes from a thread of its own), and while a live
line is on the terminal Python's warnings (torch's) are written above it rather than into it.

Timing inside the measured window adds no device synchronisation: on CUDA an interval's time comes from the
step events the harness records anyway, read only once they have completed (a non-blocking query); elsewhere the
harness synchronises after every step, so the host clock is exact.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import threading
import time
import warnings
from pathlib import Path

FORMATS = ("text", "json")
DEFAULT_INTERVAL_S = 5.0
HEARTBEAT_MAX_S = 60.0  # a long wait is said after 1, 3, 7, ... intervals, then at most this far apart
_LOCK_TYPE = threading.RLock  # reentrant: say() ends the live line under the same lock
LONG_FIRST_STEP = 3.0  # a first warm-up step this many times the typical one (and > 1 s) is announced apart


def _num(value, digits=3):
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return round(float(value), digits) if isinstance(value, float) else value


def fmt_seconds(s: float) -> str:
    if s >= 120:
        return f"{s / 60:.1f} min"
    if s >= 1:
        return f"{s:.1f} s"
    return f"{s * 1e3:.1f} ms"


def eta_text(seconds: float, upper: bool = False) -> str:
    """`ETA 12.3 s`; `ETA <= 4.2 min` where the phase may end sooner (a window until steady, within its caps)."""
    return f"ETA {'<= ' if upper else ''}{fmt_seconds(max(0.0, seconds))}"


def fmt_bytes(n: float | None) -> str:
    if not n:
        return "-"
    for unit, size in (("GiB", 2 ** 30), ("MiB", 2 ** 20)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n / 1024:.0f} KiB"


def peak_memory(device) -> tuple[float | None, str]:
    """The peak memory so far, without synchronising: the device's allocator on CUDA, else the host's RSS."""
    if getattr(device, "type", None) == "cuda":
        import torch

        return float(torch.cuda.max_memory_allocated(device)), "device"
    import resource

    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024), "host"


class EventsFile:
    """runs/<run_id>.events.jsonl: whole lines only. A line is one write (and its rest after a short one); a write
    that fails part-way (a disk that fills, a stop) is cut back to the last whole line, and a failed one ends the
    file, never the run."""

    def __init__(self, path):
        # appending: after a cut the next line starts where the last whole one ended
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        self._size = 0

    def append(self, line: str) -> None:
        if self._fd is None:
            return
        data = (line + "\n").encode()
        try:
            written = 0
            while written < len(data):  # a short write is not yet a failure: the rest may still fit
                written += os.write(self._fd, data[written:])
            self._size += written
        except BaseException as exc:
            try:
                os.ftruncate(self._fd, self._size)
            except OSError:
                pass
            if not isinstance(exc, OSError):
                raise
            self.close()

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


class LiveLog:
    """Phases and interval lines of one run (see the module's doc)."""

    def __init__(self, is_main: bool = True, quiet: bool = False, fmt: str = "text",
                 interval_s: float = DEFAULT_INTERVAL_S, stream=None, t0: float | None = None):
        """`t0`: when the run began (a perf_counter reading; default now), what run_stop's elapsed time counts from."""
        self.is_main = is_main
        self.quiet = quiet
        self.fmt = fmt if fmt in FORMATS else "text"
        self.interval_s = interval_s
        self._stream = stream
        self._events = None  # the events file, once run_start names it
        self._phases: dict[str, float] = {}
        self._rates = None  # (units_per_step x dp, unit, flops_per_unit, world_size, peak_tflops)
        self._device = None  # whose peak memory the interval line shows (None: none shown)
        self._live = None
        self._lock = _LOCK_TYPE()  # one writer at a time: a line is never cut by another
        self._showwarning = None  # warnings.showwarning before the live line took it over
        self.t0 = time.perf_counter() if t0 is None else t0

    @property
    def stream(self):
        return self._stream or sys.stderr

    # what the harness needs to turn step times into rates -------------------------------------------------------
    def configure(self, *, info=None, dp: int = 1, world_size: int = 1, peak_tflops: float | None = None,
                  device=None) -> None:
        """What the interval line's figures come from; what is not given stays as it was. `info` (the Bench's
        caraml.bench.BenchInfo) with the run's data-parallel size, world size and peak TFLOP/s: units/s, TFLOP/s
        and MFU; `device`: its peak memory."""
        if info is not None:
            self._rates = (info.units_per_step * dp, info.unit, info.flops_per_unit, world_size, peak_tflops)
        if device is not None:
            self._device = device

    def due(self, last: float, now: float) -> bool:
        return self.interval_s > 0 and now - last >= self.interval_s

    # output --------------------------------------------------------------------------------------------------------
    def _event(self, key: str, event_type: str = "POINT_IN_TIME", value=None, at: float | None = None,
               **metadata) -> None:
        """One MLPerf-style event (`at`: when it happened, a perf_counter reading; default now)."""
        if not self.is_main:
            return
        ago = 0.0 if at is None else time.perf_counter() - at
        line = json.dumps({"time_ms": round((time.time() - ago) * 1e3, 3), "event_type": event_type, "key": key,
                           "value": value, "metadata": {k: v for k, v in metadata.items() if v is not None}},
                          default=str, allow_nan=False)
        if self._events is not None:
            self._events.append(line)
        if self.fmt == "json" and not self.quiet:
            with self._lock:
                self._end_live()
                print(line, file=self.stream, flush=True)

    def say(self, message: str) -> None:
        """A line for people (text format, not quiet)."""
        if self.is_main and self.fmt == "text" and not self.quiet:
            with self._lock:
                self._end_live()
                print(f"caraml: {message}", file=self.stream, flush=True)

    def above(self, text: str) -> None:
        """Someone else's text (a library's warning): above the live line while one is on the terminal (rich
        prints it there and draws the line again under it), else as it is."""
        with self._lock:
            if self._live is not None:
                try:
                    from rich.text import Text

                    self._live.console.print(Text(text.rstrip("\n")), soft_wrap=True)
                    return
                except Exception:  # noqa: BLE001 - a display problem never loses the text: written plainly
                    pass
            self.stream.write(text)
            self.stream.flush()

    def _show_warning(self, message, category, filename, lineno, file=None, line=None) -> None:
        """warnings.showwarning while a live line is on: a warning meant for stderr goes above it."""
        text = warnings.formatwarning(message, category, filename, lineno, line)
        if file is not None and file is not sys.stderr and file is not self.stream:  # not ours to place
            try:
                file.write(text)  # as warnings' own showwarning does
            except OSError:
                pass
            return
        self.above(text)

    def progress(self, message: str) -> None:
        """An interval line: rewritten in place on a terminal (rich's live display), a plain line elsewhere."""
        if not (self.is_main and self.fmt == "text" and not self.quiet):
            return
        with self._lock:
            if self._tty():
                try:
                    from rich.text import Text

                    if self._live is None:
                        self._start_live()
                    self._live.update(Text(f"caraml: {message}"), refresh=True)
                    return
                except Exception:  # noqa: BLE001 - a display problem never ends a run: plain lines instead
                    self._end_live()
            print(f"caraml: {message}", file=self.stream, flush=True)

    def _start_live(self) -> None:
        from rich.console import Console
        from rich.live import Live

        self._live = Live(console=Console(file=self.stream), auto_refresh=False, transient=False,
                          redirect_stdout=False, redirect_stderr=False)
        self._live.start()
        self._showwarning, warnings.showwarning = warnings.showwarning, self._show_warning

    def _tty(self) -> bool:
        try:
            return self.stream.isatty()
        except (AttributeError, ValueError):
            return False

    def _end_live(self) -> None:
        with self._lock:
            if self._live is None:
                return
            live, self._live = self._live, None
            if warnings.showwarning == self._show_warning:  # unless someone replaced it since
                warnings.showwarning = self._showwarning
            self._showwarning = None
            try:
                live.stop()  # the last interval line stays on the screen
            except Exception:  # noqa: BLE001
                pass

    # the run ---------------------------------------------------------------------------------------------------------
    def run_start(self, events_path: Path | None, message: str, **metadata) -> None:
        if self.is_main and events_path is not None:
            try:
                self._events = EventsFile(events_path)
            except OSError as exc:
                print(f"caraml: warning: events file {events_path} not written ({exc})", file=sys.stderr)
        self._event("run_start", "INTERVAL_START", **metadata)
        self.say(message)

    def run_stop(self, status: str, **metadata) -> None:
        self._end_live()
        self._event("run_stop", "INTERVAL_END", value=status, elapsed_s=_num(time.perf_counter() - self.t0),
                    **metadata)
        if self._events is not None:
            self._events.close()
            self._events = None

    def phase_start(self, phase: str, message: str | None = None, since: float | None = None, **metadata) -> None:
        """Starts a phase (at `since`, a perf_counter reading, when it began before it could be said)."""
        self._phases[phase] = time.perf_counter() if since is None else since
        self._event("phase_start", "INTERVAL_START", value=phase, at=since, **metadata)
        if message:
            self.say(message)

    def phase_end(self, phase: str, message: str = "", **metadata) -> float:
        """Ends a phase; says `<phase>: done in T[, message]`; returns its elapsed seconds."""
        elapsed = time.perf_counter() - self._phases.pop(phase, self.t0)
        self._event("phase_end", "INTERVAL_END", value=phase, elapsed_s=_num(elapsed), **metadata)
        self.say(f"{phase}: done in {fmt_seconds(elapsed)}" + (f", {message}" if message else ""))
        return elapsed

    def throughput(self, phase: str, step: int, total: int | None, steps: int, seconds: float,
                   clock: str = "device", loss: float | None = None, eta_s: float | None = None,
                   eta_upper: bool = False) -> None:
        """One interval: `steps` steps took `seconds` (the harness's own timings, read without a sync); with the
        workload's latest completed loss and the phase's ETA (`eta_upper`: at most that long) where known."""
        if not self.is_main or steps <= 0 or seconds <= 0:
            return
        step_s = seconds / steps
        fields = {"phase": phase, "step": step, "steps": total, "step_time_s": _num(step_s, 6), "clock": clock}
        text = [f"{phase} step {step}" + (f"/{total}" if total else ""), f"step {fmt_seconds(step_s)}"]
        value = None
        if self._rates:
            per_step, unit, flops_per_unit, world, peak = self._rates
            value = per_step / step_s
            fields[f"{unit}_per_s"] = _num(value, 2)
            text.append(f"{value:,.1f} {unit}/s")
            if flops_per_unit:
                tflops = flops_per_unit * value / world / 1e12
                fields["tflops_per_device"] = _num(tflops, 4)
                text.append(f"{tflops:.3g} TFLOP/s")
                if peak:
                    fields["mfu"] = _num(tflops / peak, 4)
                    text.append(f"MFU {100 * tflops / peak:.1f}%")
        if self._device is not None:
            mem, where = peak_memory(self._device)
            fields["peak_memory_bytes"] = mem
            fields["memory"] = where
            text.append(f"mem {fmt_bytes(mem)}" + (" (host)" if where == "host" else ""))
        if loss is not None:
            fields["loss"] = _num(loss, 4)
            text.append(f"loss {loss:.4g}")
        if eta_s is not None:
            fields["eta_s"] = _num(eta_s, 1)
            text.append(eta_text(eta_s, eta_upper))
        self._event("throughput", value=_num(value, 2), **fields)
        self.progress("  ".join(text))

    @contextlib.contextmanager
    def waiting(self, what: str):
        """While the block runs (a first step that compiles, a long build), say that it still runs: after one
        interval, then at doubling gaps up to HEARTBEAT_MAX_S. From a thread: the block itself prints nothing."""
        if self.interval_s <= 0 or not self.is_main or self.quiet or self.fmt != "text":
            yield
            return
        done = threading.Event()
        start = time.monotonic()

        def beat():
            gap = self.interval_s
            while not done.wait(gap):
                self.say(f"{what}: still running after {fmt_seconds(time.monotonic() - start)}")
                gap = min(2 * gap, max(HEARTBEAT_MAX_S, self.interval_s))

        thread = threading.Thread(target=beat, name="caraml-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def close(self, status: str = "error") -> None:
        """Ends the log; a run that ended without run_stop (bad input found while building) gets one."""
        if self._events is not None:
            self.run_stop(status)
        self._end_live()
        if self._events is not None:
            self._events.close()
            self._events = None

