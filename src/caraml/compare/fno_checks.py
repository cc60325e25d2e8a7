"""The FNO comparison's in-process checks (bench/fno_bench.py): PIC2D's nufft_backend=matrix against torchkbnufft,
and PIC1D's channels-last layout against channels-first, each under CARAML's matmul precision 'high' (TF32 on an
NVIDIA GPU) beside the floor TF32 sets. torch is imported when a check runs."""

from __future__ import annotations

import math

from caraml.compare.fno_points import FNORun

NUFFT_CHECK_SMOKE = {"width": 8, "modes": (4, 4), "particles": 512, "batch": 2}
NUFFT_TOLERANCE = 1e-4  # the matrix backend's results equal torchkbnufft's within this, relative


def _rel_diffs(a, b) -> tuple[float, float]:
    """|a - b| / |b| (norms: held to 1e-4) and max |a - b| / max |b| (elementwise: reported). Under TF32 the model's
    other products round inputs that differ in the last float32 bit a TF32 step apart now and then, whatever the
    backend, which moves single elements by ~1e-4 but not the norms."""
    a, b = a.double(), b.double()
    return (float((a - b).norm() / b.norm().clamp_min(1e-300)),
            float((a - b).abs().max() / b.abs().max().clamp_min(1e-300)))


def _operator_results(size: dict, backend: str, device) -> dict:
    """One spectral conv through CARAML's operator alone: forward to the kept kX, a fixed per-mode factor, inverse;
    backward from a fixed cotangent to the operator's input."""
    import torch

    from caraml.workloads.fno.model import ParticleIndexNUFFT

    op = ParticleIndexNUFFT(size["modes"], size["particles"], backend).to(device)
    gen = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(size["batch"], size["width"], size["particles"], generator=gen).to(device).requires_grad_(True)
    factor = torch.randn(size["batch"], size["width"], size["modes"][0], 2, generator=gen).to(device)
    spec = op(x, None, False)
    back = op.inverse(spec * factor, None, (size["particles"],))
    (back * torch.randn(back.shape, generator=gen).to(device)).sum().backward()
    return {"spectrum": spec.detach(), "inverse": back.detach(), "input_grad": x.grad}


def _model_results(pb, size: dict, backend: str, compiled: bool, x, y, input_noise: float = 0.0,
                   dse_layout: str = "channels-first", dse_backend: str = "matmul") -> dict:
    """The FNO (CARAML's initial weights from seed 0) on one batch: output, L1 loss gradients w.r.t. the input and
    every weight; input_noise: the input times 1 + input_noise * N(0, 1). dse_backend=triton(-fused): no input gradient
    (its kernels give the positions none)."""
    import torch

    from caraml.workloads.fno.bench import loss_fn
    from caraml.workloads.fno.model import build_model

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = build_model(pb, size["width"], size["modes"], pb.layers, particles=size["particles"],
                        nufft_backend=backend, dse_layout=dse_layout, dse_backend=dse_backend).to(x.device)
    forward = torch.compile(model) if compiled else model
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(9)).to(x.device)
    x = (x * (1 + input_noise * noise)).requires_grad_(dse_backend == "matmul")
    pred = forward(x)
    loss_fn(pb.loss)(pred, y).backward()
    return {"output": pred.detach(), **({"input_grad": x.grad} if x.requires_grad else {}),
            **{f"grad {name}": q.grad for name, q in model.named_parameters()}}


def compare(results: dict, reference: dict) -> dict:
    """Per quantity (the weights' gradients: the worst parameter, named) the norm-wise and the elementwise relative
    difference; pass when every norm-wise one is below 1e-4."""
    out, worst_weight = {}, None
    for which, index in (("rel_diff", 0), ("rel_diff_elementwise", 1)):
        diffs = {name: _rel_diffs(t, reference[name])[index] for name, t in results.items()}
        out[which] = {k: v for k, v in diffs.items() if not k.startswith("grad ")}
        weights = {k[len("grad "):]: v for k, v in diffs.items() if k.startswith("grad ")}
        if weights:
            out[which]["weight_grads_max"] = max(weights.values())
            worst_weight = worst_weight or max(weights, key=weights.get)  # the norm-wise one's
    worst = max(out["rel_diff"].values())
    return {**out, "worst_weight": worst_weight, "max_rel_diff": worst, "pass": worst < NUFFT_TOLERANCE}


def nufft_check(spec: dict, where: FNORun) -> dict:
    """CARAML's PIC2D operator with nufft_backend=matrix against torchkbnufft under CARAML's float32 matmul precision
    'high' (TF32 on an NVIDIA GPU; none on a CPU): the operator alone (spectrum, inverse, gradient w.r.t. its input)
    and the model on one batch from the same initial weights (output, gradients w.r.t. the input and the weights),
    matrix eager and compiled (spec 'compiled') against torchkbnufft eager. Each quantity's relative difference
    (norm-wise; weights: the worst parameter; the elementwise one beside it), pass/fail at 1e-4. Beside them the
    floor that TF32 sets for the model: torchkbnufft against itself with the input moved by 2^-24 (relative); a
    model check is within it when no further from torchkbnufft than max(1e-4, floor)."""
    import torch

    from caraml.workloads.fno.problems import PROBLEMS

    pb = PROBLEMS[spec["problem"]]
    size = NUFFT_CHECK_SMOKE if where.smoke else {"width": pb.width, "modes": pb.modes, "particles": pb.particles,
                                                   "batch": pb.batch_size}
    device = torch.device(where.device)
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")  # CARAML's: TF32 matmuls wherever the device has them
    try:
        reference = _operator_results(size, "torchkbnufft", device)
        checks = {"operator": compare(_operator_results(size, "matrix", device), reference)}
        gen = torch.Generator(device="cpu").manual_seed(0)
        p = size["particles"]
        x = torch.randn(size["batch"], pb.in_channels, p, generator=gen)
        x[:, :pb.position_channels] = 2 * torch.pi * torch.rand(size["batch"], pb.position_channels, p, generator=gen)
        y = torch.randn(size["batch"], pb.out_channels, p, generator=gen)
        x, y = x.to(device), y.to(device)
        reference = _model_results(pb, size, "torchkbnufft", False, x, y)
        checks["model_eager"] = compare(_model_results(pb, size, "matrix", False, x, y), reference)
        if spec.get("compiled"):
            checks["model_compiled"] = compare(_model_results(pb, size, "matrix", True, x, y), reference)
        # what TF32 alone moves: torchkbnufft against itself, the input moved by float32 rounding
        floor = compare(_model_results(pb, size, "torchkbnufft", False, x, y, input_noise=2.0 ** -24), reference)
    finally:
        torch.set_float32_matmul_precision(previous)
        torch._dynamo.reset()
    # the model's other TF32 products move its weight gradients by about 1e-4 for a float32-rounding change of the
    # input (CPU emulation: 1.2e-4): a model-level difference no larger than that is all TF32's, none the backend's
    bound = max(NUFFT_TOLERANCE, floor["max_rel_diff"])
    for name, check in checks.items():
        check["within_tf32_floor"] = check["pass"] if name == "operator" else check["max_rel_diff"] <= bound
    tf32 = device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8  # what 'high' means there
    return {"status": "ok", "matmul_precision": "high", "tf32": tf32, "tolerance": NUFFT_TOLERANCE,
            "size": {k: list(v) if isinstance(v, tuple) else v for k, v in size.items()}, "checks": checks,
            "tf32_floor": {k: floor[k] for k in ("rel_diff", "rel_diff_elementwise", "max_rel_diff")},
            "max_rel_diff": max(c["max_rel_diff"] for c in checks.values()),
            "equal_within_1e-4": all(c["pass"] for c in checks.values()),
            "within_tf32_floor": all(c["within_tf32_floor"] for c in checks.values())}


# PIC1D: the channels-last layout against channels-first ----------------------------------------------------
LAYOUT_CHECK_SMOKE = {"width": 8, "modes": (4,), "particles": 512, "batch": 2}


def layout_check(spec: dict, where: FNORun) -> dict:
    """PIC1D's model in dse_layout=channels-last against channels-first on one batch from the same weights, eager,
    under matmul precision highest and high (TF32 on GPUs, CARAML's), and channels-last compiled under high, beside
    the floor TF32 sets (channels-first against itself, the input moved by float32 rounding); pass/fail at 1e-4
    relative (norm-wise)."""
    import torch

    from caraml.workloads.fno.problems import PROBLEMS

    pb, device = PROBLEMS["PIC1D"], torch.device(where.device)
    size = LAYOUT_CHECK_SMOKE if where.smoke else {"width": pb.width, "modes": pb.modes, "particles": pb.particles,
                                                    "batch": pb.batch_size}
    gen = torch.Generator(device="cpu").manual_seed(5)
    x = torch.randn(size["batch"], pb.in_channels, size["particles"], generator=gen)
    x[:, 0] = 2 * math.pi * torch.rand(size["batch"], size["particles"], generator=gen)
    y = torch.randn(size["batch"], pb.out_channels, size["particles"], generator=gen)
    x, y = x.to(device), y.to(device)
    before, checks, refs = torch.get_float32_matmul_precision(), {}, {}
    try:
        for precision in ("highest", "high"):
            torch.set_float32_matmul_precision(precision)
            refs[precision] = ref = _model_results(pb, size, "torchkbnufft", False, x, y, dse_layout="channels-first")
            now = _model_results(pb, size, "torchkbnufft", False, x, y, dse_layout="channels-last")
            checks[precision] = compare(now, ref)
            if precision == "high":  # TF32's own error, each layout against channels-first under highest
                tf32_error = {"channels-first": compare(ref, refs["highest"]),
                              "channels-last": compare(now, refs["highest"])}
        if spec.get("compiled"):  # channels-last compiled (the fused one-channel head too) against eager, high
            checks["high, compiled"] = compare(_model_results(pb, size, "torchkbnufft", True, x, y,
                                                               dse_layout="channels-last"), ref)
        # the DSE kernels (CUDA only): eager under highest and high, compiled under high
        for backend in spec.get("dse_backends", ()) if device.type == "cuda" else ():
            for precision, compiled in (("highest", False), ("high", False), ("high", True)):
                torch.set_float32_matmul_precision(precision)
                checks[f"{precision}, {backend}" + (", compiled" if compiled else "")] = compare(_model_results(
                    pb, size, "torchkbnufft", compiled, x, y, dse_layout="channels-last", dse_backend=backend),
                    refs[precision])
            torch.set_float32_matmul_precision("high")
        floor = compare(_model_results(pb, size, "torchkbnufft", False, x, y, input_noise=2.0 ** -24,
                                        dse_layout="channels-first"), ref)
    finally:
        torch.set_float32_matmul_precision(before)
    tf32 = device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8
    # under TF32 the layouts round different operands (V and c/P Y, against c/P V): what they may differ by is
    # TF32's own error, measured here as channels-first's under high against highest (floor: the input moved)
    bound = max(NUFFT_TOLERANCE, floor["max_rel_diff"], tf32_error["channels-first"]["max_rel_diff"])
    within = {k: c["max_rel_diff"] <= bound for k, c in checks.items() if k.startswith("high")}
    return {"status": "ok", "tf32": tf32, "tolerance": NUFFT_TOLERANCE,
            "size": {k: list(v) if isinstance(v, tuple) else v for k, v in size.items()},
            "layout_checks": checks, "floor_of": "channels-first",
            "tf32_floor": {k: floor[k] for k in ("rel_diff", "max_rel_diff")},
            "tf32_error": {k: {"rel_diff": c["rel_diff"], "max_rel_diff": c["max_rel_diff"]}
                           for k, c in tf32_error.items()},
            "equal_within_1e-4": {k: c["pass"] for k, c in checks.items()},
            "within_tf32_error": within, "high_within_tf32_floor": all(within.values())}
