"""Estimates on paper, before a site spends nodes: `caraml plan` and the estimate column of `caraml sweep
--dry-run`. One module per workload that has an estimate (llm.py: GPT pre-training); plain arithmetic, no torch.
"""

from __future__ import annotations

from caraml.errors import BadInput

ESTIMATED = ("llm_training",)
EFFICIENCY = 0.5  # the share of the peak rate the matrix products are assumed to reach (caraml measured 0.58 on
# the H200 for the 800M compiled; Megatron-LM reports 0.41-0.49 on H100)


def layout_of(workload, params: dict, devices: int, devices_per_node: int):
    """The parallel layout of a point: tp and pp from its parameters, dp from the devices; bad input (one line)
    when the model and batch cannot be laid out so."""
    from caraml.estimate.llm import Layout

    cfg = workload.config_of(params)
    problem = workload.launch_problem(params, devices)
    if problem:
        raise BadInput(f"{workload.name}: {problem}")
    tp, pp = cfg.parallel.tp, cfg.parallel.pp
    return cfg, Layout(devices=devices, devices_per_node=devices_per_node, tp=tp, pp=pp, dp=devices // (tp * pp))


def estimate(workload, params: dict, profile: dict, devices: int, efficiency: float = EFFICIENCY) -> dict:
    """The estimate of one point (parameters resolved) on `devices` devices of the system `profile`."""
    if workload.name not in ESTIMATED:
        raise BadInput(f"caraml plan estimates {', '.join(ESTIMATED)}; {workload.name} has no estimate yet")
    from caraml.estimate import llm

    cfg, layout = layout_of(workload, params, devices, int(profile.get("devices_per_node") or 1))
    return llm.estimate(cfg, layout, profile, efficiency)


def short(est: dict) -> str:
    """One line for a sweep point: memory per device, fit, time per iteration and tokens/s."""
    gib = est["memory"]["total_bytes"] / 2 ** 30
    text = f"est. {gib:.1f} GiB/device"
    if est["fits"] is False:
        text += f" WILL NOT FIT ({est['memory_capacity_bytes'] / 2 ** 30:.0f} GiB)"
    if est["tokens_per_s"]:
        text += f", {est['time_per_iteration_s']:.3g} s/iteration, {est['tokens_per_s'] / 1e3:.1f}k tokens/s"
    return text
