"""A mixed results folder as a benchmarker has one: a smoke run, a small suite sweep (the suite's preset and values,
with a repeat measured with other steps and an interrupted point) and records of another system, each with the
full parameter set a real run stores (every parameter resolved from defaults, preset and the values given)."""

from __future__ import annotations

from pathlib import Path

from handmade import config_id_of, record, write

from caraml import params as params_mod
from caraml import workloads
from caraml.settings import RUN_PARAMS


def _full(workload: str, preset: str | None, given: dict) -> dict:
    wl = workloads.get(workload)
    return params_mod.resolve(wl.params + RUN_PARAMS, given, workload, wl.presets[preset] if preset else None)


def run(workload: str, system: str, preset: str | None, given: dict, throughput: float | None, *, minute: int,
        device="cuda:0", status="ok", **kw) -> dict:
    """A record of one run: its parameters resolved as `caraml run` resolves them, its preset named."""
    params = _full(workload, preset, given)
    rec = record(workload, system, {}, throughput, status=status,
                 started=f"2026-12-01T10:{minute:02d}:00.000+00:00", **kw)
    rec["params"] = params
    rec["preset"] = preset
    rec["launch"]["device"] = device
    rec["error"] = "stopped by SIGTERM during measure" if status == "interrupted" else rec["error"]
    rec["id"] = config_id_of(workload, params, system)
    rec["run_id"] = f"{rec['started_at'][:19].replace(':', '').replace('-', '')}-{rec['id']}"
    return rec


def _suite_point(system: str, gbs: int, precision: str, images: float | None, minute: int, **kw) -> dict:
    """A point of the image-classification suite: its preset (caraml), its values, batch from the global batch."""
    given = {"precision": precision, "compile": "trace", "compile_mode": "default", "compile_scope": "model",
             "data": "synthetic-host", "workers": 18, "batch_size": gbs, "convention": "steady"}
    given.update(kw.pop("given", {}))
    return run("image_classification", system, "caraml", given, images, minute=minute, **kw)


def populate(results: Path) -> dict[str, dict]:
    recs = {
        "smoke": run("image_classification", "H100", "smoke", {}, 310.0, minute=0, energy_wh=0.4,
                     units_per_wh=6000.0),
        "h100_32_fp16": _suite_point("H100", 32, "fp16", 2100.0, 1, energy_wh=9.0, units_per_wh=800.0, mfu=0.21),
        "h100_64_fp16": _suite_point("H100", 64, "fp16", 2600.0, 2, energy_wh=10.0, units_per_wh=900.0, mfu=0.26),
        # the same point again, measured with fewer steps: one row of two runs
        "h100_64_fp16_again": _suite_point("H100", 64, "fp16", 2500.0, 3, energy_wh=10.0, units_per_wh=880.0,
                                           mfu=0.25, given={"measure_steps": 2}),
        "h100_32_bf16": _suite_point("H100", 32, "bf16", 2000.0, 4, energy_wh=9.0, units_per_wh=780.0, mfu=0.20),
        "h100_64_bf16": _suite_point("H100", 64, "bf16", 2400.0, 5, energy_wh=10.0, units_per_wh=850.0, mfu=0.24),
        # stopped during its measured window: a throughput over the steps it measured
        "h100_128_fp16": _suite_point("H100", 128, "fp16", 2750.0, 6, status="interrupted"),
        "a100_32_fp16": _suite_point("A100", 32, "fp16", 1100.0, 7, energy_wh=8.0, units_per_wh=420.0, mfu=0.30),
        "a100_64_fp16": _suite_point("A100", 64, "fp16", 1300.0, 8, energy_wh=9.0, units_per_wh=460.0, mfu=0.33),
        "a100_32_bf16": _suite_point("A100", 32, "bf16", 1050.0, 9, energy_wh=8.0, units_per_wh=400.0, mfu=0.29),
        # FNO on a CPU: eager, whatever compile_mode says
        "fno_cpu": run("fno", "cpu", "smoke-RBC2D", {}, 95.0, minute=10, device="cpu", energy_wh=0.1,
                       units_per_wh=900.0),
        "fno_cpu_wide": run("fno", "cpu", "smoke-RBC2D", {"width": 16}, 60.0, minute=11, device="cpu"),
        # two problems at two precisions: rows that differ in Problem, grid, modes and particles
        "fno_cpu_bf16": run("fno", "cpu", "smoke-RBC2D", {"precision": "bf16"}, 120.0, minute=12, device="cpu"),
        "fno_pic": run("fno", "cpu", "smoke-PIC1D", {}, 400.0, minute=13, device="cpu"),
        "fno_pic_bf16": run("fno", "cpu", "smoke-PIC1D", {"precision": "bf16"}, 480.0, minute=14, device="cpu"),
    }
    for rec in recs.values():
        write(results, rec)
    return recs
