"""The run's own settings, apart from any workload's: how a point is measured and how its power is sampled.

Declared as the fields of typed, frozen settings (caraml.params.setting), parsed with the workload's parameters
into one flat record `params` and read back by their owners: `MeasureSettings` (here) for the harness,
`PowerSettings` (caraml.power.settings) for the power monitor.
Importing this module imports no torch, so results, campaigns and the CLI can read the declarations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from caraml.errors import BadInput
from caraml.params import params_of, read_config, setting
from caraml.power.settings import POWER_PARAMS, PowerSettings

__all__ = ["MEASURE_PARAMS", "POWER_PARAMS", "RUN_PARAMS", "MEASUREMENT_KEYS", "MeasureSettings", "PowerSettings",
           "check_window", "identity"]


@dataclass(frozen=True)
class MeasureSettings:
    """What the harness needs: how long to warm up and to measure, the seed, the device asked for."""

    warmup_steps: int = setting(10, "steps run before measuring (compilation, autotuning); not timed as throughput",
                                minimum=1, identifies=False)
    # A GPT step of global batch 4096 takes minutes and is 256 micro-steps, all compiled after the first: ten of
    # them are a warm-up of half an hour. 3 steps at the least: the median of the last three is the typical step.
    warmup_max_seconds: float = setting(0.0, "if > 0, end the warm-up once it has run this long (s) and at least 3 "
                                        "steps, before warmup_steps", minimum=0.0, identifies=False,
                                        identifies_at_default=False)
    measure_steps: int = setting(50, "steps in the measured window", minimum=1, identifies=False)
    # the step count is fixed from the slowest rank's warm-up step
    measure_seconds: float = setting(0.0, "if > 0, measure for about this long instead (step count fixed from the "
                                     "warm-up step time)", minimum=0.0, identifies=False)
    # until-steady: measure until the mean step time is known to measure_ci (caraml.measure.steady), within caps.
    # Not identifying, and left out of ids and job scripts at their defaults (points from before they existed).
    measure: str = setting("fixed", "fixed: measure_steps (or measure_seconds); until-steady: until the 95 % "
                           "interval of the mean step time is within measure_ci", choices=("fixed", "until-steady"),
                           identifies=False, identifies_at_default=False)
    measure_ci: float = setting(0.01, "until-steady: stop when the 95 % interval's half-width is this share of the "
                                "mean step time", minimum=0.0001, identifies=False, identifies_at_default=False)
    # A host data path or a clock that changes over seconds shows only in a window that long: on an H100, ResNet50 fed
    # by host workers stopped after 2.5 s at 1.23x the rate of a 30 s window (docs/measurement.md).
    measure_min_seconds: float = setting(20.0, "until-steady: measure at least this long (s), whatever the interval "
                                         "says", minimum=0.0, identifies=False, identifies_at_default=False)
    measure_max_steps: int = setting(10000, "until-steady: measure at most this many steps", minimum=1,
                                     identifies=False, identifies_at_default=False)
    measure_max_seconds: float = setting(600.0, "until-steady: measure at most this long (s)", minimum=1.0,
                                         identifies=False, identifies_at_default=False)
    seed: int = setting(0, "random seed for weights and synthetic data", minimum=0, identifies=False)
    # A cpu run and a cuda run are different configurations: device identifies.
    device: str = setting("auto", "auto (GPU when present), cuda, cpu", choices=("auto", "cuda", "cpu"))
    # at 0 the phases are announced still
    log_interval: float = setting(5.0, "seconds between the live log's step lines on stderr (0: none)", minimum=0.0,
                                  identifies=False)

    @classmethod
    def from_params(cls, values: dict[str, Any]) -> "MeasureSettings":
        return read_config(cls, values)


MEASURE_PARAMS = params_of(MeasureSettings)

# Every parameter a run has besides its workload's, in the order `caraml workloads` lists them.
RUN_PARAMS = MEASURE_PARAMS + POWER_PARAMS

# Settings that say how a point is measured, not what is measured: two runs differing only in these measure
# the same configuration (same record id), so results and comparisons match across them.
MEASUREMENT_KEYS = frozenset(p.name for p in RUN_PARAMS if not p.identifies)


def identity(values: dict[str, Any]) -> dict[str, Any]:
    """The parameters that identify a configuration: all but the measurement keys."""
    return {k: v for k, v in values.items() if k not in MEASUREMENT_KEYS}


def check_window(values: dict[str, Any], given: dict[str, Any], owner: str) -> None:
    """measure=until-steady sets the window's length itself: a length given too (in `given`, the user's or a suite's
    values; a preset's measure_steps stands for measure=fixed) is a conflict, refused in one line."""
    if values.get("measure") != "until-steady":
        return
    low = float(values.get("measure_min_seconds", MeasureSettings.measure_min_seconds))
    high = float(values.get("measure_max_seconds", MeasureSettings.measure_max_seconds))
    if low > high:
        raise BadInput(f"{owner}: measure_min_seconds={low:g} is above measure_max_seconds={high:g}; give a minimum "
                       "at most the cap")
    for key in ("measure_steps", "measure_seconds"):
        if key in given:
            raise BadInput(f"{owner}: {key}={values[key]} conflicts with measure=until-steady, which measures until "
                           "the interval reaches measure_ci (caps: measure_max_steps, measure_max_seconds); give one "
                           "of them")
