"""`caraml plan WORKLOAD [key=value ...] [--preset P] [--system TAG] [--nodes N]`: the estimate of one point."""

from __future__ import annotations

from caraml.errors import BadInput, shown
from caraml.results.store import dumps

GIB = 2 ** 30
MAX_NODES = 100_000  # more than any machine has: a bigger count is a typo
MIN_EFFICIENCY = 0.01  # a smaller share of the peak is no estimate of a training run


def add_parser(sub) -> None:
    plan = sub.add_parser("plan", help="estimate a point on paper: memory per device, pipeline bubble, "
                                       "communication, time per iteration, tokens/s",
                          description="caraml plan WORKLOAD [key=value ...] [--preset P] [--system TAG] [--nodes N]: "
                                      "an estimate from the model's sizes and the system profile's peak rate and "
                                      "link bandwidths; nothing runs")
    plan.add_argument("workload", help="a workload with an estimate: llm_training")
    plan.add_argument("params", nargs="*", metavar="key=value", help="parameters, e.g. tp=2 pp=4 micro_batch_size=2")
    plan.add_argument("--preset", help="a named parameter set of the workload, e.g. 13B")
    plan.add_argument("--system", default="H200", help="system profile tag (default: %(default)s)")
    plan.add_argument("--nodes", type=int, default=1, help="nodes (default: %(default)s); devices = nodes x the "
                                                           "profile's devices per node")
    plan.add_argument("--efficiency", type=float, default=None,
                      help="share of the peak rate the matrix products reach (default: 0.5)")
    plan.add_argument("--json", action="store_true", help="print the estimate as one JSON object")
    plan.set_defaults(func=plan_command)


def plan_command(args) -> int:
    from caraml import estimate, systems
    from caraml.params import parse_assignments
    from caraml.runner import RunSpec, resolve

    if not 1 <= args.nodes <= MAX_NODES:
        raise BadInput(f"--nodes {shown(args.nodes, 40)} is not valid; give a whole number from 1 to {MAX_NODES:,}")
    efficiency = estimate.EFFICIENCY if args.efficiency is None else args.efficiency
    if not MIN_EFFICIENCY <= efficiency <= 1:
        given = repr(efficiency).removesuffix(".0")  # 2, 5e-324
        raise BadInput(f"--efficiency {given} is not valid; give a share of the peak rate from "
                       f"{MIN_EFFICIENCY:g} to 1")
    profile = systems.get(args.system)
    run = resolve(RunSpec(args.workload, parse_assignments(args.params), args.preset))
    per_node = int(profile.get("devices_per_node") or 1)
    devices = args.nodes * per_node
    problem = run.workload.launch_problem(run.values, devices)
    if problem:
        raise BadInput(f"{run.workload.name}: {problem} ({devices} devices: {per_node} per node of --system "
                       f"{profile['tag']} x --nodes {args.nodes})")
    est = estimate.estimate(run.workload, run.values, profile, devices, efficiency)
    if args.json:
        print(dumps({"workload": run.workload.name, "preset": args.preset, "system": profile["tag"], **est}))
        return 0
    print(render(run.workload.name, args.preset, run.config, profile, est))
    return 0


def _row(label: str, value: str, note: str = "") -> str:
    return f"  {label:<34} {value:>12}" + (f"  {note}" if note else "")


def render(name: str, preset: str | None, cfg, profile: dict, est: dict) -> str:
    from caraml.estimate.llm import caraml_count_note

    lay, mem, b, c = est["layout"], est["memory"], cfg.batch, cfg.compute
    gib = lambda v: f"{v / GIB:.2f} GiB"  # noqa: E731
    sharded = cfg.parallel.distributed_optimizer != "off" and lay["dp"] > 1
    capacity = est["memory_capacity_bytes"]
    lines = [f"{name}{' --preset ' + preset if preset else ''} on {profile['tag']}: {lay['nodes']} node(s), "
             f"{lay['devices']} devices: tp={lay['tp']} pp={lay['pp']} dp={lay['dp']}, micro-batch "
             f"{b.micro_batch_size} x {b.grad_accumulation}, {est['tokens_per_iteration']:,} tokens per iteration",
             f"memory per device (the busiest stage), {mem['parameters_per_device'] / 1e6:,.0f} M parameters:",
             _row("parameters and AdamW state", gib(mem["states_bytes"] - mem["gradients_bytes"]),
                  {"fsdp": "fp32, sharded over dp (FSDP2), parameters gathered in the step",
                   "zero1": "fp32, AdamW's moments sharded over dp (ZeRO-1)"}[cfg.parallel.distributed_optimizer]
                  if sharded else "fp32, not sharded"),
             _row("gradients at the backward's start", gib(mem["accumulated_gradients_bytes"]),
                  "the earlier micro-batches'" if b.grad_accumulation > 1 else "none yet (set to None after a step)"),
             _row("half-precision weight copies", gib(mem["half_copies_bytes"]),
                  f"{'Megatron' if c.megatron_precision else 'autocast'}'s ({c.precision})"),
             _row("activations", gib(mem["activations_bytes"]),
                  f"recompute={cfg.parallel.recompute}, compile={c.compile}, "
                  f"sequence_parallel={cfg.parallel.sequence_parallel}"),
             _row("loss (logits)", gib(mem["loss_bytes"]), f"fused_loss={c.fused_loss}, at its worst moment"),
             _row("cuBLAS workspace", gib(mem["workspace_bytes"]), "handed out by the CUDA caching allocator"),
             _row("total (peak)", gib(mem["total_bytes"]),
                  ("at the backward's start" if mem["peak_at"] == "backward" else
                   f"at the optimizer step (all {gib(mem['gradients_bytes'])} of gradients, no activations)")
                  + (f"; of {capacity / GIB:.0f} GiB: " + ("fits" if est["fits"] else "DOES NOT FIT") if capacity
                     else "; no memory size in the profile")),
             _row("pipeline bubble (pp-1)/(m+pp-1)", f"{est['bubble']:.1%}")]
    for group in ("tp", "pp", "dp"):
        volume = est["communication"][f"{group}_bytes"]
        if volume:
            where = est["links"][group]
            gbps = est["link_gbps"].get(f"{where}_node")
            speed = f"{gbps:g} GB/s: {volume / (gbps * 1e9):.3f} s" if gbps else "bandwidth not in the profile"
            lines.append(_row(f"communication {group} per iteration", f"{volume / 1e9:.2f} GB",
                              f"{where}-node link, {speed}"))
    if est["compute_s"] is None:
        lines.append(_row("compute", "unknown", f"no {est['peak_precision']} peak rate in the profile"))
    else:
        lines.append(_row("compute", f"{est['compute_s']:.3f} s",
                          f"{est['flops_per_device'] / 1e12:,.1f} TFLOP per device at {est['efficiency']:.0%} of "
                          f"{est['peak_tflops']:g} TFLOP/s {est['peak_precision']}, the bubble included"))
    if est["time_per_iteration_s"]:
        lines.append(_row("time per iteration", f"{est['time_per_iteration_s']:.3f} s",
                          "communication not overlapped"))
        lines.append(_row("tokens/s", f"{est['tokens_per_s']:,.0f}", "all devices"))
        lines.append(_row("TFLOP/s per device, CARAML's formula", f"{est['tflops_caraml_per_device']:.0f}",
                          "as CARAML's Megatron patch would print it"))
        lines.append(f"  ({caraml_count_note(cfg, est['caraml_flops_ratio'])})")
    elif est["missing_links"]:
        lines.append(f"time per iteration: unknown, the profile has no {', '.join(est['missing_links'])} bandwidth "
                     f"(links_gbps in a site profile; caraml systems {profile['tag']})")
    return "\n".join(lines)
