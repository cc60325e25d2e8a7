"""LLM-training benchmark on one GPU: `caraml run llm_training` against a plain training loop of the same model.

    PYTHONPATH=src python3 bench/llm_bench.py [--out DIR] [--only NAME,...] [--steps N] [--warmup N] [--budget S]

CARAML's 800M GPT (16 layers, 2048 wide, 16 heads, sequence 2048, vocabulary 50257 padded to 50304),
bf16 autocast with fp32 master weights, forward and loss compiled as one graph, fused AdamW, clipping at norm 1,
synthetic tokens on the GPU. Points, in this order (each caraml point is its own process; the plain ones run here):

    caraml            caraml run llm_training --preset 800M precision=bf16 compile=inductor recompute=none
    caraml_selective  the same with the preset's recompute=selective (the attention core is recomputed)
    caraml_big        caraml at micro-batch 16 (the fastest that fits), recompute=none
    caraml_acc        caraml_big with LLM_BENCH_ACC (8) micro-batches per iteration: the optimizer step shared
    plain             a hand-written loop over the same model code (caraml.compare.llm_plain), micro-batch 4
    micro             the plain loop at micro-batch 8, 16, 32, ... until out of memory: the largest that fits
    caraml_2024_log   CARAML's 2024 configuration as it ran (--preset 800M-2024), global batch LLM_BENCH_CARAML_GBS
                      (512), convention=caraml-log: CARAML's tokens/s and TFLOP/s over every 5-iteration interval up
                      to the exit after LLM_BENCH_EXIT_MIN minutes (4), beside our steady-state figure of the same
                      run (not in the default --only list: run it by name; --set k=v changes the engine's settings,
                      e.g. compile=inductor micro_batch_size=16, the global batch kept)
    plain_2024        the plain loop with CARAML's 2024 training as plain PyTorch spells it (fp16 autocast and a
                      GradScaler, dropout 0.1, the attention core recomputed) on its model (8 heads), at --set's
                      micro_batch_size, grad_accumulation and compile (uncompiled unless --set compile=inductor, as
                      native_caraml): beside native_caraml with the same --set, e.g.
                      --only native_caraml,plain_2024 --set compile=inductor --set micro_batch_size=16
                      --set grad_accumulation=4 (run it by name)

The points caraml* other than caraml_2024_log keep the plain loop's settings (bf16 autocast, no dropout) over
the preset's CARAML values, so that caraml/plain compares the same training.

Backends side by side (`--only native_caraml,megatron,crosscheck`, about 5 minutes; `--set k=v` adds settings to
both throughput points): native_caraml (--preset 800M-2024 micro_batch_size=4 compile=none), megatron (the same
with engine=megatron-core), crosscheck (both backends from the same weights and data, fp32, 20 iterations, each
iteration's loss within 1 %; beside it native against native in two micro-batches: the spread rounding alone
gives). megatron-core comes as a wheel: `python3 -m pip install --no-deps .whl/megatron_core-0.19.2-*.whl`; where
it does not import, the megatron points are skipped with one line.

Groups of points (fp8_800m, fp8_800m_recipes, fp8_wide, fp8_loss, levers): caraml.compare.llm_groups.
LLM_BENCH_FP8_SET="k=v ..." adds settings to every caraml fp8 point of the groups; --skip GROUP/POINT leaves one
out. Commands of <= 9 minutes each on one H200:
    PYTHONPATH=src python3 bench/llm_bench.py --only fp8_800m,fp8_wide --steps 20 --warmup 6 --budget 510
    PYTHONPATH=src python3 bench/llm_bench.py --only fp8_loss --budget 330       # about 4.5 minutes
    PYTHONPATH=src python3 bench/llm_bench.py --only levers --steps 20 --warmup 6 --budget 510

Prints tokens/s, TFLOP/s by 6N + 12*L*h*s per token, MFU against the device's dense bf16 peak (its system
profile's, caraml.systems), the ratio caraml/plain (target >= 0.98), peak memory (GiB) beside caraml plan's
estimate; writes llm_bench.json into --out, or $OUT, or ./bench-out. Without a GPU (or with --self-check) every
point runs on the CPU with the smoke model, uncompiled: a check of the script, not a measurement.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from caraml.compare import llm_groups
from caraml.compare.llm_plain import CARAML_2024, plain_loop
from caraml.compare.llm_setup import LIKE_PLAIN, MODEL_KEYS, LLMSetup, caraml_schedule, from_env, on_cpu
from caraml.compare.plan_check import plan_memory_gib, plan_time
from caraml.compare.points import Column, table_lines
from caraml.workloads.llm_training import PRESETS

POINTS = ("caraml", "caraml_selective", "plain", "micro", "caraml_big", "caraml_acc", *llm_groups.GROUPS)
BACKEND_POINTS = ("native_caraml", "megatron", "crosscheck")
EXTRA_POINTS = ("caraml_2024_log", "plain_2024")  # run only when named in --only
CARAML_SETTINGS = ("recompute=selective", "compile=none")  # CARAML's Megatron: selective recompute, no compiler
CROSSCHECK_STEPS, CROSSCHECK_TOLERANCE = 20, 0.01
# no dropout: the RNGs differ. lr 3e-4 without warm-up made the 800M's loss spike on the H200: the backends then
# parted by 25 % from a 1e-4 difference, as native parts from itself. The warm-up reaches 3e-4 at the last iteration.
CROSSCHECK = {"precision": "fp32", "recompute": "none", "compile": "none", "lr": 3e-4, "seed": 42,
              "attention_dropout": 0.0, "hidden_dropout": 0.0}


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1] / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def crosscheck_settings(setup: LLMSetup) -> dict:
    """The cross-check's settings at this run's micro-batch (the self-check's is smaller), warm-up over all steps."""
    return {**CROSSCHECK, "micro_batch_size": setup.micro, "lr_warmup_samples": setup.micro * CROSSCHECK_STEPS,
            **setup.crosscheck_given}


def control_settings(setup: LLMSetup) -> dict:
    """native's control: each iteration's batch in two micro-batches, the same gradient summed in another order."""
    return {"micro_batch_size": setup.micro // 2, "grad_accumulation": 2}



# caraml run, one process per point --------------------------------------------------------------------------------
def merged(base: list[str], extra: list[str]) -> list[str]:
    """`base` command-line items, then `extra`'s, each key=value replacing an earlier one of the same key (caraml run
    refuses a key given twice; --set overrides a point's own settings)."""
    items = [*base, *extra]
    last = {item.split("=", 1)[0]: i for i, item in enumerate(items) if "=" in item}
    return [item for i, item in enumerate(items) if "=" not in item or last[item.split("=", 1)[0]] == i]


def _finish(proc: subprocess.Popen, timeout: float) -> tuple | None:
    """stdout and stderr of a caraml run; out of time, it is stopped as a user would (SIGTERM), so that it still
    prints its record of the steps measured so far; None when it does not end after that either."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            return proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            return None


def caraml_point(setup: LLMSetup, name: str, extra: list[str], out: Path, steps: int, warmup: int, timeout: float,
                 micro: int | None = None, base: list[str] | None = None) -> dict:
    base = [*setup.caraml, *LIKE_PLAIN] if base is None else list(base)
    settings = merged([*base, f"attention={setup.attention}", f"micro_batch_size={micro or setup.micro}",
                       f"warmup_steps={warmup}", f"measure_steps={steps}"], extra)
    cmd = [sys.executable, "-m", "caraml", "run", "llm_training", *settings, "--results", str(out / "results"),
           "--json"]
    print(f"llm_bench: {name}: caraml {' '.join(cmd[3:-3])}", file=sys.stderr, flush=True)
    start = time.monotonic()
    ended = _finish(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()),
                    timeout)
    took = time.monotonic() - start
    if ended is None:
        return {"name": name, "status": "timeout", "wall_s": took}
    try:
        record = json.loads(ended[0].strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"name": name, "status": "failed", "wall_s": took, "error": ended[1][-3000:]}
    return {**record_row(setup, name, record), "wall_s": took, "command": "caraml " + " ".join(cmd[3:-3])}


def record_row(setup: LLMSetup, name: str, record: dict) -> dict:
    """A point's row from its `caraml run --json` record, with caraml plan's estimates beside it."""
    m, params = record.get("metrics") or {}, record.get("params") or {}
    energy, step = m.get("energy") or {}, m.get("step_time_s") or {}
    tag = "CPU" if setup.self_check else setup_tag()
    return {"name": name, "status": record["status"],
            **setup.rates((m.get("throughput") or {}).get("value"), m.get("flops_per_unit")),
            "mfu_by_peak": m.get("mfu_by_peak"), "fast_paths": m.get("fast_paths"),
            "plan_memory_gib": plan_memory_gib(params, tag), "caraml_mfu": m.get("mfu"),
            "caraml_tflops_per_device": m.get("tflops_per_device"),
            "tflops_caraml_formula": m.get("tflops_caraml_per_device"),
            "time_per_iteration_s": m.get("time_per_iteration_s"),
            **plan_time(params, m.get("time_per_iteration_s"), tag),
            "step_median_ms": (step.get("median") or 0) * 1e3, "step_p90_ms": (step.get("p90") or 0) * 1e3,
            "compile_s": (m.get("warmup") or {}).get("compile_s"), "loss": m.get("loss"),
            "peak_memory_gib": (m.get("peak_memory_bytes") or 0) / 2**30,
            "energy_wh": energy.get("total_wh"), "tokens_per_wh": energy.get("units_per_wh"),
            "caraml_log": caraml_log_figures(m), "precision_mechanism": m.get("precision_mechanism"),
            "optimizer_state_sharded": (m.get("parallel_setup") or {}).get("optimizer_state_sharded"),
            "error": record.get("error"), "backend": m.get("backend") or {"name": "native"},
            "env": {k: (record.get("env") or {}).get(k) for k in ("torch", "cuda", "driver", "python")}}


def setup_tag() -> str:
    """The system profile of this machine's GPU (caraml.systems.detect)."""
    from caraml.compare.peaks import device_tag

    return device_tag()


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
def megatron_missing(setup: LLMSetup) -> str | None:
    """Why the megatron-core points cannot run here, in a few words; None when they can."""
    if setup.device != "cuda":
        return "megatron-core runs on CUDA GPUs only"
    try:
        import megatron.core  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - absent or broken: either way the points cannot run
        return (f"megatron-core does not import ({type(exc).__name__}: {exc}); install its wheel: "
                "python3 -m pip install --no-deps .whl/megatron_core-0.19.2-*.whl")
    return None


def train_losses(setup: LLMSetup, backend: str, steps: int, timeout: float, extra: dict | None = None) -> dict:
    """Each iteration's loss of one backend, trained in a process of its own from the seed's initial weights."""
    overrides = {**crosscheck_settings(setup), "backend": backend, **(extra or {})}
    preset = setup.caraml[list(setup.caraml).index("--preset") + 1]
    code = ("import json, sys; from caraml.crosscheck import train_losses; "
            "print(json.dumps(train_losses(json.loads(sys.argv[1]), int(sys.argv[2]), preset=sys.argv[3], "
            "device=sys.argv[4])))")
    print(f"llm_bench: crosscheck: {backend}, {steps} iterations", file=sys.stderr, flush=True)
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-c", code, json.dumps(overrides), str(steps), preset, setup.device],
                              capture_output=True, text=True, env=_env(), timeout=timeout)
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


def crosscheck_point(setup: LLMSetup, timeout_end: float) -> dict:
    """native against megatron-core (against native itself where megatron-core cannot run: a check of the script,
    said so in `against`): the largest relative difference of the iterations' losses; and native against native
    in two micro-batches (`control`): what rounding alone makes of these settings."""
    against = "megatron-core" if megatron_missing(setup) is None else "native"
    runs = [train_losses(setup, b, CROSSCHECK_STEPS, max(60.0, (timeout_end - time.monotonic()) / 3))
            for b in ("native", against)]
    control = train_losses(setup, "native", CROSSCHECK_STEPS, max(60.0, timeout_end - time.monotonic()),
                           control_settings(setup))
    row = {"name": "crosscheck", "against": against, "settings": crosscheck_settings(setup), "runs": runs,
           "control_run": {**control, "settings": control_settings(setup)}, "tolerance": CROSSCHECK_TOLERANCE}
    if any(r["status"] != "ok" for r in runs):
        return {**row, "status": "failed", "error": " | ".join(str(r.get("error", r["status"]))[-1500:]
                                                               for r in runs if r["status"] != "ok")}
    a, b = runs[0]["losses"], runs[1]["losses"]
    worst = largest_difference(a, b)
    spread = largest_difference(a, control["losses"]) if control["status"] == "ok" else None
    return {**row, "status": "ok" if worst < CROSSCHECK_TOLERANCE else "differs", "max_relative_difference": worst,
            "control_max_relative_difference": spread, "loss_first": [a[0], b[0]], "loss_last": [a[-1], b[-1]]}


# what may be missing here -----------------------------------------------------------------------------------------
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


# the plain loop, here ----------------------------------------------------------------------------------------------
def free_memory() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    torch._dynamo.reset()


class BenchPoints:
    """The points the groups run (caraml.compare.llm_groups): caraml in a process, the plain fp8 loop here."""

    def __init__(self, setup: LLMSetup, out: Path):
        self.setup, self.out = setup, out

    def caraml_point(self, name, extra, steps, warmup, timeout, micro=None) -> dict:
        return caraml_point(self.setup, name, extra, self.out, steps, warmup, timeout, micro=micro)

    def plain_fp8_point(self, name: str, micro: int, steps: int, warmup: int) -> dict:
        """The plain loop with torchao's tensorwise float8 (caraml's default fp8_recipe)."""
        import torch

        start = time.monotonic()
        fp8_set = " ".join(self.setup.fp8_set)
        print(f"llm_bench: {name}: the plain loop, torchao float8 tensorwise{' ' + fp8_set if fp8_set else ''}, "
              f"micro-batch {micro}", file=sys.stderr, flush=True)
        try:
            return {"name": name, "status": "ok", "torch": torch.__version__,
                    **plain_loop(self.setup, micro, steps, warmup, caraml_schedule(), "tensorwise")}
        except torch.OutOfMemoryError as exc:
            return {"name": name, "status": "oom", "error": str(exc).splitlines()[0][:300],
                    "wall_s": time.monotonic() - start}
        finally:
            free_memory()

    def data_prefix(self, out: Path, vocab: int) -> str:
        return oscar_shaped(out, vocab)

    def liger_problem(self) -> str | None:
        return liger_problem()


def plain_point(setup: LLMSetup, steps: int, warmup: int) -> dict:
    try:
        import torch

        return {"name": "plain", "status": "ok", **plain_loop(setup, setup.micro, steps, warmup, caraml_schedule()),
                "torch": torch.__version__}
    finally:
        free_memory()


def plain_2024_point(setup: LLMSetup, settings: dict, steps: int, warmup: int) -> dict:
    """The plain loop with CARAML's 2024 recipe (llm_plain.CARAML_2024) on its model (8 heads), at the micro-batch
    and accumulation given by --set: those of native_caraml beside it."""
    import torch

    model = setup.model if setup.self_check else {k: PRESETS["800M-2024"][k] for k in MODEL_KEYS}
    recipe = replace(CARAML_2024, accumulation=int(settings.get("grad_accumulation") or 1))
    compiled = setup.compile and settings.get("compile", "none") != "none"  # uncompiled as native_caraml unless --set
    try:
        return {"name": "plain_2024", "status": "ok", "torch": torch.__version__, "compiled": compiled,
                **plain_loop(replace(setup, model=model, compile=compiled),
                             given_micro(settings, setup), steps, warmup, caraml_schedule(), recipe=recipe)}
    finally:
        free_memory()


def micro_sweep(setup: LLMSetup, steps: int, warmup: int, budget_end: float) -> dict:
    """The plain loop at growing micro-batches until one does not fit (or the time budget ends)."""
    import torch

    tried, fits, micro = [], None, 2 * setup.micro
    while time.monotonic() < budget_end - 60 and micro <= setup.max_micro:
        print(f"llm_bench: micro-batch {micro}", file=sys.stderr, flush=True)
        try:
            row = {"status": "ok", **plain_loop(setup, micro, steps, warmup, caraml_schedule())}
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


# the command -------------------------------------------------------------------------------------------------------
def given(args: argparse.Namespace) -> dict:
    """The --set items as a dict (the last of a key wins, as on caraml's command line here)."""
    return dict(item.split("=", 1) for item in args.set)


def given_micro(settings: dict, setup: LLMSetup) -> int:
    """The micro-batch --set gives (checked by parse: a whole number of at least 1), else the run's."""
    return int(settings.get("micro_batch_size") or setup.micro)


def refuse(problem: str) -> None:
    """Bad input: one line on stderr, exit 2."""
    print(f"llm_bench: {problem}", file=sys.stderr)
    sys.exit(2)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="llm_bench.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="results folder (default $OUT, else ./bench-out)")
    parser.add_argument("--only", default=",".join(POINTS), help="comma list of: " + ", ".join(
        POINTS + BACKEND_POINTS + EXTRA_POINTS))
    parser.add_argument("--steps", type=int, default=30, help="measured iterations per point")
    parser.add_argument("--warmup", type=int, default=8, help="warm-up iterations (compilation) per point")
    parser.add_argument("--budget", type=float, default=None, help="seconds for all points (default "
                        "$LLM_BENCH_BUDGET_S, else 570: the device tool allows 600 per command)")
    parser.add_argument("--skip", default="", help="comma list of group points (e.g. fp8_800m/plain_fp8@16) not "
                        "to run this time, each recorded as skipped (--skip)")
    parser.add_argument("--self-check", action="store_true", help="run on the CPU with the smoke model")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for the points native_caraml, megatron and caraml_2024_log (repeatable; "
                        "caraml_2024_log keeps its global batch whatever micro_batch_size is given)")
    args = parser.parse_args(argv)
    if args.budget is None:
        args.budget = float(os.environ.get("LLM_BENCH_BUDGET_S", "570"))
    args.only = [n for n in args.only.split(",") if n]
    for item in args.set:
        key, _, value = item.partition("=")
        if not key or not value or (key in ("micro_batch_size", "grad_accumulation") and
                                    not (value.isdigit() and int(value) > 0)):
            refuse(f"--set {item}: give KEY=VALUE, e.g. --set compile=inductor (micro_batch_size and "
                   "grad_accumulation whole numbers of at least 1)")
    return args


def setup_for(args: argparse.Namespace) -> LLMSetup:
    """The run's settings: the GPU's (its bf16 peak from its system profile), or the CPU self-check's (then the
    steps, warm-up and budget of a check, set on args)."""
    import torch

    setup = replace(from_env(), skip=frozenset(n for n in args.skip.split(",") if n))
    if args.self_check or not torch.cuda.is_available():
        print("llm_bench: no GPU (or --self-check): checking the script on the CPU with the smoke model",
              file=sys.stderr)
        args.steps, args.warmup = min(args.steps, 4), min(args.warmup, 2)
        args.budget = max(args.budget, 3600.0)  # a shared CPU starts each caraml process slowly
        return on_cpu(setup)
    from caraml.compare.peaks import peak_tflops

    return replace(setup, peak_tflops=peak_tflops("bf16"))


def check_names(only: list[str], skip: frozenset) -> None:
    """Refuses (exit 2) an unknown point, and a --skip that is not GROUP/POINT of a group in --only."""
    known = POINTS + BACKEND_POINTS + EXTRA_POINTS
    unknown = [n for n in only if n not in known]
    if unknown:
        refuse(f"unknown point(s) {', '.join(unknown)}; choose from: {', '.join(known)}")
    stray = sorted(n for n in skip if n.partition("/")[0] not in only or not n.partition("/")[2])
    if stray:
        refuse(f"--skip {', '.join(stray)}: name points as GROUP/POINT of a group in --only "
               f"({', '.join(only) or 'none'}), e.g. fp8_800m/plain_fp8@16")


def without_missing(only: list[str], rows: list[dict]) -> list[str]:
    """The points that can run here: the fp8 groups leave without torchao (a skipped row each); said in one line."""
    problem = torchao_problem()
    fp8 = [n for n in only if n in llm_groups.FP8_POINTS]
    if problem and fp8:
        print(f"llm_bench: torchao does not import ({problem}): skipping {', '.join(fp8)}", file=sys.stderr)
        rows += [{"name": n, "status": "skipped (no torchao)"} for n in fp8]
        only = [n for n in only if n not in fp8]
    if "levers" in only and liger_problem():
        print(f"llm_bench: liger-kernel is not usable ({liger_problem()}): levers runs without fused_loss=liger",
              file=sys.stderr)
    return only


def single_point(name: str, setup: LLMSetup, args, out: Path, end: float, missing: str | None) -> dict:
    """One point outside the groups, with what is left of the budget."""
    left, s, w = end - time.monotonic(), args.steps, args.warmup
    if name == "caraml_2024_log":  # CARAML's long iterations: a few measured, then on to the exit
        micro = given_micro(given(args), setup)
        extra = ["convention=caraml-log", f"exit_minutes={setup.exit_min}", *args.set,
                 f"grad_accumulation={setup.gbs // micro}"]  # last: the global batch kept whatever --set says
        return caraml_point(setup, name, extra, out, min(s, 3), min(w, 2), left, base=setup.caraml_2024)
    if name == "megatron" and missing:
        return {"name": name, "status": f"skipped ({missing})"}
    if name in ("native_caraml", "megatron"):  # CARAML's 2024 settings (fp16 as Megatron keeps it, ZeRO-1)
        extra = ["engine=megatron-core", "attention=auto"] if name == "megatron" else []
        return caraml_point(setup, name, [*CARAML_SETTINGS, *extra, *args.set], out, s, w, left,
                            base=setup.caraml_2024)
    if name == "crosscheck":
        return crosscheck_point(setup, end)
    if name == "plain_2024":
        return plain_2024_point(setup, given(args), s, w)
    if name == "plain":
        return plain_point(setup, s, w)
    if name == "micro":
        return micro_sweep(setup, max(3, s // 6), max(3, w // 2), end)
    extra = {"caraml": ["recompute=none"], "caraml_selective": ["recompute=selective"],
             "caraml_big": ["recompute=none"], "caraml_acc": ["recompute=none", f"grad_accumulation={setup.acc}"]}
    micro = setup.big_micro if name in ("caraml_big", "caraml_acc") else None
    return caraml_point(setup, name, extra[name], out, s, w, left, micro=micro)


def report(setup: LLMSetup, rows: list[dict]) -> dict:
    """The run's JSON: the model, the FLOP convention, the peak and the rows (with caraml/plain and
    native/megatron ratios where both were measured)."""
    from caraml.workloads.llm_training import sizes

    by = {r["name"]: r for r in rows}
    for a, b, key in (("caraml", "plain", "ratio_to_plain"), ("native_caraml", "megatron", "ratio_to_megatron"),
                      ("native_caraml", "plain_2024", "ratio_to_plain")):
        if by.get(a, {}).get("tokens_per_s") and by.get(b, {}).get("tokens_per_s"):
            by[a][key] = by[a]["tokens_per_s"] / by[b]["tokens_per_s"]
    return {"date": time.strftime("%Y-%m-%d"), "model": {**setup.model, "vocab_size": setup.vocab,
            "padded_vocab_size": sizes.padded_vocab(setup.vocab), "micro_batch_size": setup.micro},
            "flops_per_token": setup.flops_per_token(), "flops_convention": sizes.FLOPS_CONVENTION,
            "peak_tflops": setup.peak_tflops, "rows": rows}


# the table ---------------------------------------------------------------------------------------------------------
def _ratio(row: dict):
    return next((row[k] for k in ("ratio_to_megatron", "ratio_to_plain", "ratio") if k in row), None)


COLUMNS = (
    Column("point", 32, "s", "name"), Column("status", 8, "s", "status", cut=True),
    Column("tokens/s", 10, ".0f", "tokens_per_s"), Column("TFLOP/s", 8, ".1f", "tflops_6n"),
    Column("CARAML", 7, ".1f", "tflops_caraml_formula"), Column("MFU", 6, ".3f", "mfu"),
    Column("ratio", 6, ".3f", _ratio), Column("peak GiB", 8, ".1f", "peak_memory_gib"),
    Column("plan GiB", 8, ".1f", "plan_memory_gib"), Column("s/it", 7, ".3f", "time_per_iteration_s"),
    Column("plan s/it", 9, ".3f", "plan_time_per_iteration_s"), Column("vs plan", 7, ".2f", "time_vs_plan"),
    Column("compile s", 9, ".1f", "compile_s"), Column("wall s", 6, ".0f", "wall_s"),
    Column("loss", 0, "s", lambda r: loss_text(r)))


def loss_text(r: dict) -> str:
    loss = r.get("loss") or {}
    text = f"{loss.get('first', 0):.4f} -> {loss.get('last', 0):.4f}" if loss.get("last") is not None else ""
    text += f", last {loss['tail_steps']} mean {loss['tail_mean']:.4f}" if "tail_mean" in loss else ""
    text += f" ({r['loss_vs_bf16']:+.2%} vs bf16)" if "loss_vs_bf16" in r else ""
    mfu = ", ".join(f"MFU {k} {v['mfu']:.3f}" for k, v in (r.get("mfu_by_peak") or {}).items() if v.get("mfu"))
    return text + (f"  {mfu}" if mfu else "")


def crosscheck_lines(r: dict) -> list[str]:
    if r["name"] != "crosscheck" or "max_relative_difference" not in r:
        return []
    spread = r.get("control_max_relative_difference")
    unstable = (spread or 0) >= r["tolerance"]
    return [f"  native vs {r['against']}: {CROSSCHECK_STEPS} losses, max relative difference "
            f"{r['max_relative_difference']:.2e} (tolerance {r['tolerance']:g}); first {r['loss_first']}, "
            f"last {r['loss_last']}",
            f"  native vs native in two micro-batches (rounding alone): max relative difference "
            f"{'-' if spread is None else format(spread, '.2e')}"
            f"{'  UNSTABLE: native parts from itself, so the comparison says nothing' if unstable else ''}"]


def notes(r: dict) -> list[str]:
    """The lines under a row: the cross-check's losses, the micro-batch sweep, CARAML's own figures."""
    lines = crosscheck_lines(r)
    for t in r.get("tried", []):
        lines.append(f"  micro {t['micro_batch_size']:<4} {t['status']:<8} {t.get('tokens_per_s') or 0:10.0f} "
                     f"{t.get('tflops_6n') or 0:8.1f} {t.get('mfu') or 0:6.3f} {'':>6} "
                     f"{t.get('peak_memory_gib') or 0:8.1f}")
    log = r.get("caraml_log")
    if log:
        lines.append(f"  CARAML's convention ({log['iterations']} of {log['iterations_run']} iterations logged, exit "
                     f"after {log['exit_minutes']} min): {log['tokens_per_s'] or 0:.0f} tokens/s, "
                     f"{log['tflops_per_device'] or 0:.1f} TFLOP/s per GPU (CARAML's formula); ours, steady: "
                     f"{log['steady_tokens_per_s'] or 0:.0f} tokens/s, "
                     f"{log['steady_tflops_caraml_formula'] or 0:.1f} TFLOP/s (CARAML's formula)")
    return lines


def table(rows: list[dict]) -> list[str]:
    """The results table; a group's summary row is its line of figures."""
    lines = table_lines([], COLUMNS)
    for r in rows:
        if r["name"].endswith("/summary"):
            text = llm_groups.summary_text(r)
            lines += [text] if text else []
        else:
            lines += table_lines([r], COLUMNS, notes)[1:]
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    setup = setup_for(args)
    check_names(args.only, setup.skip)
    micro = given_micro(given(args), setup)
    if "caraml_2024_log" in args.only and setup.gbs % micro:
        refuse(f"--set micro_batch_size={micro} does not divide caraml_2024_log's global batch {setup.gbs} "
               "(LLM_BENCH_CARAML_GBS); give a divisor of it")
    missing = megatron_missing(setup) if {"megatron", "crosscheck"} & set(args.only) else None
    if missing:
        print(f"llm_bench: skipping the point megatron and crosscheck's megatron side: {missing}", file=sys.stderr)
    out = Path(args.out or os.environ.get("OUT") or "bench-out")
    out.mkdir(parents=True, exist_ok=True)
    end, rows = time.monotonic() + args.budget, []
    only = without_missing(args.only, rows)
    groups = llm_groups.GroupRunner(rows, out, setup, BenchPoints(setup, out), args.steps, args.warmup, end)

    def save():
        (out / "llm_bench.json").write_text(json.dumps(report(setup, rows), indent=1))

    for name in only:
        if end - time.monotonic() < 60:
            rows.append({"name": name, "status": "skipped (time budget)"})
        elif name in llm_groups.GROUPS:
            groups.start(name, save)
        else:
            rows.append(single_point(name, setup, args, out, end, missing))
        save()
    groups.run_late(save)
    print("\n".join(table(rows)))
    print(f"llm_bench: wrote {out / 'llm_bench.json'}", file=sys.stderr)
    unmatched = llm_groups.unmatched_skips(setup.skip, rows)
    if unmatched:
        print(unmatched, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
