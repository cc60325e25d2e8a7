"""Power backends: each one finds the devices it can read on this node and reads them.

A backend's `open()` returns its devices (or raises `Unavailable` with a reason a person can act on);
`read()` returns, per device key, the power in W and the cumulative energy in J (either may be None:
RAPL has no power reading, Grace hwmon no counter). Counters are made monotonic here (wrap-around
handled by the backend), so energy over a window is always a plain difference.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import asdict, dataclass, field

METHODS = ("nvml", "amd", "grace", "rapl", "ipu")


class Unavailable(Exception):
    """This backend cannot measure on this machine; the message says why."""


@dataclass
class Device:
    key: str            # unique on this node, e.g. "nvml:GPU-8c2d..." or "rapl:package-0"
    backend: str
    name: str
    uuid: str           # stable identity: NVML/AMD UUID, hwmon channel name, RAPL zone name
    scope: str          # what the value covers, in words
    kind: str           # accelerator | module | cpu | cpu-part | dram
    counter: bool       # a hardware energy counter exists
    power: bool = True  # a power reading exists
    note: str = ""      # e.g. "secondary die: its energy is counted on its primary die"
    info: dict = field(default_factory=dict)  # power limit, clocks, temperature at open

    def as_dict(self) -> dict:
        return asdict(self)


class Backend:
    name = "?"

    def open(self) -> list[Device]:
        raise NotImplementedError

    def read(self) -> dict[str, tuple[float | None, float | None]]:
        raise NotImplementedError

    def info(self) -> dict[str, dict]:
        """Per device key: values for the record at the end (clocks, temperature); may be empty."""
        return {}

    def close(self) -> None:
        pass


def sysfs_root() -> str:
    """Where sysfs is; tests point CARAML_SYSFS_ROOT at a generated tree with the real layout."""
    return os.environ.get("CARAML_SYSFS_ROOT", "/sys")


def make(method: str, root: str | None = None) -> Backend:
    module = importlib.import_module(f"caraml.power.backends.{method}")
    return module.make(root or sysfs_root())
