"""The FNO comparison's plain loop (bench/fno_bench.py): caraml's FNO model code (or neuraloperator's FNO) with
no harness around it, Adam, the problem's loss, two synthetic batches on the device alternated; each point built
fresh after torch._dynamo.reset(). torch is imported when a loop is built."""

from __future__ import annotations

import math
import time

from caraml.compare.fno_points import SMOKE, FNORun


def neuralop_fno(pb, size: dict):
    """neuraloperator's FNO as close to CARAML's as its options go: one linear lift, linear 1x1 skips, no
    positional embedding, no channel MLP, projection 4 x width; the same kept modes (its n_modes counts all kept
    frequencies of a dim, the last before the rfft halving: 2 m - 2 keeps m)."""
    from neuralop.models import FNO

    modes = size["modes"]
    n_modes = tuple(2 * m for m in modes[:-1]) + (2 * (modes[-1] - 1),)
    return FNO(n_modes=n_modes, in_channels=pb.in_channels, out_channels=pb.out_channels,
               hidden_channels=size["width"], n_layers=pb.layers, lifting_channel_ratio=0, projection_channel_ratio=4,
               positional_embedding=None, use_channel_mlp=False, fno_skip="linear")


def neuralop_missing() -> str | None:
    """Why neuraloperator cannot be used here, or None."""
    try:
        import neuralop  # noqa: F401
        from neuralop.models import FNO  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means: skip its points
        return f"{type(exc).__name__}: {exc}"
    return None


def _model(spec: dict, pb, size: dict, spatial: tuple, device):
    """neuraloperator's FNO or ours (real or complex weights, pointwise products as matmuls or 1x1 convolutions)."""
    from caraml.workloads.fno.model import build_model

    if spec.get("lib") == "neuralop":
        return neuralop_fno(pb, size).to(device)
    model = build_model(pb, size["width"], size["modes"], pb.layers, complex_weights=spec["complex"],
                        half_spectral=spec.get("half", False), particles=spatial[-1] if pb.particles else 0,
                        nufft_backend=spec["nufft_backend"], dse_layout=spec["dse_layout"],
                        dse_backend=spec.get("dse_backend", "matmul")).to(device)
    for module in model.modules():  # the pointwise products as 1x1 convolutions (CARAML's Conv1d)
        if spec.get("conv1x1") and hasattr(module, "as_conv"):
            module.as_conv = True
    return model


def _train_step(spec: dict, model, optimizer, loss_of, device):
    """One training step (autocast and GradScaler for fp16), compiled as the point's scope says."""
    import torch

    amp = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(spec["amp"])
    scaler = torch.amp.GradScaler(device.type) if spec["amp"] == "fp16" else None
    mode = spec["compile"]
    options = {} if mode in (None, "default") else {"mode": mode}
    forward = model
    if mode and spec["scope"] == "pointwise":
        model.exclude_spectral_from_compile()
    if mode and spec["scope"] in ("model", "pointwise"):
        forward = torch.compile(model, **options)

    def train_step(x, y):
        with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
            loss = loss_of(forward(x), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return torch.compile(train_step, **options) if mode and spec["scope"] == "step" else train_step


def plain_setup(spec: dict, where: FNORun):
    """(run(i): one training step, sync(), samples per step, model) for a plain-loop point."""
    import torch

    from caraml.errors import BadInput
    from caraml.workloads.fno.bench import loss_fn
    from caraml.workloads.fno.model import dse_backend_misfit
    from caraml.workloads.fno.problems import PROBLEMS

    torch._dynamo.reset()
    torch.set_float32_matmul_precision("high")
    torch.manual_seed(0)
    pb = PROBLEMS[spec["problem"]]
    device = torch.device(where.device)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.empty_cache()
    size = SMOKE[pb.name] if where.smoke else {"width": pb.width, "modes": pb.modes, "grid": pb.grid,
                                               "particles": pb.particles, "batch": pb.batch_size}
    spatial = size["grid"] if pb.kind == "grid" else (size["particles"],)
    misfit = dse_backend_misfit(spec.get("dse_backend", "matmul"), device, size["modes"][0], size["width"])
    if misfit:  # as `caraml run` refuses it
        raise BadInput(misfit)
    model = _model(spec, pb, size, spatial, device)
    optimizer = torch.optim.Adam(model.parameters(), lr=pb.lr, weight_decay=1e-5)
    batches = [(torch.randn(size["batch"], pb.in_channels, *spatial, device=device),
                torch.randn(size["batch"], pb.out_channels, *spatial, device=device)) for _ in range(2)]
    for x, _ in batches if pb.position_channels else ():  # PIC: positions in [0, 2 pi), as caraml's are made
        x[:, :pb.position_channels] = 2 * math.pi * torch.rand_like(x[:, :pb.position_channels])
    step = _train_step(spec, model, optimizer, loss_fn(pb.loss), device)

    def run(i):
        if spec["compile"]:
            torch.compiler.cudagraph_mark_step_begin()
        step(*batches[i % 2])

    return run, (torch.cuda.synchronize if cuda else (lambda: None)), size["batch"], model


def timed(run, sync, batch: int, warmup: int, steps: int) -> dict:
    start = time.perf_counter()
    run(0)
    sync()
    first = time.perf_counter() - start
    for i in range(1, warmup):
        run(i)
    sync()
    warm = time.perf_counter() - start
    start = time.perf_counter()
    for i in range(steps):
        run(i)
    sync()
    wall = time.perf_counter() - start
    return {"status": "ok", "samples_per_s": batch * steps / wall, "step_ms": wall / steps * 1e3,
            "first_step_s": first, "warmup_s": warm, "steps": steps}


def plain(spec: dict, where: FNORun) -> dict:
    """A plain-loop point timed: samples/s, and the model's parameter count."""
    from caraml.workloads.fno.model import count_parameters

    run, sync, batch, model = plain_setup(spec, where)
    warmup, steps = where.steps(spec["problem"])
    return {**timed(run, sync, batch, warmup, steps), "params": count_parameters(model)}
