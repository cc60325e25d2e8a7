"""The image-classification comparisons' points and tables (bench/ic_bench.py, bench/ic_group.py), as data.

resnet50-vs-plain: `caraml run` against a plain training loop (bench/plain_loop.py) at the same settings, the
harness's own overhead; a point with knobs {"plain_loop": [...]} is the plain loop with those arguments. Each pair of
VS_PLAIN_PAIRS is the same training (`plain_as_params` spells the plain loop's flags as caraml's parameters).

resnet50-attempts (formerly issue23): where the rest of the way from caraml's ResNet50 (the baseline's
6,762-6,963 images/s on the H200, 7,428 at best) to MLPerf's ≈ 7,950 per H200 goes; every point is its own process
(bench/ic_point.py: caraml's Bench, built after its bench-only knobs are set), timed over a steady window, then
profiled for one step. Each is compared with the first (baseline):

  baseline          compile=inductor compile_mode=reduce-overhead sgd_impl=fused, batch 256
  stem_pad          stem_pad_channels=8: the 7x7 stem on 8 channels (3 image channels and 5 zero ones, the same
                    math): bf16 NHWC as cuDNN's kernels take it, instead of cuDNN padding it
  cudnn_all_algos   cuDNN tries every algorithm, not its heuristics' top 10 (cudnn.benchmark_limit=0)
  conv1x1_as_mm     inductor lowers the 1x1 convolutions (two thirds of ResNet50's) to matrix products (cuBLAS)
  stem_pad4         stem_pad_channels=4 (what MLPerf's data pipeline pads to)
  autotune_convs    inductor autotunes the convolutions and matrix products (ATen/cuDNN against Triton templates),
                    without max-autotune's coordinate-descent tuning of every fused kernel: run it alone
  batch512          batch 512 (measured on 2026-12-03: 7,050 images/s; only when --only names it)
  step_scope        the whole train step compiled and graphed as one (only when named)
  coord_descent     compile_tuning=coordinate-descent: inductor tunes every fused kernel's launch (only when named)
  coord_descent_b512  the same at batch 512 (only when named)
  best_b512         every attempt that paid: batch 512, coordinate descent and stem_pad_channels=8 (only when named)
  baseline_again    the baseline once more, caches warm: the spread between two processes (only when named)
"""

from __future__ import annotations

from caraml.compare.points import Column, Group, Point, table_lines

# resnet50-vs-plain ------------------------------------------------------------------------------------------------
VS_PLAIN_COMMON = ("model=resnet50", "batch_size=256", "precision=bf16", "channels_last=on", "data=synthetic-device",
                   "device=cuda", "warmup_steps=15", "measure_steps=150")
_AUTOTUNE, _NOCG = "compile_mode=max-autotune", "compile_mode=max-autotune-no-cudagraphs"
_RO = "compile_mode=reduce-overhead"
_PLAIN_RO_FUSED = ("--compile", "--mode", "reduce-overhead", "--fused-sgd")
VS_PLAIN = Group("resnet50-vs-plain", budget_s=560.0, points=(  # 30 s: the least a point is started with
    Point("plain_eager", knobs={"plain_loop": ["--steps", "150"]}, expect_s=30),
    Point("caraml_eager", ("compile=none",), expect_s=30),
    Point("plain_compiled", knobs={"plain_loop": ["--compile", "--steps", "150"]}, expect_s=30),
    Point("caraml_compiled", ("compile=inductor",), expect_s=30),
    Point("caraml_compiled_step", ("compile=inductor", "compile_scope=step"), expect_s=30),
    Point("caraml_reduce_overhead", ("compile=inductor", _RO), expect_s=30),
    Point("caraml_max_autotune_nocg", ("compile=inductor", _NOCG), expect_s=30),
    Point("caraml_max_autotune", ("compile=inductor", _AUTOTUNE), expect_s=30),
    Point("caraml_eager_power_off", ("compile=none", "power=off"), expect_s=30),
    Point("caraml_eager_fused", ("compile=none", "sgd_impl=fused"), expect_s=30),
    Point("caraml_compiled_fused", ("compile=inductor", "sgd_impl=fused"), expect_s=30),
    Point("caraml_reduce_overhead_fused", ("compile=inductor", _RO, "sgd_impl=fused"), expect_s=75),  # 68 s cold
    Point("caraml_max_autotune_fused", ("compile=inductor", _AUTOTUNE, "sgd_impl=fused"), expect_s=30),
    Point("caraml_max_autotune_nocg_fused", ("compile=inductor", _NOCG, "sgd_impl=fused"), expect_s=30),
    # the best settings' twins, only when named: reduce-overhead with the fused SGD, untuned and with inductor's
    # coordinate-descent tuning. The tuned compile takes minutes cold (ResNet50's first step: 253-290 s); the twin
    # named after it finds much of its kernels' tuning in inductor's caches: 175 s in all after caraml_tuned on an
    # H100 (85 s with both caches warm), 68 s for plain_reduce_overhead_fused cold.
    Point("caraml_tuned", ("compile=inductor", _RO, "sgd_impl=fused", "compile_tuning=coordinate-descent"),
          expect_s=400, by_default=False),
    Point("plain_tuned", knobs={"plain_loop": [*_PLAIN_RO_FUSED, "--coordinate-descent", "--steps", "150"]},
          expect_s=180, by_default=False),
    Point("plain_reduce_overhead_fused", knobs={"plain_loop": [*_PLAIN_RO_FUSED, "--steps", "150"]}, expect_s=75,
          by_default=False),
))
VS_PLAIN_PAIRS = (("caraml_eager", "plain_eager"), ("caraml_compiled", "plain_compiled"),
                  ("caraml_reduce_overhead_fused", "plain_reduce_overhead_fused"), ("caraml_tuned", "plain_tuned"))
# bench/plain_loop.py's flags as caraml's parameters (its other settings are VS_PLAIN_COMMON's): a switch's
# parameter, or the parameter a value flag sets; --steps and --warmup say how long it is timed, not what it trains
_PLAIN_FLAGS = {"--compile": "compile=inductor", "--fused-sgd": "sgd_impl=fused",
                "--coordinate-descent": "compile_tuning=coordinate-descent"}
_PLAIN_VALUES = {"--mode": "compile_mode", "--batch": "batch_size", "--steps": None, "--warmup": None}


def plain_as_params(args: list[str]) -> set[str]:
    """The plain loop's arguments (a point's knobs["plain_loop"]) as the caraml parameters of the same training."""
    params, args = (set() if "--compile" in args else {"compile=none"}), list(args)
    while args:
        flag = args.pop(0)
        if flag in _PLAIN_VALUES:
            value = args.pop(0)
            if _PLAIN_VALUES[flag]:
                params.add(f"{_PLAIN_VALUES[flag]}={value}")
        else:
            params.add(_PLAIN_FLAGS[flag])
    return params


VS_PLAIN_COLUMNS = (
    Column("point", 30, "s", "name"), Column("status", 8, "s", "status", cut=True),
    Column("img/s", 8, ".0f", "images_per_s"),
    Column("ratio", 6, ".3f", "ratio_to_plain"), Column("med ms", 7, ".2f", "step_median_ms"),
    Column("p90 ms", 7, ".2f", "step_p90_ms"), Column("MFU", 6, ".3f", "mfu"),
    Column("compile s", 9, ".1f", "compile_s"), Column("img/Wh", 8, ".0f", "images_per_wh"),
    Column("W", 5, ".0f", "avg_power_w"), Column("wall s", 6, ".0f", "wall_s"))


def ratios_to_plain(rows: list[dict]) -> None:
    """Each caraml point of VS_PLAIN_PAIRS as a ratio to its plain loop, where both were measured."""
    by = {r["name"]: r for r in rows}
    for a, b in VS_PLAIN_PAIRS:
        if by.get(a, {}).get("images_per_s") and by.get(b, {}).get("images_per_s"):
            by[a]["ratio_to_plain"] = by[a]["images_per_s"] / by[b]["images_per_s"]


# resnet50-attempts ------------------------------------------------------------------------------------------------
GPU_COMMON = ("model=resnet50", "batch_size=256", "precision=bf16", "channels_last=on", "data=synthetic-device",
              "device=cuda", "compile=inductor", "compile_mode=reduce-overhead", "sgd_impl=fused")
CPU_COMMON = ("model=resnet18", "image_size=32", "num_classes=10", "batch_size=4", "precision=bf16",
              "channels_last=on", "data=synthetic-device", "device=cpu", "compile=none", "sgd_impl=fused")
CPU_PARAMS = {"batch_size=512": "batch_size=8"}  # self-check: the batch point doubles the tiny batch
# Wall times on the H200 (2026-12-03, docs/bench/2026-12-03-h200-ic_step_profile.json): baseline 89 s, batch512
# 93 s, of which the first (compiling) step 64 and 63 s. A point whose graph or inductor options differ compiles
# again (≈ 90 s); one with the baseline's graph and options finds inductor's caches warm (a cached compile took
# 8.6 s on 2026-12-02; ≈ 45 s with cuDNN's search over all its algorithms); the stem's only change leaves most of
# the Triton kernels as they were (≈ 75 s).
_AUTOTUNE_CONVS = {"max_autotune_gemm": True, "max_autotune_conv_backends": "ATEN,TRITON",
                   "max_autotune_gemm_backends": "ATEN,TRITON",  # Triton conv templates need TRITON here too
                   "max_autotune_pointwise": False, "coordinate_descent_tuning": False}
_TUNED = "compile_tuning=coordinate-descent"
ATTEMPTS = Group("resnet50-attempts", aliases=("issue23",), budget_s=330.0, points=(
    Point("baseline", expect_s=90),
    Point("stem_pad", ("stem_pad_channels=8",), expect_s=75),
    Point("cudnn_all_algos", knobs={"cudnn_benchmark_limit": 0}, expect_s=45),
    Point("conv1x1_as_mm", knobs={"inductor": {"conv_1x1_as_mm": True}}, expect_s=90),
    Point("stem_pad4", ("stem_pad_channels=4",), expect_s=75),
    Point("autotune_convs", knobs={"inductor": _AUTOTUNE_CONVS}, expect_s=180),
    Point("batch512", ("batch_size=512",), expect_s=95, by_default=False),
    # the whole train step (forward, backward, fused SGD) compiled and graphed as one: fewer graph edges
    Point("step_scope", ("compile_scope=step",), expect_s=100, by_default=False),
    # inductor tunes the launch of every fused kernel (the BatchNorm/ReLU/add kernels are 56 % of the step): on the
    # H200 (2026-12-07) a first step of 253 s (the point's wall 276 s), 87 s with inductor's caches warm
    Point("coord_descent", (_TUNED,), expect_s=280, by_default=False),
    Point("coord_descent_b512", ("batch_size=512", _TUNED), expect_s=310, by_default=False),
    # every attempt that paid, together: batch 512, the tuning and the padded stem (only when named)
    Point("best_b512", ("batch_size=512", _TUNED, "stem_pad_channels=8"), expect_s=310, by_default=False),
    # the baseline once more (its caches warm): the spread of one point between two processes
    Point("baseline_again", expect_s=40, by_default=False),
))
GROUPS = (ATTEMPTS,)
MLPERF_IMAGES_PER_S = 7950  # ResNet50 training per H200 in MLPerf


def point_params(point: Point, self_check: bool) -> list[str]:
    """The point's caraml parameters over the group's common ones (the CPU's tiny ResNet18 for the self-check)."""
    common = CPU_COMMON if self_check else GPU_COMMON
    overridden = {p.split("=", 1)[0] for p in point.params}
    return ([p for p in common if p.split("=", 1)[0] not in overridden]
            + [CPU_PARAMS.get(p, p) if self_check else p for p in point.params])


def _share(prefix: str):
    def share(row: dict):
        p = row.get("profile") or {}
        ms = sum(c["ms"] for n, c in (p.get("categories") or {}).items() if n.startswith(prefix))
        return 100 * ms / p["step_ms"] if p.get("step_ms") else None
    return share


def _idle(row: dict):
    p = row.get("profile") or {}
    return 100 * p["idle_ms"] / p["step_ms"] if p.get("step_ms") and p.get("idle_ms") is not None else None


ATTEMPT_COLUMNS = (
    Column("point", 17, "s", "name"), Column("status", 8, "s", "status", cut=True),
    Column("img/s", 7, ".0f", "images_per_s"),
    Column("x base", 6, ".3f", "ratio_to_baseline"),
    Column("step ms", 7, ".2f", lambda r: (r.get("profile") or {}).get("step_ms") or None),
    Column("busy ms", 7, ".2f", lambda r: (r.get("profile") or {}).get("kernel_busy_ms")),
    Column("idle %", 6, ".1f", _idle), Column("conv %", 6, ".1f", _share("conv")),
    Column("triton %", 8, ".1f", _share("triton")), Column("optim %", 7, ".1f", _share("optimizer")),
    Column("W", 4, ".0f", "avg_power_w"), Column("MHz", 5, ".0f", "avg_sm_mhz"),
    Column("1st s", 6, ".1f", "first_step_s"), Column("wall s", 6, ".0f", "wall_s"),
    Column("exp s", 5, ".0f", "expected_s"))


def _notes(row: dict) -> list[str]:
    lines = [f"    profile: {row['profile_note']}"] if row.get("profile_note") else []
    missing = (row.get("knobs") or {}).get("missing")
    return lines + ([f"    not applied (this torch lacks them): {', '.join(missing)}"] if missing else [])


def table(rows: list[dict]) -> list[str]:
    """The attempts' table, each point's images/s as a ratio to the first measured one (set on the rows)."""
    base = next((r for r in rows if r.get("images_per_s")), None)
    for r in rows:
        r["ratio_to_baseline"] = r["images_per_s"] / base["images_per_s"] if base and r.get("images_per_s") else None
    return table_lines(rows, ATTEMPT_COLUMNS, _notes)


def to_mlperf(rows: list[dict]) -> list[str]:
    """How far the baseline's step is from MLPerf's per-H200 rate at the same batch."""
    base = next((r for r in rows if r.get("images_per_s")), None)
    if not base:
        return []
    target_ms = base["batch_size"] / MLPERF_IMAGES_PER_S * 1e3
    return [f"MLPerf's ≈ {MLPERF_IMAGES_PER_S:,} images/s per H200 is {target_ms:.2f} ms per step of "
            f"{base['batch_size']}: {base['name']} takes {base['step_ms']:.2f} ms ({base['step_ms'] - target_ms:+.2f})"]


def breakdown_lines(row: dict, top: int = 4) -> list[str]:
    """The profile of one point: ms per step and share by category, with each category's top kernels."""
    p = row["profile"]
    idle = "" if p["idle_ms"] is None else f", idle {p['idle_ms']:.2f} ms"
    lines = [f"{row['name']}: {p['step_ms']:.2f} ms per step, kernels {p['kernel_busy_ms']:.2f} ms{idle}"]
    for name, c in p["categories"].items():
        share = c["share_of_step"] or 0
        lines.append(f"  {name:<46} {c['ms']:8.2f} ms {share:6.1%} {c['calls']:6.0f} calls")
        for k in c["top_kernels"][:top]:
            lines.append(f"      {k['ms']:7.3f} ms {k['calls']:4.0f}x {k['name'][:110]}")
    return lines
