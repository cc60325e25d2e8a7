"""Where a step's device time goes: kernels (or, on the CPU, aten ops) by category from torch.profiler's
averages, and the bench-only knobs a point sets before its Bench is built (torch._inductor.config options, cuDNN's
algorithm search limit). torch is imported by the functions that need it, not here."""

from __future__ import annotations

import re

CATEGORIES = (  # first match wins; Triton first: its kernel names carry the fused aten ops ("..._convolution_...")
    ("triton template (autotuned conv/mm)", re.compile(r"^triton_tem", re.I)),
    ("triton reduction (BN statistics and grads)", re.compile(r"^triton_(red|per)", re.I)),
    ("triton pointwise (BN apply, ReLU, add, casts)", re.compile(r"^triton_", re.I)),
    ("conv forward", re.compile(r"fprop|conv_fwd|convolution_fwd|mkldnn_convolution|^aten::(cudnn_)?convolution$",
                                re.I)),
    ("conv backward (CPU: one aten op)", re.compile(r"^aten::convolution_backward$")),
    ("conv backward data", re.compile(r"dgrad|conv.*bwd_data", re.I)),
    ("conv backward weight", re.compile(r"wgrad|bwd_filter|conv.*bwd_weight", re.I)),
    ("conv other (cuDNN helpers, layout)", re.compile(r"cudnn|conv|nchwtonhwc|nhwctonchw|implicit", re.I)),
    ("optimizer", re.compile(r"multi_tensor|sgd|foreach", re.I)),
    ("matmul (fc, 1x1 conv as mm)", re.compile(r"gemm|nvjet|cublas|cutlass|splitk|aten::(mm|addmm)$", re.I)),
    ("copy / fill", re.compile(r"memcpy|memset|copy|fill", re.I)),
)


def category(name: str, categories=CATEGORIES) -> str:
    """The kernel category of a device kernel's (or, on CPU, an aten op's) name: the first of `categories`, (name,
    pattern) pairs, whose pattern it matches, else "other"."""
    return next((c for c, pattern in categories if pattern.search(name)), "other")


# knobs --------------------------------------------------------------------------------------------------------
def apply_knobs(knobs: dict) -> dict:
    """Sets the knobs; returns what is in effect (read back) and what this torch lacks."""
    import torch

    applied: dict = {"inductor": {}, "missing": []}
    if knobs.get("inductor"):
        import torch._inductor.config as inductor_config

        for dotted, value in knobs["inductor"].items():
            *parents, leaf = dotted.split(".")
            owner = inductor_config
            for p in parents:
                owner = getattr(owner, p, None)
            if owner is None or not hasattr(owner, leaf):
                applied["missing"].append(f"torch._inductor.config.{dotted}")
                continue
            setattr(owner, leaf, value)
            applied["inductor"][dotted] = getattr(owner, leaf)
    if "cudnn_benchmark_limit" in knobs:
        if hasattr(torch.backends.cudnn, "benchmark_limit"):
            torch.backends.cudnn.benchmark_limit = knobs["cudnn_benchmark_limit"]
            applied["cudnn_benchmark_limit"] = torch.backends.cudnn.benchmark_limit
        else:
            applied["missing"].append("torch.backends.cudnn.benchmark_limit")
    return applied


def kernel_table(averages, steps: int, cpu: bool, categories=CATEGORIES) -> dict:
    """{kernel name: {ms_per_step, calls_per_step, category}} from torch.profiler's key_averages(); categories as
    category() takes them."""
    kernels = {}
    for evt in averages:
        if cpu:
            if not evt.key.startswith("aten::"):
                continue
            us = evt.self_cpu_time_total
        else:
            if str(getattr(evt, "device_type", "")).split(".")[-1] != "CUDA":
                continue
            us = getattr(evt, "self_device_time_total", None)
            if us is None:
                us = evt.self_cuda_time_total
        if us > 0:
            kernels[evt.key] = {"ms_per_step": us / 1e3 / steps, "calls_per_step": evt.count / steps,
                                "category": category(evt.key, categories)}
    return kernels


def breakdown(kernels: dict, step_ms: float, cpu: bool = False, top: int = 8) -> dict:
    """Device time per step by category (ms, share of the step), each with its top kernels; the idle rest (none
    on the CPU, where the ops' self times overlap across threads)."""
    cats: dict = {}
    for name, k in kernels.items():
        c = cats.setdefault(k["category"], {"ms": 0.0, "calls": 0.0, "kernels": []})
        c["ms"] += k["ms_per_step"]
        c["calls"] += k["calls_per_step"]
        c["kernels"].append((k["ms_per_step"], k["calls_per_step"], name))
    busy = sum(c["ms"] for c in cats.values())
    out = {}
    for name, c in sorted(cats.items(), key=lambda kv: -kv[1]["ms"]):
        c["kernels"].sort(reverse=True)
        out[name] = {"ms": c["ms"], "share_of_step": c["ms"] / step_ms if step_ms else None, "calls": c["calls"],
                     "top_kernels": [{"ms": ms, "calls": n, "name": k} for ms, n, k in c["kernels"][:top]]}
    return {"step_ms": step_ms, "kernel_busy_ms": busy, "idle_ms": None if cpu else step_ms - busy,
            "categories": out}
