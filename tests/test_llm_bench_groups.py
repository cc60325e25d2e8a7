"""bench/llm_bench.py's groups (caraml.compare.llm_groups): the order their points run in, what a time budget
cuts (the late points, recorded as skipped), the reuse of a point measured twice, and the summaries (each
precision's best micro-batch, caraml fp8 / plain fp8, fp8_fast_accum against tensorwise, the loss). The points
themselves are replaced by rows of known tokens/s taking known seconds on a clock of the test's own: what is
checked is the scheduling and the arithmetic, not a measurement (the script's own CPU check is `--self-check`)."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest
from conftest import ROOT, run

from caraml.compare import llm_groups
from caraml.compare.llm_plain import CARAML_2024, Schedule, plain_loop, plain_step
from caraml.compare.llm_setup import LLMSetup, on_cpu

# tokens/s and seconds of each point by (precision, micro-batch), as on the H200 (fp8 compiles longer)
TOKENS = {("bf16", 16): 91_000.0, ("fp8", 16): 103_000.0, ("fp8", 32): 110_000.0, ("bf16", 32): 90_000.0,
          ("bf16", 4): 40_000.0, ("fp8", 4): 52_000.0, ("bf16", 2): 36_000.0}
SECONDS = {"bf16": 50.0, "fp8": 85.0, "plain": 70.0}
GPU = LLMSetup()  # the H200 run's settings, no environment knobs


class FakePoints:
    """The points as rows of known tokens/s, each advancing the test's clock by its known seconds; `calls` lists
    them."""

    def __init__(self, liger: str | None = None):
        self.clock, self.calls, self.liger = [0.0], [], liger

    def caraml_point(self, name, extra, steps, warmup, timeout, micro=None):
        precision = "fp8" if "precision=fp8" in extra else "bf16"
        self.calls.append(name)
        self.clock[0] += SECONDS[precision]
        fast = 1.04 if "fp8_fast_accum=true" in extra else 1.0
        tail = {"bf16": 5.00, "fp8": 5.02}[precision] + (0.03 if "grad_accumulation=2" in extra else 0)
        return {"name": name, "status": "ok", "tokens_per_s": TOKENS[precision, micro] * fast,
                "loss": {"last": tail + 0.3, "tail_mean": tail, "tail_steps": 20}}

    def plain_fp8_point(self, name, micro, steps, warmup):
        self.calls.append(name)
        self.clock[0] += SECONDS["plain"]
        return {"name": name, "status": "ok", "tokens_per_s": 104_000.0}

    def data_prefix(self, out, vocab):
        return str(out / "oscar_shaped")

    def liger_problem(self):
        return self.liger


@pytest.fixture
def gpu():
    return FakePoints()


def _jobs(name, tmp_path, setup=GPU):
    return llm_groups.group_jobs(name, setup, FakePoints(), tmp_path)


def _run(tmp_path, names, budget, points, setup=GPU):
    rows = []
    runner = llm_groups.GroupRunner(rows, tmp_path, setup, points, 20, 6, budget, clock=lambda: points.clock[0])
    for name in names:
        runner.start(name, lambda: None)
    runner.run_late(lambda: None)
    return {r["name"]: r for r in rows}, [r["name"] for r in rows]


def test_fp8_800m_measures_each_precision_at_16_and_32_bf16_at_32_last(tmp_path):
    jobs = _jobs("fp8_800m", tmp_path)
    assert [(j.label, j.late) for j in jobs] == [("bf16@16", False), ("fp8@16", False), ("plain_fp8@16", False),
                                                 ("fp8@32", False), ("bf16@32", True)]
    assert jobs[2].plain and jobs[2].fp8 and "precision=fp8" in jobs[3].settings
    recipes = {j.label: j.settings for j in _jobs("fp8_800m_recipes", tmp_path)}
    assert "fp8_fast_accum=true" in recipes["tensorwise_fast_accum"]
    assert not any(s.startswith("fp8_fast_accum") for s in recipes["tensorwise"])
    fast = replace(GPU, fp8_set=("fp8_fast_accum=true",))  # LLM_BENCH_FP8_SET: the fp8 caraml points only
    jobs = _jobs("fp8_800m", tmp_path, fast)
    assert [j.label for j in jobs if "fp8_fast_accum=true" in j.settings] == ["fp8@16", "fp8@32"]


def test_a_budget_cut_loses_the_late_point_only_and_records_it(tmp_path, gpu):
    """480 s: bf16@16 50, fp8@16 85, plain 70, fp8@32 85, wide 50 + 85 = 425 s; bf16@32 needs 65, 55 left."""
    by, order = _run(tmp_path, ["fp8_800m", "fp8_wide"], 480.0, gpu)
    assert gpu.calls == ["fp8_800m/bf16@16", "fp8_800m/fp8@16", "fp8_800m/plain_fp8@16", "fp8_800m/fp8@32",
                         "fp8_wide/bf16", "fp8_wide/fp8"]
    assert order.index("fp8_800m/bf16@32") == order.index("fp8_800m/summary") - 1  # inside its group
    skipped = by["fp8_800m/bf16@32"]
    assert skipped["status"] == "skipped (time budget)" and skipped["need_s"] == 65.0
    summary = by["fp8_800m/summary"]
    assert summary["skipped"] == ["fp8_800m/bf16@32 (time budget)"] and by["fp8_wide/summary"]["skipped"] == []
    assert summary["best"] == {"bf16": {"tokens_per_s": 91_000.0, "micro_batch_size": 16},
                               "fp8": {"tokens_per_s": 110_000.0, "micro_batch_size": 32}}
    assert summary["best_ratio"] == pytest.approx(110 / 91)
    assert summary["caraml_over_plain_fp8"] == {"micro_batch_size": 16, "ratio": pytest.approx(103 / 104)}
    assert by["fp8_800m/fp8@16"]["ratio"] == pytest.approx(103 / 91)
    assert "ratio" not in by["fp8_800m/plain_fp8@16"]  # the plain loop is compared with caraml fp8, in the summary
    assert "ratio" not in by["fp8_800m/fp8@32"]  # no bf16 at 32 measured: no ratio against another micro-batch
    assert by["fp8_wide/fp8"]["ratio"] == pytest.approx(52 / 40)
    assert "best fp8 / best bf16 1.209" in llm_groups.summary_text(summary)


def test_with_time_left_the_late_point_runs_and_gives_the_ratio_at_32(tmp_path, gpu):
    by, _ = _run(tmp_path, ["fp8_800m", "fp8_wide"], 600.0, gpu)
    assert gpu.calls[-1] == "fp8_800m/bf16@32" and by["fp8_800m/summary"]["skipped"] == []
    assert by["fp8_800m/fp8@32"]["ratio"] == pytest.approx(110 / 90)
    assert by["fp8_800m/summary"]["best"]["bf16"]["micro_batch_size"] == 16  # 91k at 16 beats 90k at 32


def test_a_point_measured_twice_in_a_run_is_reused(tmp_path):
    gpu = FakePoints(liger="absent")
    by, _ = _run(tmp_path, ["fp8_800m", "levers"], 3600.0, gpu)
    assert gpu.calls.count("fp8_800m/bf16@16") == 1 and "levers/plain" not in gpu.calls
    assert by["levers/plain"]["reused_from"] == "fp8_800m/bf16@16"
    assert [n for n in gpu.calls if n.startswith("levers/")] == ["levers/fused_loss", "levers/fused_norm_residual",
                                                                 "levers/gelu_epilogue", "levers/compile_mode",
                                                                 "levers/compile_tuning"]


def test_the_loss_and_fast_accumulation_summaries(tmp_path, gpu):
    by, _ = _run(tmp_path, ["fp8_loss", "fp8_800m_recipes"], 3600.0, gpu)
    summary = by["fp8_loss/summary"]  # the tail means compared, not the last iteration's loss
    assert summary["loss_vs_bf16"] == by["fp8_loss/fp8"]["loss_vs_bf16"] == pytest.approx(0.004)
    assert summary["control_vs_bf16"] == by["fp8_loss/bf16_control"]["loss_vs_bf16"] == pytest.approx(0.006)
    assert summary["loss_tail_mean"] == {"bf16": 5.0, "fp8": 5.02, "bf16_control": pytest.approx(5.03)}
    text = llm_groups.summary_text(summary)
    assert "last 20 iterations fp8 vs bf16 +0.40%" in text and "two micro-batches vs bf16 +0.60% (the noise" in text
    assert _jobs("fp8_loss", tmp_path)[0].steps == 200
    assert by["fp8_800m_recipes/summary"]["fast_accum_vs_tensorwise"] == pytest.approx(1.04)


def test_the_loss_group_runs_a_bf16_control_in_two_micro_batches_within_its_budget(tmp_path):
    """bf16, fp8 (LLM_BENCH_FP8_SET reaches it alone), then bf16 with each batch in two micro-batches (the same
    samples, seed and global batch): the same settings otherwise, lr and warm-up as the group states them; the
    three within 5.5 minutes of the H200 by NEED_S."""
    setup = replace(GPU, fp8_set=("fp8_fast_accum=true",))
    jobs = _jobs("fp8_loss", tmp_path, setup)
    assert [(j.label, j.fp8, j.base) for j in jobs] == [("bf16", False, True), ("fp8", True, False),
                                                        ("bf16_control", False, False)]
    bf16, fp8, control = (set(j.settings) for j in jobs)
    assert fp8 - bf16 == {"precision=fp8", "fp8_fast_accum=true"} and control - bf16 == {"grad_accumulation=2"}
    assert (jobs[0].micro, jobs[2].micro) == (4, 2)  # the same global batch of 4
    assert {f"lr={setup.loss_lr}", f"lr_warmup_samples={llm_groups.LOSS['lr_warmup_samples']}"} <= bf16
    assert sum(j.need_s(20) for j in jobs) <= 330


def test_the_compile_levers_run_last_and_ask_for_their_compile_time(tmp_path):
    """compile_mode's autotuning and compile_tuning's tuning take minutes to compile: they run after every other
    point (late) and start only with their seconds left, so that they neither eat the others' budget nor die
    compiling."""
    jobs = {j.label: j for j in _jobs("levers", tmp_path)}
    chunked = jobs["fused_loss"]
    for label, setting, key in (("compile_tuning", "compile_tuning=coordinate-descent", "tuned"),
                                ("compile_mode", "compile_mode=max-autotune-no-cudagraphs", "autotuned")):
        job = jobs[label]
        assert job.late and not chunked.late and setting in job.settings
        assert job.need_s(20) == chunked.need_s(20) + llm_groups.NEED_S[key]


def test_the_plain_loop_with_torchao_float8_trains_the_same_model_on_the_cpu():
    """The plain fp8 point's loop on the smoke model (float8 products have a CPU kernel): the first loss within
    2 % of the bf16 loop's from the same weights and tokens, and not equal to it."""
    pytest.importorskip("torchao.float8")
    import torch

    setup = on_cpu(GPU)
    losses = {}
    for recipe in (None, "tensorwise"):
        torch.manual_seed(0)  # the same tokens
        losses[recipe] = plain_loop(setup, 2, 1, 1, Schedule(3e-4, 64), recipe)["loss_first"]
    assert abs(losses["tensorwise"] / losses[None] - 1) < 0.02
    assert losses["tensorwise"] != losses[None]  # float8 rounding: the products did change


def test_the_plain_loop_of_caraml_2024_sums_its_micro_batches_and_its_scaled_fp16_steps_train():
    """plain_2024's loop on the smoke model: an iteration of two micro-batches has the mean loss of the two
    (learning rate 0: the weights stay), and the fp16 recipe with its loss scale changes the weights when it may."""
    setup = on_cpu(GPU)
    recipe = replace(CARAML_2024, dropout=0.0)
    single = plain_step(setup, 2, Schedule(0.0, 64), recipe=recipe)  # the loop seeds its weights and two batches
    singles = [float(single(i)) for i in range(2)]
    summed = plain_step(setup, 2, Schedule(0.0, 64), recipe=replace(recipe, accumulation=2))
    assert float(summed(0)) == pytest.approx(sum(singles) / 2, rel=1e-5)
    learning = plain_step(setup, 2, Schedule(3e-2, 2), recipe=replace(recipe, accumulation=2))
    losses = [float(learning(i)) for i in range(4)]
    assert losses[3] < losses[0] - 0.01 and all(loss == loss for loss in losses)  # trained, and no NaN


def test_a_point_named_in_skip_is_not_run_and_says_why(tmp_path, gpu):
    skip = replace(GPU, skip=frozenset({"fp8_800m/plain_fp8@16"}))
    by, _ = _run(tmp_path, ["fp8_800m"], 3600.0, gpu, skip)
    assert "fp8_800m/plain_fp8@16" not in gpu.calls and len(gpu.calls) == 4
    assert by["fp8_800m/plain_fp8@16"]["status"] == "skipped (--skip)"
    summary = by["fp8_800m/summary"]
    assert summary["skipped"] == ["fp8_800m/plain_fp8@16 (--skip)"] and "caraml_over_plain_fp8" not in summary
    assert "skipped: fp8_800m/plain_fp8@16 (--skip)" in llm_groups.summary_text(summary)


def _llm_bench(*args):
    return run([sys.executable, ROOT / "bench" / "llm_bench.py", *args], timeout=120, cwd=ROOT)


@pytest.mark.subprocess
@pytest.mark.parametrize("skip", ["fp8_wide", "fp8_800m/bf16@16", "fp8_loss/"])
def test_a_skip_outside_the_groups_asked_for_is_refused_in_one_line(skip, tmp_path):
    """A --skip name that is not GROUP/POINT of a group in --only would skip nothing: refused before any point runs."""
    proc = _llm_bench("--only", "fp8_wide,fp8_loss", "--skip", skip, "--self-check", "--out", tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"llm_bench: --skip {skip}: name points as GROUP/POINT of a group in --only (fp8_wide, fp8_loss), "
        "e.g. fp8_800m/plain_fp8@16")
    assert not (tmp_path / "llm_bench.json").exists()


def test_a_skip_name_that_matched_no_point_of_its_group_is_reported(tmp_path):
    """levers/plain is a point of levers, levers/plian is not: only the misspelt one is reported after the table."""
    skip = frozenset({"levers/plain", "levers/plian"})
    by, _ = _run(tmp_path, ["levers"], 3600.0, FakePoints(liger="absent"), replace(GPU, skip=skip))
    assert by["levers/plain"]["status"] == "skipped (--skip)"
    assert llm_groups.unmatched_skips(skip, list(by.values())) == (
        "llm_bench: --skip levers/plian matched no point of its group; the points are the rows above")
