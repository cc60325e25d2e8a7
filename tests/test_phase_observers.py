"""The harness's phase edges: at each one the power monitor is marked first, then the workload learns where its
measured steps begin, then the live log says the phase; the record's phase names stay "warmup" and "measure"."""

from __future__ import annotations

import json

import torch

from caraml.distributed import DistContext
from caraml.measure.harness import Measurement, run_steps
from caraml.measure.log import LiveLog
from caraml.measure.stops import StopRequested
from caraml.settings import MeasureSettings


class _Said:
    """The log's stream, the monitor and the workload write into one list: the order they were told in."""

    def __init__(self):
        self.seen = []

    def write(self, text):
        for line in filter(str.strip, text.splitlines()):  # print() writes its newline apart
            event = json.loads(line)
            if event["key"].startswith("phase_"):
                self.seen.append(f"log {event['key']} {event['value']}")

    def flush(self):
        pass

    def mark(self, phase):
        self.seen.append(f"mark {phase}")


class _Bench:
    extra_phase = "own-epochs"

    def __init__(self, seen):
        self.seen = seen

    def step(self):
        pass

    def begin_measure(self):
        self.seen.append("begin_measure")

    def run_extra(self, should_stop):
        should_stop()


def test_each_phase_edge_marks_the_monitor_then_the_workload_then_the_log():
    said = _Said()
    log = LiveLog(fmt="json", stream=said, interval_s=0)
    m = Measurement()
    with StopRequested() as stop:
        run_steps(_Bench(said.seen), MeasureSettings(warmup_steps=2, measure_steps=3), torch.device("cpu"),
                  DistContext(), m, stop, said, log)
    assert said.seen == ["mark warmup", "log phase_start warm-up", "log phase_end warm-up",
                         "mark measure", "begin_measure", "log phase_start measuring", "log phase_end measuring",
                         "mark own-epochs", "log phase_start own-epochs", "log phase_end own-epochs",
                         "mark done"]
    assert (m.phase, m.steps, len(m.warmup_times)) == ("done", 3, 2)


def test_a_stop_in_the_warm_up_keeps_its_phase_and_marks_no_end():
    said = _Said()
    log = LiveLog(fmt="json", stream=said, interval_s=0)
    m = Measurement()
    with StopRequested() as stop:
        stop.signal = "SIGTERM"  # came while the benchmark was being built
        run_steps(_Bench(said.seen), MeasureSettings(warmup_steps=2, measure_steps=3), torch.device("cpu"),
                  DistContext(), m, stop, said, log)
    assert said.seen == ["mark warmup", "log phase_start warm-up"]
    assert (m.phase, m.stop_signal, m.warmup_times) == ("warmup", "SIGTERM", [])
