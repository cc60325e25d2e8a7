"""The columns of each workload's table: CARAML's columns first, then ours (MFU, units per Wh, spreads, status).

A column has a `key` (snake case, the same across workloads: `--columns throughput,units_per_wh`),
a `header` (what people read: `Images/s`), and a getter on a point. Configuration columns read the
point's representative run; metric columns are the median over the point's successful runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Callable

from caraml.errors import BadInput, did_you_mean, shown
from caraml.results.aggregate import Point, matches, throughput_of
from caraml.results.energy import energy_of


@dataclass(frozen=True)
class Column:
    key: str
    header: str
    get: Callable[[Point], Any]
    style: str = "text"  # how a value is shown: text, int, num, pct, bool, gib
    config: bool = False  # part of the configuration (rows sort by these; comparisons match on them)
    default: bool | str = True  # shown without --columns; "if-any": only when some row has a value
    param: str | None = None  # the workload parameter this column shows, if it shows one
    aliases: tuple[str, ...] = ()  # that parameter's former names, which older records carry (Param.aliases)
    joins: bool = False  # a value of the configuration or of a run: a row of several runs shows their values joined


def _m(record: dict) -> dict:
    return record.get("metrics") or {}


def _num(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def config(key, header, get_record, style="text", default=True) -> Column:
    return Column(key, header, lambda p: get_record(p.rep), style, config=True, default=default, joins=True)


def param(key, header, name=None, style="text", default=True, declared=None) -> Column:
    """A parameter's column. `declared`: the workload's Param of that name, whose former names and values
    (Param.aliases, value_aliases) are read from records written before the rename."""
    name = name or key
    return replace(config(key, header, lambda r: _param_value(r, name, declared), style, default), param=name,
                   aliases=tuple(getattr(declared, "aliases", ())))


def _param_value(record: dict, name: str, declared=None):
    params = record.get("params") or {}
    if declared is None or name in params:
        value = params.get(name)
    else:
        value = next((params[old] for old in declared.aliases if old in params), None)
    for old, new in getattr(declared, "value_aliases", ()):  # as Param.parse reads them: compared as text
        if value is not None and str(value).lower() == str(old).lower():
            return new
    if getattr(declared, "applies", None) is not None and not declared.applies(params):
        return None  # e.g. a compile mode where nothing is compiled
    return value


def metric(key, header, get_record, style="num", default=True) -> Column:
    return Column(key, header, lambda p: p.median(get_record), style, default=default)


def _devices(r):
    return (r.get("launch") or {}).get("world_size")


def _global_batch(r):
    """Samples per step over all devices: the record's own figure, else per-device batch x devices."""
    gbs = _num(_m(r).get("global_batch_size")) or _num((r.get("params") or {}).get("global_batch_size"))
    if gbs is None:
        per = _num((r.get("params") or {}).get("batch_size"))
        gbs = per * (_devices(r) or 1) if per is not None else None
    return gbs


def _step_spread(r):
    """(p90 - p10) / median of the measured step times: how steady the steady state was."""
    st = _m(r).get("step_time_s") or {}
    med, p10, p90 = _num(st.get("median")), _num(st.get("p10")), _num(st.get("p90"))
    return (p90 - p10) / med if med and p10 is not None and p90 is not None else None


def _interval(r):
    """The 95 % interval's half-width over the mean step time of the measured window (caraml.measure.steady)."""
    return _num((_m(r).get("window") or {}).get("ci_rel"))


# The record's CARAML-convention figure of each workload (a mean over epochs or log intervals).
CARAML_FIGURES = ("caraml_images_per_s", "caraml_tokens_per_s", "caraml_timesteps_per_s")


def caraml_figure_of(r):
    return next((v for v in (_value(_m(r).get(k)) for k in CARAML_FIGURES) if v is not None), None)


def _caraml_cv(r):
    """The coefficient of variation of the epochs or log intervals behind the record's CARAML figure."""
    return _num((_m(r).get("caraml_spread") or {}).get("cv"))


def _peak_gib(r):
    peak = _num(_m(r).get("peak_memory_bytes"))
    return peak / 2**30 if peak is not None else None


def _value(x):
    return _num(x.get("value")) if isinstance(x, dict) else _num(x)


def _dp(r):
    """Data-parallel replicas, from the run's parallel layout (the harness records it for every workload);
    without one, every device is a replica."""
    for layout in (_m(r), _m(r).get("parallel"), (r.get("launch") or {}).get("parallel")):
        dp = _num((layout or {}).get("dp"))
        if dp is not None:
            return dp
    return _devices(r)


def _time_per_iteration(r):
    m = _m(r)
    return _num(m.get("time_per_iteration_s")) or _num((m.get("step_time_s") or {}).get("median"))


def _slurm(r) -> dict:
    return (r.get("env") or {}).get("slurm") or {}


def _site(r) -> dict:
    """The site settings the record's workload had on its system (a workload's own queue and CPUs included)."""
    from caraml import systems

    profile = (r.get("system") or {}).get("profile")
    return systems.site(profile if isinstance(profile, dict) else {}, str(r.get("workload") or "")) or {}


def _runtime_s(r):
    """Seconds from the record's start to its end (CARAML's Runtime(s) is the whole job step's)."""
    from datetime import datetime

    try:
        start, end = (datetime.fromisoformat(str(r[k])) for k in ("started_at", "finished_at"))
        return (end - start).total_seconds()
    except (KeyError, TypeError, ValueError):
        return None


def _tasks_per_node(r):
    """Processes SLURM started per node: one under torchrun (it starts the device processes), one per device
    under srun, one for a single process."""
    launch = r.get("launch") or {}
    return launch.get("local_world_size") if launch.get("launcher") == "srun" else 1


def _threads_per_task(r):
    """CPUs per task: what SLURM granted the job, else what the system profile asks for."""
    granted = _slurm(r).get("SLURM_CPUS_PER_TASK")
    if granted is not None and str(granted).isdigit():
        return int(granted)
    per_task = _num(_site(r).get("cpus_per_task"))
    if per_task and (r.get("launch") or {}).get("launcher") == "srun":
        return max(1, int(per_task) // max(1, _num((r.get("launch") or {}).get("local_world_size")) or 1))
    return per_task


def _job_time(r):
    """The job's SLURM time limit as HH:MM:SS (CARAML's JobTime): its end minus its start time when SLURM gave
    them, else the system profile's."""
    slurm = _slurm(r)
    start, end = slurm.get("SLURM_JOB_START_TIME"), slurm.get("SLURM_JOB_END_TIME")
    if str(start).isdigit() and str(end).isdigit() and int(end) > int(start):
        seconds = int(end) - int(start)
        return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return _site(r).get("time_limit")


def _energy_file(r):
    """CARAML's combined energy CSV when the run wrote one (energy_files=caraml), else the first node's power
    time series."""
    energy = _m(r).get("energy") or {}
    combined = (energy.get("caraml_files") or {}).get("combined")
    if combined:
        return combined
    nodes = energy.get("nodes") or []
    return nodes[0].get("timeseries") if nodes and isinstance(nodes[0], dict) else None


def run_column(key, header, get_record, style="text", default=True) -> Column:
    """A value of one run (the point's representative run), not of the configuration: job id, log files."""
    return Column(key, header, lambda p: get_record(p.rep), style, default=default, joins=True)


def cell(c: Column, point: Point):
    """What a table shows of `c` for `point`: its value; for a value of the configuration or of a run on a row of
    several runs that differ in it, each run's value, oldest first, joined ("4, 2")."""
    if not c.joins or len(point.records) < 2:
        return c.get(point)
    from caraml.results.table import format_value

    values = []
    for r in point.records:
        value = c.get(Point(id=point.id, workload=point.workload, records=[r]))
        if value not in values:
            values.append(value)
    return values[0] if len(values) == 1 else ", ".join(format_value(v, c.style) for v in values)


def not_identifying(workload: str) -> frozenset[str]:
    """The parameters that say how a point was measured, not what (measure_steps, log_interval, seed, power
    sampling): never a column of their own, as they are no part of the configuration."""
    from caraml import workloads
    from caraml.settings import MEASUREMENT_KEYS

    try:
        own = {p.name for p in workloads.get(workload).params if not p.identifies}
    except BadInput:
        own = set()
    return MEASUREMENT_KEYS | own


SYSTEM = config("system", "System", lambda r: (r.get("system") or {}).get("tag"))
NODES = config("nodes", "Nodes", lambda r: (r.get("launch") or {}).get("nodes"), "int")
DEVICES = config("devices", "Devices", _devices, "int")
GLOBAL_BATCH = config("global_batch_size", "GlobalBatchSize", _global_batch, "int")


def throughput(header: str) -> Column:
    return metric("throughput", header, throughput_of)


def ours(unit: str) -> list[Column]:
    """Our additions to every table."""
    return [
        metric("mfu", "MFU", lambda r: _num(_m(r).get("mfu")), "pct"),
        metric("units_per_wh", f"{unit}/Wh", lambda r: energy_of(r).units_per_wh),
        metric("step_spread", "StepSpread", _step_spread, "pct"),
        metric("caraml_cv", "CaramlCV", _caraml_cv, "pct", default="if-any"),
        Column("runs", "Runs", lambda p: len(p.records), "int"),
        Column("spread", "Spread", lambda p: p.spread(throughput_of), "pct"),
        Column("caraml_repeat_spread", "CaramlSpread", lambda p: p.spread(caraml_figure_of), "pct",
               default="if-any"),
        Column("status", "Status", lambda p: p.status),
        # Available with --columns:
        metric("tflops_per_device", "TFLOP/s/device", lambda r: _num(_m(r).get("tflops_per_device")), default=False),
        metric("step_time_s", "StepTime s", lambda r: _num((_m(r).get("step_time_s") or {}).get("median")),
               default=False),
        metric("peak_memory_gib", "PeakMemory GiB", _peak_gib, "gib", default=False),
        metric("interval", "Interval", _interval, "pm", default=False),
        metric("energy_measure_wh", "MeasureEnergy Wh", lambda r: energy_of(r).measure_wh, default=False),
        Column("energy_source", "EnergySource", lambda p: p.energy().source or (
            "-" if p.energy().available else "none"), default=False),
        Column("id", "Id", lambda p: p.id, default=False),
    ]


ENERGY_WH = metric("energy_wh", "Energy Wh", lambda r: energy_of(r).total_wh)

# Columns every workload may name in its declaration (Workload.columns), besides its own Cols.
SHARED = {
    "system": SYSTEM, "nodes": NODES, "devices": DEVICES, "global_batch_size": GLOBAL_BATCH,
    "energy_wh": ENERGY_WH, "dp": config("dp", "DP", _dp, "int"),
    "time_per_iteration_s": metric("time_per_iteration_s", "Time/iteration s", _time_per_iteration),
    "tflops_per_device": metric("tflops_per_device", "TFLOP/s/device", lambda r: _num(_m(r).get("tflops_per_device"))),
    "peak_memory_gib": metric("peak_memory_gib", "PeakMemory GiB", _peak_gib, "gib"),
    "energy_per_device_wh": metric("energy_per_device_wh", "Energy/device Wh",
                                   lambda r: energy_of(r).per_device_wh(_devices(r))),
    # CARAML's job columns (JobID, Version, Queue, JobTime, Runtime(s), Runtime(min), Tasks/Node, Threads/Task,
    # EnergyFile)
    "job_id": run_column("job_id", "JobID", lambda r: _slurm(r).get("SLURM_JOB_ID")),
    "version": run_column("version", "Version", lambda r: (r.get("env") or {}).get("caraml")),
    "queue": config("queue", "Queue", lambda r: _slurm(r).get("SLURM_JOB_PARTITION") or _site(r).get("partition")
                    or None),
    "runtime_s": metric("runtime_s", "Runtime(s)", _runtime_s),
    "runtime_min": metric("runtime_min", "Runtime(min)", lambda r: _runtime_s(r) / 60 if _runtime_s(r) else None),
    "job_time": run_column("job_time", "JobTime", _job_time),
    "tasks_per_node": config("tasks_per_node", "Tasks/Node", _tasks_per_node, "int"),
    "threads_per_task": config("threads_per_task", "Threads/Task", _threads_per_task, "int"),
    "energy_file": run_column("energy_file", "EnergyFile", _energy_file),
}


def _declared(col, params=()) -> Column:
    """A workload's own column (caraml.workloads.Col) as a table column; `params`: the workload's Params."""
    if "|" in col.source:  # the first source with a value, e.g. what data=auto became, else the parameter
        first, _, rest = col.source.partition("|")
        a, b = _declared(replace(col, source=first), params), _declared(replace(col, source=rest), params)
        return replace(a, get=lambda p: _first(a.get(p), b.get(p)), config=a.config or b.config,
                       param=a.param or b.param, aliases=a.aliases or b.aliases)
    kind, _, name = col.source.partition(":")
    if kind == "shared":  # a shared column under the workload's own key, header and visibility
        return replace(SHARED[name], key=col.key, header=col.header, default=col.default)
    if kind == "param":
        declared = next((p for p in params if p.name == name), None)
        column = param(col.key, col.header, name, col.style, col.default, declared)
        if col.shows is None:
            return column
        return replace(column, get=lambda p, raw=column.get: col.shows(raw(p), p.rep.get("params") or {}))
    if kind == "label":  # a text metric (e.g. a shape): the representative run's value, not a median
        return config(col.key, col.header, lambda r, key=name: _m(r).get(key), "text", col.default)
    key, _, sub = name.partition(".")

    def get(r, key=key, sub=sub):
        value = _m(r).get(key)
        if sub and sub != "value":  # a figure inside a metric's dict: metric:loss.last
            value = value.get(sub) if isinstance(value, dict) else None
        return _value(value) if sub == "value" else _num(value) if col.style != "text" else value

    if kind == "metric" and col.style == "word":  # a word, not a number: the representative run's
        return run_column(col.key, col.header, lambda r: _m(r).get(key), "text", col.default)
    if kind == "metric":
        return metric(col.key, col.header, get, col.style if col.style != "text" else "num", col.default)
    raise ValueError(f"column {col.key}: source {col.source!r} is neither param:NAME, metric:KEY nor label:KEY")


def _first(*values):
    return next((v for v in values if v is not None), None)


def columns_for(workload: str, unit: str | None = None) -> list[Column]:
    """Every column of a workload's table, as the workload declares it: shared columns by name, its own
    columns, `throughput`, and `ours` (our additions not already named). Unknown workloads get a generic set."""
    from caraml import workloads

    try:
        wl = workloads.get(workload)
        declared, unit, params = wl.columns, wl.unit, wl.params
    except BadInput:
        declared, params = (), ()
    name = (unit or "units").capitalize()
    if not declared:
        declared = ("system", "nodes", "devices", "global_batch_size", "throughput", "energy_wh", "ours")
    out: list[Column] = []
    for item in declared:
        if item == "throughput":
            out.append(throughput(f"{name}/s"))
        elif item == "ours":
            out.extend(c for c in ours(name) if c.key not in {x.key for x in out} | _keys_named(declared))
        elif isinstance(item, str):
            out.append(SHARED[item])
        else:
            out.append(_declared(item, params))
    return out


def _keys_named(declared) -> set[str]:
    return {item if isinstance(item, str) else item.key for item in declared}


def _norm(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def find(columns: list[Column], name: str) -> Column | None:
    """A column by key, else by header, else by its parameter's former name (`backend`: Engine), ignoring case and
    punctuation ('BatchSize/Device' = 'batchsize_device'): `iterations` is ours, `Iterations` too where no key is
    that (the LLM's CARAML column)."""
    wanted = _norm(name)
    return (next((c for c in columns if _norm(c.key) == wanted), None)
            or next((c for c in columns if _norm(c.header) == wanted), None)
            or next((c for c in columns if wanted in map(_norm, c.aliases)), None))


FIELDS_HINT = "; or a parameter (data, params.data) or a record field (launch.world_size, metrics.energy.reason)"
RECORD_FIELDS = ("params", "launch", "system", "metrics", "env")


def _path_value(record: dict, path: list[str]):
    value = record
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value if not isinstance(value, (dict, list)) else json.dumps(value, default=str)


def resolve(columns: list[Column], name: str, points=()) -> Column | None:
    """A column by key or header (find), else a parameter of these runs (`data`, `params.data`), else a record
    field by its dotted path (`launch.world_size`, `metrics.energy.reason`), else None."""
    c = find(columns, name)
    if c is not None:
        return c
    bare = name[len("params."):] if name.startswith("params.") else name
    if any(bare in p.params for p in points):
        covering = next((c for c in columns if c.param == bare or bare in c.aliases), None)
        return covering or param(bare, bare, bare)
    top, _, rest = name.partition(".")
    if top in RECORD_FIELDS and rest and any(_path_value(p.rep, name.split(".")) is not None for p in points):
        path = name.split(".")
        if top == "metrics":  # a number: the median over the point's runs; text: the representative run's
            if any(_num(_path_value(r, path)) is not None for p in points for r in p.records):
                return metric(name, name, lambda r: _num(_path_value(r, path)))
            return run_column(name, name, lambda r: _path_value(r, path))
        return config(name, name, lambda r: _path_value(r, path))
    return None


# What the text table adds to a header so that figures of one name but another convention are told apart.
NOTES = {"throughput": "steady", "caraml_timesteps_per_s": "CARAML", "train_throughput": "CARAML",
         "caraml_images_per_s": "CARAML", "time_per_iteration_s": "median", "step_spread": "p90-p10",
         "caraml_cv": "std/mean",
         "interval": "95% of mean step", "caraml_iterations": "CARAML", "caraml_time_per_iteration_s": "CARAML",
         "caraml_tokens_per_s": "CARAML", "caraml_tflops_per_device": "CARAML"}
# Kept longest when a table is narrowed to fit (after the columns it keeps always).
HEADLINE = CARAML_FIGURES + ("units_per_wh", "energy_wh", "mfu", "time_per_iteration_s", "step_spread")
STEADY_SPREAD = 0.25  # a step-time spread above this is flagged in the text table
REPEAT_SPREAD = 0.10  # so is a spread of the repeats' throughputs (or CARAML figures) above this
CARAML_SPREAD = 0.10  # and a CARAML figure whose epochs or log intervals vary more than this
ENERGY_KEYS = ("energy_wh", "units_per_wh", "energy_per_device_wh", "energy_measure_wh")


def text_header(c: Column, on_gpus: bool = True) -> str:
    """The header people read: with the convention of its figure ('Images/s (steady)'), and 'device' for CARAML's
    'GPU' where the rows did not all run on GPUs ('Energy/device (Wh)' on CPUs)."""
    note = NOTES.get(c.key)
    header = f"{c.header} ({note})" if note and note.lower() not in c.header.lower() else c.header
    return header if on_gpus else header.replace("GPU", "device")


def on_gpus(points) -> bool:
    """Whether every run of `points` ran on a GPU (its launch device cuda:N; older records without one count)."""
    devices = [str((r.get("launch") or {}).get("device") or "cuda") for p in points for r in p.records]
    return all(d.startswith(("cuda", "gpu")) for d in devices)


def varying(columns: list[Column], shown_cols: list[Column], points) -> list[Column]:
    """Columns for the parameters that differ between `points` but no shown column shows: rows that differ only
    there would look alike. A workload's own column of that parameter where it has one (e.g. Data)."""
    if len(points) < 2:
        return []
    covered = {c.param for c in shown_cols if c.param} | {a for c in shown_cols for a in c.aliases}
    covered |= not_identifying(points[0].workload)  # how a point was measured is no part of what it is
    keys = sorted({k for p in points for k in p.params} - covered)
    out = []
    for k in keys:
        if len({json.dumps(p.params.get(k), sort_keys=True, default=str) for p in points}) > 1:
            out.append(resolve(columns, "params." + k, points))
    return [c for c in out if c is not None and c.key not in {s.key for s in shown_cols}]


def differs(c: Column, points) -> bool:
    return len({json.dumps(c.get(p), sort_keys=True, default=str) for p in points}) > 1


def telling_apart(columns: list[Column], shown_cols: list[Column], points) -> list[Column]:
    """The columns shown whenever the rows differ in them (default "if-differs": the engine that made a figure)
    that `shown_cols` lacks."""
    have = {c.key for c in shown_cols}
    return [c for c in columns if c.default == "if-differs" and c.key not in have and differs(c, points)]


def choose(columns: list[Column], names: list[str] | None, workload: str, points=()) -> list[Column]:
    if not names:
        return [c for c in columns if c.default is True
                or (c.default == "if-any" and any(c.get(p) is not None for p in points))
                or (c.default == "if-differs" and differs(c, points))]
    chosen = []
    for name in names:
        c = resolve(columns, name, points)
        if c is None:
            raise BadInput(f"unknown column '{shown(name)}' for {workload}; "
                           f"{did_you_mean(name, [c.key for c in columns])}choose from: "
                           + ", ".join(c.key for c in columns) + FIELDS_HINT)
        chosen.append(c)
    return chosen


def sort_key(columns: list[Column]):
    """Rows in the order of their configuration columns, numbers numerically, missing values last."""
    cfg = [c for c in columns if c.config]

    def key(point: Point):
        out = []
        for c in cfg:
            v = c.get(point)
            out.append((2, "") if v is None else (0, float(v), "") if _num(v) is not None or isinstance(v, bool)
                       else (1, str(v).lower()))
        return out

    return key


def lookup(point: Point, columns: list[Column], key: str) -> tuple[bool, Any]:
    """(known, value) of `key` for --where: a column, a parameter, or the workload."""
    c = resolve(columns, key, [point])
    if c is not None:
        return True, c.get(point)
    if key in point.params:
        return True, point.params[key]
    if key == "workload":
        return True, point.workload
    return False, None


def where(points: list[Point], columns: list[Column], pairs: list[tuple[str, str]]) -> list[Point]:
    kept = []
    for p in points:
        ok = True
        for key, wanted in pairs:
            known, value = lookup(p, columns, key)
            ok = ok and ((known and matches(value, wanted)) or _param_matches(p, columns, key, wanted))
        if ok:
            kept.append(p)
    return kept


def _param_matches(point: Point, columns: list[Column], key: str, wanted: str) -> bool:
    """Whether the parameter that `key`'s column shows matches as given, where the column shows something else
    (FNO's Data: what data=auto became), so that data=auto finds the runs given data=auto."""
    c = resolve(columns, key, [point])
    name = c.param if c is not None else None
    return name is not None and name in point.params and matches(point.params[name], wanted)


def known_keys(points: list[Point], columns: list[Column]) -> set[str]:
    keys = {c.key for c in columns} | {"workload", "status"}
    for p in points:
        keys.update(p.params)
    return keys
