"""RAPL (Intel and AMD CPUs) through powercap: package and DRAM energy counters in µJ, with wrap-around.

Zones: /sys/class/powercap/intel-rapl:N (package-N) and their sub-zones intel-rapl:N:M. Only package
and dram are kept: core/uncore lie inside the package, psys overlaps everything.
"""

from __future__ import annotations

import glob
import os

from caraml.power.backends import Backend, Device, Unavailable


class Counter:
    """A wrapping µJ counter made monotonic: each read adds the step since the last, modulo the range."""

    def __init__(self, path: str, max_range_uj: int):
        self.path, self.max_range = path, max_range_uj
        self.last = self._raw()
        self.total_uj = 0

    def _raw(self) -> int:
        with open(self.path) as f:
            return int(f.read().strip())

    def read_j(self) -> float:
        raw = self._raw()
        step = raw - self.last
        if step < 0:  # wrapped past max_energy_range_uj
            step += self.max_range
        self.last = raw
        self.total_uj += step
        return self.total_uj * 1e-6


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


class Rapl(Backend):
    name = "rapl"

    def __init__(self, root: str):
        self.base = os.path.join(root, "class", "powercap")
        self.counters: dict[str, Counter] = {}

    def open(self) -> list[Device]:
        zones = sorted(glob.glob(os.path.join(self.base, "intel-rapl:*")))
        if not zones:
            raise Unavailable(f"no RAPL zones under {self.base} (no powercap/intel_rapl driver on this machine)")
        devices = []
        for zone in zones:
            try:
                name = _read(os.path.join(zone, "name"))
            except OSError:
                continue
            if not (name.startswith("package") or name == "dram"):
                continue
            label = name if name.startswith("package") else f"dram-{os.path.basename(zone).split(':')[1]}"
            key = f"rapl:{label}"
            if key in self.counters:
                continue
            try:
                counter = Counter(os.path.join(zone, "energy_uj"),
                                  int(_read(os.path.join(zone, "max_energy_range_uj"))))
            except PermissionError:
                raise Unavailable(f"{zone}/energy_uj is readable by root only on this machine "
                                  "(ask for read access, e.g. a udev rule, or run with another method)") from None
            except (OSError, ValueError) as exc:
                raise Unavailable(f"cannot read RAPL zone {zone}: {exc}") from None
            self.counters[key] = counter
            scope = "CPU package (cores, caches, uncore)" if name.startswith("package") else "DRAM of one package"
            devices.append(Device(key=key, backend=self.name, name=f"RAPL {label}", uuid=label, scope=scope,
                                  kind="cpu" if name.startswith("package") else "dram", counter=True, power=False))
        if not devices:
            raise Unavailable(f"RAPL zones under {self.base} have no package or dram domain")
        return devices

    def read(self):
        return {key: (None, c.read_j()) for key, c in self.counters.items()}


def make(root: str) -> Rapl:
    return Rapl(root)
