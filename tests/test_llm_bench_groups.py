"""bench/llm_bench.py's issue-23 groups: the order their points run in, what a time budget cuts (the late points,
recorded as skipped), the reuse of a point measured twice, and the summaries (each precision's best micro-batch,
caraml fp8 / plain fp8, fp8_fast_accum against tensorwise, the loss). The points themselves are replaced by
rows of known tokens/s taking known seconds on a clock of the test's own: what is checked is the scheduling and
the arithmetic, not a measurement (the script's own CPU check is `--self-check`)."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
from conftest import bench_script

bench = bench_script("llm_bench")

# tokens/s and seconds of each point by (precision, micro-batch), as on the H200 (fp8 compiles longer)
TOKENS = {("bf16", 16): 91_000.0, ("fp8", 16): 103_000.0, ("fp8", 32): 110_000.0, ("bf16", 32): 90_000.0,
          ("bf16", 4): 40_000.0, ("fp8", 4): 52_000.0, ("bf16", 2): 36_000.0}
SECONDS = {"bf16": 50.0, "fp8": 85.0, "plain": 70.0}


@pytest.fixture
def gpu(monkeypatch):
    """The bench as on the H200, its points fake: each advances the clock and returns its row; `calls` lists them."""
    clock, calls = [0.0], []
    monkeypatch.setattr(bench, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setitem(bench.RUN, "device", "cuda")
    monkeypatch.setitem(bench.RUN, "max_micro", 1 << 20)

    def caraml_point(name, extra, out, steps, warmup, timeout, micro=None, base=None):
        precision = "fp8" if "precision=fp8" in extra else "bf16"
        calls.append(name)
        clock[0] += SECONDS[precision]
        fast = 1.04 if "fp8_fast_accum=true" in extra else 1.0
        tail = {"bf16": 5.00, "fp8": 5.02}[precision] + (0.03 if "grad_accumulation=2" in extra else 0)
        return {"name": name, "status": "ok", "tokens_per_s": TOKENS[precision, micro] * fast,
                "loss": {"last": tail + 0.3, "tail_mean": tail, "tail_steps": 20}}

    def plain_fp8_point(name, micro, steps, warmup):
        calls.append(name)
        clock[0] += SECONDS["plain"]
        return {"name": name, "status": "ok", "tokens_per_s": 104_000.0}

    monkeypatch.setattr(bench, "caraml_point", caraml_point)
    monkeypatch.setattr(bench, "plain_fp8_point", plain_fp8_point)
    return SimpleNamespace(clock=clock, calls=calls)


def _run(tmp_path, names, budget):
    rows = []
    runner = bench.GroupRunner(rows, tmp_path, 20, 6, budget)
    for name in names:
        runner.start(name, lambda: None)
    runner.run_late(lambda: None)
    return {r["name"]: r for r in rows}, [r["name"] for r in rows]


def test_fp8_800m_measures_each_precision_at_16_and_32_bf16_at_32_last(tmp_path, gpu, monkeypatch):
    jobs = bench.group_jobs("fp8_800m", tmp_path, self_check=False)
    assert [(j.label, j.late) for j in jobs] == [("bf16@16", False), ("fp8@16", False), ("plain_fp8@16", False),
                                                 ("fp8@32", False), ("bf16@32", True)]
    assert jobs[2].plain and jobs[2].fp8 and "precision=fp8" in jobs[3].settings
    recipes = {j.label: j.settings for j in bench.group_jobs("fp8_800m_recipes", tmp_path, self_check=False)}
    assert "fp8_fast_accum=true" in recipes["tensorwise_fast_accum"]
    assert not any(s.startswith("fp8_fast_accum") for s in recipes["tensorwise"])
    monkeypatch.setattr(bench, "FP8_SET", ("fp8_fast_accum=true",))  # LLM_BENCH_FP8_SET: the fp8 caraml points only
    jobs = bench.group_jobs("fp8_800m", tmp_path, self_check=False)
    assert [j.label for j in jobs if "fp8_fast_accum=true" in j.settings] == ["fp8@16", "fp8@32"]


def test_a_budget_cut_loses_the_late_point_only_and_records_it(tmp_path, gpu):
    """480 s: bf16@16 50, fp8@16 85, plain 70, fp8@32 85, wide 50 + 85 = 425 s; bf16@32 needs 65, 55 left."""
    by, order = _run(tmp_path, ["fp8_800m", "fp8_wide"], 480.0)
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
    assert "best fp8 / best bf16 1.209" in bench.summary_text(summary)


def test_with_time_left_the_late_point_runs_and_gives_the_ratio_at_32(tmp_path, gpu):
    by, _ = _run(tmp_path, ["fp8_800m", "fp8_wide"], 600.0)
    assert gpu.calls[-1] == "fp8_800m/bf16@32" and by["fp8_800m/summary"]["skipped"] == []
    assert by["fp8_800m/fp8@32"]["ratio"] == pytest.approx(110 / 90)
    assert by["fp8_800m/summary"]["best"]["bf16"]["micro_batch_size"] == 16  # 91k at 16 beats 90k at 32


def test_a_point_measured_twice_in_a_run_is_reused(tmp_path, gpu, monkeypatch):
    monkeypatch.setattr(bench, "liger_problem", lambda: "absent")
    by, _ = _run(tmp_path, ["fp8_800m", "levers"], 3600.0)
    assert gpu.calls.count("fp8_800m/bf16@16") == 1 and "levers/plain" not in gpu.calls
    assert by["levers/plain"]["reused_from"] == "fp8_800m/bf16@16"
    assert [n for n in gpu.calls if n.startswith("levers/")] == ["levers/fused_loss", "levers/fused_norm_residual",
                                                                 "levers/gelu_epilogue"]


def test_the_loss_and_fast_accumulation_summaries(tmp_path, gpu, monkeypatch):
    monkeypatch.setattr(bench, "oscar_shaped", lambda out, vocab: str(out / "oscar_shaped"))
    by, _ = _run(tmp_path, ["fp8_loss", "fp8_800m_recipes"], 3600.0)
    summary = by["fp8_loss/summary"]  # the tail means compared, not the last iteration's loss
    assert summary["loss_vs_bf16"] == by["fp8_loss/fp8"]["loss_vs_bf16"] == pytest.approx(0.004)
    assert summary["control_vs_bf16"] == by["fp8_loss/bf16_control"]["loss_vs_bf16"] == pytest.approx(0.006)
    assert summary["loss_tail_mean"] == {"bf16": 5.0, "fp8": 5.02, "bf16_control": pytest.approx(5.03)}
    text = bench.summary_text(summary)
    assert "last 20 iterations fp8 vs bf16 +0.40%" in text and "two micro-batches vs bf16 +0.60% (the noise" in text
    assert bench.group_jobs("fp8_loss", tmp_path, self_check=False)[0].steps == 200
    assert by["fp8_800m_recipes/summary"]["fast_accum_vs_tensorwise"] == pytest.approx(1.04)


def test_the_loss_group_runs_a_bf16_control_in_two_micro_batches_within_its_budget(tmp_path, monkeypatch):
    """bf16, fp8 (LLM_BENCH_FP8_SET reaches it alone), then bf16 with each batch in two micro-batches (the same
    samples, seed and global batch): the same settings otherwise, lr and warm-up as the group states them; the
    three within 5.5 minutes of the H200 by NEED_S."""
    monkeypatch.setattr(bench, "oscar_shaped", lambda out, vocab: str(out / "oscar_shaped"))
    monkeypatch.setattr(bench, "FP8_SET", ("fp8_fast_accum=true",))
    monkeypatch.setitem(bench.RUN, "device", "cuda")
    jobs = bench.group_jobs("fp8_loss", tmp_path, self_check=False)
    assert [(j.label, j.fp8, j.base) for j in jobs] == [("bf16", False, True), ("fp8", True, False),
                                                        ("bf16_control", False, False)]
    bf16, fp8, control = (set(j.settings) for j in jobs)
    assert fp8 - bf16 == {"precision=fp8", "fp8_fast_accum=true"} and control - bf16 == {"grad_accumulation=2"}
    assert (jobs[0].micro, jobs[2].micro) == (4, 2)  # the same global batch of 4
    assert {f"lr={bench.LOSS['lr']}", f"lr_warmup_samples={bench.LOSS['lr_warmup_samples']}"} <= bf16
    assert sum(j.need_s(20) for j in jobs) <= 330


def test_the_plain_loop_with_torchao_float8_trains_the_same_model_on_the_cpu(monkeypatch):
    """The plain fp8 point's loop on the smoke model (float8 products have a CPU kernel): the first loss within
    2 % of the bf16 loop's from the same weights and tokens, and not equal to it."""
    pytest.importorskip("torchao.float8")
    import torch

    monkeypatch.setattr(bench, "MODEL", {**bench.MODEL, **bench.SELF_CHECK["model"]})
    monkeypatch.setattr(bench, "VOCAB", bench.SELF_CHECK["vocab"])
    monkeypatch.setitem(bench.RUN, "device", "cpu")
    monkeypatch.setitem(bench.RUN, "compile", False)
    losses = {}
    for recipe in (None, "tensorwise"):
        torch.manual_seed(0)  # the same tokens
        losses[recipe] = bench.plain_loop(2, 1, 1, recipe)["loss_first"]
    assert abs(losses["tensorwise"] / losses[None] - 1) < 0.02
    assert losses["tensorwise"] != losses[None]  # float8 rounding: the products did change


def test_a_point_named_in_skip_is_not_run_and_says_why(tmp_path, gpu, monkeypatch):
    monkeypatch.setattr(bench, "SKIP", {"fp8_800m/plain_fp8@16"})
    by, _ = _run(tmp_path, ["fp8_800m"], 3600.0)
    assert "fp8_800m/plain_fp8@16" not in gpu.calls and len(gpu.calls) == 4
    assert by["fp8_800m/plain_fp8@16"]["status"] == "skipped (--skip)"
    summary = by["fp8_800m/summary"]
    assert summary["skipped"] == ["fp8_800m/plain_fp8@16 (--skip)"] and "caraml_over_plain_fp8" not in summary
    assert "skipped: fp8_800m/plain_fp8@16 (--skip)" in bench.summary_text(summary)


@pytest.mark.parametrize("skip", ["fp8_wide", "fp8_800m/bf16@16", "fp8_loss/"])
def test_a_skip_outside_the_groups_asked_for_is_refused_in_one_line(skip, monkeypatch, capsys):
    """A --skip name that is not GROUP/POINT of a group in --only would skip nothing: refused before any point runs."""
    for name in ("SKIP", "MODEL", "RUN", "MICRO", "VOCAB"):  # main's --self-check sets these: restored after
        value = getattr(bench, name)
        monkeypatch.setattr(bench, name, value.copy() if isinstance(value, (set, dict)) else value)
    monkeypatch.setattr(sys, "argv", ["llm_bench.py", "--only", "fp8_wide,fp8_loss", "--skip", skip, "--self-check"])
    with pytest.raises(SystemExit) as stop:
        bench.main()
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2
    assert err[-1] == (f"llm_bench: --skip {skip}: name points as GROUP/POINT of a group in --only "
                       "(fp8_wide, fp8_loss), e.g. fp8_800m/plain_fp8@16")


def test_a_skip_name_that_matched_no_point_of_its_group_is_reported(tmp_path, monkeypatch, capsys):
    """levers/plain is a point of levers, levers/plian is not: only the misspelt one is reported after the table.
    The points are not run (run_job replaced by a row saying so)."""
    for name in ("SKIP", "MODEL", "RUN", "MICRO", "VOCAB"):  # main's --self-check sets these: restored after
        value = getattr(bench, name)
        monkeypatch.setattr(bench, name, value.copy() if isinstance(value, (set, dict)) else value)
    ran = []

    def run_job(job, *args):
        ran.append(job.name)
        return {"name": job.name, "status": "skipped (--skip)"}

    monkeypatch.setattr(bench, "run_job", run_job)
    monkeypatch.setattr(sys, "argv", ["llm_bench.py", "--only", "levers", "--skip", "levers/plain,levers/plian",
                                      "--self-check", "--out", str(tmp_path)])
    bench.main()
    assert "levers/plain" in ran
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "llm_bench: --skip levers/plian matched no point of its group; the points are the rows above"
