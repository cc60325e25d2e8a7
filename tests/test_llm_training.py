"""llm_training: the GPT model, its sizes and FLOPs, Megatron's recipe pieces, layout checks, a smoke run through
the CLI, and tensor/pipeline/data-parallel layouts on 4 CPU processes (gloo) against a single process."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HANG_S, ROOT, SHARED_DATA, caraml, cli_env

from caraml.measure.harness import HARNESS_PARAMS
from caraml.params import resolve
from caraml.workloads.llm_training import PRESETS, WORKLOAD, layout_problem, sizes


def params(preset: str = "smoke", **overrides):
    return resolve(WORKLOAD.params + HARNESS_PARAMS, overrides, "llm_training", PRESETS[preset])


# sizes and FLOPs -------------------------------------------------------------------------------------------------
def test_vocabulary_is_padded_as_megatron_pads_it():
    assert sizes.padded_vocab(50257, 1) == 50304
    assert sizes.padded_vocab(50257, 2) == 50432
    assert sizes.padded_vocab(50257, 8) == 51200
    assert sizes.padded_vocab(512, 4) == 512


@pytest.mark.parametrize("position, activation", [("rope", "gelu"), ("learned", "swiglu")])
def test_model_shapes_tied_weights_and_parameter_count(position, activation):
    import torch

    from caraml.workloads.llm_training.model import GPT, GPTConfig, init_weights

    p = params(position=position, activation=activation)
    cfg = GPTConfig.from_params(p)
    model = GPT(cfg)
    init_weights(model, cfg, seed=42)
    assert model.output.weight is model.embed.tok.weight
    tokens = torch.randint(0, p["vocab_size"], (3, p["seq_length"]))
    assert model(tokens).shape == (3, p["seq_length"], 512)
    counted = sum(q.numel() for q in model.parameters())
    assert counted == sizes.sizes(p, tp=1)["parameters"]["total"]
    # the initial loss of a tiny-std model is that of uniform guessing over the padded vocabulary
    targets = torch.randint(0, p["vocab_size"], tokens.shape)
    loss = torch.nn.functional.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
    assert loss.item() == pytest.approx(math.log(512), rel=1e-3)


def test_parameter_counts_of_caraml_sizes():
    def total(name, tp):
        return sizes.sizes(params(name), tp)["parameters"]["total"]

    assert total("800M", 1) == pytest.approx(0.909e9, rel=1e-3)
    assert total("13B", 2) == pytest.approx(12.84e9, rel=1e-3)
    assert total("175B", 8) == pytest.approx(174.6e9, rel=1e-3)
    assert total("117M", 1) == pytest.approx(124.4e6, rel=1e-3)  # GPT-2 small with learned positions


@pytest.mark.parametrize("activation", ["gelu", "swiglu"])
def test_flop_formula_agrees_with_flop_counter(activation):
    from caraml.workloads.llm_training.model import GPTConfig, count_flops_per_token

    p = params(activation=activation, recompute="full")
    counted = count_flops_per_token(GPTConfig.from_params(p))
    formula = sizes.sizes(p, tp=1)["flops_per_token"]
    assert counted == pytest.approx(formula, rel=0.02)


def test_caraml_tflops_formula():
    # 800M, global batch 16, selective recompute: 24*4*16*2048*16*2048^2*(1 + 2048/(6*2048) + 50304/(16*16*2048))
    expected = 24 * 4 * 16 * 2048 * 16 * 2048 ** 2 * (1 + 1 / 6 + 50304 / (16 * 16 * 2048))
    assert sizes.caraml_flops_per_iteration(16, 2048, 16, 2048, 50304, recompute=True) == pytest.approx(expected)
    assert sizes.caraml_flops_per_iteration(16, 2048, 16, 2048, 50304, recompute=False) == pytest.approx(
        expected * 3 / 4)
    assert sizes.caraml_flops_per_iteration(16, 2048, 16, 2048, 50304, True, "swiglu") == pytest.approx(
        expected * 32 / 24)


# the recipe -------------------------------------------------------------------------------------------------------
def test_loss_scaler_hysteresis_window_and_floor():
    from caraml.workloads.llm_training.scaler import LossScaler

    s = LossScaler()
    assert (s.scale, s.window, s.hysteresis, s.min_scale) == (4096.0, 500, 2, 1.0)
    s.update(overflow=True)
    assert s.scale == 4096.0 and s.skipped == 1  # the first overflow only uses up hysteresis
    s.update(overflow=True)
    assert s.scale == 2048.0
    s.update(overflow=True)
    assert s.scale == 1024.0  # hysteresis is refilled only by growth
    for _ in range(499):
        s.update(overflow=False)
    assert s.scale == 1024.0
    s.update(overflow=False)
    assert s.scale == 2048.0
    s.update(overflow=True)
    assert s.scale == 2048.0  # hysteresis back to 2
    tiny = LossScaler(scale=2.0)
    for _ in range(6):
        tiny.update(overflow=True)
    assert tiny.scale == 1.0


def test_learning_rate_warm_up_then_cosine_to_min():
    from caraml.workloads.llm_training.train import learning_rate

    p = params(lr=1e-4, min_lr=1e-5, lr_warmup_samples=100, lr_decay_samples=1100)
    assert learning_rate(p, 0) == 0.0
    assert learning_rate(p, 50) == pytest.approx(5e-5)
    assert learning_rate(p, 100) == pytest.approx(1e-4)
    assert learning_rate(p, 600) == pytest.approx(5.5e-5)  # half-way: the mean of lr and min_lr
    assert learning_rate(p, 1100) == pytest.approx(1e-5)
    assert learning_rate(p, 5000) == 1e-5


def bench(**overrides):
    """A GPTBench of the smoke model in this process (one rank, CPU)."""
    import torch

    from caraml.bench import ParallelDims, RunContext
    from caraml.distributed import DistContext
    from caraml.workloads.llm_training.train import GPTBench

    p = params(**overrides)
    return GPTBench(p, RunContext(device=torch.device("cpu"), seed=p["seed"], dist=DistContext(), dims=ParallelDims()))


def test_recompute_changes_no_number():
    from caraml.workloads.llm_training.train import train_losses

    runs = [train_losses({"recompute": mode}, 3) for mode in ("none", "selective", "full")]
    assert runs[0] == runs[1] == runs[2]


def test_fp16_overflow_skips_the_step_and_spends_hysteresis():
    import torch

    b = bench(precision="fp16")
    b.step()
    assert b.scaler.scale == 4096.0 and b.scaler.skipped == 0 and math.isfinite(b.loss_values()[0])
    before = [q.detach().clone() for q in b.params]
    b.scaler.scale = 1e38  # the scaled loss overflows: every gradient is inf or nan
    b.step()
    assert b.scaler.skipped == 1 and b.scaler.scale == 1e38  # hysteresis 2: not lowered on the first overflow
    assert all(torch.equal(x, q) for x, q in zip(before, b.params))  # the step was skipped
    b.step()
    assert b.scaler.skipped == 2 and b.scaler.scale == 5e37
    details = b.details()
    assert details["loss_scale"]["skipped_steps"] == 2 and b.info.precision == "fp16"


# layouts -------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides, devices, says", [
    ({"tp": 3}, 4, "tp*pp = 3*1 = 3 does not divide the 4 devices"),
    ({"tp": 8}, 8, "num_attention_heads=4 is not a multiple of tp=8"),
    ({"num_attention_heads": 3}, 1, "hidden_size=64 is not a multiple of num_attention_heads=3"),
    ({"pp": 4, "num_layers": 6, "grad_accumulation": 4}, 4, "num_layers=6 is not a multiple of pp=4"),
    ({"pp": 2, "grad_accumulation": 1}, 2, "grad_accumulation=1 micro-batches cannot fill a pipeline of pp=2"),
    ({"global_batch_size": 6}, 2, "global_batch_size=6 is not dp x micro_batch_size x grad_accumulation = 2 x 2 x 1"),
    ({"seq_length": 128}, 1, "seq_length=128 exceeds max_position_embeddings=64"),
])
def test_layout_problems(overrides, devices, says):
    assert says in layout_problem(params(**overrides), devices)


def test_layouts_that_fit():
    assert layout_problem(params(global_batch_size=4), 2) is None  # dp 2 x micro 2 x 1
    assert layout_problem(params(tp=2, pp=2, grad_accumulation=2), 8) is None
    assert layout_problem(params("13B"), 176) is None
    assert layout_problem(params("175B"), 64) is None
    assert "tp*pp = 8*8 = 64 does not divide the 16 devices" in layout_problem(params("175B"), 16)


@pytest.mark.parametrize("args, says", [
    (["tp=2"], "tp*pp = 2*1 = 2 does not divide the 1 devices"),
    (["global_batch_size=3"], "global_batch_size=3 is not dp x micro_batch_size x grad_accumulation"),
    (["data=oscar"], "no Megatron dataset oscar_text_document.idx; set CARAML_DATA"),
])
@pytest.mark.subprocess
def test_bad_layout_is_one_line_exit_2(tmp_path, args, says):
    env = cli_env()
    env.pop("CARAML_DATA", None)
    proc = caraml("run", "llm_training", "--preset", "smoke", *args, "--results", tmp_path, env=env, check=2)
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


# runs ---------------------------------------------------------------------------------------------------------------
@pytest.mark.subprocess
def test_smoke_run_through_the_cli(tmp_path):
    out = caraml("run", "llm_training", "--preset", "smoke", "--json", "--results", tmp_path, check=0).stdout
    record = json.loads(out)
    m = record["metrics"]
    assert record["status"] == "ok" and m["throughput"]["unit"] == "tokens/s" and m["throughput"]["value"] > 0
    loss = m["loss"]
    assert loss["finite"] and loss["falling"] and loss["steps"] == 10 and loss["last"] < loss["first"] - 0.3
    assert (m["dp"], m["global_batch_size"], m["padded_vocab_size"]) == (1, 2, 512)
    assert m["time_per_iteration_s"] > 0 and m["tflops_caraml_per_device"] > 0
    assert m["flops_per_unit"] == sizes.sizes(record["params"], 1)["flops_per_token"]
    assert "12*L*h*s" in m["flops_convention"] and m["precision_in_use"] == "fp32"
    assert set(WORKLOAD.metrics) <= set(m)  # every declared metric is recorded
    (tmp_path / "record.json").write_text(out)  # as JUBE keeps it
    row = dict(ln.split("=", 1) for ln in caraml("row", tmp_path / "record.json", check=0).stdout.splitlines())
    assert (row["model_size"], row["pp"], row["tp"], row["dp"], row["global_batch_size"]) == ("smoke", "1", "1", "1",
                                                                                                "2")


# The same model, seed and global batch (8 samples) in each layout; 3 iterations. "b": learned positions, SwiGLU,
# full recompute, gradients all-reduced without DDP (tp > 1), logits gathered (no loss_parallel).
LAYOUTS = {
    "tp2_dp2_fsdp": "tp:2,micro_batch_size:2,grad_accumulation:2",
    "tp2_dp2_b": "tp:2,micro_batch_size:2,grad_accumulation:2,position:learned,activation:swiglu,"
                 "distributed_optimizer:off,recompute:full,loss_parallel:off",
    "pp2_dp2_fsdp": "pp:2,micro_batch_size:2,grad_accumulation:2",
    "pp2_dp2_ddp": "pp:2,micro_batch_size:2,grad_accumulation:2,distributed_optimizer:off",
    "pp2_tp2": "pp:2,tp:2,micro_batch_size:4,grad_accumulation:2",
    "dp4_ddp": "micro_batch_size:1,grad_accumulation:2,distributed_optimizer:off",
    # bf16 autocast: the residual stream passes between stages in bf16 (the stage shapes say so)
    "pp2_tp2_bf16": "pp:2,tp:2,micro_batch_size:4,grad_accumulation:2,precision:bf16",
}
VARIANT_B = {"position": "learned", "activation": "swiglu", "recompute": "full"}


@pytest.mark.multiprocess
def test_parallel_layouts_train_like_one_process(tmp_path):
    from caraml.workloads.llm_training.train import train_losses

    out = tmp_path / "losses.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
           str(ROOT / "tests" / "llm_parallel_worker.py"), str(out), "3", *(f"{k}={v}" for k, v in LAYOUTS.items())]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_S, env=cli_env(OMP_NUM_THREADS=1))
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(out.read_text())
    single = {"a": train_losses({"micro_batch_size": 4, "grad_accumulation": 2}, 3),
              "b": train_losses({"micro_batch_size": 4, "grad_accumulation": 2, **VARIANT_B}, 3),
              "bf16": train_losses({"micro_batch_size": 4, "grad_accumulation": 2, "precision": "bf16"}, 3)}
    assert single["a"][-1] < single["a"][0] and single["a"] != single["b"]
    for name, losses in got.items():
        kind = name.rsplit("_", 1)[-1] if name.endswith(("_b", "_bf16")) else "a"
        # bf16 rounds each layout's differently ordered sums differently: agreement to bf16's precision
        assert losses == pytest.approx(single[kind], rel=1e-2 if kind == "bf16" else 1e-4), name


# data=oscar -----------------------------------------------------------------------------------------------------------
def write_megatron_dataset(prefix: Path, documents: list[list[int]]) -> None:
    """A Megatron indexed dataset (MMIDIDX version 1, uint16 tokens), one sequence per document."""
    import numpy as np

    tokens = [np.asarray(d, dtype=np.uint16) for d in documents]
    prefix.with_suffix(".bin").write_bytes(b"".join(t.tobytes() for t in tokens))
    sizes_ = np.array([len(t) for t in tokens], dtype=np.int32)
    pointers = np.concatenate(([0], np.cumsum(sizes_[:-1].astype(np.int64) * 2))).astype(np.int64)
    with open(prefix.with_suffix(".idx"), "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8))
        f.write(struct.pack("<Q", len(tokens)) + struct.pack("<Q", len(tokens) + 1))
        f.write(sizes_.tobytes() + pointers.tobytes() + np.arange(len(tokens) + 1, dtype=np.int64).tobytes())


@pytest.mark.subprocess
def test_oscar_data_through_the_megatron_reader(tmp_path):
    pytest.importorskip("caraml.data.megatron", reason="caraml.data.megatron (the .bin/.idx reader) is not here")
    import numpy as np

    rng = np.random.default_rng(0)
    prefix = tmp_path / "oscar_text_document"
    write_megatron_dataset(prefix, [rng.integers(0, 500, size=n).tolist() for n in (300, 129, 700, 65)])
    record = json.loads(caraml("run", "llm_training", "--preset", "smoke", "data=oscar", f"data_path={prefix}",
                               "--json", "--results", tmp_path / "res", check=0).stdout)
    assert record["status"] == "ok" and record["metrics"]["loss"]["finite"]


def test_shared_oscar_index_is_readable_when_present():
    idx = SHARED_DATA / "oscar_text_document.idx"
    if not idx.exists():
        pytest.skip(f"{idx} is absent")
    head = idx.read_bytes()[:34]
    assert head[:9] == b"MMIDIDX\x00\x00" and struct.unpack("<Q", head[9:17])[0] == 1 and head[17] == 8
    assert struct.unpack("<Q", head[18:26])[0] == 790  # the format write_megatron_dataset writes
