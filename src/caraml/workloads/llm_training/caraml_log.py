"""CARAML's LLM figures (convention=caraml-log), torch-free: what its `jube result` computes from Megatron's log.

Megatron logs, every `--log-interval` iterations (CARAML: 5), the "elapsed time per iteration" of that interval
(the interval's wall time / its iterations) and, by CARAML's patch, the TFLOP/s per GPU of that interval. CARAML's
Tokens/second = global batch x sequence / the mean of the logged elapsed times, over the whole run (the first
interval, with its slow first iterations, included; a last partial interval is never logged); Avg_TFLOPs/GPU = the
mean of the logged TFLOP/s; Iterations = the last logged iteration; the run stops `--exit-duration-in-mins` after
it started. time_to_report_in_seconds = 20,000,000 / Tokens/second (CARAML's column, commented out in its table).
"""

from __future__ import annotations

from caraml.measure.timing import figure_spread

CONVENTIONS = ("steady", "caraml-log")
LOG_INTERVAL = 5  # CARAML's --log-interval
REPORT_TOKENS = 20_000_000  # CARAML's throughput_in_time: seconds to train this many tokens
CONVENTION = ("caraml-log: tokens/s = global batch x seq / mean of the elapsed time per iteration of every "
              "caraml_log_interval iterations, from the first iteration to the exit after exit_minutes (the first "
              "interval included, a last partial one not); TFLOP/s per device = mean over the intervals of CARAML's "
              "patch formula / (elapsed time per iteration x devices)")


def interval_times(step_seconds: list[float], interval: int) -> list[float]:
    """Megatron's logged "elapsed time per iteration": the mean step time of each full interval of `interval`
    consecutive iterations from the first one; a last partial interval is not logged."""
    full = len(step_seconds) // interval
    return [sum(step_seconds[k * interval:(k + 1) * interval]) / interval for k in range(full)]


def figures(step_seconds: list[float], interval: int, global_batch: int, seq_length: int, devices: int,
            flops_per_iteration: float, exit_minutes: float) -> dict:
    """CARAML's figures of a run whose iterations took `step_seconds` (every one, from the first): its
    Tokens/second (and its spread over the intervals), Time/iteration(s), Avg_TFLOPs/GPU, Iterations and
    time_to_report_in_seconds; None values where no interval was completed."""
    logged = interval_times(step_seconds, interval)
    mean = sum(logged) / len(logged) if logged else None
    tokens = global_batch * seq_length / mean if mean else None
    tflops = [flops_per_iteration / (t * devices * 1e12) for t in logged if t > 0]
    return {
        "tokens_per_s": {"value": tokens, "unit": "tokens/s", "convention": CONVENTION},
        # how much the intervals' own tokens/s differ (the first one, with its slow first iterations, included)
        "spread": figure_spread([global_batch * seq_length / t for t in logged if t > 0], "log intervals",
                                "tokens/s"),
        "time_per_iteration_s": mean,
        "tflops_per_device": sum(tflops) / len(tflops) if tflops else None,
        "iterations": len(logged) * interval,
        "iterations_run": len(step_seconds),
        "intervals": len(logged),
        "log_interval": interval,
        "exit_minutes": exit_minutes,
        "time_to_report_s": REPORT_TOKENS / tokens if tokens else None,
        "elapsed_per_iteration_s": logged,
    }
