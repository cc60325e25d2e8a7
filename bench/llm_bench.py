"""LLM-training benchmark on one GPU: `caraml run llm_training` against a plain training loop of the same model.

    PYTHONPATH=src python3 bench/llm_bench.py [--out DIR] [--only NAME,...] [--steps N] [--warmup N]

CARAML's 800M GPT (16 layers, 2048 wide, 16 heads, sequence 2048, vocabulary 50257 padded to 50304),
bf16 autocast with fp32 master weights, forward and loss compiled as one graph, fused AdamW, clipping at norm 1,
synthetic tokens on the GPU. Points, in this order (each caraml point is its own process; the plain ones run here):

    caraml            caraml run llm_training --preset 800M precision=bf16 compile=inductor recompute=none
    caraml_selective  the same with the preset's recompute=selective (the attention core is recomputed)
    caraml_big        caraml at micro-batch 16 (the fastest that fits), recompute=none
    caraml_acc        caraml_big with 8 micro-batches per iteration (global batch 128): the optimizer step shared
    plain             a hand-written loop over the same model code (model.py), micro-batch 4
    micro             the plain loop at micro-batch 8, 16, 32, ... until out of memory: the largest that fits
    caraml_2024_log   CARAML's 2024 configuration as it ran (--preset 800M-2024: 8 heads, fp16 with Megatron's mixed
                      precision, ZeRO-1, dropout 0.1, selective recompute, micro-batch 4, eager), global batch
                      LLM_BENCH_CARAML_GBS (default 512, as CARAML's published figures), convention=caraml-log:
                      CARAML's tokens/s and TFLOP/s (its patch's formula) over every 5-iteration interval from the
                      first iteration to the exit after LLM_BENCH_EXIT_MIN minutes (default 4; CARAML's 30), beside
                      our steady-state figure of the same run (not in the default --only list: run it by name)

The points caraml* other than caraml_2024_log keep the plain loop's settings (bf16 autocast, no dropout) over
the preset's CARAML values, so that caraml/plain compares the same training.

Backends side by side (`--only native_caraml,megatron,crosscheck`, about 5 minutes; `--set k=v` adds settings to
both throughput points):

    native_caraml     caraml run llm_training --preset 800M-2024 micro_batch_size=4 compile=none (CARAML's 2024
                      settings: fp16 as Megatron keeps it, dropout 0.1, ZeRO-1, selective recompute, uncompiled)
    megatron          the same with engine=megatron-core (megatron-core's GPTModel, optimizer and schedule)
    crosscheck        both backends from the same initial weights and data, fp32, 20 iterations (lr 3e-4 reached
                      by a linear warm-up over the 20: without one the loss spikes and any rounding difference
                      grows tenfold an iteration): each iteration's loss agrees within 1 %; beside it, native
                      against native with the batch in two micro-batches (the same sum, rounded otherwise): the
                      spread rounding alone gives at these settings, which must itself be well under 1 %

megatron-core comes as a wheel on a machine without a package index:
`python3 -m pip install --no-deps .whl/megatron_core-0.19.2-*.whl`; where it does not import, the megatron
points are skipped with one line.

Groups of points, bf16 first, the others' tokens/s as a ratio to the group's base at their micro-batch,
and a summary row per group. Points run most important first; a group's late points run after every group's
others; a point starts only while the budget has the seconds it takes (NEED_S), else it is recorded as skipped
(time budget), in its row and in the group's summary. A point of the same settings is measured once per run
(`reused_from`: fp8_800m's bf16@16 is the levers' plain). LLM_BENCH_FP8_SET="k=v ..." adds settings to every
caraml fp8 point of the groups (e.g. fp8_fast_accum=true, to check its loss with fp8_loss).

    fp8_800m          micro-batch 16: bf16 | precision=fp8 (torchao, tensorwise) | the plain loop with torchao's
                      float8 (caraml fp8 / plain fp8, target >= 0.98) | fp8 at micro-batch 32 | late: bf16 at 32;
                      each precision's best micro-batch, best fp8 / best bf16 (goal >= 1.15)
    fp8_800m_recipes  micro-batch 16: bf16 | tensorwise | tensorwise with fp8_fast_accum=true (the backward
                      products' fast accumulation too) | fp8_recipe=rowwise | rowwise_with_gw_hp
    fp8_wide          the 13B's width on one GPU (8 layers, 5120 wide, ffn 20480, 32 heads), micro-batch 4:
                      bf16 | fp8 (goal >= 1.3 x)
    fp8_loss          200 iterations of OSCAR-shaped data (a .bin/.idx of 790 documents, 2,340,256 tokens, made
                      here), micro-batch 4, lr LOSS['lr'] after a 16-iteration warm-up: bf16 | fp8 | bf16 with each
                      batch in two micro-batches (the noise: rounding alone); each point's mean loss over its
                      last 20 iterations (the record's loss.tail_mean) against bf16's (goal: fp8 within 1 %)
    levers            micro-batch 16, bf16: plain | fused_loss=chunked | fused_loss=liger (where liger-kernel
                      imports) | fused_norm_residual | gelu_epilogue (by expected gain)
Every caraml row also carries caraml plan's memory estimate (plan GiB) beside the measured peak memory, its time
per iteration (plan s/it, at its default efficiency 0.5) beside the measured one and their ratio (vs plan), and for
fp8 the MFU against the fp8 and the bf16 peak. Without torchao the fp8 points are skipped, said in one line.
Commands of <= 9 minutes each on one H200 (a caraml point is a process: about 50 s bf16, 85 s fp8 at
micro-batch 16, mostly compilation; see docs/performance.md):
    PYTHONPATH=src python3 bench/llm_bench.py --only fp8_800m,fp8_wide --steps 20 --warmup 6 --budget 510
    PYTHONPATH=src python3 bench/llm_bench.py --only fp8_loss --budget 330       # about 4.5 minutes
    LLM_BENCH_FP8_SET=fp8_fast_accum=true PYTHONPATH=src python3 bench/llm_bench.py --only fp8_loss --budget 330
    PYTHONPATH=src python3 bench/llm_bench.py --only levers --steps 20 --warmup 6 --budget 510
    PYTHONPATH=src python3 bench/llm_bench.py --only fp8_800m_recipes --steps 20 --warmup 6 --budget 510

Prints tokens/s, TFLOP/s by 6N + 12*L*h*s per token, MFU against 989.4 TFLOP/s (H200/H100 SXM dense bf16),
the ratio caraml/plain (target >= 0.98), peak memory; writes llm_bench.json into --out, or $OUT, or ./bench-out.
Without a GPU (or with --self-check) every point runs on the CPU with the smoke model, uncompiled: a check of
the script, not a measurement.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from caraml.runner import RunSpec, resolve  # noqa: E402  (no torch)
from caraml.workloads.llm_training import PRESETS, sizes  # noqa: E402  (no torch)

PEAK_TFLOPS = 989.4
MODEL = {k: PRESETS["800M"][k] for k in ("num_layers", "hidden_size", "num_attention_heads", "seq_length",
                                         "max_position_embeddings")}
MICRO = 4
VOCAB = 50257
POINTS = ("caraml", "caraml_selective", "plain", "micro", "caraml_big", "caraml_acc", "fp8_800m", "fp8_800m_recipes",
          "fp8_wide", "fp8_loss", "levers")
BACKEND_POINTS = ("native_caraml", "megatron", "crosscheck")
CARAML_SETTINGS = ["recompute=selective", "compile=none"]  # CARAML's Megatron: selective recompute, no compiler
CROSSCHECK_STEPS, CROSSCHECK_TOLERANCE = 20, 0.01
# no dropout: the RNGs differ. lr 3e-4 without warm-up made the 800M's loss spike (10.5 -> 11.1 -> 9.7 -> 12.0 in
# iterations 3-6 on the H200): the backends then parted by 25 % from a 1e-4 difference, as native parts from itself
# (docs/performance.md). The warm-up reaches 3e-4 at the last iteration.
CROSSCHECK = {"precision": "fp32", "recompute": "none", "compile": "none", "lr": 3e-4, "seed": 42,
              "attention_dropout": 0.0, "hidden_dropout": 0.0}
CROSSCHECK_GIVEN = json.loads(os.environ.get("LLM_BENCH_CROSSCHECK", "{}"))  # e.g. {"clip_grad": 0} to isolate a step


def crosscheck_settings() -> dict:
    """The cross-check's settings at this run's micro-batch (the self-check's is smaller), warm-up over all steps."""
    return {**CROSSCHECK, "micro_batch_size": MICRO, "lr_warmup_samples": MICRO * CROSSCHECK_STEPS,
            **CROSSCHECK_GIVEN}


def control_settings() -> dict:
    """native's control: each iteration's batch in two micro-batches, the same gradient summed in another order."""
    return {"micro_batch_size": MICRO // 2, "grad_accumulation": 2}
EXTRA_POINTS = ("caraml_2024_log",)  # run only when named in --only
# caraml_2024_log: CARAML's global batch and the minutes before the exit (CARAML's 30: too long for one command)
CARAML_GBS = int(os.environ.get("LLM_BENCH_CARAML_GBS", "512"))
EXIT_MIN = float(os.environ.get("LLM_BENCH_EXIT_MIN", "4"))
# the plain loop's training (bf16 autocast, no dropout) over the 800M preset's CARAML values
LIKE_PLAIN = ["precision=bf16", "mixed_precision=autocast", "attention_dropout=0", "hidden_dropout=0"]
OPTIM = resolve(RunSpec("llm_training", preset="800M")).config.optim
LR, LR_WARMUP_SAMPLES = OPTIM.lr, OPTIM.lr_warmup_samples  # caraml's learning-rate warm-up
ATTENTION = os.environ.get("LLM_BENCH_ATTENTION", "auto")  # the SDPA kernel for every point (caraml's attention=)
# caraml_acc: micro-batches of BIG_MICRO per iteration (8: global batch 128, within CARAML's 16...4096)
ACC = int(os.environ.get("LLM_BENCH_ACC", "8"))
BIG_MICRO = 16  # the micro-batch that gave the most tokens/s in the first H200 runs (micro 32 no faster)
# the CPU self-check: the smoke preset's model, no compilation, two micro-batch sizes at most
SELF_CHECK = {"model": {k: PRESETS["smoke"][k] for k in MODEL}, "micro": 2, "vocab": 500,
              "caraml": ["--preset", "smoke", "device=cpu", "compile=none"], "max_micro": 4,
              # the smoke model with CARAML's settings (bf16: fp16 is slow on a CPU)
              "caraml_2024": ["--preset", "smoke", "device=cpu", "mixed_precision=megatron", "precision=bf16",
                              "distributed_optimizer=zero1", "attention_dropout=0.1", "hidden_dropout=0.1",
                              "recompute=selective", "caraml_config=none"], "gbs": 8, "exit_min": 0.3}
RUN = {"device": "cuda", "compile": True, "caraml": ["--preset", "800M", "compile=inductor", "device=cuda"],
       "max_micro": 1 << 20, "caraml_2024": ["--preset", "800M-2024", "device=cuda"], "gbs": CARAML_GBS,
       "exit_min": EXIT_MIN}


def flops_per_token() -> float:
    h, layers = MODEL["hidden_size"], MODEL["num_layers"]
    return sizes.flops_per_token(layers, h, 4 * h, sizes.padded_vocab(VOCAB), MODEL["seq_length"])


def rates(tokens_per_s: float | None, per_token: float | None = None) -> dict:
    if not tokens_per_s:
        return {"tokens_per_s": tokens_per_s}
    tflops = tokens_per_s * (per_token or flops_per_token()) / 1e12
    return {"tokens_per_s": tokens_per_s, "tflops_6n": tflops, "mfu": tflops / PEAK_TFLOPS}


# caraml run, one process per point --------------------------------------------------------------------------------
def merged(base: list[str], extra: list[str]) -> list[str]:
    """`base` command-line items with each key=value of `extra` replacing the one of the same key (caraml run
    refuses a key given twice)."""
    keys = {item.split("=", 1)[0] for item in extra if "=" in item}
    return [item for item in base if item.split("=", 1)[0] not in keys] + extra


def caraml_point(name: str, extra: list[str], out: Path, steps: int, warmup: int, timeout: float,
                 micro: int | None = None, base: list[str] | None = None) -> dict:
    base = [*RUN["caraml"], *LIKE_PLAIN] if base is None else base
    settings = merged([*base, f"attention={ATTENTION}", f"micro_batch_size={micro or MICRO}",
                       f"warmup_steps={warmup}", f"measure_steps={steps}"], extra)
    cmd = [sys.executable, "-m", "caraml", "run", "llm_training", *settings, "--results", str(out / "results"),
           "--json"]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    print(f"llm_bench: {name}: caraml {' '.join(cmd[3:-3])}", file=sys.stderr, flush=True)
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # Out of time: stop it as a user would (SIGTERM), so it still prints its record of the steps measured so far.
        proc.terminate()
        try:
            stdout, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            return {"name": name, "status": "timeout", "wall_s": time.monotonic() - start}
    took = time.monotonic() - start
    try:
        record = json.loads(stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"name": name, "status": "failed", "wall_s": took, "error": stderr[-3000:]}
    m = record.get("metrics") or {}
    energy = m.get("energy") or {}
    details = {"mfu_by_peak": m.get("mfu_by_peak"), "fast_paths": m.get("fast_paths"),
               "plan_memory_gib": plan_memory_gib(record.get("params") or {})}
    tokens_per_s = (m.get("throughput") or {}).get("value")
    return {"name": name, "status": record["status"], **rates(tokens_per_s, m.get("flops_per_unit")), **details,
            "caraml_mfu": m.get("mfu"), "caraml_tflops_per_device": m.get("tflops_per_device"),
            "tflops_caraml_formula": m.get("tflops_caraml_per_device"),
            "time_per_iteration_s": m.get("time_per_iteration_s"),
            **plan_time(record.get("params") or {}, m.get("time_per_iteration_s")),
            "step_median_ms": ((m.get("step_time_s") or {}).get("median") or 0) * 1e3,
            "step_p90_ms": ((m.get("step_time_s") or {}).get("p90") or 0) * 1e3,
            "compile_s": (m.get("warmup") or {}).get("compile_s"), "loss": m.get("loss"),
            "peak_memory_gib": (m.get("peak_memory_bytes") or 0) / 2**30,
            "energy_wh": energy.get("total_wh"), "tokens_per_wh": energy.get("units_per_wh"),
            "caraml_log": caraml_log_figures(m), "precision_mechanism": m.get("precision_mechanism"),
            "optimizer_state_sharded": (m.get("parallel_setup") or {}).get("optimizer_state_sharded"),
            "wall_s": took, "error": record.get("error"), "command": "caraml " + " ".join(cmd[3:-3]),
            "backend": m.get("backend") or {"name": "native"},
            "env": {k: (record.get("env") or {}).get(k) for k in ("torch", "cuda", "driver", "python")}}


def caraml_log_figures(m: dict) -> dict | None:
    """CARAML's figures of a convention=caraml-log run, beside ours of the same run."""
    if not m.get("caraml_log"):
        return None
    log = m["caraml_log"]
    return {"tokens_per_s": (m.get("caraml_tokens_per_s") or {}).get("value"),
            "tflops_per_device": m.get("caraml_tflops_per_device"),
            "time_per_iteration_s": m.get("caraml_time_per_iteration_s"), "iterations": m.get("caraml_iterations"),
            "iterations_run": log.get("iterations_run"), "exit_minutes": log.get("exit_minutes"),
            "elapsed_per_iteration_s": log.get("elapsed_per_iteration_s"),
            "steady_tokens_per_s": (m.get("throughput") or {}).get("value"),
            "steady_tflops_caraml_formula": m.get("tflops_caraml_per_device")}


# the backends -----------------------------------------------------------------------------------------------------
def megatron_missing() -> str | None:
    """Why the megatron-core points cannot run here, in a few words; None when they can."""
    if RUN["device"] != "cuda":
        return "megatron-core runs on CUDA GPUs only"
    try:
        import megatron.core  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - absent or broken: either way the points cannot run
        return (f"megatron-core does not import ({type(exc).__name__}: {exc}); install its wheel: "
                "python3 -m pip install --no-deps .whl/megatron_core-0.19.2-*.whl")
    return None


def train_losses(backend: str, steps: int, timeout: float, extra: dict | None = None) -> dict:
    """Each iteration's loss of one backend, trained in a process of its own from the seed's initial weights."""
    overrides = {**crosscheck_settings(), "backend": backend, **(extra or {})}
    preset = RUN["caraml"][RUN["caraml"].index("--preset") + 1]
    code = ("import json, sys; from caraml.crosscheck import train_losses; "
            "print(json.dumps(train_losses(json.loads(sys.argv[1]), int(sys.argv[2]), preset=sys.argv[3], "
            "device=sys.argv[4])))")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    print(f"llm_bench: crosscheck: {backend}, {steps} iterations", file=sys.stderr, flush=True)
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-c", code, json.dumps(overrides), str(steps), preset, RUN["device"]],
                              capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"backend": backend, "status": "timeout", "wall_s": time.monotonic() - start}
    try:
        losses = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"backend": backend, "status": "failed", "error": proc.stderr[-3000:],
                "wall_s": time.monotonic() - start}
    return {"backend": backend, "status": "ok", "losses": losses, "wall_s": time.monotonic() - start}


def largest_difference(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) / abs(x) for x, y in zip(a, b))


def crosscheck_point(timeout_end: float) -> dict:
    """native against megatron-core (against native itself where megatron-core cannot run: a check of the script,
    said so in `against`): the largest relative difference of the iterations' losses; and native against native
    in two micro-batches (`control`): what rounding alone makes of these settings."""
    against = "megatron-core" if megatron_missing() is None else "native"
    runs = [train_losses(b, CROSSCHECK_STEPS, max(60.0, (timeout_end - time.monotonic()) / 3))
            for b in ("native", against)]
    control = train_losses("native", CROSSCHECK_STEPS, max(60.0, timeout_end - time.monotonic()), control_settings())
    row = {"name": "crosscheck", "against": against, "settings": crosscheck_settings(), "runs": runs,
           "control_run": {**control, "settings": control_settings()}, "tolerance": CROSSCHECK_TOLERANCE}
    if any(r["status"] != "ok" for r in runs):
        return {**row, "status": "failed", "error": " | ".join(str(r.get("error", r["status"]))[-1500:]
                                                               for r in runs if r["status"] != "ok")}
    a, b = runs[0]["losses"], runs[1]["losses"]
    worst = largest_difference(a, b)
    spread = largest_difference(a, control["losses"]) if control["status"] == "ok" else None
    return {**row, "status": "ok" if worst < CROSSCHECK_TOLERANCE else "differs", "max_relative_difference": worst,
            "control_max_relative_difference": spread, "loss_first": [a[0], b[0]], "loss_last": [a[-1], b[-1]]}


def plan_estimate(params: dict) -> dict | None:
    """caraml plan's estimate of a point's parameters on one H200 (estimate.estimate's dict); None if it has none."""
    from caraml import estimate, systems, workloads
    from caraml.errors import BadInput

    try:
        return estimate.estimate(workloads.get("llm_training"), params, systems.get("H200"), 1)
    except (BadInput, KeyError, TypeError):
        return None


def plan_memory_gib(params: dict) -> float | None:
    """caraml plan's memory estimate per device for a point's parameters on one H200 (GiB); None if it has none."""
    est = plan_estimate(params)
    return est["memory"]["total_bytes"] / 2**30 if est else None


def plan_time(params: dict, measured_s: float | None) -> dict:
    """caraml plan's time per iteration on one H200 (its default efficiency, 0.5 of the peak) beside the measured
    one: the compute estimate's cross-check; measured / plan > 1: slower than planned."""
    est = plan_estimate(params)
    plan_s = est["time_per_iteration_s"] if est else None
    return {"plan_time_per_iteration_s": plan_s, "plan_tokens_per_s": est["tokens_per_s"] if est else None,
            "time_vs_plan": measured_s / plan_s if plan_s and measured_s else None}


# fp8 and the fusion levers: groups of points, run in order of importance --------------------------------
WIDE = {"model_size": "custom", "num_layers": 8, "hidden_size": 5120, "num_attention_heads": 32,
        "ffn_hidden_size": 20480}  # the 13B's width on one GPU
WIDE_MICRO = 4
# fp8_loss: CARAML's peak learning rate (1e-4; its clip 1.0 and weight decay 0.1 come with the preset), reached by a
# linear warm-up over 16 iterations instead of CARAML's 216,320 samples (54,080 iterations at micro-batch 4: the lr
# would stay below 4e-7 for all 200) and flat after it (CARAML's cosine runs over 129 M samples). The 3e-4 of the
# earlier runs is the rate at which the 800M's loss spiked in the megatron-core cross-check, and two bf16 runs of the
# same seed ended 5 % apart there (docs/performance.md); LLM_BENCH_LOSS_LR gives another.
LOSS = {"steps": 200, "micro": 4, "lr": os.environ.get("LLM_BENCH_LOSS_LR", "1e-4"), "lr_warmup_samples": "64"}
# by expected gain, so that a budget cut loses the least promising: gelu_epilogue recomputes the pre-activation
# (+11 % of the products' FLOPs, docs/performance.md); liger only where it imports
LEVERS = ("fused_loss=chunked", "fused_loss=liger", "fused_norm_residual=true", "gelu_epilogue=true")
FP8_POINTS = ("fp8_800m", "fp8_800m_recipes", "fp8_wide", "fp8_loss")
GROUPS = FP8_POINTS + ("levers",)
SELF_CHECK_WIDE = {"model_size": "custom", "num_layers": 2, "hidden_size": 128, "num_attention_heads": 4,
                   "ffn_hidden_size": 512}
# Seconds a point takes on the H200 (process start, compilation, warm-up, 20 measured steps; the first H200 runs'
# walls at micro-batch 16: bf16 50, fp8 84): a point starts only while this much of the budget is left, so a cut
# skips whole points (recorded as skipped) instead of stopping one mid-compilation.
NEED_S = {"bf16": 55.0, "fp8": 90.0, "per_doubling": 10.0, "per_extra_step": 0.2}
# settings added to every caraml fp8 point of the groups, e.g. LLM_BENCH_FP8_SET=fp8_fast_accum=true for fp8_loss
FP8_SET = tuple(os.environ.get("LLM_BENCH_FP8_SET", "").split())
SKIP: set = set()  # --skip: group points not run this time


@dataclasses.dataclass(frozen=True)
class Job:
    """One point of a group: caraml run with `settings` over the run's base, or the plain loop here (`plain`)."""

    group: str
    label: str
    settings: tuple
    micro: int
    fp8: bool
    base: bool = False  # the group's reference: the others' ratio is to the base at their micro-batch
    late: bool = False  # run after every group's other points: the first that a budget cut loses
    plain: bool = False  # the plain loop, fp8 by torchao's tensorwise recipe when `fp8`
    steps: int | None = None  # this point's measured steps and warm-up, where not the run's
    warmup: int | None = None

    @property
    def name(self) -> str:
        return f"{self.group}/{self.label}"

    def need_s(self, steps: int) -> float:
        if RUN["device"] != "cuda":
            return 60.0
        doublings = max(0, self.micro.bit_length() - BIG_MICRO.bit_length())
        return (NEED_S["fp8" if self.fp8 else "bf16"] + NEED_S["per_doubling"] * doublings
                + NEED_S["per_extra_step"] * max(0, (self.steps or steps) - 20))


def oscar_shaped(out: Path, vocab: int) -> str:
    """A Megatron .bin/.idx in the shape of CARAML's OSCAR file (790 documents, 2,340,256 tokens) whose tokens have
    structure to learn (a fixed successor of each token most of the time, Zipf-distributed otherwise), so the
    loss falls over 200 iterations as on text. Returns its prefix."""
    import numpy as np

    from caraml.data.megatron import IndexedDatasetWriter, dtype_for_vocab

    prefix = out / "oscar_shaped"
    if (out / "oscar_shaped.idx").exists():
        return str(prefix)
    rng = np.random.default_rng(42)
    lengths = rng.lognormal(0.0, 0.8, 790)
    lengths = np.maximum(1, (lengths / lengths.sum() * 2_340_256).astype(np.int64))
    lengths[-1] += 2_340_256 - lengths.sum()
    successor = rng.permutation(vocab)
    with IndexedDatasetWriter(prefix, dtype=dtype_for_vocab(vocab)) as writer:
        for n in lengths:
            zipf = (rng.zipf(1.2, n) - 1) % vocab
            follow = rng.random(n) < 0.7
            doc = np.empty(n, dtype=np.int64)
            doc[0] = zipf[0]
            for i in range(1, n):  # a Python loop over 2.3 M tokens: a few seconds
                doc[i] = successor[doc[i - 1]] if follow[i] else zipf[i]
            writer.add_document(doc)
    return str(prefix)


def group_jobs(name: str, out: Path, self_check: bool) -> list[Job]:
    """The points of group `name`, most important first (LLM_BENCH_FP8_SET added to their caraml fp8 points)."""
    jobs = _group_jobs(name, out, self_check)
    return [dataclasses.replace(j, settings=(*j.settings, *FP8_SET)) if j.fp8 and not j.plain and FP8_SET else j
            for j in jobs]


def _group_jobs(name: str, out: Path, self_check: bool) -> list[Job]:
    big = min(BIG_MICRO, RUN["max_micro"])
    none = ("recompute=none",)
    if name == "fp8_800m":  # each precision at two micro-batches: fp8 needs 13 GiB less, so its best may be larger
        small, large = (MICRO, RUN["max_micro"]) if self_check else (BIG_MICRO, 2 * BIG_MICRO)
        return [Job(name, f"bf16@{small}", none, small, False, base=True),
                Job(name, f"fp8@{small}", (*none, "precision=fp8"), small, True),
                Job(name, f"plain_fp8@{small}", (), small, True, plain=True),
                Job(name, f"fp8@{large}", (*none, "precision=fp8"), large, True),
                Job(name, f"bf16@{large}", none, large, False, base=True, late=True)]  # micro 32 was no faster
    if name == "fp8_800m_recipes":
        fp8 = (*none, "precision=fp8")
        return [Job(name, "bf16", none, big, False, base=True), Job(name, "tensorwise", fp8, big, True),
                Job(name, "tensorwise_fast_accum", (*fp8, "fp8_fast_accum=true"), big, True),
                Job(name, "rowwise", (*fp8, "fp8_recipe=rowwise"), big, True),
                Job(name, "rowwise_with_gw_hp", (*fp8, "fp8_recipe=rowwise_with_gw_hp"), big, True)]
    if name == "fp8_wide":
        shape = (*none, *(f"{k}={v}" for k, v in (SELF_CHECK_WIDE if self_check else WIDE).items()))
        micro = min(WIDE_MICRO, RUN["max_micro"])
        return [Job(name, "bf16", shape, micro, False, base=True),
                Job(name, "fp8", (*shape, "precision=fp8"), micro, True)]
    if name == "fp8_loss":
        data = oscar_shaped(out, VOCAB)
        settings = (*none, "data=oscar", f"data_path={data}", f"lr={LOSS['lr']}",
                    f"lr_warmup_samples={LOSS['lr_warmup_samples']}")
        micro, steps = min(LOSS["micro"], RUN["max_micro"]), None if self_check else LOSS["steps"]
        return [Job(name, "bf16", settings, micro, False, base=True, steps=steps, warmup=2),
                Job(name, "fp8", (*settings, "precision=fp8"), micro, True, steps=steps, warmup=2),
                # the noise: bf16 again, the same weights and batches, each batch in two micro-batches (the same
                # sum rounded otherwise): what a rounding-sized change alone makes of the loss at these settings
                Job(name, "bf16_control", (*settings, "grad_accumulation=2"), max(1, micro // 2), False,
                    steps=steps, warmup=2)]
    levers = [lever for lever in LEVERS if lever != "fused_loss=liger" or not liger_problem()]
    return [Job(name, "plain", none, big, False, base=True),
            *(Job(name, lever.split("=")[0] if lever != "fused_loss=liger" else "liger", (*none, lever), big, False)
              for lever in levers)]


def run_job(job: Job, out: Path, steps: int, warmup: int, end: float, done: dict) -> dict:
    """One point; a point of the same settings measured earlier in this run is reused (named in `reused_from`)."""
    steps, warmup = job.steps or steps, job.warmup or warmup
    if job.name in SKIP:
        return {"name": job.name, "status": "skipped (--skip)", "micro_batch_size": job.micro}
    key = (job.plain, job.fp8, job.settings, job.micro, steps, warmup)
    if key in done:
        return {**done[key], "name": job.name, "reused_from": done[key]["name"]}
    left = end - time.monotonic()
    if left < job.need_s(steps):
        return {"name": job.name, "status": "skipped (time budget)", "micro_batch_size": job.micro,
                "left_s": left, "need_s": job.need_s(steps)}
    if job.plain:
        row = plain_fp8_point(job.name, job.micro, steps, warmup)
    else:
        row = caraml_point(job.name, list(job.settings), out, steps, warmup, left, micro=job.micro)
    row.update(micro_batch_size=job.micro, precision="fp8" if job.fp8 else "bf16")
    done[key] = row
    return row


def summarize(group: str, entries: list[tuple[Job, dict]], summary: dict) -> None:
    """Each point's tokens/s as a ratio to the base at its micro-batch; the group's figures into `summary`."""
    bases = {job.micro: row["tokens_per_s"] for job, row in entries if job.base and row.get("tokens_per_s")}
    for job, row in entries:
        if not job.base and not job.plain and row.get("tokens_per_s") and job.micro in bases:  # caraml vs caraml
            row["ratio"] = row["tokens_per_s"] / bases[job.micro]
    measured = [(job, row) for job, row in entries if row.get("tokens_per_s")]
    if group == "fp8_800m":
        best = {}
        for precision in ("bf16", "fp8"):
            found = [(row["tokens_per_s"], job.micro) for job, row in measured
                     if not job.plain and job.fp8 == (precision == "fp8")]
            if found:
                tokens, micro = max(found)
                best[precision] = {"tokens_per_s": tokens, "micro_batch_size": micro}
        summary["best"] = best
        if len(best) == 2:
            summary["best_ratio"] = best["fp8"]["tokens_per_s"] / best["bf16"]["tokens_per_s"]  # goal >= 1.15
        for job, plain in measured:
            caraml = next((r for j, r in measured if j.plain is False and j.fp8 and j.micro == job.micro), None)
            if job.plain and caraml:
                summary["caraml_over_plain_fp8"] = {"micro_batch_size": job.micro,  # target >= 0.98
                                                    "ratio": caraml["tokens_per_s"] / plain["tokens_per_s"]}
    if group == "fp8_800m_recipes":
        by = {job.label: row["tokens_per_s"] for job, row in measured}
        if "tensorwise" in by and "tensorwise_fast_accum" in by:
            summary["fast_accum_vs_tensorwise"] = by["tensorwise_fast_accum"] / by["tensorwise"]
    if group == "fp8_loss":  # each point's mean loss over its last iterations (LOSS_TAIL), against bf16's
        tails = {job.label: ((row.get("loss") or {}).get("tail_mean"), row) for job, row in entries}
        base = tails.get("bf16", (None,))[0]
        if isinstance(base, float):
            summary["loss_tail_mean"] = {k: v for k, (v, _) in tails.items() if isinstance(v, float)}
            summary["loss_tail_steps"] = (tails["bf16"][1].get("loss") or {}).get("tail_steps")
            for label, key in (("fp8", "loss_vs_bf16"), ("bf16_control", "control_vs_bf16")):
                value, row = tails.get(label, (None, None))
                if isinstance(value, float):  # fp8's goal: within +-1 %; the control's: the noise beside it
                    summary[key] = row["loss_vs_bf16"] = value / base - 1
    summary["skipped"] = [f"{row['name']} {row['status'][len('skipped '):]}" for _, row in entries
                          if row["status"].startswith("skipped")]  # each with its reason: (time budget), (--skip)


class GroupRunner:
    """Runs the groups' points into `rows`: each group's points in order, then its summary row; the late points of
    every group after all other points, each before its group's summary."""

    def __init__(self, rows: list, out: Path, steps: int, warmup: int, end: float):
        self.rows, self.out, self.steps, self.warmup, self.end = rows, out, steps, warmup, end
        self.points: dict[str, list[tuple[Job, dict]]] = {}  # each group's points as run
        self.summaries: dict[str, dict] = {}
        self.late: list[Job] = []
        self.done: dict = {}  # points measured in this run by their settings, reused where a group repeats one

    def start(self, name: str, save) -> None:
        self.points[name], self.summaries[name] = [], {"name": f"{name}/summary", "status": "ok"}
        for job in group_jobs(name, self.out, RUN["device"] == "cpu"):
            if job.late:
                self.late.append(job)
            else:
                self._run(job, None)
                save()
        self.rows.append(self.summaries[name])

    def run_late(self, save) -> None:
        for job in self.late:
            self._run(job, self.summaries[job.group])
            save()

    def _run(self, job: Job, before: dict | None) -> None:
        row = run_job(job, self.out, self.steps, self.warmup, self.end, self.done)
        if before is None:
            self.rows.append(row)
        else:
            self.rows.insert(next(i for i, r in enumerate(self.rows) if r is before), row)
        self.points[job.group].append((job, row))
        summarize(job.group, self.points[job.group], self.summaries[job.group])


def summary_text(s: dict) -> str:
    parts = []
    for precision, b in (s.get("best") or {}).items():
        parts.append(f"best {precision} {b['tokens_per_s']:.0f} tokens/s at micro-batch {b['micro_batch_size']}")
    if "best_ratio" in s:
        parts.append(f"best fp8 / best bf16 {s['best_ratio']:.3f} (goal >= 1.15)")
    if "caraml_over_plain_fp8" in s:
        c = s["caraml_over_plain_fp8"]
        parts.append(f"caraml fp8 / plain fp8 at micro-batch {c['micro_batch_size']} {c['ratio']:.3f} (>= 0.98)")
    if "fast_accum_vs_tensorwise" in s:
        parts.append(f"fp8_fast_accum=true / tensorwise {s['fast_accum_vs_tensorwise']:.3f}")
    if "loss_vs_bf16" in s:
        parts.append(f"mean loss of the last {s['loss_tail_steps']} iterations fp8 vs bf16 {s['loss_vs_bf16']:+.2%} "
                     f"(goal within 1 %)")
    if "control_vs_bf16" in s:
        parts.append(f"bf16 in two micro-batches vs bf16 {s['control_vs_bf16']:+.2%} (the noise: rounding alone)")
    if s.get("skipped"):
        parts.append(f"skipped: {', '.join(s['skipped'])}")
    return f"  {s['name']}: " + "; ".join(parts) if parts else ""


def torchao_problem() -> str | None:
    try:
        import torchao.float8  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - absent or built for another torch
        return f"{type(exc).__name__}: {str(exc)[:120]}"
    return None


def liger_problem() -> str | None:
    from caraml.workloads.llm_training.fused import liger_known_broken

    try:
        import liger_kernel.transformers  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {str(exc)[:120]}"
    return liger_known_broken()  # caraml would run its chunked loss instead: the point would repeat fused_loss


# the plain loop, here ----------------------------------------------------------------------------------------------
def plain_step(micro: int, fp8_recipe: str | None = None):
    """nanoGPT's loop over model.py's GPT: bf16 autocast, forward+loss compiled, fused AdamW with caraml's warm-up,
    clip, no harness. With `fp8_recipe`, torchao's float8 training for the blocks' linear layers (the embedding and
    the tied output layer in bf16), as caraml's precision=fp8 converts them, straight from torchao.
    Returns step(i) -> the loss of iteration i, on the device."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    from caraml.workloads.llm_training.model import GPT, GPTConfig, init_weights

    device = torch.device(RUN["device"])
    cuda = device.type == "cuda"
    cfg = GPTConfig(num_layers=MODEL["num_layers"], hidden_size=MODEL["hidden_size"],
                    num_heads=MODEL["num_attention_heads"], ffn_hidden_size=4 * MODEL["hidden_size"],
                    seq_length=MODEL["seq_length"], max_positions=MODEL["max_position_embeddings"],
                    vocab_size=sizes.padded_vocab(VOCAB), position="rope", recompute="none")
    torch.manual_seed(42)
    with device:
        model = GPT(cfg)
    init_weights(model, cfg, seed=42)
    if fp8_recipe:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        def block_linear(module, fqn):  # caraml's fp8.is_block_linear, whose size check all 800M linears pass
            return isinstance(module, nn.Linear) and fqn.startswith("layers.")

        config = Float8LinearConfig.from_recipe_name(fp8_recipe)
        if "fp8_fast_accum=true" in FP8_SET:  # as the caraml points get it: all three products accumulate fast
            from torchao.float8.config import Float8GemmConfig

            fast = Float8GemmConfig(use_fast_accum=True)
            config = dataclasses.replace(config, gemm_config_output=fast, gemm_config_grad_input=fast,
                                         gemm_config_grad_weight=fast)
        convert_to_float8_training(model, config=config, module_filter_fn=block_linear)

    def forward_loss(x, y):  # forward and loss as one graph, as caraml's compile_scope=model
        return F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten(0, 1))

    if RUN["compile"]:
        forward_loss = torch.compile(forward_loss)
    params = list(model.parameters())
    optimizer = torch.optim.AdamW([{"params": [p for p in params if p.ndim >= 2], "weight_decay": 0.1},
                                   {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}],
                                  lr=LR, betas=(0.9, 0.999), eps=1e-8, **({"fused": True} if cuda else {}))
    batches = []
    for _ in range(2):
        tokens = torch.randint(0, VOCAB, (micro, cfg.seq_length + 1), device=device)
        batches.append((tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()))

    from caraml.workloads.llm_training.model import attention_kernels

    def step(i):
        x, y = batches[i % 2]
        for group in optimizer.param_groups:  # caraml's warm-up from 0 (the same weights at every step, so the
            group["lr"] = LR * min(1.0, i * micro / LR_WARMUP_SAMPLES)  # same numbers pass through the products)
        with torch.autocast(device.type, dtype=torch.bfloat16), attention_kernels(ATTENTION):
            loss = forward_loss(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def plain_loop(micro: int, steps: int, warmup: int, fp8_recipe: str | None = None) -> dict:
    """The plain loop timed: one synchronisation at each end of the measured window."""
    import torch

    device = torch.device(RUN["device"])
    cuda = device.type == "cuda"
    step = plain_step(micro, fp8_recipe)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    for i in range(warmup):
        first = step(i)
    sync()
    warmup_s = time.perf_counter() - start
    start = time.perf_counter()
    for i in range(steps):
        last = step(i)
    sync()
    wall = time.perf_counter() - start
    out = {"micro_batch_size": micro, "steps": steps, "wall_s": wall, "warmup_s": warmup_s,
           "step_ms": wall / steps * 1e3, **rates(micro * MODEL["seq_length"] * steps / wall),
           "loss_first": float(first), "loss_last": float(last),
           "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None}
    del step
    return out


def free_memory() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    torch._dynamo.reset()


def plain_point(steps: int, warmup: int) -> dict:
    try:
        import torch

        return {"name": "plain", "status": "ok", **plain_loop(MICRO, steps, warmup), "torch": torch.__version__}
    finally:
        free_memory()


def plain_fp8_point(name: str, micro: int, steps: int, warmup: int) -> dict:
    """The plain loop with torchao's tensorwise float8 (caraml's default fp8_recipe), here in this process."""
    import torch

    start = time.monotonic()
    print(f"llm_bench: {name}: the plain loop, torchao float8 tensorwise{' ' + ' '.join(FP8_SET) if FP8_SET else ''}"
          f", micro-batch {micro}", file=sys.stderr, flush=True)
    try:
        return {"name": name, "status": "ok", **plain_loop(micro, steps, warmup, "tensorwise"),
                "torch": torch.__version__}
    except torch.OutOfMemoryError as exc:
        return {"name": name, "status": "oom", "error": str(exc).splitlines()[0][:300],
                "wall_s": time.monotonic() - start}
    finally:
        free_memory()


def micro_sweep(steps: int, warmup: int, budget_end: float) -> dict:
    """The plain loop at growing micro-batches until one does not fit (or the time budget ends)."""
    import torch

    tried, fits = [], None
    micro = 2 * MICRO
    while time.monotonic() < budget_end - 60 and micro <= RUN["max_micro"]:
        print(f"llm_bench: micro-batch {micro}", file=sys.stderr, flush=True)
        try:
            row = {"status": "ok", **plain_loop(micro, steps, warmup)}
            fits = micro
        except torch.OutOfMemoryError as exc:
            row = {"status": "oom", "micro_batch_size": micro, "error": str(exc).splitlines()[0][:300],
                   "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None}
        free_memory()
        tried.append(row)
        if row["status"] != "ok":
            break
        micro *= 2
    return {"name": "micro", "status": "ok" if tried else "skipped (time budget)", "largest_fitting": fits,
            "tried": tried}


def refuse(problem: str) -> None:
    """Bad input: one line on stderr, exit 2."""
    print(f"llm_bench: {problem}", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    parser.add_argument("--only", default=",".join(POINTS), help="comma list of: " + ", ".join(POINTS + EXTRA_POINTS))
    parser.add_argument("--steps", type=int, default=30, help="measured iterations per point")
    parser.add_argument("--warmup", type=int, default=8, help="warm-up iterations (compilation) per point")
    parser.add_argument("--budget", type=float, default=float(os.environ.get("LLM_BENCH_BUDGET_S", "570")),
                        help="seconds for all points (the device tool allows 600 per command)")
    parser.add_argument("--skip", default="", help="comma list of group points (e.g. fp8_800m/plain_fp8@16) not "
                        "to run this time, each recorded as skipped (--skip)")
    parser.add_argument("--self-check", action="store_true", help="run on the CPU with the smoke model")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for both points native_caraml and megatron (repeatable)")
    args = parser.parse_args()
    import torch

    if args.self_check or not torch.cuda.is_available():
        global MICRO, VOCAB
        print("llm_bench: no GPU (or --self-check): checking the script on the CPU with the smoke model",
              file=sys.stderr)
        MODEL.update(SELF_CHECK["model"])
        MICRO, VOCAB = SELF_CHECK["micro"], SELF_CHECK["vocab"]
        RUN.update(device="cpu", compile=False, caraml=SELF_CHECK["caraml"], max_micro=SELF_CHECK["max_micro"],
                   caraml_2024=SELF_CHECK["caraml_2024"], gbs=SELF_CHECK["gbs"], exit_min=SELF_CHECK["exit_min"])
        args.steps, args.warmup = min(args.steps, 4), min(args.warmup, 2)
        args.budget = max(args.budget, 3600.0)  # a shared CPU starts each caraml process slowly
    only = [n for n in args.only.split(",") if n]
    unknown = [n for n in only if n not in POINTS + BACKEND_POINTS + EXTRA_POINTS]
    if unknown:
        known = POINTS + BACKEND_POINTS + EXTRA_POINTS
        refuse(f"unknown point(s) {', '.join(unknown)}; choose from: {', '.join(known)}")
    SKIP.update(n for n in args.skip.split(",") if n)
    stray = sorted(n for n in SKIP if n.partition("/")[0] not in only or not n.partition("/")[2])
    if stray:
        refuse(f"--skip {', '.join(stray)}: name points as GROUP/POINT of a group in --only "
               f"({', '.join(only) or 'none'}), e.g. fp8_800m/plain_fp8@16")
    missing = megatron_missing() if {"megatron", "crosscheck"} & set(only) else None
    if missing:
        print(f"llm_bench: skipping the point megatron and crosscheck's megatron side: {missing}", file=sys.stderr)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    end = time.monotonic() + args.budget
    rows: list[dict] = []
    no_torchao = torchao_problem()
    if no_torchao and any(n in FP8_POINTS for n in only):
        print(f"llm_bench: torchao does not import ({no_torchao}): skipping "
              + ", ".join(n for n in only if n in FP8_POINTS), file=sys.stderr)
        rows += [{"name": n, "status": "skipped (no torchao)"} for n in only if n in FP8_POINTS]
        only = [n for n in only if n not in FP8_POINTS]
    if "levers" in only and liger_problem():
        print(f"llm_bench: liger-kernel is not usable ({liger_problem()}): levers runs without fused_loss=liger",
              file=sys.stderr)

    groups = GroupRunner(rows, out, args.steps, args.warmup, end)

    def save():
        by = {r["name"]: r for r in rows}
        if by.get("caraml", {}).get("tokens_per_s") and by.get("plain", {}).get("tokens_per_s"):
            by["caraml"]["ratio_to_plain"] = by["caraml"]["tokens_per_s"] / by["plain"]["tokens_per_s"]
        if by.get("megatron", {}).get("tokens_per_s") and by.get("native_caraml", {}).get("tokens_per_s"):
            by["native_caraml"]["ratio_to_megatron"] = (by["native_caraml"]["tokens_per_s"]
                                                        / by["megatron"]["tokens_per_s"])
        summary = {"date": time.strftime("%Y-%m-%d"), "model": {**MODEL, "vocab_size": VOCAB,
                   "padded_vocab_size": sizes.padded_vocab(VOCAB), "micro_batch_size": MICRO},
                   "flops_per_token": flops_per_token(), "flops_convention": sizes.FLOPS_CONVENTION,
                   "peak_tflops": PEAK_TFLOPS, "rows": rows}
        (out / "llm_bench.json").write_text(json.dumps(summary, indent=1))

    for name in only:
        left = end - time.monotonic()
        if left < 60:
            rows.append({"name": name, "status": "skipped (time budget)"})
            continue
        if name == "caraml":
            rows.append(caraml_point(name, ["recompute=none"], out, args.steps, args.warmup, left))
        elif name == "caraml_selective":
            rows.append(caraml_point(name, ["recompute=selective"], out, args.steps, args.warmup, left))
        elif name == "caraml_big":
            rows.append(caraml_point(name, ["recompute=none"], out, args.steps, args.warmup, left,
                                     micro=min(BIG_MICRO, RUN["max_micro"])))
        elif name == "caraml_acc":
            rows.append(caraml_point(name, ["recompute=none", f"grad_accumulation={ACC}"], out, args.steps,
                                     args.warmup, left, micro=min(BIG_MICRO, RUN["max_micro"])))
        elif name == "caraml_2024_log":
            # CARAML's iterations are long (global batch 512: 128 micro-batches): a few warm-up and measured ones,
            # then on to the exit; the figures of both conventions come from this one run
            acc = RUN["gbs"] // MICRO
            rows.append(caraml_point(name, [f"grad_accumulation={acc}", "convention=caraml-log",
                                            f"exit_minutes={RUN['exit_min']}"], out, min(args.steps, 3),
                                     min(args.warmup, 2), left, base=RUN["caraml_2024"]))
        elif name == "native_caraml":  # CARAML's 2024 settings (fp16 as Megatron keeps it, dropout, ZeRO-1)
            rows.append(caraml_point(name, CARAML_SETTINGS + args.set, out, args.steps, args.warmup, left,
                                     base=RUN["caraml_2024"]))
        elif name == "megatron":
            rows.append({"name": name, "status": f"skipped ({missing})"} if missing else
                        caraml_point(name, CARAML_SETTINGS + ["engine=megatron-core", "attention=auto"] + args.set,
                                     out, args.steps, args.warmup, left, base=RUN["caraml_2024"]))
        elif name == "crosscheck":
            rows.append(crosscheck_point(end))
        elif name == "plain":
            rows.append(plain_point(args.steps, args.warmup))
        elif name in GROUPS:
            groups.start(name, save)
        else:
            rows.append(micro_sweep(max(3, args.steps // 6), max(3, args.warmup // 2), end))
        save()
    groups.run_late(save)

    print(f"{'point':<32} {'status':<8} {'tokens/s':>10} {'TFLOP/s':>8} {'CARAML':>7} {'MFU':>6} {'ratio':>6} "
          f"{'peak GiB':>8} {'plan GiB':>8} {'s/it':>7} {'plan s/it':>9} {'vs plan':>7} {'compile s':>9} "
          f"{'wall s':>6}  loss")
    for r in rows:
        if r["name"].endswith("/summary"):  # a line of the group's figures, where it has any
            text = summary_text(r)
            if text:
                print(text)
            continue

        def f(key, fmt, r=r):
            v = r.get(key)
            return format(v, fmt) if isinstance(v, (int, float)) else "-"
        loss = r.get("loss") or {}
        loss_text = (f"{loss.get('first', 0):.4f} -> {loss.get('last', 0):.4f}" if loss.get("last") is not None
                     else "") + (f", last {loss['tail_steps']} mean {loss['tail_mean']:.4f}" if "tail_mean" in loss
                                 else "") + (f" ({r['loss_vs_bf16']:+.2%} vs bf16)" if "loss_vs_bf16" in r else "")
        mfu = ", ".join(f"MFU {k} {v['mfu']:.3f}" for k, v in (r.get("mfu_by_peak") or {}).items()
                        if v.get("mfu")) if r.get("mfu_by_peak") else ""
        ratio = next((k for k in ("ratio_to_megatron", "ratio_to_plain", "ratio") if k in r), "ratio")
        print(f"{r['name']:<32} {r['status'][:8]:<8} {f('tokens_per_s', '10.0f')} {f('tflops_6n', '8.1f')} "
              f"{f('tflops_caraml_formula', '7.1f')} {f('mfu', '6.3f')} {f(ratio, '6.3f')} "
              f"{f('peak_memory_gib', '8.1f')} {f('plan_memory_gib', '8.1f')} {f('time_per_iteration_s', '7.3f')} "
              f"{f('plan_time_per_iteration_s', '9.3f')} {f('time_vs_plan', '7.2f')} {f('compile_s', '9.1f')} "
              f"{f('wall_s', '6.0f')}  {loss_text}{'  ' + mfu if mfu else ''}")
        if r["name"] == "crosscheck" and "max_relative_difference" in r:
            print(f"  native vs {r['against']}: {CROSSCHECK_STEPS} losses, max relative difference "
                  f"{r['max_relative_difference']:.2e} (tolerance {r['tolerance']:g}); first {r['loss_first']}, "
                  f"last {r['loss_last']}")
            spread = r.get("control_max_relative_difference")
            unstable = (spread or 0) >= r["tolerance"]
            print(f"  native vs native in two micro-batches (rounding alone): max relative difference "
                  f"{'-' if spread is None else format(spread, '.2e')}"
                  f"{'  UNSTABLE: native parts from itself, so the comparison says nothing' if unstable else ''}")
        for t in r.get("tried", []):
            print(f"  micro {t['micro_batch_size']:<4} {t['status']:<8} {format(t.get('tokens_per_s') or 0, '10.0f')} "
                  f"{format(t.get('tflops_6n') or 0, '8.1f')} {format(t.get('mfu') or 0, '6.3f')} {'':>6} "
                  f"{format(t.get('peak_memory_gib') or 0, '8.1f')}")
        log = r.get("caraml_log")
        if log:
            print(f"  CARAML's convention ({log['iterations']} of {log['iterations_run']} iterations logged, exit "
                  f"after {log['exit_minutes']} min): {format(log['tokens_per_s'] or 0, '.0f')} tokens/s, "
                  f"{format(log['tflops_per_device'] or 0, '.1f')} TFLOP/s per GPU (CARAML's formula); ours, steady: "
                  f"{format(log['steady_tokens_per_s'] or 0, '.0f')} tokens/s, "
                  f"{format(log['steady_tflops_caraml_formula'] or 0, '.1f')} TFLOP/s (CARAML's formula)")
        if r.get("error") and r["status"] != "ok":
            print("   ", str(r["error"])[-800:])
    print(f"llm_bench: wrote {out / 'llm_bench.json'}", file=sys.stderr)
    unmatched = sorted(SKIP - {r["name"] for r in rows})
    if unmatched:  # a misspelt point ran instead of being skipped: say so
        print(f"llm_bench: --skip {', '.join(unmatched)} matched no point of its group; the points are the rows above",
              file=sys.stderr)


if __name__ == "__main__":
    main()
