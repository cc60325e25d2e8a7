"""The FNO comparison's points and groups (bench/fno_bench.py), as data, and the summary of a run's rows.

A point is a dict: the plain loop's options (`_p`: compile mode None = eager; PIC: the operator's dse_layout and
nufft_backend), `caraml run fno` parameters (`_c`, on the plain loop's data), a data-path point (`_d`), or one of the
in-process checks (profile, nufft_check, layout_check). Groups are lists of point names in order of importance (a
time budget cuts from the end); their old names stay accepted (GROUP_ALIASES).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

STEPS = {"RBC2D": (20, 300), "RBC3D": (10, 100), "PIC1D": (8, 40), "PIC2D": (8, 40)}  # warm-up, measured steps
# --smoke: the whole script on a CPU with tiny shapes (a check of the script, not a measurement)
SMOKE = {"RBC2D": {"width": 8, "modes": (4, 4), "grid": (32, 16), "batch": 4},
         "RBC3D": {"width": 8, "modes": (4, 4, 2), "grid": (16, 16, 8), "batch": 4},
         "PIC1D": {"width": 8, "modes": (4,), "particles": 512, "batch": 4},
         "PIC2D": {"width": 8, "modes": (4, 4), "particles": 512, "batch": 4}}


@dataclass(frozen=True)
class FNORun:
    """Where the points run: the GPU at full size, or (smoke) the CPU with tiny shapes and 2+3 steps."""

    device: str = "cuda"
    smoke: bool = False
    profile_steps: int = 10  # steps recorded by torch.profiler per variant (after its warm-up and timed steps)

    def steps(self, problem: str) -> tuple[int, int]:
        """(warm-up, measured) steps of a point of `problem`."""
        return (2, 3) if self.smoke else STEPS[problem]


SMOKE_RUN = FNORun(device="cpu", smoke=True, profile_steps=2)


def _p(problem, **kw) -> dict:
    """A point: plain loop options (compile mode None = eager; PIC: the operator's dse_layout, nufft_backend,
    dse_backend)."""
    return {"problem": problem, "compile": None, "scope": "model", "complex": False, "amp": None, "lib": "caraml",
            "dse_layout": "channels-last", "nufft_backend": "torchkbnufft", **kw}


# The caraml points measure the plain loop's work: batches made on the device (data=synthetic), not the presets'
# CARAML data path (data=auto: host DataLoaders, every batch copied host -> device), which the data_* points measure.
SAME_DATA = "data=synthetic"


def _c(problem, *params) -> dict:
    """A point run by `caraml run fno` with these extra parameters, on the plain loop's data."""
    return {"problem": problem, "caraml": [SAME_DATA, *params]}


# In order of importance: the time budget cuts from the end.
_LOOPS = {
    "RBC2D_plain_eager": _p("RBC2D"),
    "RBC2D_caraml_eager": _c("RBC2D"),
    "RBC2D_plain_compiled": _p("RBC2D", compile="default"),
    "RBC2D_caraml_compiled": _c("RBC2D", "compile=inductor"),
    "RBC3D_plain_eager": _p("RBC3D"),
    "RBC3D_caraml_eager": _c("RBC3D"),
    "RBC3D_plain_compiled": _p("RBC3D", compile="default"),
    "RBC3D_caraml_compiled": _c("RBC3D", "compile=inductor"),
    "RBC2D_plain_eager_complex": _p("RBC2D", complex=True),
    "RBC2D_plain_compiled_complex": _p("RBC2D", compile="default", complex=True),
    "RBC2D_plain_reduce_overhead": _p("RBC2D", compile="reduce-overhead"),
    "RBC2D_plain_compiled_pointwise": _p("RBC2D", compile="default", scope="pointwise"),
    "RBC2D_plain_eager_fp16": _p("RBC2D", amp="fp16"),
    "RBC2D_plain_compiled_fp16": _p("RBC2D", compile="default", amp="fp16"),
    "RBC2D_caraml_compiled_fp16": _c("RBC2D", "compile=inductor", "precision=fp16"),
    "RBC2D_caraml_reduce_overhead": _c("RBC2D", "compile=inductor", "compile_mode=reduce-overhead"),
    "RBC2D_plain_compiled_step": _p("RBC2D", compile="default", scope="step"),
    "RBC3D_plain_reduce_overhead": _p("RBC3D", compile="reduce-overhead"),
    "RBC3D_plain_eager_fp16": _p("RBC3D", amp="fp16"),
    "RBC3D_plain_compiled_fp16": _p("RBC3D", compile="default", amp="fp16"),
    "RBC3D_plain_eager_complex": _p("RBC3D", complex=True),
    "RBC3D_plain_compiled_step": _p("RBC3D", compile="default", scope="step"),
    "RBC2D_plain_reduce_overhead_step": _p("RBC2D", compile="reduce-overhead", scope="step"),
    "RBC2D_caraml_compiled_step": _c("RBC2D", "compile=inductor", "compile_scope=step"),
    "RBC2D_caraml_eager_power_off": _c("RBC2D", "power=off"),
    "RBC2D_caraml_epochs": _c("RBC2D", "compile=inductor", "epochs=5"),
    "RBC2D_plain_max_autotune_nocg": _p("RBC2D", compile="max-autotune-no-cudagraphs"),
    "RBC2D_plain_max_autotune": _p("RBC2D", compile="max-autotune"),
    "RBC2D_plain_reduce_overhead_fp16": _p("RBC2D", compile="reduce-overhead", amp="fp16"),
    "RBC2D_plain_compiled_half_spectral_fp16": _p("RBC2D", compile="default", amp="fp16", half=True),
    # neuraloperator beside ours, the eager profile, PIC with CARAML's operators
    "RBC2D_profile_eager": {"problem": "RBC2D", "profile": True},
    "RBC2D_neuralop_eager": _p("RBC2D", lib="neuralop"),
    "RBC2D_neuralop_compiled": _p("RBC2D", lib="neuralop", compile="default"),
    "RBC3D_neuralop_eager": _p("RBC3D", lib="neuralop"),
    "RBC3D_neuralop_compiled": _p("RBC3D", lib="neuralop", compile="default"),
    "PIC1D_caraml_eager": _c("PIC1D"),
    "PIC1D_caraml_compiled": _c("PIC1D", "compile=inductor"),
    # the plain loop at the PIC points (caraml/plain), the same operators and data shapes; compiled in the mode
    # `caraml run compile=inductor` takes by default (reduce-overhead: CUDA graphs), so that the two are twins
    "PIC1D_plain_eager": _p("PIC1D"),
    "PIC1D_plain_compiled": _p("PIC1D", compile="reduce-overhead"),
    "PIC2D_plain_matrix_eager": _p("PIC2D", nufft_backend="matrix"),
    "PIC2D_plain_matrix_compiled": _p("PIC2D", nufft_backend="matrix", compile="reduce-overhead"),
    # PIC1D's layout before (channels-first: [B, C, P], a forward and an inverse Vandermonde matrix)
    "PIC1D_caraml_channels_first_eager": _c("PIC1D", "dse_layout=channels-first"),
    "PIC1D_caraml_channels_first_compiled": _c("PIC1D", "dse_layout=channels-first", "compile=inductor"),
    "PIC1D_layout_check": {"problem": "PIC1D", "layout_check": True, "compiled": True},
    # PIC1D's DSE products as Triton kernels that make V from the positions (dse_backend=triton), and their check
    "PIC1D_caraml_triton_compiled": _c("PIC1D", "compile=inductor", "dse_backend=triton"),
    "PIC1D_caraml_triton_eager": _c("PIC1D", "dse_backend=triton"),
    "PIC1D_triton_check": {"problem": "PIC1D", "layout_check": True, "dse_backends": ["triton"]},
    "PIC1D_caraml_triton_compiled_again": _c("PIC1D", "compile=inductor", "dse_backend=triton"),
    "PIC1D_caraml_compiled_again": _c("PIC1D", "compile=inductor"),
    # and each layer's inverse, skip product, bias and GELU in one kernel (dse_backend=triton-fused)
    "PIC1D_caraml_triton_fused_compiled": _c("PIC1D", "compile=inductor", "dse_backend=triton-fused"),
    "PIC1D_caraml_triton_fused_eager": _c("PIC1D", "dse_backend=triton-fused"),
    "PIC1D_triton_fused_check": {"problem": "PIC1D", "layout_check": True, "dse_backends": ["triton-fused"]},
    "PIC1D_caraml_triton_fused_compiled_again": _c("PIC1D", "compile=inductor", "dse_backend=triton-fused"),
    "PIC1D_plain_triton_fused_compiled": _p("PIC1D", compile="reduce-overhead", dse_backend="triton-fused"),
    "PIC1D_plain_triton_fused_eager": _p("PIC1D", dse_backend="triton-fused"),  # its compiled twin's eager
    "PIC2D_caraml_eager": _c("PIC2D"),
    "PIC2D_caraml_compiled": _c("PIC2D", "compile=inductor"),
    "PIC2D_caraml_matrix_eager": _c("PIC2D", "nufft_backend=matrix"),
    "PIC2D_caraml_matrix_compiled": _c("PIC2D", "nufft_backend=matrix", "compile=inductor"),
    "PIC2D_caraml_grid2d_compiled": _c("PIC2D", "pic2d_operator=grid2d", "compile=inductor"),
    # nufft_backend=matrix (eager and compiled) against torchkbnufft in this process under TF32
    "PIC2D_nufft_check": {"problem": "PIC2D", "nufft_check": True, "compiled": True},
}
GROUPS = {  # in order of importance: the time budget cuts from the end
    "fno-operators": [  # neuraloperator beside ours, the eager profile, PIC with CARAML's operators
        "RBC2D_profile_eager", "RBC2D_plain_eager", "RBC2D_caraml_eager", "RBC2D_neuralop_eager",
        "RBC2D_plain_compiled", "RBC2D_caraml_compiled", "RBC2D_neuralop_compiled", "PIC2D_caraml_matrix_eager",
        "PIC2D_caraml_eager", "PIC2D_caraml_matrix_compiled", "PIC1D_caraml_eager", "PIC1D_caraml_compiled",
        "RBC3D_plain_eager", "RBC3D_neuralop_eager", "RBC3D_caraml_eager", "RBC3D_plain_compiled",
        "RBC3D_neuralop_compiled", "RBC3D_caraml_compiled", "PIC2D_caraml_compiled", "PIC2D_caraml_grid2d_compiled"],
    # the re-measurement after caraml's points moved to the plain loop's data and PIC2D's matrix backend came
    # first: caraml/plain on RBC2D, the profile, PIC2D torchkbnufft against matrix, PIC1D (about 6 minutes)
    "fno-recheck": [
        "RBC2D_plain_eager", "RBC2D_caraml_eager", "RBC2D_plain_compiled", "RBC2D_caraml_compiled",
        "RBC2D_profile_eager", "PIC2D_caraml_matrix_eager", "PIC2D_caraml_eager", "PIC2D_caraml_matrix_compiled",
        "PIC2D_nufft_check", "PIC1D_caraml_eager", "PIC1D_caraml_compiled", "PIC2D_caraml_compiled"],
    # PIC throughput: the matrix backend's precision under TF32 (operator and model, eager and compiled,
    # against torchkbnufft), PIC2D matrix eager/compiled and torchkbnufft eager, PIC1D eager/compiled (~2 minutes)
    "pic-throughput": [
        "PIC2D_nufft_check", "PIC2D_caraml_matrix_eager", "PIC2D_caraml_matrix_compiled", "PIC2D_caraml_eager",
        "PIC1D_caraml_eager", "PIC1D_caraml_compiled", "PIC2D_plain_matrix_compiled", "PIC2D_plain_matrix_eager"],
    # PIC1D: dse_layout=channels-last (the default now) against channels-first (before), eager and
    # compiled through `caraml run` (about 2 minutes)
    "pic1d-layouts": [
        "PIC1D_caraml_compiled", "PIC1D_caraml_channels_first_compiled", "PIC1D_caraml_eager",
        "PIC1D_caraml_channels_first_eager", "PIC1D_layout_check", "PIC1D_plain_compiled", "PIC1D_plain_eager"],
    # PIC1D: dse_backend=triton against matmul, compiled, each twice in alternation (the spread between processes),
    # the check of its results, then eager (about 4 minutes)
    "pic1d-triton": [
        "PIC1D_caraml_compiled", "PIC1D_caraml_triton_compiled", "PIC1D_triton_check",
        "PIC1D_caraml_triton_compiled_again", "PIC1D_caraml_compiled_again", "PIC1D_caraml_triton_eager",
        "PIC1D_caraml_eager"],
    # PIC1D: dse_backend=triton-fused against matmul and the start (channels-first), compiled, the two backends
    # twice in alternation, its check, then eager (about 5 minutes)
    "pic1d-triton-fused": [
        "PIC1D_caraml_channels_first_compiled", "PIC1D_caraml_compiled", "PIC1D_caraml_triton_fused_compiled",
        "PIC1D_triton_fused_check",
        "PIC1D_caraml_triton_fused_compiled_again", "PIC1D_caraml_compiled_again",
        "PIC1D_caraml_triton_fused_eager", "PIC1D_caraml_eager", "PIC1D_plain_triton_fused_compiled"]}
GROUP_ALIASES = {"issue19": "fno-operators", "issue19-recheck": "fno-recheck", "issue23-pic": "pic-throughput",
                 "issue23-pic1d": "pic1d-layouts"}  # the groups' old names
# seconds, where --budget is not given (else 420)
GROUP_BUDGETS = {"pic-throughput": 180, "pic1d-layouts": 150, "pic1d-triton": 240, "pic1d-triton-fused": 300}
PIC1D_START = 1193.0  # PIC1D compiled samples/s on the H200 before the channels-last layout


# CARAML's data path (data=file through its DataLoaders) beside data on the device: `--only data` runs these
DATA_SAMPLES = {"RBC2D": 1000, "RBC3D": 200}  # in the file and in synthetic-host: 40 / 8 training batches of 20
CARAML_EPOCHS = ("epochs=5", "global_batch_size=20", "batch_size=0")


def _d(problem, data, *params) -> dict:
    """A data-path point: `caraml run fno` with CARAML's 5 epochs over data=synthetic|file|synthetic-host."""
    extra = {"file": ["data=file", "data_path={data_dir}"],
             "synthetic-host": ["data=synthetic-host", f"samples={DATA_SAMPLES[problem]}"]}.get(
        data, ["data=synthetic"])
    return {"problem": problem, "caraml": [*CARAML_EPOCHS, *extra, *params], "data_path": data}


DATA_POINTS = {
    "data_RBC2D_synthetic": _d("RBC2D", "synthetic"),
    "data_RBC2D_file": _d("RBC2D", "file"),
    "data_RBC2D_host": _d("RBC2D", "synthetic-host"),
    "data_RBC3D_synthetic": _d("RBC3D", "synthetic"),
    "data_RBC3D_file": _d("RBC3D", "file"),
    # CARAML 2025.02 as its suite runs it: the whole train epoch compiled (mode default), data from the file
    "data_RBC2D_file_caraml_2025": _d("RBC2D", "file", "compile=inductor", "compile_mode=default",
                                      "compile_scope=epoch", "caraml_version=2025.02"),
}
POINTS = {**_LOOPS, **DATA_POINTS}  # in order of importance: the time budget cuts from the end



def data_summary(by: dict) -> dict:
    """Per data-path point: steady state (ours) beside CARAML's Timesteps/s; file and host over device data."""
    out = {}
    for name in DATA_POINTS:
        row = by.get(name) or {}
        if row.get("status") != "ok":
            continue
        twin = by.get(f"data_{POINTS[name]['problem']}_synthetic") or {}
        out[name] = {"steady_samples_per_s": row.get("samples_per_s"),
                     "caraml_timesteps_per_s": row.get("caraml_timesteps_per_s"),
                     "caraml_train_timesteps_per_s": row.get("train_timesteps_per_s"),
                     "caraml_over_steady": (row["caraml_timesteps_per_s"] / row["samples_per_s"]
                                            if row.get("caraml_timesteps_per_s") and row.get("samples_per_s")
                                            else None),
                     "steady_over_device_data": (row["samples_per_s"] / twin["samples_per_s"]
                                                 if twin.get("samples_per_s") and row.get("samples_per_s") else None)}
    return out



def _rate(by: dict, name: str):
    row = by.get(name) or {}
    return row.get("samples_per_s") if row.get("status") == "ok" else None


def _eager_twin(name: str, spec: dict) -> str:
    if name.replace("_compiled", "_eager") in POINTS:  # its twin by name (e.g. PIC2D_plain_matrix_*)
        return name.replace("_compiled", "_eager")
    return f"{spec['problem']}_{'neuralop' if spec['lib'] == 'neuralop' else 'plain'}_eager" + (
        "_complex" if spec["complex"] else "") + (f"_{spec['amp']}" if spec["amp"] else "")


def _compile_mode(spec: dict) -> str | None:
    """The torch.compile mode a point runs (None: eager): a plain loop's own, or the one `caraml run` resolves for
    the point's preset and parameters."""
    if "caraml" not in spec:
        return spec["compile"]
    from caraml.runner import RunSpec, resolve

    cfg = resolve(RunSpec("fno", dict(p.split("=", 1) for p in spec["caraml"]), preset=spec["problem"])).config
    if cfg.compile == "none":
        return None
    if cfg.compile != "inductor" or cfg.compile_tuning != "none":  # no plain loop compiles so: no twin
        return f"{cfg.compile} {cfg.compile_mode} tuning={cfg.compile_tuning}"
    return cfg.compile_mode


def _ratios(by: dict, out: dict) -> None:
    """compiled / eager and caraml / plain of each point measured beside its twin (the same name and compile mode:
    a plain loop without CUDA graphs is no twin of a caraml run that replays them); ours / neuraloperator's."""
    for name in by:
        spec = POINTS[name]
        if name in DATA_POINTS or spec.get("nufft_check") or spec.get("layout_check"):
            continue
        if "caraml" in spec:
            twin = name.replace("_caraml_", "_plain_").replace("_power_off", "").replace("_epochs", "_compiled")
            same_mode = twin in POINTS and _compile_mode(POINTS[twin]) == _compile_mode(spec)
            if same_mode and _rate(by, name) and _rate(by, twin):
                out["caraml_over_plain"][name] = _rate(by, name) / _rate(by, twin)
        elif spec.get("compile") and _rate(by, name) and _rate(by, _eager_twin(name, spec)):
            out["speedup_vs_eager"][name] = _rate(by, name) / _rate(by, _eager_twin(name, spec))
    for name in by:  # neuraloperator's FNO against ours, the same plain loop
        ours = name.replace("_neuralop_", "_plain_")
        if "_neuralop_" in name and _rate(by, name) and _rate(by, ours):
            out.setdefault("ours_over_neuralop", {})[ours] = _rate(by, ours) / _rate(by, name)


def _rbc_goals(out: dict) -> None:
    real = {k: v for k, v in out["speedup_vs_eager"].items() if "complex" not in k and "neuralop" not in k}
    out["goals"]["compiled_never_slower_than_eager"] = (min(real.values()) >= 1.0) if real else None
    rbc2d = out["speedup_vs_eager"].get("RBC2D_plain_compiled")
    out["goals"]["rbc2d_compiled_default_at_least_1.3x"] = rbc2d >= 1.3 if rbc2d else None
    best = max((v for k, v in real.items() if k.startswith("RBC2D") and "fp16" not in k), default=None)
    out["goals"]["rbc2d_best_compiled_fp32_speedup"] = best
    ratios = [v for k, v in out["caraml_over_plain"].items() if "power_off" not in k]
    out["goals"]["caraml_at_least_0.98_plain"] = min(ratios) >= 0.98 if ratios else None


def _pic2d_goals(by: dict, out: dict) -> None:
    """PIC2D's matrix backend over torchkbnufft (>= 2x, equal within 1e-4)."""
    for scope in ("eager", "compiled"):
        kb, mx = _rate(by, f"PIC2D_caraml_{scope}"), _rate(by, f"PIC2D_caraml_matrix_{scope}")
        if kb and mx:
            out.setdefault("pic2d_matrix_over_torchkbnufft", {})[scope] = mx / kb
    kb, mx = _rate(by, "PIC2D_caraml_eager"), _rate(by, "PIC2D_caraml_matrix_compiled")
    if kb and mx:  # torchkbnufft is measured eager only (CARAML runs it so; compiling it breaks the graph)
        out.setdefault("pic2d_matrix_over_torchkbnufft", {})["compiled_over_torchkbnufft_eager"] = mx / kb
    ratios = out.get("pic2d_matrix_over_torchkbnufft")
    if ratios:
        out["goals"]["pic2d_matrix_at_least_2x_torchkbnufft"] = min(ratios.values()) >= 2
    check = by.get("PIC2D_nufft_check") or {}
    if check.get("status") == "ok":
        out["goals"]["pic2d_matrix_equal_within_1e-4"] = check["equal_within_1e-4"]
        out["goals"]["pic2d_matrix_within_tf32_floor"] = check["within_tf32_floor"]


def _pic1d_goals(by: dict, out: dict) -> None:
    """PIC1D channels-last (now) over channels-first (before); the goal: the best compiled >= 2 x the start
    (channels-first compiled: 1,193 samples/s on the H200, or that point's figure in the same call)."""
    for scope in ("eager", "compiled"):
        now, before = _rate(by, f"PIC1D_caraml_{scope}"), _rate(by, f"PIC1D_caraml_channels_first_{scope}")
        if now and before:
            out.setdefault("pic1d_channels_last_over_first", {})[scope] = now / before
    layouts = by.get("PIC1D_layout_check") or {}
    if layouts.get("status") == "ok":
        out["goals"]["pic1d_layouts_equal_within_1e-4"] = layouts["equal_within_1e-4"]
        out["goals"]["pic1d_layouts_within_tf32_floor"] = layouts["high_within_tf32_floor"]
    rates = {backend: [r for r in (_rate(by, f"PIC1D_caraml{tag}_compiled"),
                                   _rate(by, f"PIC1D_caraml{tag}_compiled_again")) if r]
             for backend, tag in (("matmul", ""), ("triton", "_triton"), ("triton-fused", "_triton_fused"))}
    for backend in ("triton", "triton-fused"):
        name = backend.replace("-", "_")
        if rates["matmul"] and rates[backend]:  # each backend's processes, and the mean of each over the other's
            out[f"pic1d_{name}_over_matmul"] = {"matmul": rates["matmul"], backend: rates[backend], "ratio":
                                                statistics.fmean(rates[backend]) / statistics.fmean(rates["matmul"])}
        check = by.get(f"PIC1D_{name}_check") or {}
        if check.get("status") == "ok":  # IEEE float32 within 1e-4; under TF32 within TF32's own error (the layouts')
            # (None: not run, as on a CPU, where the kernels cannot run)
            out["goals"][f"pic1d_{name}_equal_within_1e-4"] = check["equal_within_1e-4"].get(f"highest, {backend}")
            own = [ok for k, ok in check.get("within_tf32_error", {}).items() if k.startswith(f"high, {backend}")]
            out["goals"][f"pic1d_{name}_within_tf32_error"] = all(own) if own else None
    best = max((r for backend_rates in rates.values() for r in backend_rates), default=None)
    start_point = "PIC1D_caraml_channels_first_compiled"
    if best and start_point in by and not _rate(by, start_point):  # asked for here and failed: no other card's start
        out["goals"]["pic1d_compiled_at_least_2x_issue_start"] = None
    elif best:  # the start measured in this call, on this card, where it ran; else the H200's figure from before
        here = _rate(by, start_point)
        start = {"samples_per_s": here or PIC1D_START,
                 "from": "channels-first compiled, this call" if here else "the H200's before channels-last"}
        out["pic1d_best_compiled_over_start"] = {"best": best, "start": start, "ratio": best / start["samples_per_s"]}
        out["goals"]["pic1d_compiled_at_least_2x_issue_start"] = best >= 2 * start["samples_per_s"]


def summary(by: dict) -> dict:
    """The run's ratios and goals from its rows by name."""
    out = {"speedup_vs_eager": {}, "caraml_over_plain": {}, "goals": {}, "data_paths": data_summary(by)}
    _ratios(by, out)
    _rbc_goals(out)
    _pic2d_goals(by, out)
    _pic1d_goals(by, out)
    return out
