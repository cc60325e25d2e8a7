"""NVIDIA Grace (GH200, JUPITER) power telemetry through hwmon: power1_average in µW per channel.

Each channel names itself in power1_oem_info, e.g. "Module Power Socket 0" (the whole superchip module:
Hopper GPU, Grace CPU and memory), "Grace Power Socket 0" (CPU, LPDDR5X and SoC), "CPU Power Socket 0"
and "SysIO Power Socket 0" (rails inside Grace). No energy counter: energy is integrated.
"""

from __future__ import annotations

import glob
import os
import re

from caraml.power.backends import Backend, Device, Unavailable

_SCOPES = {  # channel kind -> (device kind, scope in words)
    "module": ("module", "whole module of socket {s}: GPU + Grace CPU + memory (includes the GPU)"),
    "grace": ("cpu", "Grace of socket {s}: CPU cores, LPDDR5X memory and SoC (excludes the GPU)"),
    "cpu": ("cpu-part", "CPU rail of socket {s} (part of the Grace value)"),
    "sysio": ("cpu-part", "SoC/IO rail of socket {s} (part of the Grace value)"),
}


def channel_kind(label: str) -> tuple[str, str, str]:
    """'Module Power Socket 0' -> ('module', device kind, scope); unknown labels are kept as parts."""
    m = re.match(r"\s*(\w+)\s+Power\s+Socket\s+(\d+)", label, re.IGNORECASE)
    if not m:
        return "other", "cpu-part", f"hwmon channel '{label}' (scope unknown; not added to totals)"
    word, socket = m.group(1).lower(), m.group(2)
    kind, scope = _SCOPES.get(word, ("cpu-part", "hwmon channel '{l}' of socket {s} (not added to totals)"))
    return word, kind, scope.format(s=socket, l=label)


class Grace(Backend):
    name = "grace"

    def __init__(self, root: str):
        self.base = os.path.join(root, "class", "hwmon")
        self.paths: dict[str, str] = {}

    def open(self) -> list[Device]:
        devices = []
        for info in sorted(glob.glob(os.path.join(self.base, "hwmon*", "device", "power1_oem_info"))):
            folder = os.path.dirname(info)
            try:
                with open(info) as f:
                    label = f.read().strip()
                value = os.path.join(folder, "power1_average")
                with open(value) as f:
                    int(f.read().strip())
            except (OSError, ValueError):
                continue
            word, kind, scope = channel_kind(label)
            key = f"grace:{label}"
            self.paths[key] = value
            devices.append(Device(key=key, backend=self.name, name=label, uuid=label, scope=scope, kind=kind,
                                  counter=False, info={"channel": word,
                                                       "hwmon": os.path.basename(os.path.dirname(folder))}))
        if not devices:
            raise Unavailable(f"no Grace power channels (power1_oem_info) under {self.base}: not a Grace system")
        return devices

    def read(self):
        out = {}
        for key, path in self.paths.items():
            with open(path) as f:
                out[key] = (int(f.read().strip()) * 1e-6, None)
        return out


def make(root: str) -> Grace:
    return Grace(root)
