"""One flow from run spec to record: resolve parameters, pick device and system, measure, record, store."""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any

from caraml import distributed, params as params_mod, systems, workloads
from caraml.bench import RunContext
from caraml.errors import BadInput
from caraml.measure.harness import HARNESS_PARAMS, Measurement, memory, metrics, run_steps, say
from caraml.measure.stops import StopRequested
from caraml.paths import ensure_writable_dir
from caraml.results import record as rec
from caraml.results.store import Store


@dataclass
class RunSpec:
    workload: str
    params: dict[str, Any] = field(default_factory=dict)  # as given by the user (strings or values)
    preset: str | None = None
    system: str | None = None  # tag; None: detect
    results: str = "caraml-results"


def resolve_params(spec: RunSpec) -> tuple[workloads.Workload, dict[str, Any]]:
    """Every effective parameter, typed and checked (imports no torch unless a check needs it)."""
    wl = workloads.get(spec.workload)
    preset = None
    if spec.preset is not None:
        if spec.preset not in wl.presets:
            raise BadInput(f"{wl.name}: unknown preset '{spec.preset}'; choose one of: " + ", ".join(wl.presets))
        preset = wl.presets[spec.preset]
    values = params_mod.resolve(wl.params + HARNESS_PARAMS, spec.params, wl.name, preset)
    return wl, values


def _pick_device(choice: str, dist):
    import torch

    if choice == "cuda" and not torch.cuda.is_available():
        raise BadInput("device=cuda was asked for but torch sees no GPU; use device=cpu or device=auto")
    if choice in ("cuda", "auto") and torch.cuda.is_available():
        if dist.local_rank >= torch.cuda.device_count():
            raise BadInput(f"local rank {dist.local_rank} has no GPU: only {torch.cuda.device_count()} visible")
        torch.cuda.set_device(dist.local_rank)
        return torch.device("cuda", dist.local_rank)
    return torch.device("cpu")


def execute(spec: RunSpec, monitor_factory=None) -> dict:
    """Run one benchmark point; returns its record (saved by rank 0). BadInput propagates."""
    with StopRequested() as stop:  # from the very start: a stop during start-up still leaves a record
        return _execute(spec, stop, monitor_factory)


def _execute(spec: RunSpec, stop: StopRequested, monitor_factory) -> dict:
    from caraml.measure import env as env_mod

    wl, values = resolve_params(spec)
    workloads.require_built(wl)
    dist = distributed.launch_env()
    dims = wl.parallel_dims(values, dist.world_size)
    device = _pick_device(values["device"], dist)
    if wl.check_device:
        wl.check_device(values, device)
    tag = systems.get(spec.system)["tag"] if spec.system else systems.detect(device)
    profile = systems.get(tag)
    store = Store(spec.results)
    if dist.is_main:
        ensure_writable_dir(store.runs)
    distributed.init(dist, device.type)

    record = rec.RunRecord.for_config(
        wl.name, values, {"tag": tag, "detected": spec.system is None, "profile": profile},
        {"world_size": dist.world_size, "nodes": dist.nodes, "local_world_size": dist.local_world_size,
         "rank": dist.rank, "backend": dist.backend, "launcher": distributed.launcher(), "device": str(device),
         "parallel": dims.as_dict()},
        preset=spec.preset, env=env_mod.collect())
    if not dist.is_main:
        record.run_id += f"-rank{dist.rank}"
    say(f"{wl.name} on {tag} ({device}, {dist.world_size} process{'es' if dist.world_size > 1 else ''}): "
        + ", ".join(f"{k}={v}" for k, v in values.items() if k in _HEADLINE), dist)

    m = Measurement()
    bench = None
    if monitor_factory is None:
        from caraml.power.run_monitor import monitor_for_run as monitor_factory  # power=auto|off|methods decides
    from caraml.power.settings import PowerSettings

    monitor = monitor_factory(PowerSettings.from_params(values), profile, record.run_id, tag, store.runs)
    ctx = RunContext(device=device, seed=values["seed"], dist=dist, dims=dims, data_root=os.environ.get("CARAML_DATA"))
    try:
        if monitor:
            monitor.start()
        if stop.signal is None:
            bench = wl.build(values, ctx)
            run_steps(bench, values, device, dist, m, stop, monitor)
        _stopped(record, m, stop)
    except BadInput:
        raise
    except KeyboardInterrupt:
        record.status, record.error = "interrupted", f"interrupted during {m.phase}"
    except Exception as exc:  # noqa: BLE001 - every failure becomes a record
        if stop.signal:  # e.g. DataLoader workers killed by the same SIGTERM: the run was stopped, not broken
            m.stop_signal = m.stop_signal or stop.signal
            _stopped(record, m, stop)
            record.error += f" ({type(exc).__name__}: {str(exc)[:300]})"
        else:
            record.status = "oom" if _is_oom(exc) else "failed"
            record.error = f"{type(exc).__name__}: {exc}".strip()[:4000]
            record.traceback = traceback.format_exc()[-8000:]
    finally:
        if monitor:
            monitor.stop()  # at once: sampling ends with the run

    # After a stop all ranks agreed on, collectives are still safe; after a failure they are not.
    collective = record.status == "ok" or (record.status == "interrupted" and m.agreed)
    if bench is not None:
        info = bench.info
        peak = systems.peak_tflops(profile, info.precision)
        if m.steps or m.warmup_times:
            record.metrics.update(metrics(info, dims, dist, m, peak, interrupted=not collective))
        record.metrics.update(memory(device))
        record.metrics.update(bench.details())
        bench.close()
    if monitor:  # energy needs the units of the measured window
        record.metrics["energy"] = monitor.finish(record.metrics, dist, gather=collective)
    record.metrics.setdefault("energy", {"total_wh": None, "available": False,
                                         "reason": "no power monitor was attached to this run (power=off)"})
    record.finished_at = rec.now()
    out = record.to_dict()
    # Rank 0 writes the run's record; another rank writes one only when it failed on its own (rank 0
    # may then be stuck in a collective and be killed by torchrun before it can).
    if dist.is_main or record.status in ("oom", "failed"):
        try:
            out["path"] = str(store.save(out))
        except BadInput as exc:  # nowhere to write: the record still goes to stdout (--json) and the summary
            print(f"caraml: error: {exc}", file=sys.stderr)
            out["path"] = None
    if collective:
        distributed.shutdown(dist)
    return out


def _stopped(record, m: Measurement, stop: StopRequested) -> None:
    """ok, or interrupted with the signal and the phase it came in."""
    signal_name = m.stop_signal or stop.signal
    if signal_name:
        record.status, record.error = "interrupted", f"stopped by {signal_name} during {m.phase}"
    else:
        record.status = "ok"


_HEADLINE = ("model", "problem", "mode", "batch_size", "precision", "amp", "compile", "compile_mode", "channels_last", "data",
             "image_size")


def _is_oom(exc: BaseException) -> bool:
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc)
    return any(s in text for s in ("out of memory", "CUDA_ERROR_OUT_OF_MEMORY", "can't allocate memory", "HIP out of memory"))
