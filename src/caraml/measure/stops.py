"""Stop signals turned into a flag checked between steps, so a stopped run still leaves its record.

SIGTERM (SLURM's end, `kill`), SIGINT (Ctrl-C), SIGUSR2 (SLURM's warning signal) and SIGHUP (a closed
terminal or dropped ssh session). `catch_early()` is called first thing by `caraml run`, so that a signal
that comes while Python is still importing torch is remembered, not fatal.
"""

from __future__ import annotations

import contextlib
import signal

STOP_SIGNALS = tuple(s for s in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGUSR2", None),
                                 getattr(signal, "SIGHUP", None)) if s)
_early: list[str] = []  # signals caught before a StopRequested took over
_taken: list[str] = []  # signals a StopRequested took


def _remember(signum, _frame):
    _early.append(signal.Signals(signum).name)


def stop_came() -> bool:
    """Whether a stop signal came to this process, before a run's StopRequested took over or while it held."""
    return bool(_early or _taken)


def catch_early() -> None:
    for sig in STOP_SIGNALS:
        signal.signal(sig, _remember)


class StopRequested:
    """Turns stop signals into a flag checked between steps; a second signal stops at once, and so does the first
    inside `at_once()`."""

    def __init__(self):
        self.signal: str | None = _early[0] if _early else None
        self._old = {}
        self._at_once = False

    @contextlib.contextmanager
    def at_once(self):
        """Inside the block the first stop signal ends it (KeyboardInterrupt, with `signal` set): for work that
        checks no flag and may run for minutes - a build, a warm-up step that compiles or autotunes - where SLURM
        would SIGKILL the run KillWait (30 s) after its SIGTERM, before a record is written."""
        if self.signal is not None:
            raise KeyboardInterrupt
        self._at_once = True
        try:
            yield
        finally:
            self._at_once = False

    def __enter__(self):
        for sig in STOP_SIGNALS:
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread
                pass
        return self

    def _handle(self, signum, _frame):
        again = self.signal is not None
        self.signal = self.signal or signal.Signals(signum).name
        _taken.append(signal.Signals(signum).name)
        if again or self._at_once:
            raise KeyboardInterrupt

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        return False


class Interrupting:
    """Stop signals raise KeyboardInterrupt while the block runs, whatever they did before: a command that has
    nothing to save stops where it is and cleans up on the way out (`with` blocks, `finally`)."""

    def __enter__(self):
        self._old = {}
        for sig in STOP_SIGNALS:
            try:
                self._old[sig] = signal.signal(sig, _interrupt)
            except ValueError:  # not the main thread
                pass
        return self

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        return False


def _interrupt(_signum, _frame):
    raise KeyboardInterrupt
