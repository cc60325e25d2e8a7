"""llm_training as CARAML runs it: its configurations by version, Megatron's dropout, mixed precision and
distributed optimizer (ZeRO-1), CARAML's log-interval convention, its result columns, and the suite's dry run
against a table of CARAML's values per system."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from conftest import ROOT, caraml, cli_env, run

from caraml.campaign import suite as suite_mod
from caraml.campaign.expand import expand
from caraml.runner import RunSpec, build_bench, resolve
from caraml.workloads.llm_training import WORKLOAD, check_launch
from caraml.workloads.llm_training.caraml_log import figures, interval_times
from caraml.workloads.llm_training.optimizer import owners


def config(preset: str = "smoke", **overrides):
    return resolve(RunSpec("llm_training", overrides, preset)).config


# configuration ids -----------------------------------------------------------------------------------------------
def test_ids_of_configurations_that_existed_before_are_unchanged():
    """The new parameters at their defaults, and the former boolean distributed_optimizer, keep ids (as computed
    before these parameters existed)."""
    from handmade import config_id_of

    from caraml.params import resolve as resolve_params
    from caraml.results.aggregate import current_id
    from caraml.settings import RUN_PARAMS

    declared = WORKLOAD.params + RUN_PARAMS
    smoke = resolve_params(declared, {}, "llm_training", WORKLOAD.presets["smoke"])
    assert smoke["distributed_optimizer"] == "fsdp" and smoke["mixed_precision"] == "autocast"
    assert config_id_of("llm_training", smoke, "CPU", 1, 1) == "4cc437d2c3670039"
    plain = resolve_params(declared, {}, "llm_training")
    assert config_id_of("llm_training", plain, "CPU", 1, 1) == "a50e6c4d410bb069"
    # a stored record with the former boolean reads as today's value, under its stored id
    stored = {**smoke, "distributed_optimizer": False}
    off = resolve_params(declared, {"distributed_optimizer": "off"}, "llm_training", WORKLOAD.presets["smoke"])
    record = {"id": config_id_of("llm_training", stored, "CPU", 1, 1), "workload": "llm_training", "params": stored,
              "system": {"tag": "CPU"}, "launch": {"world_size": 1, "nodes": 1}}
    assert current_id(record) == record["id"] == config_id_of("llm_training", off, "CPU", 1, 1)
    assert config(distributed_optimizer="true").parallel.distributed_optimizer == "fsdp"
    # a changed setting is a different configuration
    assert config_id_of("llm_training", {**smoke, "hidden_dropout": 0.1}, "CPU", 1, 1) != "4cc437d2c3670039"


# CARAML's configurations -------------------------------------------------------------------------------------------
def test_caraml_presets_by_version():
    newest, published = config("800M"), config("800M-2024")
    for cfg in (newest, published):
        assert (cfg.model.num_layers, cfg.model.hidden_size, cfg.model.model_size) == (16, 2048, "800M")
        assert (cfg.compute.attention_dropout, cfg.compute.hidden_dropout) == (0.1, 0.1)
        assert (cfg.compute.mixed_precision, cfg.compute.precision, cfg.parallel.distributed_optimizer) == (
            "megatron", "fp16", "zero1")
        assert cfg.compute.megatron_precision and "fp32 main copies" in cfg.compute.mechanism
    assert (newest.model.num_attention_heads, newest.caraml.caraml_config, newest.caraml.exit_after_minutes) == (
        16, "2025", 60.0)
    assert (published.model.num_attention_heads, published.caraml.caraml_config,
            published.caraml.exit_after_minutes) == (8, "2024", 30.0)
    assert check_launch(published, 1) is None and check_launch(newest, 4) is None
    # presets of our own keep their behaviour: no dropout, autocast, FSDP2
    smoke = config("smoke")
    assert (smoke.compute.hidden_dropout, smoke.compute.mixed_precision, smoke.parallel.distributed_optimizer) == (
        0.0, "autocast", "fsdp")


@pytest.mark.parametrize("preset, overrides, says", [
    ("800M", {"caraml_config": "2024"}, "whose 800M GPT has 8 heads"),
    ("800M-2024", {"num_attention_heads": 16}, "or caraml_config=2025 (--preset 800M)"),
    ("800M", {"hidden_dropout": 1.0}, "hidden_dropout=1 drops everything"),
    ("smoke", {"mixed_precision": "megatron", "precision": "bf16"}, "FSDP2's sharded parameters cannot hold"),
])
def test_bad_caraml_settings_are_one_line(preset, overrides, says):
    problem = check_launch(config(preset, **overrides), 4)
    assert problem and says in problem and "\n" not in problem


@pytest.mark.subprocess
def test_refusal_through_the_cli_is_one_line_exit_2(tmp_path):
    proc = caraml("run", "llm_training", "--preset", "800M-2024", "num_attention_heads=16", "--results", tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "caraml_config=2024" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


# dropout and Megatron's mixed precision --------------------------------------------------------------------------
def test_dropout_acts_in_training_only():
    from caraml.workloads.llm_training.model import GPT, GPTConfig

    cfg = GPTConfig.of(config(attention_dropout=0.3, hidden_dropout=0.3))
    assert (cfg.attention_dropout, cfg.hidden_dropout) == (0.3, 0.3)
    torch.manual_seed(0)
    model = GPT(cfg)
    x = torch.randint(0, cfg.vocab_size, (2, cfg.seq_length))
    a, b = model(x), model(x)
    assert not torch.equal(a, b)  # a new mask each time
    model.eval()
    assert torch.equal(model(x), model(x))


def test_megatron_precision_keeps_half_parameters_and_fp32_main_copies():
    bench = build_bench(RunSpec("llm_training", {"mixed_precision": "megatron", "precision": "bf16"}, "smoke"),
                        device="cpu")
    try:
        assert {p.dtype for p in bench.params} == {torch.bfloat16}
        assert {p.dtype for p in bench.update_params} == {torch.float32}
        assert bench.model.rope.dtype == torch.float32
        for _ in range(6):
            bench.step()
        losses = bench.loss_values()
        assert losses[-1] < losses[0]
        # the model holds its main copies rounded
        for p, m in zip(bench.params, bench.update_params):
            assert torch.equal(p, m.to(torch.bfloat16))
        details = bench.details()
        assert details["precision_mechanism"].startswith("megatron: bf16 parameters")
    finally:
        bench.close()


# ZeRO-1 ---------------------------------------------------------------------------------------------------------
def test_owners_balance_the_elements_and_agree_everywhere():
    sizes = [100, 10, 10, 50, 50, 1, 1]
    got = owners(sizes, 2)
    load = [sum(s for s, o in zip(sizes, got) if o == r) for r in range(2)]
    assert got == owners(sizes, 2) and load == [111, 111] and set(got) == {0, 1}
    assert owners([5], 3) == [0]  # more replicas than tensors: the others own nothing


LAYOUTS = {
    "dp4_off": "micro_batch_size:1,grad_accumulation:2,distributed_optimizer:off",
    "dp4_zero1": "micro_batch_size:1,grad_accumulation:2,distributed_optimizer:zero1",
    "tp2_dp2_zero1": "tp:2,micro_batch_size:2,grad_accumulation:2,distributed_optimizer:zero1",
    "dp4_zero1_megatron": "micro_batch_size:1,grad_accumulation:2,distributed_optimizer:zero1,"
                          "mixed_precision:megatron,precision:bf16",
}


@pytest.mark.multiprocess
def test_zero1_shards_optimizer_state_and_trains_as_unsharded(tmp_path):
    from caraml.crosscheck import train_losses

    out = tmp_path / "zero1.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
           str(ROOT / "tests" / "llm_zero1_worker.py"), str(out), "3", *(f"{k}={v}" for k, v in LAYOUTS.items())]
    proc = run(cmd, env=cli_env(OMP_NUM_THREADS=1))
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(out.read_text())
    single = train_losses({"micro_batch_size": 4, "grad_accumulation": 2}, 3)
    megatron = train_losses({"micro_batch_size": 4, "grad_accumulation": 2, "mixed_precision": "megatron",
                             "precision": "bf16"}, 3)
    assert got["dp4_zero1"]["losses"] == pytest.approx(got["dp4_off"]["losses"], rel=1e-5)
    assert got["dp4_zero1"]["losses"] == pytest.approx(single, rel=1e-4)
    assert got["tp2_dp2_zero1"]["losses"] == pytest.approx(single, rel=1e-4)
    assert got["dp4_zero1_megatron"]["losses"] == pytest.approx(megatron, rel=1e-2)
    assert got["dp4_zero1_megatron"]["half_parameters"] and not got["dp4_zero1"]["half_parameters"]
    # off: every rank keeps the whole state; zero1: each a share, together the whole
    off, zero = got["dp4_off"], got["dp4_zero1"]
    assert off["state_elements"] == [off["parameters"]] * 4
    assert sum(zero["state_elements"]) == zero["parameters"] and max(zero["state_elements"]) < zero["parameters"] / 2


# CARAML's log convention -------------------------------------------------------------------------------------------
def test_log_intervals_are_megatrons():
    steps = [3.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 9.0]
    assert interval_times(steps, 5) == [1.4, 2.0]  # the first interval's slow first step counts; 9.0 is never logged
    found = figures(steps, 5, global_batch=32, seq_length=2048, devices=4, flops_per_iteration=8e12,
                    exit_minutes=30.0)
    assert found["time_per_iteration_s"] == pytest.approx(1.7)
    assert found["tokens_per_s"]["value"] == pytest.approx(32 * 2048 / 1.7)
    assert found["tflops_per_device"] == pytest.approx((8 / (1.4 * 4) + 8 / (2.0 * 4)) / 2)
    assert (found["iterations"], found["iterations_run"], found["intervals"]) == (10, 11, 2)
    assert found["time_to_report_s"] == pytest.approx(20_000_000 / found["tokens_per_s"]["value"])
    empty = figures([1.0] * 4, 5, 32, 2048, 4, 1e12, 30.0)
    assert empty["tokens_per_s"]["value"] is None and empty["iterations"] == 0


def test_caraml_log_trains_on_to_the_exit_and_reports_both_figures():
    bench = build_bench(RunSpec("llm_training", {"convention": "caraml-log", "exit_minutes": 0.02,
                                                 "caraml_log_interval": 2}, "smoke"), device="cpu")
    try:
        assert bench.extra_phase == "caraml-log"
        for _ in range(2):
            bench.step()
        bench.begin_measure()
        for _ in range(3):
            bench.step()
        bench.run_extra(lambda: False)
        d = bench.details()
        assert bench.iteration >= 5 and len(bench.run_step_times()) == bench.iteration
        assert d["caraml_iterations"] == bench.iteration // 2 * 2 and d["caraml_tokens_per_s"]["value"] > 0
        assert d["caraml_tflops_per_device"] > 0 and d["time_per_iteration_s"] > 0  # ours beside CARAML's
        assert d["caraml_log"]["exit_minutes"] == 0.02 and "caraml-log" in d["caraml_tokens_per_s"]["convention"]
        assert d["caraml_spread"]["n"] == d["caraml_log"]["intervals"] and d["caraml_spread"]["over"] == "log intervals"
    finally:
        bench.close()


# the suite against CARAML's values per system ----------------------------------------------------------------------
# CARAML's llm_benchmark_nvidia_amd.yaml, 800M: by version, heads, global batches, exit after minutes; every system:
# micro-batch 4, fp16 (Megatron's: half parameters, fp32 main), distributed optimizer, dropout 0.1, log interval 5.
CARAML_800M = {
    "2025": {"heads": 16, "batches": [16, 32, 64, 128, 256, 512, 1024, 2048, 4096], "exit": 60.0, "tags": set()},
    "2024": {"heads": 8, "batches": [32, 512], "exit": 30.0, "tags": {"2024"}},
    # CARAML's published 800M plots (2024.01 configuration) cover global batch 16..512
    "2024-published": {"heads": 8, "batches": [16, 32, 64, 128, 256, 512], "exit": 30.0, "tags": {"2024", "published"},
                       "config": "2024"},
}
# GPUs per node (CARAML's gpus_per_node); 8 GCDs start the sweep at 8 x 4
SYSTEMS = {"JUPITER": 4, "GH200": 1, "WAIH100": 4, "H100": 4, "A100": 4, "MI250": 8, "MI300X": 8, "MI300A": 4}


@pytest.mark.parametrize("version", list(CARAML_800M))
@pytest.mark.parametrize("system", list(SYSTEMS))
def test_suite_is_caramls_800m_table(version, system):
    want = CARAML_800M[version]
    points = expand(suite_mod.load("llm_training"), {"800M", system} | want["tags"], system)
    per_node = SYSTEMS[system]
    batches = [b for b in want["batches"] if b >= per_node * 4]
    assert sorted(p.params["global_batch_size"] for p in points) == batches
    for point in points:
        p = point.params
        assert point.devices_per_node == per_node and point.nodes == 1
        assert (p["num_layers"], p["hidden_size"], p["num_attention_heads"]) == (16, 2048, want["heads"])
        assert (p["micro_batch_size"], p["tp"], p["pp"], p["precision"]) == (4, 1, 1, "fp16")
        assert (p["mixed_precision"], p["distributed_optimizer"]) == ("megatron", "zero1")
        assert (p["attention_dropout"], p["hidden_dropout"]) == (0.1, 0.1)
        assert (p["caraml_config"], p["convention"], p["caraml_log_interval"], p["exit_minutes"]) == (
            want.get("config", version), "caraml-log", 5, want["exit"])
        assert (p["recompute"], p["position"], p["seed"], p["energy_files"]) == ("selective", "rope", 42, "caraml")
        dp = per_node
        assert dp * p["micro_batch_size"] * p["grad_accumulation"] == p["global_batch_size"]


def test_suite_tag_steady_leaves_caramls_run_out():
    points = expand(suite_mod.load("llm_training"), {"800M", "steady"}, "H100")
    assert {p.params["convention"] for p in points} == {"steady"}


@pytest.mark.subprocess
def test_dry_run_with_the_system_as_a_tag_shows_caramls_2024_configuration():
    text = caraml("sweep", "llm_training", "--tag", "800M", "--tag", "GH200", "--tag", "2024", "--dry-run",
                  check=0).stdout
    assert text.count("num_attention_heads=8") == 2 and "exit_minutes=30.0" in text
    assert "global_batch_size=32 " in text and "global_batch_size=512 " in text
    assert "mixed_precision=megatron" in text and "distributed_optimizer=zero1" in text


# result columns -----------------------------------------------------------------------------------------------------
def test_caramls_llm_columns_are_offered():
    from caraml.results.columns import columns_for

    headers = {c.key: c.header for c in columns_for("llm_training")}
    for key, header in (("job_id", "JobID"), ("version", "Version"), ("queue", "Queue"), ("job_time", "JobTime"),
                        ("runtime_min", "Runtime(min)"), ("model", "Model"), ("model_size", "ModelSize"),
                        ("dataset", "Dataset"), ("caraml_iterations", "Iterations"),
                        ("caraml_time_per_iteration_s", "Time/iteration(s)"), ("caraml_tokens_per_s", "Tokens/second"),
                        ("caraml_tflops_per_device", "Avg_TFLOPs/GPU"),
                        ("time_to_report_s", "time_to_report_in_seconds"), ("energy_file", "EnergyFile"),
                        # ours, of the steady window
                        ("iterations", "MeasuredSteps"), ("time_per_iteration_s", "IterationTime s"),
                        ("throughput", "Tokens/s"), ("tflops_caraml_per_device", "TFLOP/s/GPU (CARAML formula)")):
        assert headers[key] == header


def test_job_time_from_slurm_or_the_profile():
    from caraml.results.columns import _job_time

    slurm = {"env": {"slurm": {"SLURM_JOB_START_TIME": "1000", "SLURM_JOB_END_TIME": str(1000 + 4500)}}}
    assert _job_time(slurm) == "01:15:00"
    assert _job_time({"system": {"profile": {"site": {"time_limit": "00:15:00"}}}}) == "00:15:00"
    assert _job_time({}) is None


# GC200: CARAML's IPU run through PopTorch ------------------------------------------------------------------------
def test_ipu_layout_batch_and_schedule_are_caramls():
    from caraml.workloads.llm_training import ipu

    assert ipu.layer_ipus("0 4 4 4") == [1] * 4 + [2] * 4 + [3] * 4
    assert ipu.placement_problem(12, 4, "0 4 4 4") is None
    assert "places 16 layers" in ipu.placement_problem(12, 4, "4 4 4 4")
    assert "names 3 IPUs" in ipu.placement_problem(12, 4, "0 6 6")
    assert "not a list of layer counts" in ipu.placement_problem(12, 4, "0 four")
    assert ipu.samples_per_step(1, 128, 1, 4) == 512
    lr = [ipu.learning_rate(u, 1000, 1.5e-4, 0.01) for u in (0, 5, 10, 505, 1000)]
    assert lr[0] == 0 and lr[1] == pytest.approx(0.75e-4) and lr[2] == pytest.approx(1.5e-4)
    assert lr[3] == pytest.approx(0.75e-4) and lr[4] == pytest.approx(0.0, abs=1e-12)


def test_gc200_suite_point_is_caramls_ipu_run():
    [point] = expand(suite_mod.load("llm_training"), {"117M", "GC200"}, "GC200")
    p = point.params
    assert (p["engine"], p["replicas"], p["ipus_per_replica"], p["layers_per_ipu"], p["device_iterations"]) == (
        "poptorch", 1, 4, "0 4 4 4", 4)
    assert (p["micro_batch_size"], p["grad_accumulation"], p["lr"], p["lr_warmup_fraction"]) == (1, 128, 1.5e-4, 0.01)
    assert (p["num_layers"], p["hidden_size"], p["num_attention_heads"], p["seq_length"]) == (12, 768, 12, 1024)
    assert point.devices_per_node == 1 and p["convention"] == "steady" and p["caraml_config"] == "2024"
    assert "give convention=steady" in check_launch(config("117M", backend="poptorch", convention="caraml-log"), 1)
    assert "launch one process" in check_launch(config("117M", backend="poptorch"), 4)


@pytest.mark.subprocess
def test_poptorch_missing_is_one_line_exit_2(tmp_path):
    proc = caraml("run", "llm_training", "--preset", "117M", "backend=poptorch", "--results", tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "needs Graphcore's poptorch" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
