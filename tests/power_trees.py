"""Generated sysfs trees with the real layout of powercap (RAPL) and hwmon (Grace) for the power tests."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def write(path: Path, text) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{text}\n")


def rapl_tree(root: Path, energy_uj: int = 1_000_000, max_uj: int = 262_143_328_850) -> Path:
    """intel-rapl:0 package-0 with core and dram sub-zones, intel-rapl:1 package-1, intel-rapl:2 psys."""
    base = root / "class" / "powercap"
    for zone, name in (("intel-rapl:0", "package-0"), ("intel-rapl:0:0", "core"), ("intel-rapl:0:1", "dram"),
                       ("intel-rapl:1", "package-1"), ("intel-rapl:2", "psys")):
        write(base / zone / "name", name)
        write(base / zone / "energy_uj", energy_uj)
        write(base / zone / "max_energy_range_uj", max_uj)
    write(base / "intel-rapl" / "enabled", 1)  # the control type folder, not a zone
    return base


def set_energy(base: Path, zone: str, uj: int) -> None:
    """Atomically, as sysfs reads are: the sampler must never see a half-written file."""
    tmp = base / zone / "energy_uj.tmp"
    tmp.write_text(f"{uj}\n")
    os.replace(tmp, base / zone / "energy_uj")


def grace_tree(root: Path, sockets: int = 1, watts: dict | None = None) -> Path:
    """hwmon1.. with device/power1_oem_info and power1_average (µW), as on a GH200 node."""
    watts = watts or {"Module": 600.0, "Grace": 150.0, "CPU": 90.0, "SysIO": 30.0}
    base = root / "class" / "hwmon"
    write(base / "hwmon0" / "name", "acpitz")  # a thermal hwmon without power channels
    n = 1
    for s in range(sockets):
        for label, w in watts.items():
            dev = base / f"hwmon{n}" / "device"
            write(dev / "power1_oem_info", f"{label} Power Socket {s}")
            write(dev / "power1_average", int(w * 1e6))
            write(dev / "power1_average_interval", 50)
            n += 1
    return base


def moving_counter(base: Path, stop: threading.Event):
    """package-0 counts 2 J every 50 ms (40 W), written atomically as the kernel's file reads."""
    uj, target = 1_000_000, base / "intel-rapl:0" / "energy_uj"
    while not stop.wait(0.05):
        uj += 2_000_000
        tmp = target.with_suffix(".tmp")
        tmp.write_text(f"{uj}\n")
        os.replace(tmp, target)
