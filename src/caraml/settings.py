"""The run's own settings, apart from any workload's: how a point is measured and how its power is sampled.

Declared as `Param`s (parsed with the workload's, into one flat record `params`), then resolved into typed,
frozen settings by their owners: `MeasureSettings` (here) for the harness, `PowerSettings`
(caraml.power.settings) for the power monitor.
Importing this module imports no torch, so results, campaigns and the CLI can read the declarations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from caraml.params import Param, typed_fields
from caraml.power.settings import POWER_PARAMS, PowerSettings

__all__ = ["MEASURE_PARAMS", "POWER_PARAMS", "RUN_PARAMS", "MEASUREMENT_KEYS", "MeasureSettings", "PowerSettings",
           "identity"]

MEASURE_PARAMS = [
    Param("warmup_steps", int, 10, "steps run before measuring (compilation, autotuning); not timed as throughput",
          minimum=1, identifies=False),
    Param("measure_steps", int, 50, "steps in the measured window", minimum=1, identifies=False),
    Param("measure_seconds", float, 0.0,
          "if > 0, measure for about this long instead (step count fixed from the warm-up step time)", minimum=0.0,
          identifies=False),
    Param("seed", int, 0, "random seed for weights and synthetic data", minimum=0, identifies=False),
    # A cpu run and a cuda run are different configurations: device identifies.
    Param("device", str, "auto", "auto (GPU when present), cuda, cpu", choices=("auto", "cuda", "cpu")),
    Param("log_interval", float, 5.0, "seconds between the live log's step lines on stderr (0: none)", minimum=0.0,
          identifies=False),
]

# Every parameter a run has besides its workload's, in the order `caraml workloads` lists them.
RUN_PARAMS = MEASURE_PARAMS + POWER_PARAMS

# Settings that say how a point is measured, not what is measured: two runs differing only in these measure
# the same configuration (same record id), so results and comparisons match across them.
MEASUREMENT_KEYS = frozenset(p.name for p in RUN_PARAMS if not p.identifies)


@dataclass(frozen=True)
class MeasureSettings:
    """What the harness needs: how long to warm up and to measure, the seed, the device asked for."""

    warmup_steps: int = 10
    """steps run before the measured window (compilation, autotuning, cuDNN benchmarking)"""
    measure_steps: int = 50
    """steps in the measured window (unless measure_seconds > 0)"""
    measure_seconds: float = 0.0
    """if > 0, measure for about this long: the step count is fixed from the slowest rank's warm-up step"""
    log_interval: float = 5.0
    """seconds between the live log's step lines (0: none; phases are announced still)"""
    seed: int = 0
    """random seed for weights and synthetic data"""
    device: str = "auto"
    """auto (a GPU when present), cuda or cpu"""

    @classmethod
    def from_params(cls, values: dict[str, Any]) -> "MeasureSettings":
        return typed_fields(cls, values)


def identity(values: dict[str, Any]) -> dict[str, Any]:
    """The parameters that identify a configuration: all but the measurement keys."""
    return {k: v for k, v in values.items() if k not in MEASUREMENT_KEYS}
