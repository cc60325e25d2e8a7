"""The LLM comparison's groups of points (bench/llm_bench.py), as data, and their run under a time budget.

Each group's points run most important first; a group's late points run after every group's others; a point
starts only while the budget has the seconds it takes (NEED_S), else it is recorded as skipped (time budget), in
its row and in the group's summary. A point of the same settings is measured once per run (`reused_from`). Each
point's tokens/s is a ratio to its group's base at its micro-batch; a summary row per group gives its figures.

    fp8_800m          micro-batch 16: bf16 | precision=fp8 (torchao, tensorwise) | the plain loop with torchao's
                      float8 | fp8 at micro-batch 32 | late: bf16 at 32; each precision's best micro-batch
    fp8_800m_recipes  micro-batch 16: bf16 | tensorwise | tensorwise with fp8_fast_accum=true | rowwise |
                      rowwise_with_gw_hp
    fp8_wide          the 13B's width on one GPU (8 layers, 5120 wide, ffn 20480, 32 heads), micro-batch 4: bf16 | fp8
    fp8_loss          200 iterations of OSCAR-shaped data, micro-batch 4: bf16 | fp8 | bf16 with each batch in two
                      micro-batches (the noise: rounding alone); each point's mean loss over its last iterations
    levers            micro-batch 16, bf16: plain | fused_loss=chunked | fused_loss=liger | fused_norm_residual |
                      gelu_epilogue (by expected gain) | compile_mode=max-autotune-no-cudagraphs |
                      compile_tuning=coordinate-descent (the last two late: minutes of compiling)

The points themselves are the caller's (`points`: caraml_point, plain_fp8_point, data_prefix, liger_problem), so
that the scheduling and the arithmetic here run without a GPU.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from caraml.compare.llm_setup import BIG_MICRO, LLMSetup

WIDE = {"model_size": "custom", "num_layers": 8, "hidden_size": 5120, "num_attention_heads": 32,
        "ffn_hidden_size": 20480}  # the 13B's width on one GPU
WIDE_MICRO = 4
SELF_CHECK_WIDE = {"model_size": "custom", "num_layers": 2, "hidden_size": 128, "num_attention_heads": 4,
                   "ffn_hidden_size": 512}
# fp8_loss: CARAML's peak learning rate (1e-4; LLMSetup.loss_lr), reached by a linear warm-up over 16 iterations
# instead of CARAML's 216,320 samples (the lr would stay below 4e-7 for all 200) and flat after it.
LOSS = {"steps": 200, "micro": 4, "lr_warmup_samples": "64"}
# by expected gain, so that a budget cut loses the least promising; liger only where it imports; the compile
# levers last (late: after every group's other points), their compiles take minutes: inductor's matrix-product
# autotuning (unmeasured), then its coordinate-descent tuning (1.002 x on an H100, 2026-12-07; after the autotuning
# its compile finds the tuning of the kernels both share in inductor's caches)
AUTOTUNED = "compile_mode=max-autotune-no-cudagraphs"
TUNED = "compile_tuning=coordinate-descent"
COMPILING = {AUTOTUNED: "autotuned", TUNED: "tuned"}  # each compile lever's key in NEED_S
LEVERS = ("fused_loss=chunked", "fused_loss=liger", "fused_norm_residual=true", "gelu_epilogue=true", AUTOTUNED,
          TUNED)
FP8_POINTS = ("fp8_800m", "fp8_800m_recipes", "fp8_wide", "fp8_loss")
GROUPS = FP8_POINTS + ("levers",)
# Seconds a point takes on the H200 (process start, compilation, warm-up, 20 measured steps; the first H200 runs'
# walls at micro-batch 16: bf16 50, fp8 84): a point starts only while this much of the budget is left.
NEED_S = {"bf16": 55.0, "fp8": 90.0, "per_doubling": 10.0, "per_extra_step": 0.2,
          "tuned": 200.0,  # compile_tuning=coordinate-descent: the 800M's point took 201 s against 76 (H100)
          # max-autotune-no-cudagraphs: the 800M's first step was still compiling 387 s into it (H100, when the
          # call's time limit ended it): at least that, more than a ten-minute budget leaves beside the baseline
          "autotuned": 420.0}


@dataclasses.dataclass(frozen=True)
class Job:
    """One point of a group: caraml run with `settings` over the run's base, or the plain loop (`plain`)."""

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

    def need_s(self, steps: int, device: str = "cuda") -> float:
        if device != "cuda":
            return 60.0
        doublings = max(0, self.micro.bit_length() - BIG_MICRO.bit_length())
        return (NEED_S["fp8" if self.fp8 else "bf16"] + NEED_S["per_doubling"] * doublings
                + NEED_S["per_extra_step"] * max(0, (self.steps or steps) - 20)
                + sum(NEED_S[key] for lever, key in COMPILING.items() if lever in self.settings))


def group_jobs(name: str, setup: LLMSetup, points, out: Path) -> list[Job]:
    """The points of group `name`, most important first (setup.fp8_set added to their caraml fp8 points)."""
    jobs = _JOBS[name](name, setup, points, out)
    return [dataclasses.replace(j, settings=(*j.settings, *setup.fp8_set)) if j.fp8 and not j.plain else j
            for j in jobs]


NONE = ("recompute=none",)


def _fp8_800m(name, setup, points, out):  # each precision at two micro-batches: fp8's best may be larger
    small, large = (setup.micro, setup.max_micro) if setup.self_check else (BIG_MICRO, 2 * BIG_MICRO)
    return [Job(name, f"bf16@{small}", NONE, small, False, base=True),
            Job(name, f"fp8@{small}", (*NONE, "precision=fp8"), small, True),
            Job(name, f"plain_fp8@{small}", (), small, True, plain=True),
            Job(name, f"fp8@{large}", (*NONE, "precision=fp8"), large, True),
            Job(name, f"bf16@{large}", NONE, large, False, base=True, late=True)]  # micro 32 was no faster


def _fp8_800m_recipes(name, setup, points, out):
    fp8, big = (*NONE, "precision=fp8"), setup.big_micro
    return [Job(name, "bf16", NONE, big, False, base=True), Job(name, "tensorwise", fp8, big, True),
            Job(name, "tensorwise_fast_accum", (*fp8, "fp8_fast_accum=true"), big, True),
            Job(name, "rowwise", (*fp8, "fp8_recipe=rowwise"), big, True),
            Job(name, "rowwise_with_gw_hp", (*fp8, "fp8_recipe=rowwise_with_gw_hp"), big, True)]


def _fp8_wide(name, setup, points, out):
    shape = (*NONE, *(f"{k}={v}" for k, v in (SELF_CHECK_WIDE if setup.self_check else WIDE).items()))
    micro = min(WIDE_MICRO, setup.max_micro)
    return [Job(name, "bf16", shape, micro, False, base=True), Job(name, "fp8", (*shape, "precision=fp8"), micro, True)]


def _fp8_loss(name, setup, points, out):
    settings = (*NONE, "data=oscar", f"data_path={points.data_prefix(out, setup.vocab)}", f"lr={setup.loss_lr}",
                f"lr_warmup_samples={LOSS['lr_warmup_samples']}")
    micro, steps = min(LOSS["micro"], setup.max_micro), None if setup.self_check else LOSS["steps"]
    return [Job(name, "bf16", settings, micro, False, base=True, steps=steps, warmup=2),
            Job(name, "fp8", (*settings, "precision=fp8"), micro, True, steps=steps, warmup=2),
            # the noise: bf16 again, each batch in two micro-batches (the same sum rounded otherwise)
            Job(name, "bf16_control", (*settings, "grad_accumulation=2"), max(1, micro // 2), False, steps=steps,
                warmup=2)]


def _levers(name, setup, points, out):
    levers = [lever for lever in LEVERS if lever != "fused_loss=liger" or not points.liger_problem()]
    return [Job(name, "plain", NONE, setup.big_micro, False, base=True),
            *(Job(name, lever.split("=")[0] if lever != "fused_loss=liger" else "liger", (*NONE, lever),
                  setup.big_micro, False, late=lever in COMPILING) for lever in levers)]


_JOBS = {"fp8_800m": _fp8_800m, "fp8_800m_recipes": _fp8_800m_recipes, "fp8_wide": _fp8_wide,
         "fp8_loss": _fp8_loss, "levers": _levers}


def run_job(job: Job, setup: LLMSetup, points, steps: int, warmup: int, left: float, done: dict) -> dict:
    """One point with `left` seconds of the budget; a point of the same settings measured earlier in this run is
    reused (named in `reused_from`)."""
    steps, warmup = job.steps or steps, job.warmup or warmup
    if job.name in setup.skip:
        return {"name": job.name, "status": "skipped (--skip)", "micro_batch_size": job.micro}
    key = (job.plain, job.fp8, job.settings, job.micro, steps, warmup)
    if key in done:
        return {**done[key], "name": job.name, "reused_from": done[key]["name"]}
    need = job.need_s(steps, setup.device)
    if left < need:
        return {"name": job.name, "status": "skipped (time budget)", "micro_batch_size": job.micro,
                "left_s": left, "need_s": need}
    if job.plain:
        row = points.plain_fp8_point(job.name, job.micro, steps, warmup)
    else:
        row = points.caraml_point(job.name, list(job.settings), steps, warmup, left, micro=job.micro)
    row.update(micro_batch_size=job.micro, precision="fp8" if job.fp8 else "bf16")
    done[key] = row
    return row


def _best_of_each_precision(measured: list, summary: dict) -> None:
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


def _loss_tails(entries: list, summary: dict) -> None:
    """Each point's mean loss over its last iterations against bf16's."""
    tails = {job.label: ((row.get("loss") or {}).get("tail_mean"), row) for job, row in entries}
    base = tails.get("bf16", (None,))[0]
    if not isinstance(base, float):
        return
    summary["loss_tail_mean"] = {k: v for k, (v, _) in tails.items() if isinstance(v, float)}
    summary["loss_tail_steps"] = (tails["bf16"][1].get("loss") or {}).get("tail_steps")
    for label, key in (("fp8", "loss_vs_bf16"), ("bf16_control", "control_vs_bf16")):
        value, row = tails.get(label, (None, None))
        if isinstance(value, float):  # fp8's goal: within +-1 %; the control's: the noise beside it
            summary[key] = row["loss_vs_bf16"] = value / base - 1


def summarize(group: str, entries: list[tuple[Job, dict]], summary: dict) -> None:
    """Each point's tokens/s as a ratio to the base at its micro-batch; the group's figures into `summary`."""
    bases = {job.micro: row["tokens_per_s"] for job, row in entries if job.base and row.get("tokens_per_s")}
    for job, row in entries:
        if not job.base and not job.plain and row.get("tokens_per_s") and job.micro in bases:  # caraml vs caraml
            row["ratio"] = row["tokens_per_s"] / bases[job.micro]
    measured = [(job, row) for job, row in entries if row.get("tokens_per_s")]
    if group == "fp8_800m":
        _best_of_each_precision(measured, summary)
    if group == "fp8_800m_recipes":
        by = {job.label: row["tokens_per_s"] for job, row in measured}
        if "tensorwise" in by and "tensorwise_fast_accum" in by:
            summary["fast_accum_vs_tensorwise"] = by["tensorwise_fast_accum"] / by["tensorwise"]
    if group == "fp8_loss":
        _loss_tails(entries, summary)
    summary["skipped"] = [f"{row['name']} {row['status'][len('skipped '):]}" for _, row in entries
                          if row["status"].startswith("skipped")]  # each with its reason: (time budget), (--skip)


class GroupRunner:
    """Runs the groups' points into `rows`: each group's points in order, then its summary row; the late points of
    every group after all other points, each before its group's summary. `end` is the budget's end on `clock`."""

    def __init__(self, rows: list, out: Path, setup: LLMSetup, points, steps: int, warmup: int, end: float,
                 clock=time.monotonic):
        self.rows, self.out, self.setup, self.points = rows, out, setup, points
        self.steps, self.warmup, self.end, self.clock = steps, warmup, end, clock
        self.entries: dict[str, list[tuple[Job, dict]]] = {}  # each group's points as run
        self.summaries: dict[str, dict] = {}
        self.late: list[Job] = []
        self.done: dict = {}  # points measured in this run by their settings, reused where a group repeats one

    def start(self, name: str, save) -> None:
        self.entries[name], self.summaries[name] = [], {"name": f"{name}/summary", "status": "ok"}
        for job in group_jobs(name, self.setup, self.points, self.out):
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
        left = self.end - self.clock()
        row = run_job(job, self.setup, self.points, self.steps, self.warmup, left, self.done)
        if before is None:
            self.rows.append(row)
        else:
            self.rows.insert(next(i for i, r in enumerate(self.rows) if r is before), row)
        self.entries[job.group].append((job, row))
        summarize(job.group, self.entries[job.group], self.summaries[job.group])


def summary_text(s: dict) -> str:
    """The group's figures in one line ('' when it has none)."""
    parts = [f"best {precision} {b['tokens_per_s']:.0f} tokens/s at micro-batch {b['micro_batch_size']}"
             for precision, b in (s.get("best") or {}).items()]
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


def unmatched_skips(skip: frozenset, rows: list[dict]) -> str | None:
    """A --skip name that matched no point of its group (misspelt: that point ran), as one line; None if none."""
    unmatched = sorted(skip - {r["name"] for r in rows})
    return (f"llm_bench: --skip {', '.join(unmatched)} matched no point of its group; the points are the rows above"
            if unmatched else None)
