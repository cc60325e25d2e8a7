"""bench/ic_bench.py --group=resnet50-attempts (bench/ic_group.py, bench/ic_point.py; caraml.compare's
image_classification and kernel_profile): kernel categories, the time budget, the knobs, and one point end to end
on the CPU. The GPU figures themselves come from the lead's H200 run."""

from __future__ import annotations

import gzip
import json
import sys

import pytest
from conftest import ROOT, run

from caraml.compare import image_classification as ic
from caraml.compare import kernel_profile
from caraml.compare.points import Point, plan


@pytest.mark.parametrize("name, expected", [
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_execute_kernel__5x_cudnn",
     "conv forward"),
    ("sm90_xmma_dgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_kernel__5x_cudnn",
     "conv backward data"),
    ("sm90_xmma_wgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x64x64_kernel__5x_cudnn",
     "conv backward weight"),
    ("void cudnn::engines_precompiled::nhwcToNchwKernel<float, float, float, true, false>",
     "conv other (cuDNN helpers, layout)"),
    ("triton_poi_fused__native_batch_norm_legit_functional_convolution_relu_12", "triton pointwise (BN apply, "
     "ReLU, add, casts)"),
    ("triton_red_fused__native_batch_norm_legit_functional_convolution_3",
     "triton reduction (BN statistics and grads)"),
    ("triton_tem_fused_convolution_0", "triton template (autotuned conv/mm)"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", "matmul (fc, 1x1 conv as mm)"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedSgdMathFunctor<c10::BFloat16, 3>>",
     "optimizer"),
    ("Memcpy DtoD (Device -> Device)", "copy / fill"),
    ("aten::convolution_backward", "conv backward (CPU: one aten op)"),
    ("aten::_log_softmax_backward_data", "other"),
])
def test_kernel_names_fall_in_their_category(name, expected):
    assert kernel_profile.category(name) == expected


def test_breakdown_sums_categories_and_leaves_the_idle_rest():
    kernels = {"sm90_xmma_fprop_a": {"ms_per_step": 10.0, "calls_per_step": 3, "category": "conv forward"},
               "sm90_xmma_fprop_b": {"ms_per_step": 5.0, "calls_per_step": 2, "category": "conv forward"},
               "triton_poi_x": {"ms_per_step": 4.0, "calls_per_step": 9, "category": "triton pointwise"}}
    out = kernel_profile.breakdown(kernels, step_ms=20.0)
    assert out["kernel_busy_ms"] == 19.0 and out["idle_ms"] == pytest.approx(1.0)
    conv = out["categories"]["conv forward"]
    assert list(out["categories"])[0] == "conv forward" and conv["ms"] == 15.0 and conv["share_of_step"] == 0.75
    assert [k["name"] for k in conv["top_kernels"]] == ["sm90_xmma_fprop_a", "sm90_xmma_fprop_b"]
    assert kernel_profile.breakdown(kernels, step_ms=20.0, cpu=True)["idle_ms"] is None


def test_a_point_that_would_overrun_the_budget_is_skipped_not_started():
    point = Point("late", expect_s=70)
    assert plan(point, budget=230, elapsed=100) == (True, 130)
    go, why = plan(point, budget=230, elapsed=180)
    assert not go and why.startswith("skipped: needs ≈ 70 s, 50 s of the 230 s budget left")


def test_the_default_budget_runs_the_four_valued_points_and_skips_the_rest_by_their_estimates():
    """With every point taking its estimate, the plain command runs baseline, stem_pad, cudnn_all_algos and
    conv1x1_as_mm (≈ 300 s) and records the rest as skipped; batch512 (measured) runs only when named."""
    group = ic.ATTEMPTS
    elapsed, ran, skipped = 0.0, [], []
    for point in [p for p in group.points if p.by_default]:
        go, _ = plan(point, group.budget_s, elapsed)
        (ran if go else skipped).append(point.name)
        elapsed += point.expect_s if go else 0
    assert ran == ["baseline", "stem_pad", "cudnn_all_algos", "conv1x1_as_mm"]
    assert skipped == ["stem_pad4", "autotune_convs"] and "batch512" in group.names()
    assert {"step_scope", "coord_descent", "baseline_again"} <= set(group.names()) - set(ran + skipped)
    assert 280 <= elapsed <= 310 and group.budget_s - elapsed >= 20


def test_knobs_are_set_read_back_and_missing_ones_named():
    import torch
    import torch._inductor.config as inductor_config

    before = inductor_config.conv_1x1_as_mm, torch.backends.cudnn.benchmark_limit
    try:
        applied = kernel_profile.apply_knobs({"inductor": {"conv_1x1_as_mm": True, "triton.cudagraphs": False,
                                                     "no_such_option": 1}, "cudnn_benchmark_limit": 0})
        assert inductor_config.conv_1x1_as_mm is True and torch.backends.cudnn.benchmark_limit == 0
        assert applied["inductor"] == {"conv_1x1_as_mm": True, "triton.cudagraphs": False}
        assert applied["cudnn_benchmark_limit"] == 0
        assert applied["missing"] == ["torch._inductor.config.no_such_option"]
    finally:
        inductor_config.conv_1x1_as_mm, torch.backends.cudnn.benchmark_limit = before


def test_table_states_each_point_against_the_baseline_and_skips_in_words():
    profile = {"step_ms": 40.0, "kernel_busy_ms": 38.0, "idle_ms": 2.0,
               "categories": {"conv forward": {"ms": 10.0}, "conv backward data": {"ms": 10.0},
                              "triton pointwise": {"ms": 8.0}, "optimizer": {"ms": 2.0}}}
    rows = [{"name": "baseline", "status": "ok", "images_per_s": 6400.0, "profile": profile},
            {"name": "batch512", "status": "ok", "images_per_s": 6720.0, "profile": profile},
            {"name": "autotune_convs", "status": "skipped: needs ≈ 180 s, 20 s of the 230 s budget left"}]
    lines = ic.table(rows)
    assert rows[1]["ratio_to_baseline"] == pytest.approx(1.05)
    assert lines[2].split()[:4] == ["batch512", "ok", "6720", "1.050"]
    assert " 50.0 " in lines[1] and " 5.0 " in lines[1]  # conv share, idle share
    assert "skipped: needs ≈ 180 s" in lines[-1]
    rows[0].update(batch_size=256, step_ms=40.0)
    assert ic.to_mlperf(rows) == ["MLPerf's ≈ 7,950 images/s per H200 is 32.20 ms per step of 256: baseline "
                                        "takes 40.00 ms (+7.80)"]
    assert ic.to_mlperf(rows[2:]) == []


def _ic_bench(*args, timeout=300):
    return run([sys.executable, ROOT / "bench" / "ic_bench.py", *args], timeout=timeout, cwd=ROOT)


@pytest.mark.subprocess
def test_unknown_group_or_point_is_one_line_and_exit_2(tmp_path):
    for args, says in ((["--group=nope"], "unknown group nope; choose from: resnet50-attempts, issue23"),
                       (["--group=issue23", "--only=baseline,warp"],
                        "unknown point(s) warp in group resnet50-attempts"),
                       (["--only=plain_eager,warp"], "unknown point(s) warp in group resnet50-vs-plain")):
        proc = _ic_bench(tmp_path, *args)
        assert proc.returncode == 2 and says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.subprocess
def test_self_check_runs_a_knob_point_end_to_end_on_the_cpu(tmp_path):
    proc = _ic_bench(tmp_path, "--group=issue23", "--self-check", "--only=cudnn_all_algos")
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads((tmp_path / "ic_group.json").read_text())["rows"][0]
    assert row["status"] == "ok" and row["images_per_s"] > 0 and row["knobs"]["cudnn_benchmark_limit"] == 0
    assert "model=resnet18" in row["params"] and row["profile"]["kernel_busy_ms"] > 0
    assert any(name.startswith("conv") for name in row["profile"]["categories"])
    with gzip.open(tmp_path / "trace-cudnn_all_algos.json.gz", "rt") as trace:
        assert "traceEvents" in json.load(trace)
    assert "cudnn_all_algos" in proc.stdout and "x base" in proc.stdout


def test_each_caraml_point_and_its_plain_twin_train_the_same_way():
    """The pairs whose ratio the bench states: the plain loop's flags spell the caraml point's parameters."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import plain_loop
    finally:
        sys.path.remove(str(ROOT / "bench"))
    by = {p.name: p for p in ic.VS_PLAIN.points}
    for caraml_name, plain_name in ic.VS_PLAIN_PAIRS:
        args = by[plain_name].knobs["plain_loop"]
        plain_loop.parse(args)  # flags the plain loop takes (argparse exits on one it does not)
        assert ic.plain_as_params(args) == set(by[caraml_name].params), caraml_name
    assert ic.plain_as_params(["--compile", "--mode", "reduce-overhead", "--steps", "9", "--batch", "512"]) == {
        "compile=inductor", "compile_mode=reduce-overhead", "batch_size=512"}
