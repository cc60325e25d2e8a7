"""The harness's measure_seconds window : the step count every rank runs comes from the slowest rank's
typical warm-up step, the median of the last three, so one compiling first step does not shrink the window.
In process, a fake process group; no steps are run.
"""

from __future__ import annotations

import pytest

from caraml.measure.harness import Measurement, _window_steps
from caraml.settings import MeasureSettings


class Ranks:
    """This rank among others whose typical warm-up step took `others` seconds."""

    def __init__(self, *others: float):
        self.others, self.world_size = others, 1 + len(others)

    def all_reduce(self, value, op="sum"):
        values = [value, *self.others]
        return max(values) if op == "max" else sum(values)


def warmed(*times: float) -> Measurement:
    return Measurement(phase="warmup", warmup_times=list(times))


def test_measure_seconds_counts_steps_from_the_median_of_the_last_three_warmup_steps():
    settings = MeasureSettings(warmup_steps=4, measure_seconds=4.0)
    assert _window_steps(settings, Ranks(), warmed(10.0, 0.5, 0.4, 0.8)) == 8  # median(0.5, 0.4, 0.8) = 0.5


def test_measure_seconds_follow_the_slowest_rank():
    settings = MeasureSettings(warmup_steps=3, measure_seconds=4.0)
    assert _window_steps(settings, Ranks(1.0, 0.25), warmed(0.5, 0.5, 0.5)) == 4


@pytest.mark.parametrize("seconds, steps", [(0.0, 7), (0.01, 1)])
def test_measure_steps_without_seconds_and_at_least_one_step(seconds, steps):
    settings = MeasureSettings(warmup_steps=1, measure_steps=7, measure_seconds=seconds)
    assert _window_steps(settings, Ranks(), warmed(0.5)) == steps
