"""`caraml show WORKLOAD [--preset P] [key=value ...]` and `caraml show RUN_ID`: the parameters a run would use,
or a stored run used, without running anything.

Every effective value, grouped by its owner (the workload's, the measurement settings, the power settings), each
marked with where it came from: `user` (given on the command line), `preset` or `default`. A value the workload
replaces (0 or auto: the problem's) is shown with what it becomes. For a stored record the origin is read back
from the record's preset and today's defaults (`preset`, `default`, else `set`: given by the user or a sweep;
`not in the record` for a parameter added since).
`--json` prints the same as one JSON object on stdout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from caraml.errors import BadInput, did_you_mean, printable, shown

HEADLINE_METRICS = ("throughput", "step_time_s", "window", "loss", "tflops_per_device", "mfu", "energy")


def add_parser(sub, results_default: str) -> None:
    show = sub.add_parser("show", help="the resolved parameters of a workload (and preset) or of a stored run",
                          description="caraml show WORKLOAD [--preset P] [key=value ...]: every parameter a run "
                                      "would use, by owner, marked user/preset/default; nothing runs. "
                                      "caraml show RUN_ID (or its prefix, or a config id): a stored run's "
                                      "parameters and headline metrics.")
    show.add_argument("target", help="a workload (see `caraml workloads`), or a stored run's id, prefix or config id")
    show.add_argument("params", nargs="*", metavar="key=value", help="parameters, as `caraml run` takes them")
    show.add_argument("--preset", help="a named parameter set of the workload, e.g. smoke")
    show.add_argument("--results", default=results_default, help="results directory for a run id "
                      "(default: %(default)s)")
    show.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    show.set_defaults(func=_show)


def _show(args) -> int:
    from caraml import workloads

    if args.target in workloads.names():
        shown_ = resolved_view(args.target, args.params, args.preset)
    else:
        if args.params or args.preset:
            raise BadInput(f"show: {shown(args.target)} is not a workload ({', '.join(workloads.names())}); "
                           "key=value and --preset go with a workload")
        shown_ = record_view(find_record(args.results, args.target, workloads.names()))
    if args.json:
        print(json.dumps(shown_, default=str))
    else:
        sys.stdout.write(render(shown_))
    return 0


def _groups():
    from caraml.settings import MEASURE_PARAMS, POWER_PARAMS

    return (("measurement", MEASURE_PARAMS), ("power", POWER_PARAMS))


def _entries(declared, values: dict, origin, config=None) -> dict[str, dict]:
    out = {}
    for p in declared:
        entry = {"value": values.get(p.name), "from": origin(p)}
        became = getattr(config, p.name, None) if config is not None else None
        if became is not None and not isinstance(became, (dict, list)):
            became = became if isinstance(became, (int, float, str, bool)) else _text(became)
            if str(became) not in (str(entry["value"]), "", "()"):
                entry["resolved"] = became
        out[p.name] = entry
    return out


def _text(value) -> str:
    if isinstance(value, tuple):
        return "x".join(map(str, value)) if all(isinstance(v, int) for v in value) else str(value)
    return str(getattr(value, "name", value))


def resolved_view(workload: str, assignments: list[str], preset_name: str | None) -> dict[str, Any]:
    """What `caraml run WORKLOAD [--preset P] key=value ...` would use, without running it."""
    from caraml import params as params_mod
    from caraml.runner import RunSpec, resolve
    from caraml.settings import RUN_PARAMS

    given = params_mod.parse_assignments(assignments)
    run = resolve(RunSpec(workload=workload, params=given, preset=preset_name))
    wl = run.workload
    given = params_mod.canonical(wl.params + RUN_PARAMS, given, wl.name)
    preset_name = run.preset
    preset = wl.presets.get(preset_name, {}) if preset_name else {}

    def origin(p):
        return "user" if p.name in given else "preset" if p.name in preset else "default"

    groups = {"workload": _entries(wl.params, run.values, origin, run.config)}
    for name, declared in _groups():
        groups[name] = _entries(declared, run.values, origin)
    return {"kind": "resolved", "workload": wl.name, "preset": preset_name, "params": groups}


def point_view(plan, key: str) -> dict[str, Any]:
    """One sweep point's parameters, as `caraml sweep SUITE --show ID` prints them: `key` is its number in the
    dry run's list (1, 2, ...), its id, or a prefix of one id; each value marked `suite` (the suite or an
    override set it), `preset` or `default`."""
    from caraml import workloads
    from caraml.settings import RUN_PARAMS

    points = plan.points
    if key.isdigit() and 1 <= int(key) <= len(points) and not any(p.id == key for p in points):
        point = points[int(key) - 1]
    else:
        matches = [p for p in points if p.id == key] or [p for p in points if p.id.startswith(key)]
        if len(matches) != 1:
            what = f"begins {len(matches)} point ids; give more of one" if matches else (
                f"is no point of this sweep (1..{len(points)} or an id); {did_you_mean(key, [p.id for p in points])}"
                "see --dry-run")
            raise BadInput(f"--show {shown(key)} {what}")
        point = matches[0]
    wl = workloads.get(point.workload)
    preset = wl.presets.get(point.preset or "", {})

    def origin(p):
        return "suite" if p.name in point.shown else "preset" if p.name in preset else "default"

    values = point.params
    config = None
    try:
        config = wl.config_of({**{p.name: p.default for p in wl.params + RUN_PARAMS}, **values})
    except BadInput:
        pass
    groups = {"workload": _entries(wl.params, values, origin, config)}
    for name, declared in _groups():
        groups[name] = _entries(declared, values, origin)
    launch = {"system": point.system, "nodes": point.nodes, "devices_per_node": point.devices_per_node,
              "launcher": point.launcher, "time_limit": point.time_limit,
              **({"repeats": point.repeats} if point.repeats > 1 else {})}
    return {"kind": "point", "id": point.id, "number": points.index(point) + 1, "of": len(points),
            "suite": plan.suite.name, "workload": wl.name, "preset": point.preset, "launch": launch,
            "params": groups}


def show_point(plan, key: str, as_json: bool) -> int:
    view = point_view(plan, key)
    if as_json:
        print(json.dumps(view, default=str))
    else:
        sys.stdout.write(render(view))
    return 0


def find_record(results: str, key: str, workload_names=()) -> dict:
    """The stored record whose run_id is `key`, else the one run_id `key` begins, else the latest run of the
    config id `key`; BadInput (one line, with the closest id) when none or several match."""
    from caraml.results.aggregate import readable
    from caraml.results.store import Store

    records, skipped = readable(Store(results), warn=False)
    exact = [r for r in records if r.get("run_id") == key]
    if exact:
        return exact[-1]
    prefixed = [r for r in records if str(r.get("run_id", "")).startswith(key)]
    runs = {r.get("run_id") for r in prefixed}
    if len(runs) == 1:
        return prefixed[-1]
    if len(runs) > 1:
        listed = sorted(map(str, runs))
        raise BadInput(f"show: {shown(key)} begins {len(listed)} run ids ({', '.join(listed[:3])}"
                       f"{', …' if len(listed) > 3 else ''}); give more of one")
    config = [r for r in records if r.get("id") == key]
    if config:
        return config[-1]  # the latest run of this configuration
    for entry in skipped:  # "PATH.json: why"; run ids begin with the start time and end in the config id
        path, _, why = entry.partition(".json: ")
        name = Path(path).name
        if name == key or name.startswith(key) or name.endswith(f"-{key}"):
            raise BadInput(f"show: record {path}.json is skipped: {why}")
    ids = [str(r.get("run_id")) for r in records] + [str(r.get("id")) for r in records] + list(workload_names)
    where = f"in {results}" if records else f"({results} holds no readable record)"
    raise BadInput(f"show: {shown(key)} is no workload and no run id, prefix or config id {where}; "
                   f"{did_you_mean(key, ids)}workloads: {', '.join(workload_names)}")


def record_view(record: dict) -> dict[str, Any]:
    """A stored record's parameters, grouped as `resolved_view` groups them, and its headline metrics."""
    from caraml import workloads
    from caraml.params import as_today

    name = record.get("workload")
    values = dict(record.get("params") or {})
    try:
        wl = workloads.get(name)
    except BadInput:
        wl = None
    groups: dict[str, dict] = {}
    if wl is not None:
        from caraml.settings import RUN_PARAMS

        values = as_today(wl.params + RUN_PARAMS, values)
        preset = wl.presets.get(record.get("preset") or "", {})

        def origin(p):
            if p.name not in values:
                return "not in the record"
            value = values.get(p.name)
            if p.name in preset and str(preset[p.name]) == str(value):
                return "preset"
            return "default" if str(value) == str(p.default) else "set"

        config = None
        try:  # what 0 and auto became, as today's code reads them
            config = wl.config_of({**{p.name: p.default for p in wl.params + RUN_PARAMS}, **values})
        except (BadInput, KeyError, TypeError, ValueError):
            pass
        groups["workload"] = _entries(wl.params, values, origin, config)
        for group, declared in _groups():
            groups[group] = _entries(declared, values, origin)
        known = {k for g in groups.values() for k in g}
        rest = {k: {"value": v, "from": "set"} for k, v in values.items() if k not in known}
        if rest:
            groups["other"] = rest
    else:
        groups["params"] = {k: {"value": v, "from": "set"} for k, v in values.items()}
    metrics = record.get("metrics") or {}
    headline = {k: metrics[k] for k in HEADLINE_METRICS if k in metrics}
    system = record.get("system") or {}
    return {"kind": "record", "run_id": record.get("run_id"), "id": record.get("id"), "workload": name,
            "status": record.get("status"), "preset": record.get("preset"),
            "system": system.get("tag") if isinstance(system, dict) else system,
            "started_at": record.get("started_at"), "path": record.get("_path") or record.get("path"),
            "error": record.get("error"), "params": groups, "metrics": headline}


def _metric_text(key: str, value) -> str:
    if isinstance(value, dict):
        if key == "throughput":
            return f"{_num(value.get('value'))} {value.get('unit', '')}".strip()
        if key == "step_time_s":
            return f"median {_num(value.get('median'))} s"
        if key == "window":
            return window_text(value)
        if key == "loss":
            return (f"last {_num(value.get('last'))} (first {_num(value.get('first'))}, mean of the last "
                    f"{value.get('tail_steps')} {_num(value.get('tail_mean'))}; {value.get('steps')} steps)")
        if key == "energy":
            if value.get("total_wh") is not None:
                return f"{_num(value['total_wh'])} Wh"
            return f"- ({value.get('reason') or 'unavailable'})"
        return json.dumps(value, default=str)[:120]
    if key == "mfu" and isinstance(value, (int, float)):
        return f"{value * 100:.1f} %"
    return _num(value)


def window_text(window: dict) -> str:
    """`until-steady: 340 steps in 12.3 s, ±0.9 % (target ±1.0 %), stopped by interval`."""
    ci, target = window.get("ci_rel"), window.get("target_ci")
    seconds = window.get("seconds")
    return (f"{window.get('mode')}: {window.get('steps')} steps"
            + (f" in {seconds:.3g} s" if isinstance(seconds, (int, float)) else "")
            + (f", ±{100 * ci:.2f} %" if isinstance(ci, (int, float)) else ", no interval")
            + (f" (target ±{100 * target:.2f} %)" if isinstance(target, (int, float)) else "")
            + f", stopped by {window.get('stopped_by')}")


def _num(value) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-" if value is None else str(value)
    return f"{value:.4g}"


def render(view: dict) -> str:
    lines = []
    if view["kind"] == "resolved":
        lines.append(f"{view['workload']}" + (f" --preset {view['preset']}" if view["preset"] else "")
                     + ": the parameters a run would use (nothing was run)")
    elif view["kind"] == "point":
        lines.append(f"point {view['number']} of {view['of']} of suite {view['suite']}: {view['id']} "
                     f"({view['workload']}" + (f", preset {view['preset']}" if view["preset"] else "")
                     + "; nothing was run)")
        lines.append("  launch: " + " ".join(f"{k}={v}" for k, v in view["launch"].items()))
    else:
        lines.append(f"run {view['run_id']} ({view['workload']}, {view['status']}) on {view['system']}, "
                     f"started {view['started_at']}")
        lines.append(f"  config id {view['id']}" + (f", preset {view['preset']}" if view["preset"] else "")
                     + (f", record {view['path']}" if view["path"] else ""))
        if view.get("error"):
            lines.append(f"  error: {view['error']}")
    for group, entries in view["params"].items():
        if not entries:
            continue
        lines.append(f"{group}:")
        width = max(len(k) for k in entries)
        for key, e in entries.items():
            value = "-" if e["value"] is None else str(e["value"]) or "''"
            became = f" -> {e['resolved']}" if "resolved" in e else ""
            lines.append(f"  {key:<{width}}  {value}{became}  ({e['from']})")
    if view.get("metrics"):
        lines.append("metrics:")
        width = max(len(k) for k in view["metrics"])
        for key, value in view["metrics"].items():
            lines.append(f"  {key:<{width}}  {_metric_text(key, value)}")
    return "".join(printable(line) + "\n" for line in lines)
