"""The workload registry: every workload registers itself with `register(Workload(...))`.

Built-in workloads are the modules of this package; others come from installed packages through the
entry-point group `caraml.workloads` (`name = "package.module"`). Modules are imported only when asked
for, and declaring a workload's parameters never imports torch, so that listing, validation and sweep
expansion stay fast.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable

from caraml.errors import BadInput, did_you_mean, shown
from caraml.params import Param, id_view, params_of, read_config

_REGISTERED: dict[str, "Workload"] = {}


@dataclass(frozen=True)
class Col:
    """A result column a workload declares: a parameter (`param:NAME`) or one of its metrics (`metric:KEY`,
    `metric:KEY.value` for a {value, unit} metric; `label:KEY` for a text metric such as a shape, shown as
    the representative run has it). Style: text, int, num, pct, bool, gib; word for a metric that is text
    (shown from the configuration's representative run, not a median). `A|B`: A's value, else B's (a column of
    what data=auto became that shows the parameter for records without it, and filters and varies as it)."""

    key: str
    header: str
    source: str
    style: str = "text"
    # shown without --columns; "if-any": only when some row has a value; "if-differs": whenever the rows differ in
    # it, also beside the columns asked for (the engine that made a figure)
    default: bool | str = True
    # param: how the parameter's value reads in the table, from it and the run's parameters (CompileMode "eager"
    # where nothing is compiled); None: as it is
    shows: Callable[[Any, dict], Any] | None = None


@dataclass(frozen=True)
class Workload:
    """A workload's declaration: its typed config (which declares its parameters), and the functions that
    check and build it. Everything here is importable without torch; `build` imports what it needs."""

    name: str
    unit: str  # what throughput counts, per second: "images", "tokens", "timesteps"
    # The typed config: a frozen dataclass whose fields are the workload's parameters (caraml.params.setting),
    # the one reader of their values: `from_params(values) -> config` where it resolves some (0: the problem's),
    # else caraml.params.read_config. Every function below takes the config, never the flat values.
    config: Any = None
    params: list[Param] = None  # params_of(config); given only by a workload without a config class
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)
    build: Callable[..., Any] | None = None  # (config, RunContext) -> caraml.contract.Bench; None: declared, not built
    check_device: Callable[..., None] | None = None  # (config, device): BadInput if it can't run there
    description: str = ""
    # (config, devices) -> error message or None: launch-shape checks such as tp*pp dividing devices
    check_launch: Callable[[Any, int], str | None] | None = None
    # (config, world) -> caraml.parallel_dims.ParallelDims; None: every process is a data-parallel replica
    dims: Callable[[Any, int], Any] | None = None
    # The result table, in order: names of shared columns (caraml.results.columns.SHARED) and Cols of its own.
    columns: tuple = ()
    metrics: tuple[str, ...] = ()  # the keys its Bench.details() puts into the record's metrics
    # (config, dims) -> the caraml.kit.torch_features a run of this config on this layout needs; checked at start
    torch_features: Callable[[Any, Any], tuple] | None = None

    def __post_init__(self):
        if self.config is not None and self.params is not None:
            raise TypeError(f"workload {self.name}: its config declares its parameters; give config= or params=, "
                            "not both")
        if self.params is None:
            object.__setattr__(self, "params", params_of(self.config) if self.config is not None else [])

    def config_of(self, values: dict[str, Any]):
        """The typed config of resolved parameter values (a run's, or a sweep point's)."""
        if self.config is None:  # a workload without a config class gets its own parameters' values, no others
            return {p.name: values[p.name] for p in self.params if p.name in values}
        from_params = getattr(self.config, "from_params", None)
        return from_params(values) if from_params is not None else read_config(self.config, values)

    def identifying(self, values: dict[str, Any]) -> dict[str, Any]:
        """What a configuration id hashes of these values (caraml.results.record.config_id): the workload's name
        and its parameters less the measurement settings, quiet defaults and retyped values as they were."""
        from caraml.settings import identity

        return {"workload": self.name, "params": id_view(self.params, identity(values))}

    def parallel_dims(self, config, world: int):
        from caraml.parallel_dims import ParallelDims

        return self.dims(config, world) if self.dims else ParallelDims(dp=world)

    def launch_problem(self, values: dict[str, Any], devices: int) -> str | None:
        """What makes these values impossible on `devices` processes, in one line; None when they fit."""
        return self.check_launch(self.config_of(values), devices) if self.check_launch else None

    @property
    def headline(self) -> tuple[str, ...]:
        """The parameters a run names in its first line (setting(..., headline=True))."""
        return tuple(p.name for p in self.params if p.headline)


def register(workload: Workload) -> Workload:
    """Make a workload known by its name; returns it, so a module can say `WORKLOAD = register(Workload(...))`."""
    _REGISTERED[workload.name] = workload
    return workload


def require_built(wl: Workload) -> None:
    """Refuse, as bad input, to run a workload whose parameters are declared but which is not built yet."""
    if wl.build is None:
        raise BadInput(f"workload {wl.name} is not built yet in this version; its sweeps can be expanded "
                       f"(caraml sweep {wl.name} --dry-run) but not run")


def preset_named(wl: Workload, name: str) -> str:
    """The preset of `wl` that `name` names, in any case (`Smoke`, `13b`), as tags and systems are taken."""
    if name in wl.presets:
        return name
    for known in wl.presets:
        if known.lower() == name.lower():
            return known
    raise BadInput(f"{wl.name}: unknown preset '{shown(name)}'; {did_you_mean(name, wl.presets)}choose one of: "
                   + ", ".join(wl.presets))


def _modules() -> dict[str, str]:
    """Workload name -> module: this package's modules and packages by their names, then entry points."""
    found = {m.name: f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")}
    try:
        from importlib.metadata import entry_points

        eps = entry_points()
        group = eps.select(group="caraml.workloads") if hasattr(eps, "select") else eps.get("caraml.workloads", ())
        for ep in group:  # (select: Python 3.10+; a dict of groups on 3.9)
            found.setdefault(ep.name, ep.value.split(":")[0])
    except Exception:  # noqa: BLE001 - a broken third-party install must not stop the built-in workloads
        pass
    return found


def names() -> list[str]:
    return sorted(_modules())


def get(name: str) -> Workload:
    if name not in _REGISTERED:
        modules = _modules()
        if name not in modules:
            raise BadInput(f"unknown workload '{shown(name)}'; {did_you_mean(name, modules)}choose one of: "
                           + ", ".join(sorted(modules)))
        importlib.import_module(modules[name])
        if name not in _REGISTERED:
            raise BadInput(f"module {modules[name]} does not register a workload named '{name}'")
    return _REGISTERED[name]
