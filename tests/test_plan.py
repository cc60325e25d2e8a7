"""`caraml plan` (caraml.estimate): memory per device, pipeline bubble, communication and time against numbers
worked out by hand here; the sweep's dry run shows the estimate and flags points that do not fit."""

from __future__ import annotations

import json

import pytest
from conftest import cli

from caraml import estimate, workloads
from caraml.estimate import llm
from caraml.runner import RunSpec, resolve

SMALL = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "ffn_hidden_size": 256, "seq_length": 64,
         "max_position_embeddings": 64, "vocab_size": 500, "micro_batch_size": 2, "model_size": "custom",
         "recompute": "none", "precision": "fp32"}


def _cfg(**params):
    return resolve(RunSpec("llm_training", {**SMALL, **params})).config


def test_bubble():
    assert llm.bubble(1, 8) == 0
    assert llm.bubble(4, 4) == pytest.approx(3 / 7)
    assert llm.bubble(2, 64) == pytest.approx(1 / 65)


def test_memory_of_one_device_by_hand():
    h, f, s, b = 64, 256, 64, 2
    per_layer = (4 * h * h + 4 * h) + (2 * h * f + f + h) + 4 * h  # attention, MLP, two LayerNorms: 49,984
    params = 2 * per_layer + 512 * h + 2 * h  # vocabulary 500 padded to 512, final LayerNorm: 132,864
    mem = llm.memory(_cfg(), llm.Layout(devices=1, devices_per_node=1, tp=1, pp=1, dp=1))
    assert mem["parameters_per_device"] == params == 132_864
    assert mem["states_bytes"] == 16 * params  # fp32 parameters, gradients, two AdamW moments
    assert mem["half_copies_bytes"] == 0  # fp32: no autocast copies
    # per token and layer, fp32 eager (a = 4): norms' and q/k/v/MLP inputs 4*a*h + the norms' statistics 16; q/k/v
    # product 3*a*h, rotated q and k 2*a*h, attention output a*h, log-sum-exp 4 per head, GELU in and out 2*a*f
    per_token = (4 * 4 * h + 16) + (6 * 4 * h + 2 * 4 * f + 4 * 4)
    assert mem["activations_bytes"] == 2 * per_token * s * b == 1_187_840
    # token ids 8, final norm's and output layer's inputs 2*a*h, statistics 8; the loss's worst moment: 12 bytes
    # per logit (the fp32 log-softmax kept, the incoming gradient and the result)
    assert mem["loss_bytes"] == (8 + 2 * 4 * h + 8) * b * s + 12 * 512 * b * s == 854_016
    assert mem["gradients_bytes"] == 4 * params and mem["accumulated_gradients_bytes"] == 0
    assert mem["peak_at"] == "backward"  # the gradients are not there yet: 12 bytes per parameter
    assert mem["total_bytes"] == 12 * params + 1_187_840 + 854_016 + llm.CUDA_WORKSPACE_BYTES
    bf16 = llm.memory(_cfg(precision="bf16", recompute="selective", fused_loss="chunked"),
                      llm.Layout(devices=1, devices_per_node=1, tp=1, pp=1, dp=1))
    assert bf16["half_copies_bytes"] == 2 * params
    # a = 2; selective recompute drops only the log-sum-exp (eager keeps the attention output as wo's input)
    assert bf16["activations_bytes"] == 2 * ((8 * h + 16) + (12 * h + 4 * f)) * s * b
    full = llm.memory(_cfg(recompute="full"), llm.Layout(devices=1, devices_per_node=1, tp=1, pp=1, dp=1))
    assert full["activations_bytes"] == (2 * 4 * h + per_token) * s * b  # each block's input; one block rebuilt
    compiled = llm.memory(_cfg(precision="bf16", compile="inductor"),
                          llm.Layout(devices=1, devices_per_node=1, tp=1, pp=1, dp=1))
    # inductor keeps the norms' statistics in bf16 and, for the loss, the bf16 logits and their gradient
    assert compiled["activations_bytes"] == 2 * ((8 * h + 8) + (12 * h + 4 * f + 16)) * s * b
    assert compiled["loss_bytes"] == (8 + 4 * h + 8) * b * s + 4 * 512 * b * s


def test_sharded_states_and_a_pipeline_by_hand():
    cfg = _cfg(num_layers=4, tp=2, pp=2, grad_accumulation=4, recompute="selective")
    layout = llm.Layout(devices=8, devices_per_node=4, tp=2, pp=2, dp=2)
    mem = llm.memory(cfg, layout)
    per_layer = 49_984
    params = 2 * per_layer / 2 + 512 * 64 / 2  # 2 layers per stage, tp halves them and the embedding
    assert mem["parameters_per_device"] == params == 66_368
    assert mem["states_bytes"] == 16 * params / 2 + 4 * params  # sharded over dp = 2, gathered in the step
    # sequence parallel: everything / tp; 2 layers per stage; 2 micro-batches in flight on the first stage
    per_token = ((4 * 4 * 64 + 16) + (6 * 4 * 64 + 2 * 4 * 256 + 4 * 4 - 4 * 4)) / 2  # fp32, selective, / tp
    assert mem["activations_bytes"] == per_token * 64 * 2 * 2 * 2 == 1_183_744
    assert mem["accumulated_gradients_bytes"] == 4 * params / 2  # 4 micro-batches: the earlier ones' gradients
    assert mem["loss_bytes"] == 0  # the first stage is the busiest


def test_communication_and_time_by_hand():
    cfg = _cfg(num_layers=4, tp=2, pp=2, grad_accumulation=4, recompute="selective", precision="bf16")
    layout = llm.Layout(devices=8, devices_per_node=4, tp=2, pp=2, dp=2)
    act = 2 * 64 * 64 * 2  # one micro-batch of the residual stream in bf16: 16,384 bytes
    comm = llm.communication(cfg, layout)
    assert comm["tp_bytes"] == 4 * 2 * (1 / 2) * act * 2 * 4 == 524_288  # 4 all-reduces x 2 layers x 4 micro
    assert comm["pp_bytes"] == 2 * act / 2 * 4 == 65_536
    assert comm["dp_bytes"] == 2 * (1 / 2) * 4 * 66_368 == 265_472
    assert llm.links(layout) == {"tp": "intra", "dp": "intra", "pp": "inter"}
    profile = {"peak_tflops": {"bf16": 100.0}, "links_gbps": {"intra_node": 100.0, "inter_node": 10.0},
               "memory_per_device_gb": 1}
    est = llm.estimate(cfg, layout, profile, efficiency=0.5)
    per_token = 6 * (4 * (4 * 64 * 64 + 2 * 64 * 256) + 512 * 64) + 12 * 4 * 64 * 64 + 4 * 4 * 64 * 64
    tokens = 2 * 2 * 4 * 64  # dp x micro-batch x micro-batches x sequence
    compute = tokens * per_token / 8 / (100e12 * 0.5) / (1 - 0.2)
    assert est["compute_s"] == pytest.approx(compute) and est["bubble"] == pytest.approx(0.2)
    time = compute + 524_288 / 100e9 + 65_536 / 10e9 + 265_472 / 100e9
    assert est["time_per_iteration_s"] == pytest.approx(time)
    assert est["tokens_per_s"] == pytest.approx(tokens / time) and est["fits"] is True
    caraml = 24 * 4 * 16 * 64 * 4 * 64 ** 2 * (1 + 64 / (6 * 64) + 512 / (16 * 4 * 64))  # f = 4: recompute on
    assert est["tflops_caraml_per_device"] == pytest.approx(caraml / (time * 8 * 1e12))
    del profile["links_gbps"]["inter_node"]
    unknown = llm.estimate(cfg, layout, profile, efficiency=0.5)
    assert unknown["time_per_iteration_s"] is None and unknown["missing_links"] == ["inter_node"]


def test_plan_command_text_and_json():
    out = cli("plan", "llm_training", "--preset", "13B", "--system", "JUPITER", "--nodes", "44", check=0).stdout
    assert "44 node(s), 176 devices: tp=2 pp=2 dp=44" in out and "pipeline bubble" in out and "1.5%" in out
    assert "fits" in out and "tokens/s" in out and "inter-node link, 25 GB/s" in out
    est = json.loads(cli("plan", "llm_training", "--preset", "800M", "--system", "H200", "--json", check=0).stdout)
    assert est["system"] == "H200" and est["layout"]["dp"] == 1 and est["bubble"] == 0
    assert est["peak_tflops"] == 989.4 and est["tokens_per_s"] > 0


@pytest.mark.parametrize("args,needle", [
    (("plan", "image_classification"), "caraml plan estimates llm_training; image_classification has no estimate"),
    (("plan", "llm_training", "--preset", "13B", "--system", "H200"), "tp*pp = 2*2 = 4 does not divide the 1"),
    (("plan", "llm_training", "--nodes", "0"), "--nodes 0 is not valid"),
    (("plan", "llm_training", "--efficiency", "2"), "--efficiency 2 is not valid"),
])
def test_plan_bad_input_is_one_line(args, needle):
    proc = cli(*args, check=2)
    assert needle in proc.stderr.strip().splitlines()[-1]


def test_the_dry_run_shows_estimates_and_flags_what_does_not_fit():
    text = cli("sweep", "llm_training", "--tag", "800M", "--system", "A100", "micro_batch_size=32", "global_batch=128",
               "--dry-run", check=0).stdout
    assert "WILL NOT FIT (37 GiB)" in text and "tokens/s" in text
    points = json.loads(cli("sweep", "llm_training", "--tag", "800M", "--system", "A100", "global_batch=16",
                            "--dry-run", "--json", check=0).stdout)
    assert points[0]["estimate"]["fits"] is True and points[0]["estimate"]["layout"]["dp"] == 4
    fno = json.loads(cli("sweep", "fno", "--tag", "smoke", "--dry-run", "--json", check=0).stdout)
    assert "estimate" not in fno[0]


def test_a_profile_link_field_must_be_numbers(tmp_path, monkeypatch):
    from caraml import systems
    from caraml.errors import BadInput

    (tmp_path / "X.toml").write_text('tag = "X"\n[links_gbps]\nintra_node = "fast"\n')
    monkeypatch.setenv("CARAML_SYSTEMS_PATH", str(tmp_path))
    systems._load_all.cache_clear()
    with pytest.raises(BadInput, match="links_gbps"):
        systems.profiles()
    systems._load_all.cache_clear()


def test_estimate_of_a_resolved_point_matches_the_layout():
    wl = workloads.get("llm_training")
    values = resolve(RunSpec("llm_training", {}, "800M")).values
    est = estimate.estimate(wl, values, {"devices_per_node": 4, "peak_tflops": {"fp16": 312.0}}, 4)
    assert est["layout"]["dp"] == 4 and est["fits"] is None and est["compute_s"] > 0
    assert est["time_per_iteration_s"] is None and est["missing_links"] == ["intra_node"]  # dp's gradients


def test_the_gpu_bench_sets_the_plans_time_beside_the_measured_one():
    from caraml.compare import plan_check

    values = resolve(RunSpec("llm_training", {"precision": "bf16", "micro_batch_size": 16}, "800M")).values
    est = plan_check.plan_estimate(values, "H200")
    row = plan_check.plan_time(values, 2 * est["time_per_iteration_s"], "H200")
    assert row["plan_time_per_iteration_s"] == est["time_per_iteration_s"] > 0
    assert row["time_vs_plan"] == pytest.approx(2.0) and row["plan_tokens_per_s"] == est["tokens_per_s"]
    assert plan_check.plan_time({"hidden_size": "wide"}, 1.0, "H200")["time_vs_plan"] is None  # no estimate
    assert plan_check.plan_memory_gib(values, "H200") == pytest.approx(est["memory"]["total_bytes"] / 2 ** 30)
