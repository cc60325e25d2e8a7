"""From samples to energy: windows, counter differences, trapezoids, totals without double counting.

Pure functions on plain data, shared by the monitor process (one node) and the combine step (all
nodes). Times are seconds on one node's monotonic clock (time.monotonic, CLOCK_MONOTONIC: the same for
every process of a node), counted from the monitor's start.
"""

from __future__ import annotations

from bisect import bisect_left

J_PER_WH = 3600.0


def _at(ts: list[float], vs: list[float], t: float) -> float:
    """Value at time t by linear interpolation, held constant beyond the ends."""
    i = bisect_left(ts, t)
    if i < len(ts) and ts[i] == t:
        return vs[i]
    if i == 0:
        return vs[0]
    if i == len(ts):
        return vs[-1]
    t0, t1, v0, v1 = ts[i - 1], ts[i], vs[i - 1], vs[i]
    return v0 + (v1 - v0) * (t - t0) / (t1 - t0)


def _clean(ts, vs):
    pairs = [(t, v) for t, v in zip(ts, vs) if v is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def integrate(ts: list[float], ps: list[float | None], t0: float, t1: float) -> float | None:
    """Trapezoidal integral of power (W) over [t0, t1] in J, interpolating at the window's edges.

    None where fewer than two samples exist or the window lies outside the sampled span.
    """
    ts, ps = _clean(ts, ps)
    if len(ts) < 2 or t1 < t0:
        return None
    if t1 == t0:
        return 0.0
    if t1 < ts[0] or t0 > ts[-1]:
        return None
    a, b = max(t0, ts[0]), min(t1, ts[-1])
    inner = [(t, p) for t, p in zip(ts, ps) if a < t < b]
    points = [(a, _at(ts, ps, a))] + inner + [(b, _at(ts, ps, b))]
    return sum((tb - ta) * (pa + pb) / 2 for (ta, pa), (tb, pb) in zip(points, points[1:]))


def counter_delta(ts: list[float], es: list[float | None], t0: float, t1: float) -> float | None:
    """Energy in J over [t0, t1] from a cumulative counter (already unwrapped), interpolated at the edges."""
    ts, es = _clean(ts, es)
    if len(ts) < 2 or t1 < ts[0] or t0 > ts[-1]:
        return None
    return _at(ts, es, min(t1, ts[-1])) - _at(ts, es, max(t0, ts[0]))


def counter_power(ts: list[float], es: list[float | None]) -> tuple[list[float], list[float]]:
    """Power between consecutive counter reads (for counter-only devices such as RAPL)."""
    ts, es = _clean(ts, es)
    out_t, out_p = [], []
    for (ta, ea), (tb, eb) in zip(zip(ts, es), zip(ts[1:], es[1:])):
        if tb > ta:
            out_t.append((ta + tb) / 2)
            out_p.append((eb - ea) / (tb - ta))
    return out_t, out_p


def windows(phases: list[tuple[str, float]], end: float) -> list[tuple[str, float, float]]:
    """[(name, start)] marks -> [(name, start, end)]: each phase lasts until the next mark."""
    out = []
    for i, (name, start) in enumerate(phases):
        stop = phases[i + 1][1] if i + 1 < len(phases) else end
        out.append((name, start, stop))
    return out


def device_summary(device: dict, ts: list[float], ps: list, es: list, phases: list[tuple[str, float, float]],
                   failure: str | None = None) -> dict:
    """Energy per phase and over the whole span for one device: counter first, else integrated power."""
    has_counter = device.get("counter") and any(e is not None for e in es)
    has_power = any(p is not None for p in ps)
    out = dict(device)
    out["samples"] = len(ts)
    if not has_counter and not has_power:
        out.update(source=None, available=False, energy_j=None, phases={},
                   reason=failure or device.get("note") or "no reading")
        return out
    out["source"] = "counter" if has_counter else "integrated"
    out["available"] = failure is None
    out["reason"] = failure
    span = (ts[0], ts[-1]) if ts else (0.0, 0.0)
    per_phase = {}
    for name, a, b in list(phases) + [("all", span[0], span[1])]:
        counted = counter_delta(ts, es, a, b) if has_counter else None
        integrated = integrate(ts, ps, a, b) if has_power else None
        energy = counted if has_counter else integrated
        per_phase[name] = {"energy_j": energy, "counter_j": counted, "integrated_j": integrated, "duration_s": b - a,
                           "avg_power_w": energy / (b - a) if energy is not None and b > a else None}
    out["whole"] = per_phase.pop("all")
    out["energy_j"] = out["whole"]["energy_j"]
    out["phases"] = per_phase
    pt, pp = (_clean(ts, ps) if has_power else counter_power(ts, es))
    out["peak_power_w"] = max(pp) if pp else None
    out["avg_power_w"] = out["energy_j"] / (span[1] - span[0]) if out["energy_j"] is not None and span[1] > span[0] \
        else None
    return out


def assign_totals(devices: list[dict]) -> None:
    """Decide, per host, which devices add up to its energy without counting anything twice.

    Grace "Module" channels cover the whole superchip (GPU + CPU + memory): where they exist they are the
    node's total, and the GPUs (NVML) and Grace channels inside them are shown but not added. Grace "CPU"
    and "SysIO" rails are parts of the "Grace" channel. RAPL package and DRAM are disjoint from GPUs.
    """
    hosts = {d.get("host") for d in devices}
    for host in hosts:
        mine = [d for d in devices if d.get("host") == host]
        module = any(d["backend"] == "grace" and d["kind"] == "module" and d.get("source") for d in mine)
        for d in mine:
            if not d.get("source"):
                d["in_total"], d["counted_in"] = False, None
            elif d["kind"] == "cpu-part":
                d["in_total"], d["counted_in"] = False, "the Grace channel of its socket"
            elif module and d["kind"] in ("accelerator", "cpu") and d["backend"] in ("nvml", "grace"):
                d["in_total"], d["counted_in"] = False, "the Grace module channel (module power includes it)"
            else:
                d["in_total"], d["counted_in"] = True, None


def dedupe(devices: list[dict]) -> tuple[list[dict], int]:
    """One entry per (host, device UUID): a node measured by two processes is counted once."""
    seen, out = set(), []
    for d in devices:
        ident = (d.get("host"), d.get("uuid"))
        if ident in seen:
            continue
        seen.add(ident)
        out.append(d)
    return out, len(devices) - len(out)


def combine(nodes: list[dict], units: float | None = None, unit: str | None = None,
            window: str = "measure") -> dict:
    """One energy table for the run from per-node summaries (each from one monitor process).

    `total_wh` is the energy of `window` (the measured window of a benchmark; the whole run for a plain
    command); `units_per_wh` divides the units done in that window by it.
    """
    good = [n for n in nodes if n.get("available", True)]
    devices, dropped = dedupe([dict(d, host=n["host"]) for n in good for d in n.get("devices", [])])
    assign_totals(devices)
    phase_names = _phase_names(good)
    if window not in phase_names:
        window = "all"
    counted = [d for d in devices if d.get("in_total")]
    out = {"available": False, "total_wh": None, "window": window, "units_per_wh": None, "source": None,
           "clock": "time.monotonic per node, seconds from the monitor's start",
           "nodes": [{k: n[k] for k in ("host", "node_rank", "timeseries", "backends", "interval_ms",
                                        "started_wall", "samples", "methods", "reason") if k in n} for n in nodes],
           "duplicates_dropped": dropped}
    reason = _unavailable(nodes, devices, counted)
    if reason:
        out["reason"] = reason
    out["devices"] = [_device_row(d, window) for d in devices]
    out["phases"] = {name: {"wh": _total_wh(counted, name), "duration_s": _duration(good, name)}
                     for name in phase_names}
    out["run_wh"] = _total_wh(counted, "all")
    if not reason:
        out.update(_window_total(counted, good, window, units, unit))
    out.update(_idle(counted, good))
    return out


def _phase_names(nodes: list[dict]) -> list[str]:
    """Every phase any node marked, in the order first seen."""
    names = []
    for n in nodes:
        for name, _, _ in n.get("phases", []):
            if name not in names:
                names.append(name)
    return names


def _unavailable(nodes: list[dict], devices: list[dict], counted: list[dict]) -> str | None:
    """Why the run has no energy total (a failed node, nothing counted, a counted device broken); None: it has."""
    failures = [f"{n.get('host', '?')}: {n['reason']}" for n in nodes if not n.get("available", True)]
    if failures:
        return "energy unavailable: " + "; ".join(failures)
    if not counted:
        problems = [f"{d['name']}: {d.get('reason')}" for d in devices if d.get("reason")]
        return "energy unavailable: " + ("; ".join(problems) if problems else "no device with a reading")
    broken = [d for d in counted if not d.get("available")]
    if broken:
        return "energy unavailable: " + "; ".join(f"{d['host']} {d['name']}: {d['reason']}" for d in broken)
    return None


def _energy_j(d: dict, phase: str) -> float | None:
    if phase == "all":
        return d.get("energy_j")
    return (d.get("phases", {}).get(phase) or {}).get("energy_j")


def _total_wh(counted: list[dict], phase: str) -> float | None:
    """The counted devices' energy in `phase`, Wh; None unless every one of them has it."""
    if any(not d.get("available") for d in counted):
        return None  # a device that stopped reading mid-run would be under-counted
    values = [_energy_j(d, phase) for d in counted]
    return sum(values) / J_PER_WH if values and all(v is not None for v in values) else None


def _window_total(counted: list[dict], nodes: list[dict], window: str, units: float | None,
                  unit: str | None) -> dict:
    """The run's total over `window`, its source, power and units per Wh (the keys combine() sets then)."""
    total = _total_wh(counted, window)
    if total is None:
        return {"total_wh": None, "reason": f"energy unavailable: no reading covers the {window} window"}
    sources = {d["source"] for d in counted}
    out = {"total_wh": total, "available": True,
           "source": sources.pop() if len(sources) == 1 else "mixed: " + ", ".join(
               sorted(f"{d['name']}={d['source']}" for d in counted))}
    duration = _duration(nodes, window)
    out["avg_power_w"] = total * J_PER_WH / duration if duration else None
    out["peak_power_w"] = sum(d["peak_power_w"] or 0.0 for d in counted)
    out["peak_power_note"] = "sum of each device's peak (an upper bound of the node's peak)"
    if units and total > 0:
        out["units_per_wh"] = units / total
        if unit:
            out["unit"] = f"{unit}/Wh"
    return out


def _idle(counted: list[dict], nodes: list[dict]) -> dict:
    """Idle power of the counted devices, when an idle baseline was sampled and every one has it."""
    idle = [d["phases"]["idle"]["avg_power_w"] for d in counted if "idle" in d.get("phases", {})]
    if idle and all(v is not None for v in idle):
        return {"idle_power_w": sum(idle), "idle_baseline_s": _duration(nodes, "idle")}
    return {}


def _duration(nodes: list[dict], phase: str) -> float | None:
    spans = [b - a for n in nodes for name, a, b in n.get("phases", []) if name == phase]
    if phase == "all":
        spans = [n["phases"][-1][2] - n["phases"][0][1] for n in nodes if n.get("phases")]
    return max(spans) if spans else None


def _device_row(d: dict, window: str) -> dict:
    phase = (d.get("whole") if window == "all" else d.get("phases", {}).get(window)) or {}
    wh = lambda j: j / J_PER_WH if j is not None else None  # noqa: E731
    return {
        "host": d.get("host"), "name": d["name"], "uuid": d["uuid"], "backend": d["backend"], "scope": d["scope"],
        "kind": d["kind"], "source": d.get("source"), "in_total": d.get("in_total"), "counted_in": d.get("counted_in"),
        "energy_wh": wh(phase.get("energy_j")),
        "run_wh": wh(d.get("energy_j")),
        "counter_wh": wh(phase.get("counter_j")), "integrated_wh": wh(phase.get("integrated_j")),
        "avg_power_w": phase.get("avg_power_w"),
        "peak_power_w": d.get("peak_power_w"),
        "phases": {k: wh(v.get("energy_j")) for k, v in d.get("phases", {}).items()},
        "samples": d.get("samples"), "available": d.get("available"), "reason": d.get("reason"),
        "note": d.get("note") or None, "info": d.get("info") or {},
    }


def table(energy: dict) -> str:
    """A per-device energy table for people."""
    rows = [("host", "device", "uuid", "source", "Wh", "avg W", "peak W", "total", "scope")]
    fmt = lambda v, spec: format(v, spec) if isinstance(v, (int, float)) else "-"  # noqa: E731
    for d in energy.get("devices", []):
        total = "yes" if d.get("in_total") else (
            "in " + d["counted_in"].split(" (")[0] if d.get("counted_in") else "no")
        rows.append((str(d["host"]), d["name"], d["uuid"][:20], d.get("source") or "-", fmt(d["energy_wh"], ".4f"),
                     fmt(d["avg_power_w"], ".1f"), fmt(d["peak_power_w"], ".1f"), total,
                     d.get("note") or d.get("reason") or d["scope"]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows]
    if energy.get("available"):
        span = "the whole run" if energy["window"] == "all" else f"the {energy['window']} window"
        lines.append(f"total {energy['total_wh']:.4f} Wh over {span} ({energy['source']})"
                     + (f", {energy['units_per_wh']:.1f} {energy.get('unit', 'units/Wh')}" if energy.get("units_per_wh")
                        else ""))
    else:
        lines.append(energy.get("reason") or "energy unavailable")
    return "\n".join(lines) + "\n"
