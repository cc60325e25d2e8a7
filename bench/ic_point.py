"""One image-classification point in its own process, with bench-only knobs, timed and profiled.

    PYTHONPATH=src python3 bench/ic_point.py --name NAME --params '["model=resnet50", ...]' \
        --knobs '{"inductor": {...}, "cudnn_benchmark_limit": 0}' --out DIR [--warmup 15] [--steps 100]

The Bench is caraml's own (`caraml.runner.build_bench`, the code `caraml run` measures), built after the knobs
are set: torch._inductor.config options (read at compile time, so they apply to the first step) and cuDNN's
algorithm search limit (`torch.backends.cudnn.benchmark_limit`). A knob that this torch lacks is named in the
result and not applied. Then: warm-up (the first step timed alone: compilation), a measured window with one
synchronisation at each end (images/s; NVML power and SM clock sampled in a thread where pynvml imports), and
torch.profiler over `--profile-steps` steady steps: device time per step by kernel category, the kernels of each
category, and the step's idle device time. Prints the result as one JSON line; writes the Chrome trace (gzip)
into DIR.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

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


def category(name: str) -> str:
    """The kernel category of a device kernel's (or, on CPU, an aten op's) name."""
    return next((c for c, pattern in CATEGORIES if pattern.search(name)), "other")


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


# the device's power and clock over the window ----------------------------------------------------------------
class Sampler:
    """NVML power (W) and SM clock (MHz) every 100 ms in a thread; nothing where pynvml or a GPU is absent."""

    def __init__(self, cuda: bool):
        self.power, self.clock, self.note = [], [], None
        self._stop = threading.Event()
        self._thread = None
        if not cuda:
            self.note = "no GPU: no power or clock samples"
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            import torch

            self._nvml, self._handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        except Exception as exc:  # noqa: BLE001 - samples are context, the figure is images/s
            self.note = f"no power or clock samples (pynvml: {exc})"
            return
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.power.append(self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1e3)
            self.clock.append(self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))

    def __enter__(self):
        if self._thread:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()

    def summary(self) -> dict:
        def mean(xs):
            return sum(xs) / len(xs) if xs else None
        return {"avg_power_w": mean(self.power), "avg_sm_mhz": mean(self.clock), "samples": len(self.power),
                **({"note": self.note} if self.note else {})}


# profile ------------------------------------------------------------------------------------------------------
def kernel_table(averages, steps: int, cpu: bool) -> dict:
    """{kernel name: {ms_per_step, calls_per_step, category}} from torch.profiler's key_averages()."""
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
                                "category": category(evt.key)}
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


# one point ----------------------------------------------------------------------------------------------------
def run_point(name: str, params: list, knobs: dict, out: Path, warmup: int, steps: int, profile_steps: int) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from caraml.runner import RunSpec, build_bench

    applied = apply_knobs(knobs)
    spec = RunSpec("image_classification", dict(p.split("=", 1) for p in params))
    bench = build_bench(spec)
    cuda = bench.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    batch = bench.cfg.batch_size

    start = time.perf_counter()
    bench.step()
    sync()
    first_step_s = time.perf_counter() - start
    for _ in range(warmup - 1):
        bench.step()
    sync()
    warmup_s = time.perf_counter() - start

    with Sampler(cuda) as sampler:
        start = time.perf_counter()
        for _ in range(steps):
            bench.step()
        sync()
        window_s = time.perf_counter() - start
    step_ms = window_s / steps * 1e3

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(profile_steps):
            bench.step()
        sync()
    kernels = kernel_table(prof.key_averages(), profile_steps, cpu=not cuda)
    trace = out / f"trace-{name}.json"
    try:
        prof.export_chrome_trace(str(trace))
        with open(trace, "rb") as raw, gzip.open(f"{trace}.gz", "wb") as packed:
            shutil.copyfileobj(raw, packed)
        trace.unlink()
    except Exception as exc:  # noqa: BLE001 - the trace is a convenience; the table is the result
        print(f"ic_point: {name}: no trace ({exc})", file=sys.stderr)
    note = None
    if cuda and sum(k["ms_per_step"] for k in kernels.values()) < 0.1 * step_ms:
        note = ("the profile saw kernels for under 10 % of the step (the CUDA graph's kernels not traced?); "
                "the Chrome trace shows what it did see")
    info = bench.info
    row = {"name": name, "status": "ok", "images_per_s": batch * steps / window_s, "step_ms": step_ms,
           "batch_size": batch, "first_step_s": first_step_s, "warmup_s": warmup_s, "measured_steps": steps,
           "mfu_bf16_989tf": info.flops_per_unit * batch / (step_ms / 1e3) / 989.4e12 if cuda else None,
           "knobs": applied, "math": bench.math, "stem_padded": bench.details().get("stem_padded"),
           **sampler.summary(),
           "peak_memory_gb": torch.cuda.max_memory_allocated() / 1e9 if cuda else None,
           "profile": breakdown(kernels, step_ms, cpu=not cuda), "profiled_steps": profile_steps,
           "profile_note": note,
           "torch": torch.__version__, "cudnn": torch.backends.cudnn.version() if cuda else None,
           "device_name": torch.cuda.get_device_name() if cuda else "cpu"}
    bench.close()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--params", required=True, help="JSON list of caraml parameters key=value")
    parser.add_argument("--knobs", default="{}", help="JSON: {inductor: {option: value}, cudnn_benchmark_limit: n}")
    parser.add_argument("--out", required=True)
    parser.add_argument("--warmup", type=int, default=15)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--profile-steps", type=int, default=1)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    row = run_point(args.name, json.loads(args.params), json.loads(args.knobs), out, max(args.warmup, 1),
                    args.steps, args.profile_steps)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
