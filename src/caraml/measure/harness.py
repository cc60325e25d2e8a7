"""The measurement harness: warm-up, then a timed steady-state window, for any workload's `step()`.

It knows nothing about models. It turns steps into throughput (global units over the wall time
of the measured window, slowest rank), step-time statistics, TFLOP/s, MFU and peak memory, and it
stops cleanly at a stop signal (measure/stops.py), keeping what it measured.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from caraml.kit.compile import graph_breaks
from caraml.measure import steady
from caraml.measure.log import LONG_FIRST_STEP, LiveLog, eta_text, fmt_seconds
from caraml.measure.phases import MeasuredSteps, Phases, PowerMarks
from caraml.measure.stops import StopRequested
from caraml.measure.timing import StepClock, summarize
from caraml.settings import MeasureSettings

# Ranks agree on stopping every this many measured steps: one small all-reduce, not one per step.
STOP_CHECK_EVERY = 10


@dataclass
class Measurement:
    """What the harness measured so far (filled as it goes, so a stopped run keeps it)."""

    phase: str = "setup"
    warmup_times: list[float] = field(default_factory=list)
    warmup_s: float = 0.0
    step_times: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    steps: int = 0
    stop_signal: str | None = None
    agreed: bool = False  # all ranks stopped at the same step, so collectives are still safe
    window: dict | None = None  # how the measured window ended (caraml.measure.steady.window_record)
    graph_breaks_before: dict | None = None  # torch.compile's graph breaks when the build began (kit.compile)
    graph_breaks: dict | None = None  # those made since, up to the end of the measured window


def say(message: str, dist) -> None:
    if dist.is_main:
        print(f"caraml: {message}", file=sys.stderr, flush=True)


def run_steps(bench, settings: MeasureSettings, device, dist, m: Measurement, stop: StopRequested,
              monitor=None, log: LiveLog | None = None) -> None:
    """Warm up, then measure; fills `m` as it goes so an interruption keeps what was measured. `log` announces
    each phase and, every `settings.log_interval` seconds, the steps' rates (caraml.measure.log)."""
    run = _step_run(bench, settings, device, dist, m, stop, monitor, log)
    # Everything built so far lives for the whole run: keep it out of the garbage collector's full scans, which
    # otherwise grow with the size of the imported libraries and stall launch-bound steps (timeit's reasoning).
    gc.collect()
    gc.freeze()
    try:
        if not _warm_up(run):
            return  # stopped before the window: the power phases end where the run did
        _measure(run)
        if m.graph_breaks_before is not None:  # before the extra phase, whose compiles (FNO's report) are not the run's
            m.graph_breaks = graph_breaks(m.graph_breaks_before)
        _run_extra(run)
    finally:
        gc.unfreeze()  # the frozen setup objects become collectable again once the steps are done
    run.power.done()


@dataclass
class StepRun:
    """One run_steps call: what each of its phases reads, built once. `phases` tells every observer of a phase
    edge at once (caraml.measure.phases); `log` also carries the lines inside a phase."""

    bench: object
    settings: MeasureSettings
    device: object
    sync: Callable[[], None]
    dist: object
    m: Measurement
    stop: StopRequested
    log: LiveLog
    power: PowerMarks
    phases: Phases


def _step_run(bench, settings: MeasureSettings, device, dist, m: Measurement, stop: StopRequested, monitor,
              log: LiveLog | None) -> StepRun:
    if log is None:
        log = LiveLog(dist.is_main, interval_s=settings.log_interval)
        if getattr(bench, "info", None) is not None:
            log.configure(info=bench.info, dp=1, world_size=dist.world_size)
    log.configure(device=device)
    sync = (lambda: __import__("torch").cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    power = PowerMarks(m, monitor)
    # the monitor's mark first, then the workload, then the log's line (the order the phases were always told in)
    observers = (power, MeasuredSteps(bench), log) if hasattr(bench, "begin_measure") else (power, log)
    return StepRun(bench, settings, device, sync, dist, m, stop, log, power, Phases(*observers))


def _warm_up(run: StepRun) -> bool:
    """The warm-up steps, each timed on its own (a synchronisation after each); False when a stop came."""
    bench, log, m = run.bench, run.log, run.m
    total = run.settings.warmup_steps
    bound = run.settings.warmup_max_seconds
    run.phases.phase_start("warm-up", f"warm-up: {total} steps" + (
        f", or {fmt_seconds(bound)} once {MIN_WARMUP_STEPS} are done" if bound > 0 else ""), steps=total)
    if _stop_agreed(run, every=1):  # a stop that came while the benchmark was being built
        return False
    start = last = time.perf_counter()
    logged = 0
    for i in range(total):
        t0 = time.perf_counter()
        # compilation, autotuning, graph capture: a warm-up step may take minutes and checks no stop flag
        with log.waiting(f"warm-up step 1/{total} (compilation, autotuning)") if i == 0 else _nothing(), \
                run.stop.at_once():
            bench.step()
            run.sync()
        now = time.perf_counter()
        m.warmup_times.append(now - t0)
        if i == 0 and total > 1 and log.due(t0, now):  # a first step this long is compilation, autotuning
            log.say(f"warm-up: first step took {fmt_seconds(now - t0)} ("
                    + ("compilation, " if _compiled(bench) else "") + "autotuning, caches)")
        if log.due(last, now) and i + 1 > logged:
            log.throughput("warm-up", i + 1, total, i + 1 - logged, sum(m.warmup_times[logged:]), clock="host")
            last, logged = now, i + 1
        if _stop_agreed(run, every=1):
            run.phases.phase_end("warm-up", f"stopped after {len(m.warmup_times)} steps", stopped=True)
            return False
        if _warm_enough(run, now - start):
            break
    m.warmup_s = time.perf_counter() - start
    first, rest = m.warmup_times[0], m.warmup_times[1:]
    typical = statistics.median(rest) if rest else None
    long_first = typical is not None and first > 1.0 and first > LONG_FIRST_STEP * typical
    why = "compilation" if _compiled(bench) else "first-step setup"
    run.phases.phase_end("warm-up", f"first step {fmt_seconds(first)}" + (
        f" ({why}; then {fmt_seconds(typical)}/step)" if long_first else ""),
        steps=len(m.warmup_times), first_step_s=round(first, 6),
        typical_step_s=round(typical, 6) if typical else None)
    return True


MIN_WARMUP_STEPS = 3  # the compiling first step, then two: the median of the last three is a typical step


def _warm_enough(run: StepRun, elapsed: float) -> bool:
    """Whether warmup_max_seconds ends the warm-up here, before warmup_steps: as soon as any rank has run that long,
    so every rank measures from the same step."""
    bound, done = run.settings.warmup_max_seconds, len(run.m.warmup_times)
    if bound <= 0 or done < MIN_WARMUP_STEPS or done >= run.settings.warmup_steps:
        return False
    return run.dist.all_reduce(1.0 if elapsed >= bound else 0.0, "max") > 0


_nothing = contextlib.nullcontext


def _compiled(bench) -> bool:
    return bool(getattr(getattr(bench, "info", None), "compiled", False))


def _window_steps(settings: MeasureSettings, dist, m: Measurement) -> int:
    if settings.measure_seconds <= 0:
        return settings.measure_steps
    # Every rank must run the same number of steps: fix it from the slowest rank's typical warm-up step.
    return max(1, int(settings.measure_seconds / max(_typical_step(dist, m), 1e-9)))


def _typical_step(dist, m: Measurement) -> float:
    """The slowest rank's typical warm-up step (s): the median of its last three, so that a first step that
    compiled does not count alone. Collective: the same on every rank."""
    typical = statistics.median(m.warmup_times[-3:] if len(m.warmup_times) > 1 else m.warmup_times)
    return dist.all_reduce(typical, "max")


def _measure(run: StepRun) -> None:
    """The measured window: a fixed number of steps, or until-steady (until the mean step time's interval is within
    measure_ci, caps aside), between two device synchronisations. Its interval lines and steadiness checks read
    only steps that have completed (StepClock.completed: no synchronisation inside the window)."""
    settings, dist, m = run.settings, run.dist, run.m
    until_steady = settings.measure == "until-steady"
    steps = settings.measure_max_steps if until_steady else _window_steps(settings, dist, m)
    # steps of 0.1 s or more: the verdict is asked every step, so that measure_max_seconds is kept to within one
    slow = until_steady and _typical_step(dist, m) >= steady.SLOW_STEP_S
    dist.barrier()
    # the workload learns here which steps are measured (its own per-step figures): phases.MeasuredSteps
    run.phases.phase_start(
        "measuring", f"measuring until the mean step time is known within ±{100 * settings.measure_ci:g} "
        f"% (at most {steps} steps, {fmt_seconds(settings.measure_max_seconds)})" if until_steady
        else f"measuring: {steps} steps", steps=None if until_steady else steps)
    clock = StepClock(run.device.type, run.sync)
    clock.start()
    line = _Lines(run, clock, steps if not until_steady else None)
    for _ in range(steps):
        run.bench.step()
        clock.tick()
        m.steps += 1
        line.maybe()
        if _stop_agreed(run, every=STOP_CHECK_EVERY):
            stopped_by = "stop"
            break
        if until_steady and (why := _steady_agreed(clock, settings, dist, m.steps, slow)):
            stopped_by = why
            break
    else:
        stopped_by = "max_steps" if until_steady else "steps"
    m.wall_s, m.step_times = clock.stop()
    _close_window(run, stopped_by)


class _Lines:
    """The measured window's interval lines: rates, loss and ETA of the steps completed since the last line."""

    def __init__(self, run: StepRun, clock: StepClock, total: int | None):
        self.bench, self.log, self.clock, self.settings, self.total = run.bench, run.log, clock, run.settings, total
        self.where = "device events" if run.device.type == "cuda" else "host"
        self.done = 0
        self.done_s = 0.0
        self.last = time.perf_counter()

    def maybe(self) -> None:
        if not self.log.due(self.last, now := time.perf_counter()):
            return
        n, t = self.clock.completed()
        if n <= self.done:
            return
        step_s = (t - self.done_s) / (n - self.done)
        loss = self.bench.live_loss() if hasattr(self.bench, "live_loss") else None
        self.log.throughput("measuring", n, self.total, n - self.done, t - self.done_s, clock=self.where,
                            loss=loss, eta_s=self._eta(n, step_s, now), eta_upper=self.total is None)
        self.done, self.done_s, self.last = n, t, now

    def _eta(self, steps: int, step_s: float, now: float) -> float:
        """From `steps` completed: fixed window, the steps left at the recent step time; until-steady, up to its
        caps."""
        if self.total is not None:
            return (self.total - steps) * step_s
        left = (self.settings.measure_max_steps - steps) * step_s
        return max(0.0, min(left, self.settings.measure_max_seconds - (now - self.clock.wall_start)))


def _steady_agreed(clock: StepClock, settings: MeasureSettings, dist, steps: int, slow: bool) -> str | None:
    """Why an until-steady window stops now ("interval", "max_seconds"), or None; asked at the same steps on every
    rank (steady.check_every), and agreed: the interval when every rank has it, a cap when any rank reached it."""
    if steps % steady.check_every(steps, slow):
        return None
    elapsed = time.perf_counter() - clock.wall_start
    capped = elapsed >= settings.measure_max_seconds
    done = elapsed >= settings.measure_min_seconds and steady.verdict(clock.completed_times(), settings.measure_ci).stop
    if dist.world_size > 1:
        capped = dist.all_reduce(1.0 if capped else 0.0, "max") > 0
        done = dist.all_reduce(1.0 if done else 0.0, "sum") >= dist.world_size
    return "interval" if done else "max_seconds" if capped else None


def _close_window(run: StepRun, stopped_by: str) -> None:
    """The window's record (metrics.window), the warning when a cap ended an until-steady window, the phase's end."""
    settings, m = run.settings, run.m
    target = settings.measure_ci if settings.measure == "until-steady" else None
    m.window = steady.window_record(settings.measure, m.steps, m.wall_s, m.step_times, target, stopped_by)
    cap = {"max_steps": f"measure_max_steps={settings.measure_max_steps}",
           "max_seconds": f"measure_max_seconds={settings.measure_max_seconds:g}"}.get(stopped_by, "")
    warning = steady.cap_warning(m.window, cap)
    if warning:
        say(warning, run.dist)
    ci = m.window["ci_rel"]
    run.phases.phase_end("measuring", f"{m.steps} steps, {fmt_seconds(m.wall_s / m.steps) if m.steps else '-'}/step"
                         + (f" ±{100 * ci:.1f} %" if ci is not None else ""),
                         steps=m.steps, window_s=round(m.wall_s, 6), stopped_by=stopped_by, ci_rel=ci)


def _run_extra(run: StepRun) -> None:
    """A workload's own measurement after the steady-state window (a Bench with `extra_phase`, e.g. CARAML's
    epochs): a phase of its own for the power monitor, with the same collective stop checks."""
    bench, log = run.bench, run.log
    phase = getattr(bench, "extra_phase", None)
    if not phase or run.m.stop_signal:
        return
    run.dist.barrier()
    run.phases.phase_start(phase, f"{phase}: the workload's own measurement")
    calls = itertools.count(1)
    last = [time.perf_counter()]

    def should_stop() -> bool:
        # Called once per step of the workload's own loop: every call on one process, every STOP_CHECK_EVERY-th
        # collectively with several (the same count on every rank, as the contract asks).
        count = next(calls)
        if log.due(last[0], now := time.perf_counter()):
            left = bench.extra_left(count - 1, now - log_start) if hasattr(bench, "extra_left") else None
            log.progress(f"{phase}: {count - 1} steps, {fmt_seconds(now - log_start)} so far"
                         + (f", {eta_text(left)}" if left is not None else ""))
            last[0] = now
        return _stop_agreed(run, every=STOP_CHECK_EVERY, count=count)

    log_start = time.perf_counter()
    bench.run_extra(should_stop)
    run.phases.phase_end(phase, f"{next(calls) - 1} steps")


def _stop_agreed(run: StepRun, every: int, count: int | None = None) -> bool:
    """Whether to stop now. With several ranks the decision is collective (every `every` steps), so all
    ranks leave the loop at the same step and can still agree on the window and the energy."""
    dist, m, stop = run.dist, run.m, run.stop
    if count is None:
        count = m.steps if m.phase == "measure" else len(m.warmup_times)
    if dist.world_size == 1:
        stopped = stop.signal is not None
    elif count % every:
        return False
    else:
        stopped = dist.all_reduce(1.0 if stop.signal else 0.0, "max") > 0
    if stopped:
        m.stop_signal = stop.signal or "a stop signal on another rank"
        m.agreed = True
    return stopped


def metrics(info, dims, dist, m: Measurement, peak_tflops: float | None, interrupted: bool) -> dict:
    """Throughput, step times and FLOP rates of one measurement, from the Bench's `info` (caraml.bench.BenchInfo)
    and the run's parallel layout. Units count once per data-parallel replica; the window is the slowest rank's.
    `interrupted`: the ranks did not stop together, so no collectives (other ranks may be gone)."""
    if interrupted:
        # Other ranks may be gone: no collectives. This rank's window stands for all, said so in the record.
        wall, units = m.wall_s, info.units_per_step * m.steps * dims.dp
    else:
        wall = dist.all_reduce(m.wall_s, "max")
        mine = info.units_per_step * m.steps if dims.counts_units(dist.rank) else 0.0
        units = dist.all_reduce(float(mine), "sum")
    value = units / wall if wall > 0 and m.steps else None
    steady = summarize(m.step_times)
    first = m.warmup_times[0] if m.warmup_times else None
    compile_s = None
    if first is not None and steady and info.compiled:
        compile_s = max(0.0, first - steady["median"]) + info.compile_setup_s
    tflops = mfu = None
    if value and info.flops_per_unit:
        tflops = info.flops_per_unit * value / dist.world_size / 1e12
        mfu = tflops / peak_tflops if peak_tflops else None
    return {
        "throughput": {"value": value, "unit": f"{info.unit}/s"},
        "units": units,
        "measured_steps": m.steps,
        "measured_time_s": wall,
        "window": m.window,
        "step_time_s": steady,
        "warmup": {"steps": len(m.warmup_times), "time_s": m.warmup_s or sum(m.warmup_times),
                   "first_step_s": first, "compile_s": compile_s, "step_times_s": m.warmup_times},
        "flops_per_unit": info.flops_per_unit,
        "flops_convention": info.flops_convention,
        "precision_in_use": info.precision,
        "tflops_per_device": tflops,
        "peak_tflops": peak_tflops,
        "mfu": mfu,
        "parallel": dims.as_dict(),
        "throughput_source": "this rank's window x data-parallel size (interrupted)"
        if interrupted and dist.world_size > 1 else "all ranks",
    }


def memory(device) -> dict:
    import resource

    out = {"peak_host_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
           "peak_memory_bytes": None}
    if device.type == "cuda":
        import torch

        out["peak_memory_bytes"] = torch.cuda.max_memory_allocated(device)
        out["peak_memory_reserved_bytes"] = torch.cuda.max_memory_reserved(device)
    return out
