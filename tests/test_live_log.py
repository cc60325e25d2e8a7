"""The live log: each phase announced with its elapsed time, one line per logging interval with
step n/N, step time, units/s, TFLOP/s and memory; `-q` quiet; `--log-format json` MLPerf-style events on stderr
and in runs/<run_id>.events.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import cli

TINY_IC = ("run", "image_classification", "--preset", "smoke", "power=off", "data=synthetic-device", "batch_size=2",
           "image_size=32", "num_classes=10", "warmup_steps=2", "measure_steps=3")
EVERY_STEP = "log_interval=0.000001"  # an interval shorter than any step: a line after every step


def _lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def test_every_phase_is_announced_with_its_elapsed_time_and_every_interval_has_a_line(tmp_path):
    proc = cli(*TINY_IC, EVERY_STEP, "--results", tmp_path, "--json", check=0)
    err = proc.stderr
    for phase in ("setup", "build", "warm-up", "measuring"):
        assert f"caraml: {phase}: done in " in err, err
    assert "caraml: warm-up step 2/2  step " in err and "caraml: measuring step 3/3  step " in err, err
    line = next(la for la in _lines(err) if la.startswith("caraml: measuring step 1/3"))
    assert "images/s" in line and "TFLOP/s" in line and "mem " in line, line
    assert "MFU" not in line  # the CPU profile has no peak: no MFU made up
    record = json.loads(proc.stdout)  # --json: still exactly one record on stdout
    assert record["status"] == "ok"


def test_log_interval_zero_keeps_the_phases_and_drops_the_step_lines(tmp_path):
    err = cli(*TINY_IC, "log_interval=0", "--results", tmp_path, check=0).stderr
    assert "caraml: measuring: done in " in err and " step 1/" not in err, err


def test_a_workloads_own_phase_is_announced_with_its_progress(tmp_path):
    err = cli("run", "fno", "--preset", "smoke-RBC2D", "power=off", "measure_steps=2", "epochs=1", EVERY_STEP,
              "--results", tmp_path, check=0).stderr
    assert "caraml: caraml-epochs: the workload's own measurement" in err, err
    assert "steps, " in err and " so far" in err, err
    assert "caraml: caraml-epochs: done in " in err, err


def test_quiet_says_only_the_summary(tmp_path):
    proc = cli(*TINY_IC, EVERY_STEP, "-q", "--results", tmp_path, check=0)
    (path,) = (tmp_path / "runs").glob("*.json")
    assert _lines(proc.stderr) == [f"caraml: record saved to {path}"], proc.stderr
    assert "image_classification" in proc.stdout  # the summary table


def test_quiet_still_says_errors(tmp_path):
    proc = cli(*TINY_IC, "batch_size=0", "-q", "--results", tmp_path, check=2)
    assert len(_lines(proc.stderr)) == 1 and "batch_size" in proc.stderr


def test_json_log_format_writes_mlperf_style_events_on_stderr_and_beside_the_record(tmp_path):
    proc = cli(*TINY_IC, EVERY_STEP, "--log-format", "json", "--json", "--results", tmp_path, check=0)
    record = json.loads(proc.stdout)  # stdout: the one record
    events = [json.loads(line) for line in _lines(proc.stderr)]  # stderr: nothing but events
    keys = [e["key"] for e in events]
    assert keys[0] == "run_start" and keys[-1] == "run_stop", keys
    assert {"phase_start", "phase_end", "throughput"} <= set(keys)
    assert events[0]["metadata"]["run_id"] == record["run_id"] and events[-1]["value"] == "ok"
    ended = {e["value"]: e["metadata"]["elapsed_s"] for e in events if e["key"] == "phase_end"}
    assert {"setup", "build", "warm-up", "measuring"} <= set(ended) and all(s >= 0 for s in ended.values())
    measured = [e for e in events if e["key"] == "throughput" and e["metadata"]["phase"] == "measuring"]
    assert [e["metadata"]["step"] for e in measured] == [1, 2, 3]
    assert all(e["value"] > 0 and e["metadata"]["images_per_s"] == e["value"] for e in measured)
    assert all(e["event_type"] in ("POINT_IN_TIME", "INTERVAL_START", "INTERVAL_END") for e in events)
    assert all(e["time_ms"] <= f["time_ms"] for e, f in zip(events[1:], events[2:]))  # in time order
    beside = Path(record["path"]).with_suffix(".events.jsonl")
    assert [json.loads(line)["key"] for line in beside.read_text().splitlines()] == keys


def test_text_runs_write_the_events_file_too(tmp_path):
    record = json.loads(cli(*TINY_IC, "--json", "--results", tmp_path, check=0).stdout)
    events = Path(record["path"]).with_suffix(".events.jsonl").read_text().splitlines()
    assert json.loads(events[0])["key"] == "run_start" and json.loads(events[-1])["key"] == "run_stop"


def test_log_format_is_checked():
    proc = cli(*TINY_IC, "--log-format", "xml", check=2)
    assert len(_lines(proc.stderr)) == 1 and "invalid choice: 'xml'" in proc.stderr


# the harness's timings, without device synchronisation ------------------------------------------------------------
class _Event:
    def __init__(self, t: float, done: bool):
        self.t, self.done, self.queried = t, done, 0

    def query(self) -> bool:
        self.queried += 1
        return self.done

    def elapsed_time(self, other) -> float:  # ms, as torch.cuda.Event's; both must have completed
        assert self.done and other.done, "elapsed_time on an event that has not completed would synchronise"
        return (other.t - self.t) * 1e3


def test_interval_time_on_cuda_comes_from_completed_events_only():
    from caraml.measure.timing import StepClock

    clock = StepClock("cpu", lambda: None)
    clock._cuda = True
    clock._events = [_Event(0.0, True)] + [_Event(0.5 * i, i <= 6) for i in range(1, 11)]  # 6 of 10 completed
    assert clock.completed() == (6, 3.0)
    for e in clock._events:
        e.queried = 0
    for e in clock._events[7:9]:
        e.done = True
    assert clock.completed() == (8, 4.0)
    assert sum(e.queried for e in clock._events[:7]) == 0  # the search starts after what was already seen
    assert sum(e.queried for e in clock._events) <= 4  # a binary search, not a query per step


class _Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


class _SlowFirstStep:
    def __init__(self, clock: _Clock, compiled: bool):
        from caraml.contract import BenchInfo

        self.clock, self.n = clock, 0
        self.info = BenchInfo(units_per_step=4, unit="things", flops_per_unit=1e9, flops_convention="x",
                              precision="fp32", compiled=compiled)

    def step(self):
        self.n += 1
        self.clock.now += 30.0 if self.n == 1 else 0.1


@pytest.mark.parametrize("compiled, why", [(True, "compilation"), (False, "first-step setup")])
def test_a_long_first_warmup_step_is_said_apart(monkeypatch, compiled, why):
    import io

    import torch

    from caraml.distributed import DistContext
    from caraml.measure import harness
    from caraml.measure.log import LiveLog
    from caraml.measure.stops import StopRequested
    from caraml.settings import MeasureSettings

    clock = _Clock()
    monkeypatch.setattr(harness.time, "perf_counter", clock)
    monkeypatch.setattr("caraml.measure.log.time.perf_counter", clock)
    out = io.StringIO()
    log = LiveLog(stream=out, interval_s=5.0)
    log.configure(info=_SlowFirstStep(clock, compiled).info, dp=1, world_size=1, peak_tflops=1.0)
    bench = _SlowFirstStep(clock, compiled)
    with StopRequested() as stop:
        harness.run_steps(bench, MeasureSettings(warmup_steps=4, measure_steps=2), torch.device("cpu"),
                          DistContext(), harness.Measurement(), stop, log=log)
    text = out.getvalue()
    assert "caraml: warm-up: first step took 30.0 s" in text, text
    assert f"caraml: warm-up: done in 30.3 s, first step 30.0 s ({why}; then 100.0 ms/step)" in text, text
    line = next(la for la in text.splitlines() if la.startswith("caraml: warm-up step 1/4"))
    # 4 things in 30 s; 1 GFLOP each: 0.13 GFLOP/s of a 1 TFLOP/s peak
    assert "step 30.0 s" in line and "0.1 things/s" in line and "MFU 0.0%" in line, line


class _Watched:
    """A stderr that tells when a line with `text` came."""

    def __init__(self, text: str):
        import io
        import threading

        self.text, self.seen, self.buf = text, threading.Event(), io.StringIO()

    def write(self, s: str) -> int:
        self.buf.write(s)
        if self.text in self.buf.getvalue():
            self.seen.set()
        return len(s)

    def flush(self) -> None:
        pass


class _CompilingFirstStep:
    """Its first step lasts until the log has said that the step still runs (as a long compilation would)."""

    def __init__(self, said):
        from caraml.contract import BenchInfo

        self.said, self.n = said, 0
        self.info = BenchInfo(units_per_step=1, unit="things", flops_per_unit=None, flops_convention="x",
                              precision="fp32", compiled=True)

    def step(self):
        self.n += 1
        if self.n == 1:
            assert self.said.wait(120), "no heartbeat during the first step"  # bounds a hang only


def test_a_long_first_step_is_said_while_it_runs():
    import torch

    from caraml.distributed import DistContext
    from caraml.measure import harness
    from caraml.measure.log import LiveLog
    from caraml.measure.stops import StopRequested
    from caraml.settings import MeasureSettings

    out = _Watched("caraml: warm-up step 1/2 (compilation, autotuning): still running after ")
    log = LiveLog(stream=out, interval_s=0.01)
    with StopRequested() as stop:
        harness.run_steps(_CompilingFirstStep(out.seen), MeasureSettings(warmup_steps=2, measure_steps=1),
                          torch.device("cpu"), DistContext(), harness.Measurement(), stop, log=log)
    assert "caraml: measuring: done in " in out.buf.getvalue()


def test_bad_input_found_while_building_ends_the_event_stream_and_leaves_no_events_file(tmp_path):
    from caraml import workloads
    from caraml.errors import BadInput
    from caraml.params import Param
    from caraml.workloads import Workload, register

    def refuse(params, ctx):
        raise BadInput("fake_refusing: no such data")

    register(Workload(name="fake_refusing", unit="things", params=[Param("batch", int, 3, minimum=1)], presets={},
                      build=refuse, columns=("system", "throughput")))
    try:
        proc = cli("run", "fake_refusing", "power=off", "device=cpu", "--system", "CPU", "--results", tmp_path,
                   "--log-format", "json", check=2)
    finally:
        workloads._REGISTERED.pop("fake_refusing")
    *stream, error = proc.stderr.strip().splitlines()
    assert error == "caraml: error: fake_refusing: no such data"
    last = json.loads(stream[-1])
    assert (last["key"], last["value"]) == ("run_stop", "error")
    assert list((tmp_path / "runs").iterdir()) == []  # no record: no events file beside it either


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_interval_rates_count_every_replica_and_tflops_per_device_of_the_whole_world(fmt):
    """dp = 2 replicas of tp = 2 (4 devices): 8 tokens per replica step, 0.5 s a step: 32 tokens/s in all;
    1 TFLOP per token over 4 devices: 8 TFLOP/s each, half of a 16 TFLOP/s peak."""
    import io

    from caraml.contract import BenchInfo
    from caraml.measure.log import LiveLog

    out = io.StringIO()
    log = LiveLog(stream=out, fmt=fmt)
    log.configure(info=BenchInfo(units_per_step=8, unit="tokens", flops_per_unit=1e12, flops_convention="x",
                                 precision="bf16"), dp=2, world_size=4, peak_tflops=16.0)
    log.throughput("measure", 12, 20, steps=4, seconds=2.0)
    if fmt == "json":
        event = json.loads(out.getvalue())
        assert event["key"] == "throughput" and event["value"] == 32.0
        assert event["metadata"]["tokens_per_s"] == 32.0 and event["metadata"]["step_time_s"] == 0.5
        assert event["metadata"]["tflops_per_device"] == 8.0 and event["metadata"]["mfu"] == 0.5
    else:
        assert out.getvalue() == "caraml: measure step 12/20  step 500.0 ms  32.0 tokens/s  8 TFLOP/s  MFU 50.0%\n"


class _HalfSecondSteps:
    """A bench whose every step takes 0.5 s of a fake clock: 8 tokens per replica step, 1 TFLOP per token."""

    def __init__(self, clock: _Clock):
        from caraml.contract import BenchInfo

        self.clock = clock
        self.info = BenchInfo(units_per_step=8, unit="tokens", flops_per_unit=1e12, flops_convention="x",
                              precision="bf16")

    def step(self):
        self.clock.now += 0.5


class _FourRanks:
    """Rank 0 of 4 that agree on everything (the other ranks' values are this rank's)."""

    rank, local_rank, world_size, is_main = 0, 0, 4, True

    def all_reduce(self, value, op="sum"):
        return value if op == "max" else 4 * value

    def barrier(self):
        pass


def test_the_runner_gives_the_live_log_the_replicas_and_the_world_of_its_layout(monkeypatch):
    """dp = 2 x tp = 2 on 4 ranks, through the runner's measurement: 32 tokens/s in all, 8 TFLOP/s per device."""
    import io
    from types import SimpleNamespace

    import torch

    from caraml import runner
    from caraml.measure import harness
    from caraml.measure.log import LiveLog
    from caraml.measure.stops import StopRequested
    from caraml.parallel_dims import ParallelDims
    from caraml.settings import MeasureSettings

    clock = _Clock()
    monkeypatch.setattr(harness.time, "perf_counter", clock)
    bench = _HalfSecondSteps(clock)
    workload = SimpleNamespace(name="half_second_steps", build=lambda config, ctx: bench)
    run = SimpleNamespace(workload=workload, config=None, measure=MeasureSettings(warmup_steps=1, measure_steps=4))
    setup = runner._Setup(run=run, dist=_FourRanks(), dims=ParallelDims(dp=2, tp=2), device=torch.device("cpu"),
                          tag="test", profile={"peak_tflops": {"bf16": 16.0}}, config_id="0" * 16)
    out = io.StringIO()
    log = LiveLog(fmt="json", interval_s=0.25, stream=out)
    record = SimpleNamespace(status=None, error=None)
    with StopRequested() as stop:
        runner._measure(setup, record, harness.Measurement(), stop, None, log)
    assert record.status == "ok"
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    rates = [e["metadata"] for e in events if e["key"] == "throughput" and e["metadata"]["phase"] == "measuring"]
    assert len(rates) == 4
    for r in rates:
        assert (r["tokens_per_s"], r["tflops_per_device"], r["mfu"]) == (32.0, 8.0, 0.5)


@pytest.mark.parametrize("seconds, text", [(0.0125, "12.5 ms"), (1.0, "1.0 s"), (119.9, "119.9 s"),
                                           (120.0, "2.0 min"), (330.0, "5.5 min")])
def test_times_are_said_in_ms_below_a_second_and_in_minutes_from_two(seconds, text):
    from caraml.measure.log import fmt_seconds

    assert fmt_seconds(seconds) == text


@pytest.mark.parametrize("size, text", [(None, "-"), (0, "-"), (1536, "2 KiB"), (2 ** 20 - 1, "1024 KiB"),
                                        (2 ** 20, "1.00 MiB"), (2 ** 30 - 2 ** 20, "1023.00 MiB"),
                                        (2 ** 30, "1.00 GiB"), (80 * 2 ** 30, "80.00 GiB")])
def test_memory_is_said_in_the_largest_unit_it_fills(size, text):
    from caraml.measure.log import fmt_bytes

    assert fmt_bytes(size) == text


def test_a_long_wait_is_said_at_doubling_gaps_up_to_the_heartbeat_limit(monkeypatch):
    """interval 5 s: said after 5, 15, 35, 75 s, then every 60 s (HEARTBEAT_MAX_S). The heartbeat thread's waits
    pass on a fake clock: its event, faked, advances the clock by each wait and ends the wait after six."""
    import io
    import threading
    from types import SimpleNamespace

    from caraml.measure import log as log_mod

    clock = _Clock()
    gaps, beaten = [], threading.Event()

    class FakeDone:
        def wait(self, gap):
            gaps.append(gap)
            clock.now += gap
            if len(gaps) < 7:
                return False
            beaten.set()
            return True

        def set(self):
            pass

    monkeypatch.setattr(log_mod, "threading", SimpleNamespace(Event=FakeDone, Thread=threading.Thread))
    monkeypatch.setattr(log_mod.time, "monotonic", clock)
    out = io.StringIO()
    log = log_mod.LiveLog(stream=out, interval_s=5.0)
    with log.waiting("build"):
        assert beaten.wait(60), "the heartbeat never waited a seventh time"  # bounds a hang only
    assert gaps == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0, 60.0]
    assert out.getvalue().splitlines() == [f"caraml: build: still running after {t}" for t in
                                           ("5.0 s", "15.0 s", "35.0 s", "75.0 s", "2.2 min", "3.2 min")]
