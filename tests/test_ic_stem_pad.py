"""stem_pad_channels: the stem convolution on zero-padded channels is the same math as the unpadded model (outputs,
every gradient, a Bench's trained weights: bitwise on the CPU), keeps the model's parameters, and is refused where
it cannot apply."""

from __future__ import annotations

import copy

import pytest
import torch
import torchvision

from caraml.errors import BadInput
from caraml.runner import RunSpec, build_bench, resolve
from caraml.workloads.image_classification.stem import ZeroChannelPadConv, pad_stem


def _outputs_and_grads(model, x, y, bf16=False):
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = model(x)
    torch.nn.functional.cross_entropy(out.float(), y).backward()
    return out, {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("channels, channels_last", [(4, False), (8, True)])
def test_padded_stem_gives_the_same_outputs_and_gradients_bitwise(channels, channels_last):
    torch.manual_seed(0)
    plain = torchvision.models.resnet18(num_classes=10)
    padded = copy.deepcopy(plain)
    assert pad_stem(padded, channels) == f"conv1: 3 -> {channels} input channels, the extra ones zeros"
    assert isinstance(padded.conv1, ZeroChannelPadConv)
    assert padded.conv1.weight is padded.state_dict(keep_vars=True)["conv1.weight"]
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    plain, padded = plain.to(memory_format=fmt), padded.to(memory_format=fmt)
    x = torch.randn(4, 3, 32, 32).contiguous(memory_format=fmt)
    y = torch.randint(0, 10, (4,))
    out, grads = _outputs_and_grads(plain, x, y)
    out_padded, grads_padded = _outputs_and_grads(padded, x, y)
    assert torch.equal(out, out_padded)
    assert list(grads) == list(grads_padded)  # the same parameters, in the same order (the optimizer's)
    assert [n for n in grads if not torch.equal(grads[n], grads_padded[n])] == []
    assert padded.conv1.weight.shape == (64, 3, 7, 7)  # no extra weight channel exists to train


def test_in_bf16_the_padded_stem_differs_only_by_rounding():
    """bf16 convolutions on 3 and on 8 channels are different kernels: on values every kernel sums exactly (small
    integers) they agree bitwise, forward and weight gradient; on random values, within bf16's rounding."""
    conv = torch.nn.Conv2d(3, 16, 7, stride=2, padding=3, bias=False)
    padded = ZeroChannelPadConv(conv, 8)
    for exact in (True, False):
        with torch.no_grad():
            conv.weight.copy_(torch.randint(-1, 2, conv.weight.shape) if exact else torch.randn(conv.weight.shape))
        x = torch.randint(-1, 2, (1, 3, 8, 8)).float() if exact else torch.randn(2, 3, 16, 16)
        results = []
        for model in (conv, padded):
            conv.weight.grad = None
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(x)
            out.float().sum().backward()
            results.append((out, conv.weight.grad.clone()))
        (out, grad), (out_padded, grad_padded) = results
        if exact:
            assert torch.equal(out, out_padded) and torch.equal(grad, grad_padded)
        else:
            torch.testing.assert_close(out_padded, out, rtol=1e-2, atol=1e-2)
            torch.testing.assert_close(grad_padded, grad, rtol=1e-2, atol=1e-1)


def test_the_padded_input_and_weight_keep_their_memory_format(monkeypatch):
    conv = ZeroChannelPadConv(torch.nn.Conv2d(3, 4, 3), 8)
    seen, conv2d = [], torch.nn.functional.conv2d

    def spy(x, w, *rest):
        seen.append((x.shape[1], w.shape[1], x.is_contiguous(memory_format=torch.channels_last)))
        return conv2d(x, w, *rest)

    monkeypatch.setattr(torch.nn.functional, "conv2d", spy)
    conv(torch.randn(2, 3, 8, 8).contiguous(memory_format=torch.channels_last))
    conv(torch.randn(2, 3, 8, 8))
    assert seen == [(8, 8, True), (8, 8, False)]


def _bench(**given):
    params = {"model": "resnet18", "image_size": "32", "num_classes": "10", "batch_size": "4", "precision": "fp32",
              "channels_last": "on", "data": "synthetic-device", "device": "cpu", **given}
    return build_bench(RunSpec("image_classification", params))


def test_a_bench_with_a_padded_stem_trains_the_same_weights_and_says_so():
    plain, padded = _bench(), _bench(stem_pad_channels="8")
    for _ in range(2):
        plain.step()
        padded.step()
    assert padded.details()["stem_padded"] == "conv1: 3 -> 8 input channels, the extra ones zeros"
    assert "stem_padded" not in plain.details()
    trained, trained_padded = plain.model.state_dict(), padded.model.state_dict()
    assert list(trained) == list(trained_padded)
    assert all(torch.equal(trained[k], trained_padded[k]) for k in trained)
    # the unpadded Bench's FLOPs: the extra products are zeros, not work the model asks for
    assert padded.info.flops_per_unit == plain.info.flops_per_unit


def test_off_by_default_and_out_of_the_configuration_id():
    from handmade import config_id_of

    params = {"model": "resnet18", "batch_size": 16, "device": "auto"}
    assert resolve(RunSpec("image_classification", {})).config.stem_pad_channels == 0
    assert config_id_of("image_classification", {**params, "stem_pad_channels": 0}, "CPU", 1, 1) == config_id_of(
        "image_classification", params, "CPU", 1, 1)
    assert config_id_of("image_classification", {**params, "stem_pad_channels": 8}, "CPU", 1, 1) != config_id_of(
        "image_classification", params, "CPU", 1, 1)


@pytest.mark.parametrize("given, says", [
    ({"stem_pad_channels": "2"}, r"stem_pad_channels=2 must be 0 \(off\) or more than the images' 3 channels"),
    ({"stem_pad_channels": "-1"}, "too small"),
    ({"stem_pad_channels": "8", "backend": "poptorch", "precision": "16.16"},
     "use stem_pad_channels=0 with engine=poptorch"),
])
def test_refused_in_one_line(given, says):
    from caraml.workloads.image_classification import check_combination

    with pytest.raises(BadInput, match=says):
        cfg = resolve(RunSpec("image_classification", given)).config
        problem = check_combination(cfg)
        if problem:
            raise BadInput(problem)


def test_a_model_without_a_stem_on_three_channels_is_refused():
    with pytest.raises(BadInput, match="no convolution on the 3 image channels"):
        pad_stem(torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3)), 8)
    with pytest.raises(BadInput, match="pads its border with reflect"):
        pad_stem(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect")), 8)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_a_stem_padding_its_border_other_than_with_zeros_is_refused(mode):
    with pytest.raises(BadInput, match=f"pads its border with {mode}, not zeros"):
        pad_stem(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1, padding_mode=mode)), 8)


def test_channels_last_is_kept_where_the_pad_itself_returns_the_standard_layout(monkeypatch):
    """A torch whose F.pad returns a contiguous tensor for a channels-last one (a fake of it here; this torch keeps
    the layout itself): the padded input and weight are channels-last still, as cuDNN's NHWC kernels need."""
    from caraml.workloads.image_classification import stem

    pad = torch.nn.functional.pad
    monkeypatch.setattr(stem.F, "pad", lambda t, p: pad(t, p).contiguous())
    x = torch.randn(2, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    padded = stem._padded(x, (0, 0, 0, 0, 0, 5))
    assert padded.shape == (2, 8, 8, 8) and padded.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(padded[:, :3], x) and not padded[:, 3:].any()
    plain = stem._padded(torch.randn(2, 3, 8, 8), (0, 0, 0, 0, 0, 5))
    assert plain.is_contiguous()  # the standard layout stays standard
