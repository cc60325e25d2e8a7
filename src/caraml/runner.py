"""One flow from run spec to record: resolve the settings by owner, pick device and system, measure, record, store."""

from __future__ import annotations

import os
import re
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from caraml import distributed, rollcall, systems, workloads
from caraml import params as params_mod
from caraml.contract import RunContext
from caraml.errors import BadInput
from caraml.kit import torch_features
from caraml.kit.compile import graph_break_counts, graph_breaks
from caraml.measure.harness import Measurement, memory, metrics, run_steps, say
from caraml.measure.log import LiveLog, fmt_seconds
from caraml.measure.stops import StopRequested
from caraml.paths import ensure_writable_dir, safe_name
from caraml.results import record as rec
from caraml.results.store import Store
from caraml.settings import RUN_PARAMS, MeasureSettings, PowerSettings, check_window


@dataclass
class RunSpec:
    workload: str
    params: dict[str, Any] = field(default_factory=dict)  # as given by the user (strings or values)
    preset: str | None = None
    system: str | None = None  # tag; None: detect
    results: str = "caraml-results"
    force_system: bool = False  # take `system` at its word even where the device contradicts it
    quiet: bool = False  # the live log says nothing (errors and the final summary only)
    log_format: str = "text"  # text lines, or MLPerf-style JSON events, on stderr (caraml.measure.log)


@dataclass(frozen=True)
class Resolved:
    """A run spec's settings, each with its owner: the workload's config, the harness's, the power monitor's.
    `values` is the same, flat: every effective parameter, as the record's `params` keeps it."""

    workload: workloads.Workload
    values: dict[str, Any]
    config: Any
    measure: MeasureSettings
    power: PowerSettings
    preset: str | None = None  # the preset's name as the workload spells it


def resolve(spec: RunSpec) -> Resolved:
    """Every effective parameter, typed and checked (imports no torch unless a check needs it)."""
    wl = workloads.get(spec.workload)
    name = workloads.preset_named(wl, spec.preset) if spec.preset is not None else None
    values = params_mod.resolve(wl.params + RUN_PARAMS, spec.params, wl.name, wl.presets[name] if name else None)
    check_window(values, params_mod.canonical(wl.params + RUN_PARAMS, spec.params, wl.name), wl.name)
    return Resolved(wl, values, wl.config_of(values), MeasureSettings.from_params(values),
                    PowerSettings.from_params(values), name)


def resolve_params(spec: RunSpec) -> tuple[workloads.Workload, dict[str, Any]]:
    """The workload and every effective parameter, flat (for callers that print or store them)."""
    run = resolve(spec)
    return run.workload, run.values


def device_for(choice: str, local_rank: int = 0):
    """The device a run with device=`choice` uses on this machine as local rank `local_rank`."""
    import torch

    if choice == "cuda" and not torch.cuda.is_available():
        raise BadInput("device=cuda was asked for but torch sees no GPU; use device=cpu or device=auto")
    if choice in ("cuda", "auto") and torch.cuda.is_available():
        if local_rank >= torch.cuda.device_count():
            raise BadInput(f"local rank {local_rank} has no GPU: only {torch.cuda.device_count()} visible")
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def _pick_device(choice: str, dist):
    device = device_for(choice, dist.local_rank)
    if device.type == "cuda":
        import torch

        torch.cuda.set_device(device)
    return device


@dataclass
class _Setup:
    """What a run stands on before its first step: settings, ranks, layout, device, system."""

    run: Resolved
    dist: Any  # caraml.distributed.DistContext
    dims: Any  # caraml.parallel_dims.ParallelDims
    device: Any  # torch.device
    tag: str
    profile: dict
    config_id: str  # the configuration's hash (caraml.results.record.config_id): rank check-in and record share it

    def context(self) -> RunContext:
        return RunContext(device=self.device, seed=self.run.measure.seed, dist=self.dist, dims=self.dims,
                          data_root=os.environ.get("CARAML_DATA"))


def _set_up(spec: RunSpec) -> _Setup:
    """Everything that can be refused before a process group starts: parameters, layout, device, system."""
    run = resolve(spec)
    wl = run.workload
    workloads.require_built(wl)
    dist = distributed.launch_env()
    dims = wl.parallel_dims(run.config, dist.world_size).for_rank(dist.rank)
    if wl.torch_features:  # the container's torch may be older than the configuration needs: one line, exit 2
        try:
            torch_features.require(wl.torch_features(run.config, dims))
        except BadInput as exc:
            exc.every_rank = True  # the same torch everywhere: rank 0 says it (cli._quiet_rank)
            raise
    device = _pick_device(run.measure.device, dist)
    if wl.check_device:
        wl.check_device(run.config, device)
    tag = systems.get(spec.system)["tag"] if spec.system else systems.detect(device)
    profile = systems.get(tag)
    if spec.system and not spec.force_system:
        systems.require_fits(profile, device, "drop --system to use the detected {detected}, or add "
                                              "--force-system to record this run as that system anyway")
    cid = rec.config_id(wl.identifying(run.values), tag, {"world_size": dist.world_size, "nodes": dist.nodes})
    return _Setup(run, dist, dims, device, tag, profile, cid)


def build_bench(spec: RunSpec, device: str | None = None):
    """The Bench of a run spec, built in this process without harness, monitor or record: for profile scripts
    and tests that drive `step()` themselves. Under torchrun the process group must already be up."""
    if device is not None:
        spec = RunSpec(spec.workload, {**spec.params, "device": device}, spec.preset, spec.system, spec.results,
                       spec.force_system)
    setup = _set_up(spec)
    if setup.dist.world_size > 1:
        import torch.distributed as tdist

        setup.dist.backend = tdist.get_backend()
    return setup.run.workload.build(setup.run.config, setup.context())


def execute(spec: RunSpec, monitor_factory=None) -> dict:
    """Run one benchmark point; returns its record (saved by rank 0). BadInput propagates."""
    with StopRequested() as stop:  # from the very start: a stop during start-up still leaves a record
        return _execute(spec, stop, monitor_factory)


def _execute(spec: RunSpec, stop: StopRequested, monitor_factory) -> dict:
    started = time.perf_counter()
    setup = _set_up(spec)
    dist, run = setup.dist, setup.run
    store = Store(spec.results)
    if dist.is_main:
        ensure_writable_dir(store.runs)
    roll = rollcall.RollCall(store.runs, setup.config_id, dist)
    roll.check_in()  # before the process group: a rank killed later is still known by node and rank
    distributed.init(dist, setup.device.type)
    record = _new_record(spec, setup)
    log = LiveLog(dist.is_main, quiet=spec.quiet, fmt=spec.log_format, interval_s=run.measure.log_interval,
                  t0=started)
    events = store.runs / f"{safe_name(record.run_id)}.events.jsonl" if dist.is_main else None
    log.run_start(events,
                  f"{run.workload.name} on {setup.tag} ({setup.device}, {dist.world_size} "
                  f"process{'es' if dist.world_size > 1 else ''}): "
                  + ", ".join(f"{p.name}={run.values[p.name]}" for p in run.workload.params
                              if p.headline and p.applies_to(run.values)),
                  run_id=record.run_id, workload=run.workload.name, system=setup.tag, device=str(setup.device),
                  world_size=dist.world_size, params=run.values)
    log.phase_start("setup", since=started)  # the setup began with the spec, before the process group
    log.phase_end("setup")
    try:
        return _finish_run(spec, setup, store, record, stop, monitor_factory, log, roll)
    except BadInput:  # refused (exit 2) with no record: its events would sit beside none
        log.close()
        if events is not None:
            events.unlink(missing_ok=True)
        raise
    finally:
        log.close()


def _finish_run(spec: RunSpec, setup: _Setup, store: Store, record, stop: StopRequested, monitor_factory,
                log: LiveLog, roll: rollcall.RollCall) -> dict:
    dist, run = setup.dist, setup.run

    if monitor_factory is None:
        from caraml.power.run_monitor import monitor_for_run as monitor_factory  # power=auto|off|methods decides
    monitor = monitor_factory(run.power, setup.profile, record.run_id, setup.tag, store.runs)
    m = Measurement()
    bench = _measure(setup, record, m, stop, monitor, log)
    # After a stop all ranks agreed on, collectives are still safe; after a failure they are not.
    collective = record.status == "ok" or (record.status == "interrupted" and m.agreed)
    if bench is not None:
        _bench_metrics(setup, bench, record, m, collective)
    if monitor:  # energy needs the units of the measured window
        log.phase_start("energy")
        record.metrics["energy"] = energy = monitor.finish(record.metrics, dist, gather=collective)
        log.phase_end("energy", f"{energy['total_wh']:.4g} Wh" if energy.get("total_wh") is not None
                      else str(energy.get("reason") or "unavailable"), total_wh=energy.get("total_wh"))
    record.metrics.setdefault("energy", {"total_wh": None, "available": False,
                                         "reason": "no power monitor was attached to this run (power=off)"})
    roll.check_out(record.status)  # first: ranks that all failed at once do not wait for each other
    if record.status == "failed":  # a peer's death shows here as a closed connection only: name the silent ranks
        lost = roll.lost()
        if lost:
            record.launch["lost_ranks"] = lost
            record.error = f"{record.error}; {rollcall.describe(lost)}"
    record.finished_at = rec.now()
    out = _save(record, store, dist)
    tp = record.metrics.get("throughput") or {}
    log.run_stop(record.status, throughput=tp.get("value"), unit=tp.get("unit"), error=record.error,
                 record=out.get("path"))
    if collective:
        distributed.shutdown(dist)  # a barrier: every rank has checked out
        if dist.is_main:
            roll.clear()
    return out


def _new_record(spec: RunSpec, setup: _Setup) -> rec.RunRecord:
    from caraml.measure import env as env_mod

    dist = setup.dist
    launch = {"world_size": dist.world_size, "nodes": dist.nodes, "local_world_size": dist.local_world_size,
              "rank": dist.rank, "node_rank": dist.node_rank, "backend": dist.backend,
              "launcher": distributed.launcher(),
              "device": str(setup.device), "parallel": setup.dims.as_dict()}
    system = {"tag": setup.tag, "detected": spec.system is None, **({"forced": True} if spec.force_system else {}),
              "profile": setup.profile}
    record = rec.RunRecord(id=setup.config_id, workload=setup.run.workload.name, status="failed",
                           params=setup.run.values, system=system, launch=launch, started_at=rec.now(),
                           preset=setup.run.preset, env=env_mod.collect())
    if not dist.is_main:
        record.run_id += f"-rank{dist.rank}"
    return record


def _measure(setup: _Setup, record: rec.RunRecord, m: Measurement, stop: StopRequested, monitor, log: LiveLog):
    """Build the benchmark and run its steps under the harness; the record's status says how it ended.
    Returns the Bench (None when it was never built)."""
    bench = None
    try:
        if monitor:
            monitor.start()
        if stop.signal is None:
            m.phase = "build"
            log.phase_start("build", f"build: {setup.run.workload.name} (model, data, optimizer)")
            m.graph_breaks_before = graph_break_counts()
            with log.waiting("build"), stop.at_once():
                bench = setup.run.workload.build(setup.run.config, setup.context())
            info = bench.info
            log.phase_end("build", f"of which compiling {fmt_seconds(info.compile_setup_s)}"
                          if info.compile_setup_s else "")
            log.configure(info=info, dp=setup.dims.dp, world_size=setup.dist.world_size,
                          peak_tflops=systems.peak_tflops(setup.profile, info.precision))
            run_steps(bench, setup.run.measure, setup.device, setup.dist, m, stop, monitor, log)
        _stopped(record, m, stop)
    except BadInput:
        raise
    except KeyboardInterrupt:  # a second stop signal, or the first one inside stop.at_once()
        record.status = "interrupted"
        record.error = f"{f'stopped by {stop.signal}' if stop.signal else 'interrupted'} during {m.phase}"
    except Exception as exc:  # noqa: BLE001 - every failure becomes a record
        if stop.signal:  # e.g. DataLoader workers killed by the same SIGTERM: the run was stopped, not broken
            m.stop_signal = m.stop_signal or stop.signal
            _stopped(record, m, stop)
            # the stop is the news; what it broke (a compiler killed by the same Ctrl-C) is one line, in full below
            record.error += f" ({first_line(exc)})"
            record.traceback = traceback.format_exc()[-8000:]
        else:
            record.status = "oom" if _is_oom(exc) else "failed"
            record.error = f"{type(exc).__name__}: {exc}".strip()[:4000]
            record.traceback = traceback.format_exc()[-8000:]
    finally:
        if monitor:
            monitor.stop()  # at once: sampling ends with the run
    return bench


def _bench_metrics(setup: _Setup, bench, record: rec.RunRecord, m: Measurement, collective: bool) -> None:
    info = bench.info
    peak = systems.peak_tflops(setup.profile, info.precision)
    if m.steps or m.warmup_times:
        record.metrics.update(metrics(info, setup.dims, setup.dist, m, peak, interrupted=not collective))
        if info.compiled and m.graph_breaks_before is not None:  # what compiling left eager, for the reader
            # the harness counted to the end of the window; a run stopped before it is counted up to now
            breaks = m.graph_breaks if m.graph_breaks is not None else graph_breaks(m.graph_breaks_before)
            if breaks is not None:  # torch.compile made graphs (not a TorchScript trace, not PopTorch)
                record.metrics["warmup"]["graph_breaks"] = breaks
                if breaks["count"]:
                    say(f"compile: {breaks['count']} graph breaks: the code between graphs ran eagerly (most often: "
                        f"{breaks['reasons'][0]['reason']})", setup.dist)
        if info.mfu_also:
            record.metrics["mfu_by_peak"] = mfu_by_peak(record.metrics.get("tflops_per_device"), setup.profile,
                                                        (info.precision, *info.mfu_also))
    record.metrics.update(memory(setup.device))
    record.metrics.update(bench.details())
    if record.status == "ok":
        _check_health(bench, record)
    bench.close()


def mfu_by_peak(tflops: float | None, profile: dict, precisions) -> dict:
    """MFU against each precision's peak rate, each named: {"fp8": {"peak_tflops": ..., "mfu": ...}, ...}."""
    out = {}
    for precision in precisions:
        peak = systems.peak_tflops(profile, precision)
        out[precision] = {"peak_tflops": peak, "mfu": tflops / peak if tflops and peak else None}
    return out


def _check_health(bench, record: rec.RunRecord) -> None:
    """A run that measured without training (Bench.health() gives the reason) is `diverged`, not ok."""
    health = getattr(bench, "health", None)
    reason = health() if callable(health) else None
    if reason:
        record.status, record.error = "diverged", str(reason)


def _save(record: rec.RunRecord, store: Store, dist) -> dict:
    """Rank 0 writes the run's record; another rank writes one only when it failed on its own (rank 0 may then
    be stuck in a collective and be killed by torchrun before it can)."""
    out = record.to_dict()
    if dist.is_main or record.status in ("oom", "failed"):
        try:
            out["path"] = str(store.save(out))
        except BadInput as exc:  # nowhere to write: the record still goes to stdout (--json) and the summary
            print(f"caraml: error: {exc}", file=sys.stderr)
            out["path"] = None
    return out


def _stopped(record, m: Measurement, stop: StopRequested) -> None:
    """ok, or interrupted with the signal and the phase it came in."""
    signal_name = m.stop_signal or stop.signal
    if signal_name:
        record.status, record.error = "interrupted", f"stopped by {signal_name} during {m.phase}"
    else:
        record.status = "ok"


CAUSE_CHARS = 200  # of the first line of what a stop broke


def first_line(exc: BaseException) -> str:
    """`Type: the first line of its message`, at most CAUSE_CHARS: a compiler's output that a stop cut short
    (inductor's C++ compile error carries the command and every diagnostic, its line breaks often written as a
    literal backslash-n) is not what the user needs to read."""
    text = str(exc).strip()
    line = next((part.strip() for part in re.split(r"\n|\\n", text) if part.strip()), "")
    if len(line) > CAUSE_CHARS:
        line = line[:CAUSE_CHARS] + "…"
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def _is_oom(exc: BaseException) -> bool:
    import torch

    if isinstance(exc, getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)):  # newer than torch 2.3
        return True
    text = str(exc)
    return any(s in text for s in ("out of memory", "CUDA_ERROR_OUT_OF_MEMORY", "can't allocate memory",
                                   "HIP out of memory"))
