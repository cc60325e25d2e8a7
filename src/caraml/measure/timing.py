"""Step timing that never mixes warm-up into throughput and never reads a clock before the device is done.

On CUDA each step is bracketed by events recorded on the stream, so timing adds no host
synchronisation inside the measured window; the window's wall time is read on the host after
one synchronisation at each end. On other devices the host clock is read after a synchronisation
per step.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable


def summarize(samples: list[float]) -> dict[str, float | int] | None:
    """Median and spread of step times (seconds); None when there are none."""
    if not samples:
        return None
    ordered = sorted(samples)

    def pct(q: float) -> float:  # linear interpolation between closest ranks
        pos = q * (len(ordered) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(ordered) - 1)
        return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)

    return {
        "n": len(ordered),
        "median": statistics.median(ordered),
        "p10": pct(0.10),
        "p90": pct(0.90),
        "mean": statistics.fmean(ordered),
        "min": ordered[0],
        "max": ordered[-1],
    }


def figure_spread(values: list[float], over: str, unit: str) -> dict | None:
    """How much the parts of a figure that is a mean over parts (CARAML's images/s over epochs, tokens/s over log
    intervals) differ: each part's own figure `values`, their count, lowest, highest and coefficient of variation
    (sample standard deviation / mean; None for one part); None without parts."""
    if not values:
        return None
    mean = statistics.fmean(values)
    cv = statistics.stdev(values) / mean if len(values) > 1 and mean else None
    return {"over": over, "unit": unit, "n": len(values), "min": min(values), "max": max(values), "cv": cv}


class StepClock:
    """Per-step durations for one window, with device events where the device has them."""

    def __init__(self, device_type: str, synchronize: Callable[[], None]):
        self._sync = synchronize
        self._cuda = device_type == "cuda"
        self._events: list = []
        self._host: list[float] = []
        self._last = 0.0
        self._done = 0  # CUDA: the steps known to have completed (events complete in the order recorded)
        self._times: list[float] = []  # CUDA: the durations of the completed steps read so far
        self.wall_start = 0.0

    def start(self) -> None:
        self._sync()
        self.wall_start = time.perf_counter()
        if self._cuda:
            import torch

            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._events.append(event)
        self._last = self.wall_start

    def tick(self) -> None:
        """Mark the end of one step."""
        if self._cuda:
            import torch

            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._events.append(event)
        else:
            self._sync()
            now = time.perf_counter()
            self._host.append(now - self._last)
            self._last = now

    def completed(self) -> tuple[int, float]:
        """The steps completed so far and their time (s), without synchronising: on CUDA from the step events
        that have completed (a non-blocking query each, a binary search over the new ones), else the host's."""
        if not self._cuda:
            return len(self._host), sum(self._host)
        ev = self._events
        lo, hi = self._done, len(ev) - 1  # ev[0] marks the start; ev[i] the end of step i
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if ev[mid].query():
                lo = mid
            else:
                hi = mid - 1
        self._done = lo
        return lo, (ev[0].elapsed_time(ev[lo]) / 1e3 if lo else 0.0)

    def completed_times(self) -> list[float]:
        """Each completed step's duration (s), in order, without synchronising (see `completed`): the list grows as
        steps complete; the caller must not change it."""
        if not self._cuda:
            return self._host
        done, _ = self.completed()
        ev, times = self._events, self._times
        times.extend(ev[i].elapsed_time(ev[i + 1]) / 1e3 for i in range(len(times), done))
        return times

    def stop(self) -> tuple[float, list[float]]:
        """Wall time of the window (s) and each step's duration (s)."""
        self._sync()
        wall = time.perf_counter() - self.wall_start
        if self._cuda:
            ev = self._events
            steps = [ev[i].elapsed_time(ev[i + 1]) / 1e3 for i in range(len(ev) - 1)]
        else:
            steps = list(self._host)
        return wall, steps
