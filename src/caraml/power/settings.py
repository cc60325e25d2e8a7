"""What `caraml run` is asked to measure of power: the parameters' declarations and the typed settings
resolved from them. Torch-free and backend-free, so the CLI, results and campaigns can declare and read
them without loading a monitor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from caraml.params import Param
from caraml.power.backends import METHODS  # the registry's names only; no backend module is loaded


def _check_methods(value: str) -> str | None:
    if value == "off":
        return None
    from caraml.errors import BadInput
    from caraml.power.monitor import resolve_methods

    try:
        resolve_methods(value)
    except BadInput:
        return "is not a power method; use auto, off or a comma list of: " + ", ".join(METHODS)
    return None


# How power is sampled never changes what is measured: none of these identifies a configuration.
POWER_PARAMS = [
    Param("power", str, "auto", "power measurement: auto (the system's methods the machine has), off, or a comma "
          "list of " + "|".join(METHODS), check=_check_methods, identifies=False),
    Param("power_interval_ms", float, 100.0, "power sampling interval in ms", minimum=1.0, identifies=False),
    Param("idle_baseline_s", float, 0.0, "seconds of idle power sampled before the run (0: none)", minimum=0.0,
          identifies=False),
    Param("energy_files", str, "none", "also write the power time series as CARAML does (jpwr's per-node-rank CSVs "
          "and a combined CSV, beside the record): none or caraml", choices=("none", "caraml"), identifies=False),
]

_DEFAULTS = {p.name: p.default for p in POWER_PARAMS}


@dataclass(frozen=True)
class PowerSettings:
    """How `caraml run` measures power, read once from the parameters (`from_params`)."""

    methods: str = _DEFAULTS["power"]
    """The `power` parameter as given: "auto" (the system profile's methods), "off", or a comma list of methods."""
    interval_ms: float = _DEFAULTS["power_interval_ms"]
    """Sampling interval of the monitor process, ms."""
    idle_baseline_s: float = _DEFAULTS["idle_baseline_s"]
    """Seconds of idle power sampled before the run starts (its own "idle" phase); 0: none."""
    energy_files: str = _DEFAULTS["energy_files"]
    """Extra files: with "caraml", jpwr-style per-node-rank CSVs and a combined CSV beside the record; "none": none."""

    @classmethod
    def from_params(cls, values: dict[str, Any]) -> PowerSettings:
        """From resolved parameters (the declarations' defaults for keys not given)."""
        v = {name: values.get(name, default) for name, default in _DEFAULTS.items()}
        return cls(methods=v["power"], interval_ms=v["power_interval_ms"], idle_baseline_s=v["idle_baseline_s"],
                   energy_files=v["energy_files"])

    @property
    def enabled(self) -> bool:
        return self.methods != "off"
