"""The power comparison's analysis (bench/power_bench.py): the monitor's cost in throughput, the energy counter
against the integrated power, images/Wh; pure functions of `caraml run --json` records."""

from __future__ import annotations

STEADY_WINDOW_MIN_S = 30.0  # a shorter measured window gives too few samples for the counter comparison


def analyse(points: dict[str, dict]) -> dict:
    """The figures of interest from the three records (pure: testable on CPU with made-up records)."""
    def throughput(r):
        return ((r.get("metrics") or {}).get("throughput") or {}).get("value") if r.get("status") == "ok" else None

    off, on, comp = points.get("eager_monitor_off", {}), points.get("eager_monitor_on", {}), points.get("compiled", {})
    out: dict = {"throughput_off": throughput(off), "throughput_on": throughput(on)}
    out["monitor_throughput_ratio"] = (out["throughput_on"] / out["throughput_off"]
                                       if out["throughput_on"] and out["throughput_off"] else None)
    energy = (on.get("metrics") or {}).get("energy") or {}
    out["measured_window_s"] = (on.get("metrics") or {}).get("measured_time_s")
    out["window_long_enough"] = bool(out["measured_window_s"] and out["measured_window_s"] >= STEADY_WINDOW_MIN_S)
    gpus = [d for d in energy.get("devices", []) if d.get("backend") == "nvml" and d.get("in_total")]
    rows = []
    for d in gpus:
        c, i = d.get("counter_wh"), d.get("integrated_wh")
        rows.append({"device": d.get("name"), "uuid": d.get("uuid"), "counter_wh": c, "integrated_wh": i,
                     "difference_pct": (i - c) / c * 100 if c and i is not None else None,
                     "avg_power_w": d.get("avg_power_w"), "peak_power_w": d.get("peak_power_w"),
                     "power_reading": (d.get("info") or {}).get("power_reading")})
    out["counter_vs_integrated"] = rows
    out["energy_eager"] = {k: energy.get(k) for k in ("available", "total_wh", "source", "units_per_wh",
                                                      "avg_power_w", "reason")}
    cenergy = (comp.get("metrics") or {}).get("energy") or {}
    out["throughput_compiled"] = throughput(comp)
    out["images_per_wh_compiled"] = cenergy.get("units_per_wh")
    out["images_per_wh_eager"] = energy.get("units_per_wh")
    out["energy_compiled"] = {k: cenergy.get(k) for k in ("available", "total_wh", "source", "units_per_wh",
                                                          "avg_power_w", "reason")}
    out["status"] = {name: r.get("status") for name, r in points.items()}
    out["errors"] = {name: r.get("error") for name, r in points.items() if r.get("error")}
    return out


def render(a: dict) -> str:
    f = lambda v, spec=".1f": format(v, spec) if isinstance(v, (int, float)) else "-"  # noqa: E731
    lines = [
        f"{'figure':<44} value",
        f"{'images/s, monitor off (eager)':<44} {f(a['throughput_off'])}",
        f"{'images/s, monitor on (eager)':<44} {f(a['throughput_on'])}",
        f"{'throughput ratio on/off':<44} {f(a['monitor_throughput_ratio'], '.4f')}",
        f"{'measured window (s)':<44} {f(a['measured_window_s'])}" + ("" if a["window_long_enough"] else "  (< 30 s!)"),
    ]
    for r in a["counter_vs_integrated"]:
        lines.append(f"{('counter Wh, ' + str(r['device']))[:44]:<44} {f(r['counter_wh'], '.4f')}")
        lines.append(f"{'integrated Wh (' + str(r['power_reading']) + ')':<44} {f(r['integrated_wh'], '.4f')}")
        lines.append(f"{'integrated vs counter (%)':<44} {f(r['difference_pct'], '+.2f')}")
        lines.append(f"{'avg / peak power (W)':<44} {f(r['avg_power_w'])} / {f(r['peak_power_w'])}")
    lines += [
        f"{'images/Wh, eager':<44} {f(a['images_per_wh_eager'])}",
        f"{'images/s, compiled':<44} {f(a['throughput_compiled'])}",
        f"{'images/Wh, compiled':<44} {f(a['images_per_wh_compiled'])}",
    ]
    for name, err in a["errors"].items():
        lines.append(f"{name}: {str(err)[:300]}")
    for key in ("energy_eager", "energy_compiled"):
        if a[key].get("reason"):
            lines.append(f"{key}: {a[key]['reason']}")
    return "\n".join(lines) + "\n"
