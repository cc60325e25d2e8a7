"""When a measured window has run long enough: the 95 % confidence interval of the mean step time, by batch means.

Step times of one run are correlated (a slow step is often followed by another: a cache, a clock, a neighbour's
job), so the plain standard error of single steps is too narrow. The steps are grouped into BATCHES consecutive
batches instead; the batch means are close to independent, and Student's t over them gives the interval. A trend
(clocks still ramping, a cache still warming) would let the interval shrink while the mean still moves, so the
window stops only when the first and second halves of the batches also agree within their own interval.

`verdict(times, target_ci)` is a pure function of the completed step times: the harness asks it every few steps
(measure=until-steady), and the record's `metrics.window` holds what it said at the end.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

BATCHES = 20  # batch means the interval is taken over
# never stop before this many measured steps: one per batch. Fast steps are held longer by measure_min_seconds
# (20 s: thousands of millisecond steps); a step that takes a second or more is its own batch mean.
MIN_STEPS = BATCHES
SLOW_STEP_S = 0.1  # a step this long or longer: the verdict is asked after every one (check_every)
Z_975 = 1.959963984540054  # the normal distribution's 97.5 % quantile


# Student's t 97.5 % quantiles for 1..10 degrees of freedom; above, the expansion in t_975 is within 0.01 %.
T_975_SMALL = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def t_975(df: int) -> float:
    """Student's t 97.5 % quantile for `df` >= 1 degrees of freedom (a table, then Cornish-Fisher: no scipy)."""
    if df <= len(T_975_SMALL):
        return T_975_SMALL[max(1, df) - 1]
    z, n = Z_975, float(df)
    return (z + (z**3 + z) / (4 * n) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * n**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * n**3))


@dataclass(frozen=True)
class Verdict:
    """What the step times say: whether to stop, the mean step time (s), the interval's half-width (s), the steps
    it covers and whether the two halves disagree (a trend)."""

    stop: bool
    mean: float | None
    half_width: float | None
    steps: int
    drifting: bool = False

    @property
    def ci_rel(self) -> float | None:
        """The half-width relative to the mean (0.01: ±1 %); None with too few steps for an interval."""
        return self.half_width / self.mean if self.half_width is not None and self.mean else None


def _batch_means(times: list[float], batches: int) -> list[float]:
    """Means of `batches` equal batches of the LAST steps (the earliest remainder left out: it is the likeliest to
    be still settling)."""
    size = len(times) // batches
    tail = times[len(times) - size * batches:]
    return [math.fsum(tail[i * size:(i + 1) * size]) / size for i in range(batches)]


def interval(means: list[float]) -> tuple[float, float]:
    """(mean, 95 % half-width) of independent `means` (at least two)."""
    k = len(means)
    mean = math.fsum(means) / k
    return mean, t_975(k - 1) * statistics.stdev(means) / math.sqrt(k)


def verdict(times: list[float], target_ci: float, min_steps: int = MIN_STEPS, batches: int = BATCHES) -> Verdict:
    """Whether a window of these step times (seconds, in order) may stop: at least `min_steps` steps, the 95 %
    interval of the mean within ±`target_ci` of it (relative), and no trend between the halves."""
    n = len(times)
    k = min(batches, n)
    if k < 2:
        return Verdict(False, times[0] if times else None, None, n)
    means = _batch_means(times, k)
    mean, half = interval(means)
    drifting = k >= 4 and _halves_differ(means)
    stop = n >= min_steps and mean > 0 and half / mean <= target_ci and not drifting
    return Verdict(stop, mean, half, n, drifting)


def _halves_differ(means: list[float]) -> bool:
    """Whether the first and second halves of the batch means differ by more than the 95 % interval of their
    difference (Welch's form: each half's own spread)."""
    half = len(means) // 2
    first, second = means[:half], means[len(means) - half:]
    spread = math.sqrt(statistics.variance(first) / half + statistics.variance(second) / half)
    diff = abs(math.fsum(first) / half - math.fsum(second) / half)
    return diff > t_975(2 * half - 2) * spread


def check_every(steps: int, slow: bool = False) -> int:
    """How often (in steps) the verdict is asked at `steps` steps: every 10, then rarer as the window grows, so that
    asking costs a bounded share of a long window; every step where steps are `slow` (SLOW_STEP_S or more: asking
    is then cheap, and the time cap is kept to within one step). Deterministic in the step count: every rank asks
    at the same steps."""
    return max(1, steps // 1000) * (1 if slow else 10)


def window_record(mode: str, steps: int, seconds: float, times: list[float], target_ci: float | None,
                  stopped_by: str) -> dict:
    """The record's `metrics.window`: how the measured window ended and how well it knows the mean step time
    (`ci_rel`: the 95 % interval's half-width over the mean, from all its step times; None with fewer than two)."""
    return {"mode": mode, "steps": steps, "seconds": seconds, "ci_rel": verdict(times, target_ci or 0.0).ci_rel,
            "target_ci": target_ci, "stopped_by": stopped_by}


def cap_warning(window: dict, cap: str) -> str | None:
    """The one line saying an until-steady window reached its cap `cap` (e.g. measure_max_seconds=600) before its
    interval; None when it did not."""
    if window["mode"] != "until-steady" or window["stopped_by"] not in ("max_steps", "max_seconds"):
        return None
    ci, target = window["ci_rel"], window["target_ci"]
    achieved = "no interval yet" if ci is None else f"±{100 * ci:.2f} %"
    if ci is not None and ci <= target:  # narrow enough, but the halves did not agree
        return (f"warning: the measured window stopped at {cap} after {window['steps']} steps while its step times "
                f"still moved (its first and second halves disagree), at {achieved} (measure_ci={target:g})")
    return (f"warning: the measured window stopped at {cap} after {window['steps']} steps, before its interval "
            f"reached ±{100 * target:.2f} % (measure_ci={target:g}): achieved {achieved}")
