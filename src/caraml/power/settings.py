"""What `caraml run` is asked to measure of power: the parameters' declarations and the typed settings
resolved from them. Torch-free and backend-free, so the CLI, results and campaigns can declare and read
them without loading a monitor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from caraml.params import params_of, read_config, setting
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


@dataclass(frozen=True)
class PowerSettings:
    """How `caraml run` measures power, read once from the parameters (`from_params`). How power is sampled never
    changes what is measured: none of these identifies a configuration."""

    # "auto": the system profile's methods
    power: str = setting("auto", "power measurement: auto (the system's methods the machine has), off, or a comma "
                         "list of " + "|".join(METHODS), check=_check_methods, identifies=False)
    power_interval_ms: float = setting(100.0, "power sampling interval in ms", minimum=1.0, identifies=False)
    # sampled before the run starts, as its own "idle" phase
    idle_baseline_s: float = setting(0.0, "seconds of idle power sampled before the run (0: none)", minimum=0.0,
                                     identifies=False)
    energy_files: str = setting("none", "also write the power time series as CARAML does (jpwr's per-node-rank "
                                "CSVs and a combined CSV, beside the record): none or caraml",
                                choices=("none", "caraml"), identifies=False)

    @classmethod
    def from_params(cls, values: dict[str, Any]) -> PowerSettings:
        """From resolved parameters (the declarations' defaults for keys not given)."""
        return read_config(cls, values)

    @property
    def enabled(self) -> bool:
        return self.power != "off"


POWER_PARAMS = params_of(PowerSettings)
