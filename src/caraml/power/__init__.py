"""Power and energy measurement: backends per device type, a monitor process per node, energy tables.

In any script:

    import caraml.power
    with caraml.power.measure(methods="auto", interval_ms=100) as m:
        work()
        m.mark("second half")        # optional: phases, each reported on its own
    print(m.energy_wh(), m.energy()["devices"])
"""

from __future__ import annotations

from contextlib import contextmanager

from caraml.power.backends import METHODS
from caraml.power.energy import combine, table
from caraml.power.monitor import Monitor, resolve_methods

__all__ = ["METHODS", "EnergyMeasurement", "Monitor", "combine", "measure", "resolve_methods", "table"]


class EnergyMeasurement:
    """The energy of one `measure()` block (what it yields): mark phases while running; read energy after."""

    def __init__(self, monitor: Monitor):
        self.monitor = monitor
        self._energy: dict | None = None

    def mark(self, phase: str) -> None:
        self.monitor.mark(phase)

    def energy(self, units: float | None = None, unit: str | None = None) -> dict:
        if self._energy is None or units is not None:
            self._energy = self.monitor.energy(units, unit, window="all")
        return self._energy

    def energy_wh(self) -> float | None:
        """Energy of all counted devices over the whole block, Wh; None when unavailable."""
        return self.energy().get("run_wh")


@contextmanager
def measure(methods: str = "auto", interval_ms: float = 100.0, out_dir: str | None = None, **options):
    """Measure energy of the enclosed block in a separate monitor process."""
    monitor = Monitor(methods, interval_ms, out_dir, phase="run", **options).start()
    m = EnergyMeasurement(monitor)
    try:
        yield m
    finally:
        monitor.stop()
