"""precision=fp8 (fp8.py): torchao converts exactly the blocks' linear layers; the refusals (no torchao, a CPU, a
GPU before sm_89, tp > 1) are one line; MFU is stated against the fp8 and the bf16 peak, both named. The float8
products themselves run here on the CPU (torch's _scaled_mm has a CPU kernel), as a check of the wiring."""

from __future__ import annotations

import sys

import pytest
import torch
import torch.nn as nn

from caraml.errors import BadInput
from caraml.workloads.llm_training import fp8
from caraml.workloads.llm_training.model import GPT, GPTConfig, init_weights

torchao = pytest.importorskip("torchao.float8")

SMOKE = GPTConfig(num_layers=2, hidden_size=64, num_heads=4, ffn_hidden_size=256, seq_length=32, max_positions=32,
                  vocab_size=512)


def _model(seed=1):
    model = GPT(SMOKE)
    init_weights(model, SMOKE, seed)
    return model


@pytest.mark.parametrize("recipe", fp8.RECIPES)
def test_the_conversion_takes_the_block_linears_and_nothing_else(recipe):
    from torchao.float8.float8_linear import Float8Linear

    model = _model()
    converted = fp8.convert(model, recipe)
    floats = sorted(n for n, m in model.named_modules() if isinstance(m, Float8Linear))
    expected = sorted(f"layers.{i}.{p}" for i in range(2) for p in ("attn.wqkv", "attn.wo", "mlp.w1", "mlp.w2"))
    assert floats == sorted(converted) == expected
    assert type(model.output) is nn.Linear and type(model.embed.tok) is nn.Embedding
    assert model.output.weight is model.embed.tok.weight  # the tie survives


@pytest.mark.parametrize("recipe", fp8.RECIPES)
def test_fast_accumulation_reaches_the_backward_products_only_when_asked(recipe):
    """torchao's recipes accumulate fast in the forward product only; fp8_fast_accum=true in all three, the
    recipe's scaling untouched."""
    from torchao.float8.float8_linear import Float8Linear

    default, fast = fp8.linear_config(recipe), fp8.linear_config(recipe, fast_accum=True)
    assert default.gemm_config_output.use_fast_accum and fast.gemm_config_output.use_fast_accum
    assert not default.gemm_config_grad_input.use_fast_accum and not default.gemm_config_grad_weight.use_fast_accum
    assert fast.gemm_config_grad_input.use_fast_accum and fast.gemm_config_grad_weight.use_fast_accum
    assert fast.cast_config_input == default.cast_config_input
    assert fast.cast_config_input_for_grad_weight == default.cast_config_input_for_grad_weight
    assert fast.round_scales_to_power_of_2 == default.round_scales_to_power_of_2
    block = _model().layers["0"]
    fp8.convert(block, recipe, fast_accum=True)
    assert all(m.config.gemm_config_grad_weight.use_fast_accum for m in block.modules() if isinstance(m, Float8Linear))


def test_block_by_block_as_the_build_does_it():
    block = _model().layers["0"]
    assert sorted(fp8.convert(block, "tensorwise")) == ["attn.wo", "attn.wqkv", "mlp.w1", "mlp.w2"]
    assert not fp8.is_block_linear(nn.Linear(64, 8), "attn.wqkv")  # 8 outputs: float8 products need multiples of 16
    assert not fp8.is_block_linear(nn.Linear(64, 512), "output")


def test_a_float8_step_tracks_the_bf16_one():
    """One forward/backward of the converted model under bf16 autocast: the loss within 2 % of bf16's, the
    gradients pointing the same way (float8 rounding, not a different computation)."""
    tokens = torch.randint(0, 500, (2, 32), generator=torch.Generator().manual_seed(0))
    results = []
    for convert in (False, True):
        model = _model()
        if convert:
            fp8.convert(model, "tensorwise")
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
        loss.backward()
        results.append((loss.item(), model.layers["0"].mlp.w1.weight.grad.flatten()))
    (plain, g_plain), (fast, g_fast) = results
    assert abs(fast - plain) / plain < 0.02
    assert torch.nn.functional.cosine_similarity(g_plain, g_fast, dim=0) > 0.9


def test_refused_on_a_cpu_and_on_gpus_before_sm89(monkeypatch):
    assert "needs an NVIDIA GPU with float8 tensor cores" in fp8.device_problem(torch.device("cpu"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA A100-SXM4-80GB")
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (8, 0))
    problem = fp8.device_problem(torch.device("cuda", 0))
    assert "compute capability >= 8.9" in problem and "NVIDIA A100-SXM4-80GB is 8.0" in problem
    for ok in ((8, 9), (9, 0), (10, 0)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None, ok=ok: ok)
        assert fp8.device_problem(torch.device("cuda", 0)) is None
    monkeypatch.setattr(torch.version, "hip", "6.2", raising=False)
    assert "AMD" in fp8.device_problem(torch.device("cuda", 0))


def test_refused_without_torchao(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao.float8", None)  # import fails as if absent
    assert "torchao's float8 training does not import" in fp8.torchao_problem()
    with pytest.raises(BadInput, match="llm_training: precision=fp8 needs an NVIDIA GPU"):
        fp8.check(torch.device("cpu"))


@pytest.mark.subprocess
def test_caraml_run_refuses_fp8_on_the_cpu_in_one_line(tmp_path):
    from conftest import caraml

    proc = caraml("run", "llm_training", "--preset", "smoke", "precision=fp8", "--results", tmp_path, check=2)
    lines = [line for line in proc.stderr.strip().splitlines() if line.startswith("caraml")]
    assert len(lines) == 1 and "precision=fp8 needs an NVIDIA GPU with float8 tensor cores" in lines[0]
    assert "Traceback" not in proc.stderr


def test_mfu_against_the_fp8_and_the_bf16_peak_both_named():
    from caraml import systems
    from caraml.runner import mfu_by_peak

    h200 = systems.get("H200")
    out = mfu_by_peak(989.4, h200, ("fp8", "bf16"))
    assert out == {"fp8": {"peak_tflops": 1978.9, "mfu": pytest.approx(989.4 / 1978.9)},
                   "bf16": {"peak_tflops": 989.4, "mfu": pytest.approx(1.0)}}
    assert mfu_by_peak(None, h200, ("fp8",))["fp8"]["mfu"] is None
    assert mfu_by_peak(100.0, systems.get("A100"), ("fp8",))["fp8"] == {"peak_tflops": None, "mfu": None}


def test_the_bench_states_fp8_for_the_record(monkeypatch):
    """The bench of a precision=fp8 point (its device check passed over: float8 runs on this CPU): the blocks
    converted, the precision in use fp8 with bf16 as the second peak, the record's fast_paths."""
    from caraml.runner import RunSpec, build_bench

    monkeypatch.setattr(fp8, "check", lambda device: None)
    bench = build_bench(RunSpec("llm_training", {"precision": "fp8", "fp8_recipe": "rowwise", "hidden_size": 64,
                                                 "num_attention_heads": 4}, "smoke"), device="cpu")
    bench.step()
    assert bench.info.precision == "fp8" and bench.info.mfu_also == ("bf16",)
    record = bench.details()["fast_paths"]["fp8"]
    assert record["recipe"] == "rowwise" and record["layers"] == 8 and record["library"] == "torchao.float8"
    assert record["fast_accum"] == "forward product"  # fp8_fast_accum at its default
    assert bench.compute_dtype == torch.bfloat16
