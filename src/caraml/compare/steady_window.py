"""Until-steady against a fixed window, per workload's CARAML configuration (bench/steady_bench.py): the figure each
window stops at, its 95 % interval, and the GPU time each whole `caraml run` took (set-up and compile included)."""

from __future__ import annotations

from caraml.compare.points import Column, Group, Point

FIXED = ("measure=fixed", "measure_seconds=30")  # the longer fixed window: the reference figure
UNTIL_STEADY = ("measure=until-steady", "measure_ci=0.01", "measure_max_seconds=60")

# CARAML's configuration of each workload, its epochs left out (the steady window is what is compared); the GPT at
# global batch 16 (CARAML's smallest), where 100 steps take seconds, not the 10 s per step of global batch 512.
CONFIGS = {
    "ic": ("image_classification", "--preset", "caraml", "convention=steady"),
    "gpt": ("llm_training", "--preset", "800M-2024", "grad_accumulation=4"),
    "fno": ("fno", "--preset", "PIC1D", "epochs=0"),
}
CPU_CONFIGS = {  # a check of the script on the CPU: the smoke presets
    "ic": ("image_classification", "--preset", "smoke"),
    "gpt": ("llm_training", "--preset", "smoke"),
    "fno": ("fno", "--preset", "smoke-PIC1D", "epochs=0"),
}
CPU_WINDOWS = {"fixed": ("measure=fixed", "measure_seconds=3"),
               "steady": ("measure=until-steady", "measure_ci=0.05", "measure_max_seconds=10")}


def group(cpu: bool = False) -> Group:
    """One fixed and one until-steady point per workload, each a whole `caraml run`."""
    fixed, steady = (CPU_WINDOWS["fixed"], CPU_WINDOWS["steady"]) if cpu else (FIXED, UNTIL_STEADY)
    configs = CPU_CONFIGS if cpu else CONFIGS
    points = []
    for name, config in configs.items():
        points.append(Point(f"{name}_fixed", config + fixed, expect_s=20 if cpu else 70))
        points.append(Point(f"{name}_steady", config + steady, expect_s=20 if cpu else 70))
    return Group("until-steady", tuple(points), budget_s=540.0)


def row(name: str, record: dict, wall_s: float) -> dict:
    """A point's figures from its `caraml run --json` record."""
    m = record.get("metrics") or {}
    window = m.get("window") or {}
    return {"name": name, "status": record.get("status"), "throughput": (m.get("throughput") or {}).get("value"),
            "unit": (m.get("throughput") or {}).get("unit"), "steps": m.get("measured_steps"),
            "window_s": m.get("measured_time_s"), "ci_rel": window.get("ci_rel"),
            "stopped_by": window.get("stopped_by"), "wall_s": wall_s, "error": record.get("error")}


def agreement(rows: list[dict]) -> None:
    """Each until-steady row: its figure over the fixed window's of the same workload, and its GPU time's share."""
    by_name = {r["name"]: r for r in rows}
    for r in rows:
        fixed = by_name.get(r["name"].replace("_steady", "_fixed"))
        if not r["name"].endswith("_steady") or not fixed or not fixed.get("throughput") or not r.get("throughput"):
            continue
        r["vs_fixed"] = r["throughput"] / fixed["throughput"]
        r["time_share"] = r["wall_s"] / fixed["wall_s"]


def _pct(value) -> str:
    return "-" if value is None else f"±{100 * value:.2f}%"


COLUMNS = (
    Column("point", 13, "s", "name"), Column("status", 8, "s", "status"),
    Column("throughput", 11, ".1f", "throughput"), Column("unit", 10, "s", "unit", cut=True),
    Column("steps", 6, "d", "steps"), Column("window s", 8, ".1f", "window_s"),
    Column("95% CI", 8, "s", lambda r: _pct(r.get("ci_rel"))), Column("stopped by", 10, "s", "stopped_by"),
    Column("run s", 6, ".0f", "wall_s"), Column("x fixed", 7, ".4f", "vs_fixed"),
    Column("time", 6, ".2f", "time_share"),
)
