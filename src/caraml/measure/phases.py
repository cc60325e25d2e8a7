"""The harness's phase edges and who is told of them: one call at each edge, heard by every observer in turn.

Observers (each a PhaseObserver): the phase as the measurement and the power monitor know it (PowerMarks), the
workload that learns where its measured steps begin (MeasuredSteps), and the live log (caraml.measure.log.LiveLog).
The log names its phases for people ("warm-up", "measuring"); the record and the monitor's energy phases keep
their own names ("warmup", "measure"), so PowerMarks translates.
"""

from __future__ import annotations

from typing import Protocol

# the log's phase names -> the record's and the power monitor's (any other phase keeps its name)
RECORD_NAMES = {"warm-up": "warmup", "measuring": "measure"}


class PhaseObserver(Protocol):
    def phase_start(self, phase: str, message: str | None = None, **fields) -> object: ...

    def phase_end(self, phase: str, message: str = "", **fields) -> object: ...


class Phases:
    """The observers of one run's phases, told in the order given (the power mark before the log line: the energy
    of a phase starts before anything is said of it)."""

    def __init__(self, *observers: PhaseObserver):
        self.observers = observers

    def phase_start(self, phase: str, message: str | None = None, **fields) -> None:
        for observer in self.observers:
            observer.phase_start(phase, message, **fields)

    def phase_end(self, phase: str, message: str = "", **fields) -> None:
        for observer in self.observers:
            observer.phase_end(phase, message, **fields)


class PowerMarks:
    """The phase in the measurement (`m.phase`, which says where a stopped run stopped) and the power monitor's
    mark that starts the phase's energy. A phase's energy ends where the next one's starts, the last at done()."""

    def __init__(self, m, monitor=None):
        self.m, self.monitor = m, monitor

    def phase_start(self, phase: str, message: str | None = None, **fields) -> None:
        self._mark(RECORD_NAMES.get(phase, phase))

    def phase_end(self, phase: str, message: str = "", **fields) -> None:
        pass  # the next phase_start (or done) ends it

    def done(self) -> None:
        """The steps are over: a stopped run keeps the phase it stopped in; the monitor's last phase ends."""
        if self.m.stop_signal is None:
            self.m.phase = "done"
        if self.monitor:
            self.monitor.mark("done")

    def _mark(self, phase: str) -> None:
        self.m.phase = phase
        if self.monitor:
            self.monitor.mark(phase)


class MeasuredSteps:
    """A workload with per-step figures of its own (a Bench's `begin_measure`) learns where the measured window
    begins: after the monitor's mark, before the log's line, as the harness always told it."""

    def __init__(self, bench):
        self.bench = bench

    def phase_start(self, phase: str, message: str | None = None, **fields) -> None:
        if phase == "measuring":
            self.bench.begin_measure()

    def phase_end(self, phase: str, message: str = "", **fields) -> None:
        pass
