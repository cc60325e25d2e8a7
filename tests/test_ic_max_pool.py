"""max_pool_impl=aten: ATen's max-pool kernels kept under torch.compile are the same math as the model's MaxPool2d
(outputs and gradients bitwise on the CPU, ties included, eager and compiled), inductor calls them instead of
lowering its own, and the parameter is refused where it cannot apply."""

from __future__ import annotations

import copy

import pytest
import torch
import torchvision

from caraml.errors import BadInput
from caraml.runner import RunSpec, build_bench, resolve

needs_custom_op = pytest.mark.skipif(not hasattr(torch.library, "custom_op"),
                                     reason="torch.library.custom_op is torch >= 2.4 (older ones are refused)")


def _pool_and_grad(pool, x, grad):
    x = x.detach().requires_grad_()
    out = pool(x)
    (dx,) = torch.autograd.grad(out, x, grad)
    return out, dx


@needs_custom_op
@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=pytest.mark.subprocess)],  # inductor: g++
                         ids=["eager", "compiled"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_the_same_outputs_and_gradients_bitwise_ties_included(compiled, channels_last):
    from caraml.workloads.image_classification.max_pool import AtenMaxPool2d

    torch.manual_seed(0)
    pool = torch.nn.MaxPool2d(3, 2, 1)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randint(-2, 3, (2, 8, 15, 16)).float().contiguous(memory_format=fmt)  # most windows tie
    aten = AtenMaxPool2d(pool)
    if compiled:
        torch._dynamo.reset()
        aten = torch.compile(aten)
    grad = torch.randn(pool(x).shape)
    out, dx = _pool_and_grad(pool, x, grad)
    out_aten, dx_aten = _pool_and_grad(aten, x, grad)
    assert torch.equal(out, out_aten) and torch.equal(dx, dx_aten)
    assert dx_aten.is_contiguous(memory_format=fmt)  # the backward writes in the input's layout


@needs_custom_op
@pytest.mark.subprocess  # inductor's C++ compiler
def test_inductor_calls_atens_kernels_instead_of_lowering_its_own():
    from torch._inductor.utils import run_and_get_code

    from caraml.workloads.image_classification.max_pool import AtenMaxPool2d

    torch._dynamo.reset()
    x = torch.randn(2, 4, 8, 8, requires_grad=True)

    def step(module):
        compiled = torch.compile(module)
        return lambda: compiled(x).sum().backward()

    _, (forward, backward) = run_and_get_code(step(AtenMaxPool2d(torch.nn.MaxPool2d(3, 2, 1))))
    assert "caraml.max_pool2d.default" in forward and "caraml.max_pool2d_backward.default" in backward
    torch._dynamo.reset()
    _, (forward, backward) = run_and_get_code(step(torch.nn.MaxPool2d(3, 2, 1)))
    assert "caraml" not in forward + backward  # the model's own pool: inductor's kernels


@needs_custom_op
def test_a_resnet_with_atens_pool_gives_the_same_outputs_and_gradients_and_keeps_its_parameters():
    from caraml.workloads.image_classification.max_pool import AtenMaxPool2d, use_aten_max_pool

    torch.manual_seed(0)
    plain = torchvision.models.resnet18(num_classes=10).to(memory_format=torch.channels_last)
    aten = copy.deepcopy(plain)
    assert use_aten_max_pool(aten) == "maxpool" and isinstance(aten.maxpool, AtenMaxPool2d)
    assert list(aten.state_dict()) == list(plain.state_dict())
    x = torch.randn(4, 3, 32, 32).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (4,))
    results = []
    for model in (plain, aten):
        out = model(x)
        torch.nn.functional.cross_entropy(out, y).backward()
        results.append((out, {n: p.grad for n, p in model.named_parameters()}))
    (out, grads), (out_aten, grads_aten) = results
    assert torch.equal(out, out_aten)
    assert [n for n in grads if not torch.equal(grads[n], grads_aten[n])] == []


def _bench(**given):
    params = {"model": "resnet18", "image_size": "32", "num_classes": "10", "batch_size": "4", "precision": "fp32",
              "channels_last": "on", "data": "synthetic-device", "device": "cpu", **given}
    return build_bench(RunSpec("image_classification", params))


@needs_custom_op
def test_a_bench_with_atens_pool_trains_the_same_weights_and_says_so():
    plain, aten = _bench(), _bench(max_pool_impl="aten")
    for _ in range(2):
        plain.step()
        aten.step()
    assert aten.details()["max_pool_aten"] == "maxpool" and "max_pool_aten" not in plain.details()
    trained, trained_aten = plain.model.state_dict(), aten.model.state_dict()
    assert list(trained) == list(trained_aten)
    assert all(torch.equal(trained[k], trained_aten[k]) for k in trained)


def test_compiler_by_default_and_out_of_the_configuration_id():
    from handmade import config_id_of

    params = {"model": "resnet18", "batch_size": 16, "device": "auto"}
    assert resolve(RunSpec("image_classification", {})).config.max_pool_impl == "compiler"
    assert config_id_of("image_classification", {**params, "max_pool_impl": "compiler"}, "CPU", 1, 1) == config_id_of(
        "image_classification", params, "CPU", 1, 1)
    assert config_id_of("image_classification", {**params, "max_pool_impl": "aten"}, "CPU", 1, 1) != config_id_of(
        "image_classification", params, "CPU", 1, 1)


@pytest.mark.parametrize("given, says", [
    ({"max_pool_impl": "cudnn"}, "max_pool_impl"),
    ({"max_pool_impl": "aten", "backend": "poptorch", "precision": "16.16"},
     "use max_pool_impl=compiler with engine=poptorch"),
])
def test_refused_in_one_line(given, says):
    from caraml.workloads.image_classification import check_combination

    with pytest.raises(BadInput, match=says):
        cfg = resolve(RunSpec("image_classification", given)).config
        problem = check_combination(cfg)
        if problem:
            raise BadInput(problem)


def test_an_older_torch_is_refused_naming_the_release_that_has_it(monkeypatch):
    from caraml.kit import torch_features as tf
    from caraml.workloads.image_classification import torch_features

    cfg = resolve(RunSpec("image_classification", {"max_pool_impl": "aten"})).config
    assert tf.CUSTOM_OP in torch_features(cfg, None)
    assert tf.CUSTOM_OP not in torch_features(resolve(RunSpec("image_classification", {})).config, None)
    monkeypatch.delattr(torch.library, "custom_op")
    with pytest.raises(BadInput, match=r"needs torch.library.custom_op, in torch 2.4 or newer.*max_pool_impl=compiler"):
        tf.require(torch_features(cfg, None))


@needs_custom_op
def test_a_model_without_max_pool_or_one_returning_its_indices_is_refused():
    from caraml.workloads.image_classification.max_pool import use_aten_max_pool

    with pytest.raises(BadInput, match="has no MaxPool2d; use max_pool_impl=compiler"):
        use_aten_max_pool(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3)))
    with pytest.raises(BadInput, match="returns its indices"):
        use_aten_max_pool(torch.nn.Sequential(torch.nn.MaxPool2d(2, return_indices=True)))
