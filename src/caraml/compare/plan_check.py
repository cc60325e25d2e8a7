"""caraml plan's estimate beside a measured point (bench/llm_bench.py): its memory per device and its time per
iteration (at plan's default efficiency) on the system the point ran on."""

from __future__ import annotations


def plan_estimate(params: dict, tag: str) -> dict | None:
    """caraml plan's estimate of an llm_training point's parameters on one device of system `tag`
    (estimate.estimate's dict); None if it has none."""
    from caraml import estimate, systems, workloads
    from caraml.errors import BadInput

    try:
        return estimate.estimate(workloads.get("llm_training"), params, systems.get(tag), 1)
    except (BadInput, KeyError, TypeError):
        return None


def plan_memory_gib(params: dict, tag: str) -> float | None:
    """caraml plan's memory estimate per device (GiB); None if it has none."""
    est = plan_estimate(params, tag)
    return est["memory"]["total_bytes"] / 2**30 if est else None


def plan_time(params: dict, measured_s: float | None, tag: str) -> dict:
    """caraml plan's time per iteration (its default efficiency, 0.5 of the peak) beside the measured one: the
    compute estimate's cross-check; measured / plan > 1: slower than planned."""
    est = plan_estimate(params, tag)
    plan_s = est["time_per_iteration_s"] if est else None
    return {"plan_time_per_iteration_s": plan_s, "plan_tokens_per_s": est["tokens_per_s"] if est else None,
            "time_vs_plan": measured_s / plan_s if plan_s and measured_s else None}
