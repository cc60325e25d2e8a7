"""Hand-written run records that follow the record schema, for runs a CPU cannot make (many GPUs, many nodes)
and energy data a CPU cannot produce. Written exactly as the store writes them: runs/<run_id>.json.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from caraml.results.record import RunRecord, config_id, now

UNITS = {"image_classification": "images", "llm_training": "tokens", "fno": "timesteps"}


def record(workload: str, system: str, params: dict, throughput: float | None, *, devices=1, nodes=1,
           status="ok", started="2026-12-01T10:00:00.000+00:00", energy_wh=None, units_per_wh=None,
           step_median=0.5, spread=0.1, mfu=None, tflops=None, peak_memory=None, extra_metrics=None,
           timeseries=None, measure_s=10.0) -> dict:
    """One record; energy given as the whole run's Wh and the measured window's units per Wh."""
    unit = UNITS.get(workload, "units")
    params = {**params, "warmup_steps": 2, "measure_steps": 20, "measure_seconds": 0.0, "seed": 0,
              "device": "auto"}
    metrics = {"throughput": {"value": throughput, "unit": f"{unit}/s"},
               "units": throughput * measure_s if throughput else None, "measured_time_s": measure_s,
               "step_time_s": {"n": 20, "median": step_median, "p10": step_median * (1 - spread / 2),
                               "p90": step_median * (1 + spread / 2), "mean": step_median,
                               "min": step_median * 0.9, "max": step_median * 1.2},
               "mfu": mfu, "tflops_per_device": tflops, "peak_memory_bytes": peak_memory}
    if energy_wh is None:
        metrics["energy"] = {"total_wh": None, "available": False, "reason": "no power monitor was attached"}
    else:  # the shape caraml.power.energy.combine writes: total_wh is the measured window's energy
        metrics["energy"] = {
            "total_wh": energy_wh, "window": "measure", "run_wh": energy_wh * 1.3, "available": True,
            "source": "counter", "units_per_wh": units_per_wh, "unit": f"{unit}/Wh",
            "devices": [{"host": "node1", "uuid": f"GPU-{i}", "name": "GPU", "backend": "nvml", "scope": "device",
                         "kind": "accelerator", "source": "counter", "in_total": True, "counted_in": None,
                         "energy_wh": energy_wh / devices, "run_wh": energy_wh * 1.3 / devices,
                         "avg_power_w": 500.0, "peak_power_w": 650.0} for i in range(devices)],
            "phases": {"warmup": {"wh": energy_wh * 0.2, "duration_s": 2.0},
                       "measure": {"wh": energy_wh, "duration_s": measure_s},
                       "done": {"wh": energy_wh * 0.1, "duration_s": 1.0}},
            "nodes": [{"host": "node1", "timeseries": timeseries, "interval_ms": 100.0}]}
    metrics.update(extra_metrics or {})
    # The layout the runner records for every run: dp from the tensor and pipeline sizes the params ask for.
    tp, pp = params.get("tp", 1), params.get("pp", 1)
    parallel = {"dp": devices // (tp * pp), "tp": tp, "pp": pp, "world": devices}
    return record_for(
        workload, params, {"tag": system, "detected": False, "profile": {"tag": system}},
        {"world_size": devices, "nodes": nodes, "local_world_size": devices // nodes,
         "backend": "nccl" if devices > 1 else None, "launcher": "torchrun" if devices > 1 else "single",
         "device": "cuda:0", "parallel": parallel},
        status=status, started_at=started, finished_at=started, metrics=metrics,
        env={"caraml": "0.1.0", "hostname": f"{system.lower()}-node1", "torch": "2.11.0",
             "devices": [{"name": f"{system} GPU"}]},
        error=None if status == "ok" else "CUDA out of memory").to_dict()


def write(results: Path, rec: dict) -> Path:
    runs = results / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    path = runs / f"{rec['run_id']}.json"
    rec["path"] = str(path)
    path.write_text(json.dumps(rec, indent=1))
    return path


def write_power_csv(path: Path, devices=("GPU-6a1e-0", "GPU-93c2-1")) -> str:
    """A power time series as the monitor writes it (caraml.power.series.COLUMNS): two GPUs of one name
    told apart by UUID; idle-ish warm-up, busy measure, tail."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        w = csv.writer(handle)
        w.writerow(["time_s", "phase", "host", "backend", "device", "uuid", "power_w", "energy_j"])
        for i in range(60):
            t = i * 0.1
            phase = "warmup" if t < 1.5 else "measure" if t < 5.0 else "done"
            for j, uuid in enumerate(devices):
                base = {"warmup": 250.0, "measure": 600.0, "done": 120.0}[phase]
                w.writerow([f"{t:.1f}", phase, "node1", "nvml", "NVIDIA H100", uuid, f"{base + 10 * j + (i % 5):.1f}",
                            f"{base * t:.3f}"])
    return path.name


def llm(system, model_size, devices, tp, pp, gbs, tokens_per_s, **kw):
    params = {"model_size": model_size, "global_batch_size": gbs, "micro_batch_size": 4, "tp": tp, "pp": pp,
              "seq_length": 2048, "precision": "bf16"}
    from caraml.workloads.llm_training.sizes import caraml_flops_per_iteration

    t_iter = gbs * 2048 / tokens_per_s
    caraml_flops = caraml_flops_per_iteration(gbs, 2048, 16, 2048, 50304, recompute=True)  # the 800M model
    extra = {"time_per_iteration_s": t_iter, "global_batch_size": gbs, "measured_steps": 20,
             "dp": devices // (tp * pp), "tflops_caraml_per_device": caraml_flops / (t_iter * devices * 1e12)}
    return record("llm_training", system, params, tokens_per_s, devices=devices, nodes=max(1, devices // 4),
                  extra_metrics={**extra, **kw.pop("extra_metrics", {})}, **kw)


def fno(system, problem, devices, batch_size, amp, compile_mode, timesteps_per_s, mode="train", train=None, **kw):
    """An FNO record as written before `amp` became `precision` (tables read it through Param.aliases)."""
    params = {"problem": problem, "batch_size": batch_size, "amp": amp, "compile": "inductor",
              "compile_mode": compile_mode, "mode": mode, "complex_mixed_precision": False}
    extra = {"global_batch_size": batch_size * devices, "dp": devices, "model_params_m": 0.6, "model_size_mb": 2.4,
             "input_shape": f"[{batch_size},4,256,64]"}
    if train is not None:
        extra["train_throughput"] = {"value": train, "unit": "timesteps/s"}
        extra["caraml_timesteps_per_s"] = train * 1.1
    return record("fno", system, params, timesteps_per_s, devices=devices, extra_metrics=extra, **kw)


def image(system, batch_size, precision, images_per_s, devices=1, compile="none", **kw):
    params = {"model": "resnet50", "image_size": 224, "num_classes": 1000, "batch_size": batch_size,
              "precision": precision, "compile": compile, "compile_mode": "default", "compile_scope": "model",
              "channels_last": True, "data": "synthetic-host", "workers": 4, "cudnn_benchmark": True, "lr": 0.1,
              "momentum": 0.9, "weight_decay": 1e-4}
    return record("image_classification", system, params, images_per_s, devices=devices,
                  nodes=max(1, devices // 4), **kw)


def populate(results: Path, with_power=True) -> dict[str, dict]:
    """A small campaign over two systems and three workloads, with repeats, a failure and energy."""
    power = write_power_csv(results / "runs" / "h100-power.csv") if with_power else None
    t = iter(f"2026-12-01T10:{m:02d}:00.000+00:00" for m in range(60))
    recs = {
        "h100_64_a": image("H100", 64, "bf16", 2400.0, energy_wh=10.0, units_per_wh=900.0, started=next(t),
                           mfu=0.30, timeseries=power),
        "h100_64_b": image("H100", 64, "bf16", 2500.0, energy_wh=10.0, units_per_wh=950.0, started=next(t), mfu=0.31),
        "h100_64_c": image("H100", 64, "bf16", 2600.0, energy_wh=10.0, units_per_wh=1000.0, started=next(t),
                           mfu=0.32),
        "h100_128": image("H100", 128, "bf16", 2800.0, energy_wh=12.0, units_per_wh=1100.0, started=next(t)),
        "h100_256": image("H100", 256, "bf16", 3000.0, energy_wh=13.0, units_per_wh=1150.0, started=next(t)),
        "h100_64_fp32": image("H100", 64, "fp32", 1000.0, energy_wh=11.0, units_per_wh=400.0, started=next(t)),
        "a100_64": image("A100", 64, "bf16", 1500.0, energy_wh=9.0, units_per_wh=600.0, started=next(t)),
        "a100_128": image("A100", 128, "bf16", 1600.0, energy_wh=9.5, units_per_wh=640.0, started=next(t)),
        "a100_256": image("A100", 256, "bf16", None, status="oom", started=next(t)),
        "h100_64_x4": image("H100", 64, "bf16", 9600.0, devices=4, energy_wh=40.0, units_per_wh=920.0,
                            started=next(t)),
        "h100_64_x8": image("H100", 64, "bf16", 18000.0, devices=8, energy_wh=80.0, units_per_wh=880.0,
                            started=next(t)),
        "llm_h100_4": llm("H100", "800M", 4, 1, 1, 256, 400_000.0, energy_wh=50.0, units_per_wh=2.0e6,
                          tflops=480.0, mfu=0.485, started=next(t)),
        "llm_h100_8": llm("H100", "800M", 8, 2, 1, 256, 720_000.0, energy_wh=100.0, units_per_wh=1.8e6,
                          tflops=430.0, mfu=0.435, started=next(t)),
        "llm_a100_4": llm("A100", "800M", 4, 1, 1, 256, 200_000.0, energy_wh=40.0, units_per_wh=1.25e6,
                          tflops=150.0, mfu=0.48, started=next(t)),
        "fno_h100": fno("H100", "RBC2D", 1, 20, "fp16", "default", 3757.0, train=3700.0, energy_wh=2.0,
                        units_per_wh=50_000.0, peak_memory=3 * 2**30, started=next(t)),
        "fno_a100": fno("A100", "RBC2D", 1, 20, "fp16", "default", 2000.0, train=1950.0, energy_wh=1.5,
                        units_per_wh=40_000.0, peak_memory=3 * 2**30, started=next(t)),
        "fno_h100_eval": fno("H100", "RBC2D", 1, 20, "off", "max-autotune", 9000.0, mode="eval", started=next(t)),
    }
    for rec in recs.values():
        write(results, rec)
    return recs


def identifying(workload: str, values: dict) -> dict:
    """What the configuration id hashes of `values`: by the workload's declarations, or as they are for a workload
    this installation does not have."""
    from caraml import workloads
    from caraml.errors import BadInput

    try:
        wl = workloads.get(workload)
    except BadInput:
        wl = workloads.Workload(workload, unit="units", params=[])
    return wl.identifying(values)


def config_id_of(workload: str, values: dict, system: str, world_size: int = 1, nodes: int = 1) -> str:
    """The configuration id a run of `workload` with these parameter values gets on `system`."""
    return config_id(identifying(workload, values), system, {"world_size": world_size, "nodes": nodes})


def record_for(workload: str, params: dict, system: dict, launch: dict, status: str = "ok",
               started_at: str | None = None, **rest) -> RunRecord:
    """A record whose id is the configuration's, as a run makes it (the workload's identifying parameters, the
    system's tag, the launch's devices and nodes)."""
    return RunRecord(id=config_id_of(workload, params, system["tag"], launch["world_size"], launch["nodes"]),
                     workload=workload, status=status, params=params, system=system, launch=launch,
                     started_at=started_at or now(), **rest)
