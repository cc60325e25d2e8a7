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
import shutil
import sys
import threading
import time
from pathlib import Path

from caraml.compare.kernel_profile import apply_knobs, breakdown, kernel_table


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


# one point ----------------------------------------------------------------------------------------------------
def timed_steps(bench, sync, warmup: int, steps: int) -> dict:
    """The first step alone (compilation), the rest of the warm-up, then the measured window under the sampler."""
    start = time.perf_counter()
    bench.step()
    sync()
    first_step_s = time.perf_counter() - start
    for _ in range(warmup - 1):
        bench.step()
    sync()
    warmup_s = time.perf_counter() - start
    with Sampler(bench.device.type == "cuda") as sampler:
        start = time.perf_counter()
        for _ in range(steps):
            bench.step()
        sync()
        window_s = time.perf_counter() - start
    return {"first_step_s": first_step_s, "warmup_s": warmup_s, "step_ms": window_s / steps * 1e3,
            **sampler.summary()}


def profiled(bench, sync, name: str, out: Path, profile_steps: int) -> dict:
    """torch.profiler over `profile_steps` steady steps: the kernels of a step; the Chrome trace (gzip) into out."""
    from torch.profiler import ProfilerActivity, profile

    cuda = bench.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(profile_steps):
            bench.step()
        sync()
    trace = out / f"trace-{name}.json"
    try:
        prof.export_chrome_trace(str(trace))
        with open(trace, "rb") as raw, gzip.open(f"{trace}.gz", "wb") as packed:
            shutil.copyfileobj(raw, packed)
        trace.unlink()
    except Exception as exc:  # noqa: BLE001 - the trace is a convenience; the table is the result
        print(f"ic_point: {name}: no trace ({exc})", file=sys.stderr)
    return kernel_table(prof.key_averages(), profile_steps, cpu=not cuda)


def device_facts(bench, flops_per_s: float) -> dict:
    """MFU against the device's bf16 peak (its system profile's), peak memory (GiB), versions, the device."""
    import torch

    from caraml.compare.peaks import device_tag, mfu

    if bench.device.type != "cuda":
        return {"mfu_bf16": None, "peak_memory_gib": None, "torch": torch.__version__, "cudnn": None,
                "device_name": "cpu", "system": "CPU"}
    tag = device_tag(bench.device)
    return {"mfu_bf16": mfu(flops_per_s, "bf16", tag), "system": tag,
            "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30, "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version(), "device_name": torch.cuda.get_device_name()}


def run_point(name: str, params: list, knobs: dict, out: Path, warmup: int, steps: int, profile_steps: int) -> dict:
    import torch

    from caraml.runner import RunSpec, build_bench

    applied = apply_knobs(knobs)
    bench = build_bench(RunSpec("image_classification", dict(p.split("=", 1) for p in params)))
    cuda = bench.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    batch = bench.cfg.batch_size
    timed = timed_steps(bench, sync, warmup, steps)
    step_ms = timed["step_ms"]
    kernels = profiled(bench, sync, name, out, profile_steps)
    note = None
    if cuda and sum(k["ms_per_step"] for k in kernels.values()) < 0.1 * step_ms:
        note = ("the profile saw kernels for under 10 % of the step (the CUDA graph's kernels not traced?); "
                "the Chrome trace shows what it did see")
    row = {"name": name, "status": "ok", "images_per_s": batch * 1e3 / step_ms, "batch_size": batch, **timed,
           "measured_steps": steps, "knobs": applied, "math": bench.math,
           "stem_padded": bench.details().get("stem_padded"),
           **device_facts(bench, bench.info.flops_per_unit * batch / (step_ms / 1e3)),
           "profile": breakdown(kernels, step_ms, cpu=not cuda), "profiled_steps": profile_steps,
           "profile_note": note}
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
