"""Until-steady against a fixed window, per workload's CARAML configuration (bench/steady_bench.py): the figure each
window stops at, its 95 % interval, and the GPU time each whole `caraml run` took (set-up and compile included)."""

from __future__ import annotations

import statistics
from dataclasses import replace

from caraml.compare.points import Column, Group, Point

FIXED = ("measure=fixed", "measure_seconds=30")  # the longer fixed window: the reference figure
UNTIL_STEADY = ("measure=until-steady", "measure_ci=0.01", "measure_max_seconds=60")
UNTIL_STEADY_LONG = ("measure=until-steady", "measure_ci=0.01", "measure_max_seconds=180")

# CARAML's configuration of each workload, its epochs left out (the steady window is what is compared); the GPT at
# global batch 16 (CARAML's smallest): 0.6 s steps, not the 10-20 s of global batch 512.
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
               "steady": ("measure=until-steady", "measure_ci=0.05", "measure_min_seconds=2",
                          "measure_max_seconds=10")}


def group(cpu: bool = False) -> Group:
    """One fixed and one until-steady point per workload, each a whole `caraml run`."""
    fixed, steady = (CPU_WINDOWS["fixed"], CPU_WINDOWS["steady"]) if cpu else (FIXED, UNTIL_STEADY)
    configs = CPU_CONFIGS if cpu else CONFIGS
    points = []
    for name, config in configs.items():
        points.append(Point(f"{name}_fixed", config + fixed, expect_s=20 if cpu else 70))
        points.append(Point(f"{name}_steady", config + steady, expect_s=20 if cpu else 70))
    if not cpu:  # how long a host-fed point needs for ±1 %: only when --only names it
        points.append(Point("ic_steady_long", CONFIGS["ic"] + UNTIL_STEADY_LONG, expect_s=200, by_default=False))
        points.append(Point("fno_steady_long", CONFIGS["fno"] + UNTIL_STEADY_LONG, expect_s=200, by_default=False))
        # CARAML's image classification fed from the device (data=synthetic-device): what the host loaders' share is
        device_fed = CONFIGS["ic"] + ("data=synthetic-device",)
        points.append(Point("icdev_fixed", device_fed + FIXED, expect_s=70, by_default=False))
        points.append(Point("icdev_steady", device_fed + UNTIL_STEADY, expect_s=70, by_default=False))
    return Group("until-steady", tuple(points), budget_s=540.0)


def repeated(points: list[Point], repeats: int) -> list[Point]:
    """The points `repeats` times over, one round after another (a drift of the machine falls on every point), each
    run named POINT.K; one round keeps the plain names."""
    if repeats <= 1:
        return list(points)
    return [replace(p, name=f"{p.name}.{k}") for k in range(1, repeats + 1) for p in points]


def base_name(name: str) -> str:
    return name.split(".", 1)[0]


def spread(rows: list[dict]) -> list[dict]:
    """One row per point over its repeats: the median figure, its min–max and n, the range relative to the median
    beside the median 95 % interval (does one run's interval cover what another run gives?), and the median run s."""
    by_point: dict = {}
    for r in rows:
        if r.get("status") == "ok" and r.get("throughput"):
            by_point.setdefault(base_name(r["name"]), []).append(r)
    summary = []
    for name, runs in by_point.items():
        figures = [r["throughput"] for r in runs]
        median = statistics.median(figures)
        cis = [r["ci_rel"] for r in runs if r.get("ci_rel") is not None]
        summary.append({"name": name, "status": "ok", "n": len(runs), "median": median,
                        "min": min(figures), "max": max(figures),
                        "range_rel": (max(figures) - min(figures)) / median, "unit": runs[0].get("unit"),
                        "ci_rel": statistics.median(cis) if cis else None,
                        "wall_s": statistics.median(r["wall_s"] for r in runs),
                        "stopped_by": ",".join(sorted({str(r.get("stopped_by")) for r in runs}))})
    medians = {s["name"]: s["median"] for s in summary}
    for s in summary:  # ic_steady and ic_steady_long against ic_fixed
        workload, steady, _ = s["name"].partition("_steady")
        fixed = medians.get(f"{workload}_fixed") if steady else None
        s["vs_fixed"] = s["median"] / fixed if fixed else None
    return summary


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
        if not base_name(r["name"]).endswith("_steady") or not (fixed or {}).get("throughput") \
                or not r.get("throughput"):
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

SPREAD_COLUMNS = (
    Column("point", 15, "s", "name"), Column("n", 2, "d", "n"), Column("median", 9, ".1f", "median"),
    Column("min", 9, ".1f", "min"), Column("max", 9, ".1f", "max"),
    Column("range", 7, "s", lambda r: _pct(r.get("range_rel")).replace("±", "")),
    Column("med. CI", 8, "s", lambda r: _pct(r.get("ci_rel"))), Column("run s", 6, ".0f", "wall_s"),
    Column("x fixed", 7, ".4f", "vs_fixed"), Column("stopped by", 18, "s", "stopped_by"),
)
