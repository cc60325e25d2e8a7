"""The GPT's fused kernels (fused.py), each against the plain path on the CPU: values and gradients; the levers
in a training run; their layout refusals; ids of points without them unchanged."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from caraml.workloads.llm_training import fused


def _grads(fn, *tensors):
    out = fn(*tensors)
    (out if out.ndim == 0 else (out * torch.linspace(0.5, 1.5, out.numel()).view_as(out)).sum()).backward()
    return out.detach(), [t.grad.clone() for t in tensors]


def _leaves(*shapes, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=gen, dtype=torch.float64).requires_grad_() for s in shapes]


@pytest.mark.parametrize("chunk", [5, 7, 64])
def test_chunked_linear_cross_entropy_equals_head_then_cross_entropy(chunk):
    h, w = _leaves((2, 13, 16), (40, 16))
    targets = torch.randint(0, 40, (2, 13), generator=torch.Generator().manual_seed(1))
    plain, plain_grads = _grads(lambda a, b: F.cross_entropy((a @ b.t()).flatten(0, 1), targets.flatten()), h, w)
    h2, w2 = (t.detach().clone().requires_grad_() for t in (h, w))
    fast, fast_grads = _grads(lambda a, b: fused.chunked_linear_cross_entropy(a, b, targets, chunk=chunk), h2, w2)
    assert torch.allclose(plain, fast, atol=1e-10)
    for a, b in zip(plain_grads, fast_grads):
        assert torch.allclose(a, b, atol=1e-10)


def test_chunked_loss_under_bf16_autocast_keeps_the_parameter_dtypes():
    h = torch.randn(32, 16, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(50, 16, requires_grad=True)  # fp32 master weight
    t = torch.randint(0, 50, (32,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = fused.chunked_linear_cross_entropy(h, w, t, chunk=8)
        ref = F.cross_entropy(F.linear(h, w).float(), t)
    loss.backward()
    assert loss.dtype == torch.float32 and abs(loss.item() - ref.item()) < 2e-2
    assert h.grad.dtype == torch.bfloat16 and w.grad.dtype == torch.float32


def test_gelu_epilogue_equals_linear_then_gelu():
    x, w, b = _leaves((3, 5, 16), (24, 16), (24,))
    plain, plain_grads = _grads(lambda a, c, d: F.gelu(F.linear(a, c, d)), x, w, b)
    x2, w2, b2 = (t.detach().clone().requires_grad_() for t in (x, w, b))
    linear = nn.Linear(16, 24).double()
    linear.weight, linear.bias = nn.Parameter(w2), nn.Parameter(b2)
    fast, _ = _grads(lambda a: fused.linear_gelu(a, linear), x2)
    assert fused.epilogue_gelu_kind("cpu") == "none"  # the exact GELU on the CPU, cuBLASLt's tanh on CUDA
    assert torch.allclose(plain, fast, atol=1e-10)
    for a, got in zip(plain_grads, (x2.grad, linear.weight.grad, linear.bias.grad)):
        assert torch.allclose(a, got, atol=1e-9)


def test_the_tanh_derivative_matches_autograd(monkeypatch):
    """The CUDA branch of the hand-written backward (tanh GELU), checked on the CPU against autograd's."""
    monkeypatch.setattr(fused, "epilogue_gelu_kind", lambda kind: "tanh")
    monkeypatch.setattr(torch, "_addmm_activation", lambda b, x, w, use_gelu: F.gelu(torch.addmm(b, x, w),
                                                                                    approximate="tanh"))
    x, w, b = _leaves((7, 16), (24, 16), (24,))
    plain, plain_grads = _grads(lambda a, c, d: F.gelu(F.linear(a, c, d), approximate="tanh"), x, w, b)
    x2, w2, b2 = (t.detach().clone().requires_grad_() for t in (x, w, b))
    fast, fast_grads = _grads(lambda a, c, d: fused.LinearGelu.apply(a, c, d, torch.float64), x2, w2, b2)
    assert torch.allclose(plain, fast, atol=1e-10)
    for a, got in zip(plain_grads, fast_grads):
        assert torch.allclose(a, got, atol=1e-9)


def test_add_layer_norm_equals_add_then_norm():
    x, y = _leaves((2, 6, 16), (2, 6, 16))
    norm = nn.LayerNorm(16).double()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    norm2 = nn.LayerNorm(16).double()
    norm2.load_state_dict(norm.state_dict())

    def plain(a, b):
        s = a + b
        return s * 0.3 + norm(s)  # the sum goes on (the residual) and into the norm: both gradients arrive

    def fast(a, b):
        s, n = fused.add_layer_norm(a, b, norm2)
        return s * 0.3 + n

    ref, ref_grads = _grads(plain, x, y)
    x2, y2 = (t.detach().clone().requires_grad_() for t in (x, y))
    got, got_grads = _grads(fast, x2, y2)
    assert torch.allclose(ref, got, atol=1e-10)
    for a, b in zip(ref_grads + [norm.weight.grad, norm.bias.grad], got_grads + [norm2.weight.grad, norm2.bias.grad]):
        assert torch.allclose(a, b, atol=1e-9)


def test_training_with_every_lever_gives_the_plain_losses():
    from caraml.crosscheck import train_losses

    plain = train_losses({}, 4)
    fast = train_losses({"fused_loss": "chunked", "gelu_epilogue": True, "fused_norm_residual": True}, 4)
    assert plain[-1] < plain[0]
    assert fast == pytest.approx(plain, rel=1e-5)


def test_the_record_names_what_ran_and_the_fallback():
    from caraml.runner import RunSpec, build_bench

    bench = build_bench(RunSpec("llm_training", {"fused_loss": "liger", "gelu_epilogue": "true"}, "smoke"),
                        device="cpu")
    bench.step()
    fast = bench.details()["fast_paths"]
    assert fast["fused_loss"] == {"asked": "liger", "in_use": "chunked (liger needs a CUDA GPU; this run is on cpu)"}
    assert fast["gelu_epilogue"]["gelu"] == "exact" and fast["fp8"] is None and not fast["fused_norm_residual"]
    plain = build_bench(RunSpec("llm_training", {}, "smoke"), device="cpu").details()["fast_paths"]
    assert plain == {"fp8": None, "fused_loss": None, "gelu_epilogue": None, "fused_norm_residual": False}


@pytest.mark.parametrize("params,devices,needle", [
    ({"fused_loss": "chunked", "tp": 2}, 2, "fused_loss=chunked runs with tp=1 and pp=1"),
    ({"fused_loss": "chunked"}, 2, "not wired with the distributed optimizer over dp=2"),
    ({"gelu_epilogue": "true", "activation": "swiglu"}, 1, "gelu_epilogue=true needs activation=gelu"),
    ({"fused_norm_residual": "true", "tp": 2}, 2, "run with tp=1"),
    ({"precision": "fp8", "tp": 2}, 2, "precision=fp8 runs with tp=1"),
    ({"precision": "fp8", "gelu_epilogue": "true"}, 1, "would bypass precision=fp8"),
    ({"fp8_fast_accum": "true"}, 1, "fp8_fast_accum=true applies to precision=fp8's float8 products"),
    ({"fp8_recipe": "rowwise"}, 1, "fp8_recipe=rowwise applies to precision=fp8's float8 products; this run has "
                                   "precision=fp32"),
    ({"fp8_recipe": "rowwise_with_gw_hp", "precision": "fp32"}, 1, "fp8_recipe=rowwise_with_gw_hp applies to"),
])
def test_layouts_the_levers_refuse(params, devices, needle):
    from caraml.runner import RunSpec, resolve
    from caraml.workloads.llm_training import check_launch

    cfg = resolve(RunSpec("llm_training", params, "smoke")).config
    assert needle in check_launch(cfg, devices)
    ddp = {"fused_loss": "chunked", "distributed_optimizer": "false"}
    assert check_launch(resolve(RunSpec("llm_training", ddp, "smoke")).config, 2) is None


def test_ids_of_points_without_the_new_parameters_are_unchanged():
    """The new parameters at their defaults stay out of the id: the ids computed before they existed."""
    from handmade import config_id_of

    from caraml.runner import RunSpec, resolve

    def cid(preset, **params):
        return config_id_of("llm_training", resolve(RunSpec("llm_training", params, preset)).values, "CPU", 1, 1)

    before = {"mixed_precision": "autocast", "attention_dropout": 0.0, "hidden_dropout": 0.0,  # the former 800M
              "distributed_optimizer": "fsdp", "caraml_config": "none"}
    assert cid("smoke") == "4cc437d2c3670039" and cid("800M", **before) == "5af6287258196d12"  # by commit 207c79c
    assert cid("smoke", fused_loss="chunked") != cid("smoke") != cid("smoke", precision="fp8")
    assert cid("smoke", precision="fp8", fp8_recipe="rowwise") != cid("smoke", precision="fp8")
    assert cid("smoke", precision="fp8", fp8_fast_accum=True) != cid("smoke", precision="fp8")


def test_a_sweep_writes_new_parameters_only_when_they_are_not_the_default():
    from caraml.campaign.expand import SweepPoint
    from caraml.campaign.launchers import caraml_run_args
    from caraml.runner import RunSpec, resolve

    def args(**params):
        values = resolve(RunSpec("llm_training", params, "smoke")).values
        return caraml_run_args(SweepPoint("x", "llm_training", "CPU", "smoke", values), "/r")

    plain = args()
    assert not any(a.startswith(("fp8_recipe=", "fused_loss=", "gelu_epilogue=")) for a in plain)
    assert "fused_loss=chunked" in args(fused_loss="chunked") and "precision=fp32" in plain


def test_liger_falls_back_to_chunked_under_a_triton_with_its_known_fault(monkeypatch):
    """Liger-Kernel#916: an illegal memory access (it killed the H200 run) under Triton 3.5+; older ones try it."""
    monkeypatch.setattr(fused, "triton_version", lambda: (3, 5))
    fn, in_use = fused.loss_backend("liger", torch.device("cuda"))
    assert fn is fused.chunked_linear_cross_entropy
    assert in_use.startswith("chunked (liger's fused linear cross-entropy faults") and "Liger-Kernel#916" in in_use
    monkeypatch.setattr(fused, "triton_version", lambda: (3, 4))
    assert fused.liger_known_broken() is None
    monkeypatch.setattr(fused, "triton_version", lambda: None)  # no Triton: liger does not import, said so then
    assert fused.liger_known_broken() is None


@pytest.mark.parametrize("device_type", ["cpu", "mps", "xpu"])
def test_liger_off_cuda_falls_back_naming_the_device(monkeypatch, device_type):
    """Liger's kernel is Triton on CUDA: any other device gets the chunked loss, the device named, liger not tried."""
    monkeypatch.setattr(fused, "liger_loss", lambda: pytest.fail("liger tried off CUDA"))
    fn, in_use = fused.loss_backend("liger", torch.device(device_type))
    assert fn is fused.chunked_linear_cross_entropy
    assert in_use == f"chunked (liger needs a CUDA GPU; this run is on {device_type})"
