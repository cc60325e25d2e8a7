"""Image-classification training: any torchvision classifier, SGD with momentum, synthetic data.

`build` returns a `Bench` whose `step()` runs one training step without synchronising the
device; the harness owns timing, warm-up and the record.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from functools import lru_cache
from typing import Any

from caraml.bench import BenchInfo, RunContext
from caraml.errors import BadInput
from caraml.params import Param
from caraml.workloads import Col, Workload, register

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
COMPILERS = ("none", "inductor", "aot_eager", "trace")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
DATA = ("synthetic-host", "synthetic-device")
FLOPS_CONVENTION = (
    "torch.utils.flop_counter on one forward+backward pass at fp32 (2 FLOPs per multiply-add of "
    "convolutions and matrix products, input-gradient of the first layer as torch computes it; "
    "normalisation, activations and the optimizer not counted)"
)


@lru_cache(maxsize=1)
def classification_models() -> tuple[str, ...]:
    import torchvision

    return tuple(torchvision.models.list_models(module=torchvision.models))


def _check_model(name: str) -> str | None:
    known = classification_models()
    if name in known:
        return None
    return "is not a torchvision classification model; choose one of: " + ", ".join(known)


PARAMS = [
    Param("model", str, "resnet50", "torchvision classification model", check=_check_model),
    Param("image_size", int, 224, "height and width of the square input images", minimum=16),
    Param("num_classes", int, 1000, "classifier outputs", minimum=2),
    Param("batch_size", int, 64, "images per device per step", minimum=1),
    Param("precision", str, "fp32", "fp32, tf32 (matmul/conv in TF32), fp16 (autocast+GradScaler), bf16 (autocast)",
          choices=PRECISIONS),
    Param("compile", str, "none", "none, inductor (torch.compile), aot_eager, trace (TorchScript)", choices=COMPILERS),
    Param("compile_mode", str, "default", "torch.compile mode for compile=inductor", choices=COMPILE_MODES),
    Param("compile_scope", str, "model", "compile the model, or the whole train step", choices=("model", "step")),
    Param("channels_last", bool, False, "NHWC memory format for model and inputs"),
    Param("data", str, "synthetic-host", "synthetic-host (DataLoader, workers, pinned memory) or synthetic-device",
          choices=DATA),
    Param("workers", int, 4, "DataLoader worker processes for data=synthetic-host", minimum=0),
    Param("cudnn_benchmark", bool, True, "let cuDNN pick the fastest convolution algorithms (warm-up)"),
    Param("lr", float, 0.1, "SGD learning rate", minimum=0.0),
    Param("momentum", float, 0.9, "SGD momentum", minimum=0.0),
    Param("weight_decay", float, 1e-4, "SGD weight decay", minimum=0.0),
    Param("sgd_impl", str, "foreach", "SGD kernels: foreach (PyTorch's default), fused (one kernel), for-loop",
          choices=("foreach", "fused", "for-loop")),
]

PRESETS = {
    # Small enough to finish in well under a minute on two CPU cores.
    "smoke": {"model": "resnet18", "image_size": 64, "num_classes": 100, "batch_size": 16,
              "data": "synthetic-device", "workers": 0, "warmup_steps": 2, "measure_steps": 8},
    # CARAML's setting: ResNet50 on 224x224 images, data generated on the host.
    "default": {"model": "resnet50", "image_size": 224, "num_classes": 1000, "batch_size": 64,
                "data": "synthetic-host"},
}


def _autocast_dtype(precision: str):
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)


def check_precision(precision: str, device) -> None:
    """Refuse a precision the device cannot run, with one clear line."""
    import torch

    if device.type == "cuda":
        hip = getattr(torch.version, "hip", None)
        major, minor = torch.cuda.get_device_capability(device)
        name = torch.cuda.get_device_name(device)
        if precision == "tf32" and not hip and major < 8:
            raise BadInput(f"precision=tf32 needs an NVIDIA GPU of compute capability >= 8.0; {name} is {major}.{minor}")
        if precision == "bf16" and not torch.cuda.is_bf16_supported():
            raise BadInput(f"precision=bf16 is not supported on {name}; use fp16 or fp32")
        if precision == "fp16" and not hip and (major, minor) < (5, 3):
            raise BadInput(f"precision=fp16 needs compute capability >= 5.3; {name} is {major}.{minor}")
        return
    if precision == "tf32":
        raise BadInput(f"precision=tf32 exists only on NVIDIA (Ampere or newer) and AMD GPUs, not on {device.type}; "
                       "use fp32, bf16 or fp16")
    dtype = _autocast_dtype(precision)
    if dtype is not None:
        try:
            with torch.autocast(device.type, dtype=dtype):
                conv = torch.nn.Conv2d(1, 1, 1).to(device)
                conv(torch.ones(1, 1, 2, 2, device=device)).sum()
        except Exception as exc:  # the autocast backend lacks this dtype
            raise BadInput(f"precision={precision} is not supported on {device.type} by torch "
                           f"{torch.__version__} ({exc}); use fp32") from None


def count_flops_per_image(model_name: str, num_classes: int, image_size: int) -> float:
    """Training FLOPs per image, counted once on the meta device (no memory, no compute)."""
    import torch
    import torchvision
    from torch.utils.flop_counter import FlopCounterMode

    batch = 2
    with torch.device("meta"):
        model = torchvision.models.get_model(model_name, num_classes=num_classes)
        x = torch.empty(batch, 3, image_size, image_size)
    model.train()
    with FlopCounterMode(display=False) as counter:
        out = _logits(model(x))
        out.sum().backward()
    return counter.get_total_flops() / batch


def _logits(out):
    """Inception and GoogLeNet return (logits, aux) in training mode."""
    if isinstance(out, tuple):
        return out[0]
    return out


class ClassificationBench:
    """One configured training setup; `step()` trains on one batch."""

    def __init__(self, p: dict[str, Any], ctx: RunContext):
        import torch
        import torchvision

        device, dist = ctx.device, ctx.dist
        self.p, self.device, self.dist = p, device, dist
        check_precision(p["precision"], device)
        torch.manual_seed(p["seed"] + dist.rank)

        if device.type == "cuda":
            tf32 = p["precision"] == "tf32"
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32
            torch.backends.cudnn.benchmark = p["cudnn_benchmark"]
        self.math = {
            "matmul_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "cudnn_tf32": bool(torch.backends.cudnn.allow_tf32),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        }
        self.memory_format = torch.channels_last if p["channels_last"] else torch.contiguous_format

        model = torchvision.models.get_model(p["model"], num_classes=p["num_classes"])
        model = model.to(device=device, memory_format=self.memory_format).train()
        self.criterion = torch.nn.CrossEntropyLoss()
        impl = {"foreach": {"foreach": True}, "fused": {"fused": True}, "for-loop": {"foreach": False}}[p["sgd_impl"]]
        self.optimizer = torch.optim.SGD(model.parameters(), lr=p["lr"], momentum=p["momentum"],
                                         weight_decay=p["weight_decay"], **impl)
        dtype = _autocast_dtype(p["precision"])
        self.autocast = (lambda: torch.autocast(device.type, dtype=dtype)) if dtype else nullcontext
        self.scaler = torch.amp.GradScaler(device.type) if p["precision"] == "fp16" else None

        self._data = self._make_data()
        self.compile_setup_s = 0.0
        if p["compile"] == "trace":
            start = time.perf_counter()
            x, _ = self._pool[0] if self._pool else self._next_batch()
            with self.autocast():
                model = torch.jit.trace(model, x, check_trace=False, strict=False)
            self.compile_setup_s = time.perf_counter() - start
        if dist.world_size > 1:
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
                        gradient_as_bucket_view=True)
        self.model = model
        self._train = self._train_step
        if p["compile"] in ("inductor", "aot_eager"):
            options = {"backend": p["compile"]}
            if p["compile"] == "inductor" and p["compile_mode"] != "default":
                options["mode"] = p["compile_mode"]
            if p["compile_scope"] == "model":
                self.model = torch.compile(self.model, **options)
            else:
                self._train = torch.compile(self._train_step, **options)

        self.info = BenchInfo(
            units_per_step=p["batch_size"], unit="images",
            flops_per_unit=count_flops_per_image(p["model"], p["num_classes"], p["image_size"]),
            flops_convention=FLOPS_CONVENTION, precision=p["precision"], compiled=p["compile"] != "none",
            compile_setup_s=self.compile_setup_s)

    # data -----------------------------------------------------------------------------------
    def _make_data(self):
        import torch

        p = self.p
        self._pool = []
        if p["data"] == "synthetic-device":
            gen = torch.Generator(device=self.device).manual_seed(p["seed"] + self.dist.rank)
            for _ in range(2):  # two batches, alternated, so no step reuses the previous input
                x = torch.randn(p["batch_size"], 3, p["image_size"], p["image_size"], device=self.device,
                                generator=gen).contiguous(memory_format=self.memory_format)
                y = torch.randint(0, p["num_classes"], (p["batch_size"],), device=self.device, generator=gen)
                self._pool.append((x, y))
            return None
        from torch.utils.data import DataLoader

        from caraml.workloads.synthetic import SyntheticImages, ignore_stop_signals

        source = SyntheticImages(p["batch_size"], p["image_size"], p["num_classes"], p["seed"] + self.dist.rank)
        loader = DataLoader(source, batch_size=None, num_workers=p["workers"],
                            pin_memory=self.device.type == "cuda",
                            persistent_workers=p["workers"] > 0, worker_init_fn=ignore_stop_signals,
                            prefetch_factor=4 if p["workers"] > 0 else None)
        return iter(loader)

    def _next_batch(self):
        x8, y = next(self._data)
        x = x8.to(self.device, non_blocking=True).float().div_(127.5).sub_(1.0)  # normalise on the device
        return x.contiguous(memory_format=self.memory_format), y.to(self.device, non_blocking=True)

    # training -------------------------------------------------------------------------------
    def _train_step(self, x, y):
        with self.autocast():
            loss = self.criterion(_logits(self.model(x)), y)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss

    def step(self) -> None:
        if self._pool:
            self._i = (getattr(self, "_i", -1) + 1) % len(self._pool)
            x, y = self._pool[self._i]
        else:
            x, y = self._next_batch()
        self._train(x, y)

    def details(self) -> dict:
        return {"math": self.math, "global_batch_size": self.p["batch_size"] * self.dist.world_size}

    def close(self) -> None:
        self._data = None  # stops DataLoader workers


WORKLOAD = register(Workload(
    name="image_classification",
    unit="images",
    params=PARAMS,
    presets=PRESETS,
    build=ClassificationBench,
    check_device=lambda p, device: check_precision(p["precision"], device),
    description="Image-classification training (torchvision models, ResNet50 by default), synthetic data",
    columns=("system", Col("model", "Model", "param:model"), "nodes", "devices", "global_batch_size",
             Col("batch_size", "BatchSize/Device", "param:batch_size", "int"),
             Col("precision", "Precision", "param:precision"), Col("compile", "Compiler", "param:compile"),
             Col("compile_mode", "CompileMode", "param:compile_mode"),
             Col("channels_last", "ChannelsLast", "param:channels_last", "bool"),
             "throughput", "energy_wh", "ours",
             Col("image_size", "ImageSize", "param:image_size", "int", default=False),
             Col("data", "Data", "param:data", default=False)),
    metrics=("math", "global_batch_size"),
))
