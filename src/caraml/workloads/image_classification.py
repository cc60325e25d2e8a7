"""Image-classification training: any torchvision classifier, SGD, synthetic data; CARAML's settings as a preset.

`build` returns a `Bench` whose `step()` runs one training step without synchronising the
device; the harness owns timing, warm-up and the record. Two conventions: `steady` (ours: the
harness's steady-state images/s) and `caraml-epochs` (also CARAML's figure: FakeData epochs of
train + validation, images/s = data set size / epoch time, mean after the warm-up epochs; see
_caraml_epochs.py), reported apart as `caraml_images_per_s`. With `backend=poptorch` the same
workload runs on Graphcore IPUs (CARAML's GC200 runs; _ipu.py).
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from functools import lru_cache
from typing import Any

from caraml.contract import BenchInfo, RunContext
from caraml.errors import BadInput
from caraml.params import Param
from caraml.training import backward_and_step
from caraml.workloads import Col, Workload, register

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
IPU_PRECISIONS = ("16.16", "16.32", "32.32")  # graphcore train.py's model.partials precisions
CONVENTIONS = ("steady", "caraml-epochs")
STEADY = "steady-state: images of the measured steps (all data-parallel ranks) / the slowest rank's window"
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
    Param("model", str, "resnet50", "torchvision classification model", check=_check_model, headline=True),
    Param("image_size", int, 224, "height and width of the square input images", minimum=16, headline=True),
    Param("num_classes", int, 1000, "classifier outputs", minimum=2),
    Param("batch_size", int, 64, "images per device per step (poptorch: per replica per micro-batch)", minimum=1, headline=True),
    Param("precision", str, "fp32", "fp32, tf32 (matmul/conv in TF32), fp16 (autocast+GradScaler), bf16 (autocast); "
          "IPU (backend=poptorch): 16.16, 16.32, 32.32 (model.partials)", choices=PRECISIONS + IPU_PRECISIONS, headline=True),
    Param("compile", str, "none", "none, inductor (torch.compile), aot_eager, trace (TorchScript)", choices=COMPILERS, headline=True),
    Param("compile_mode", str, "default", "torch.compile mode for compile=inductor", choices=COMPILE_MODES, headline=True),
    Param("compile_scope", str, "model", "compile the model, or the whole train step", choices=("model", "step")),
    Param("channels_last", bool, False, "NHWC memory format for model and inputs", headline=True),
    Param("data", str, "synthetic-host", "synthetic-host (DataLoader, workers, pinned memory) or synthetic-device",
          choices=DATA, headline=True),
    Param("workers", int, 4, "DataLoader worker processes for data=synthetic-host", minimum=0),
    Param("cudnn_benchmark", bool, True, "let cuDNN pick the fastest convolution algorithms (warm-up)"),
    Param("lr", float, 0.1, "SGD learning rate", minimum=0.0),
    Param("momentum", float, 0.9, "SGD momentum", minimum=0.0),
    Param("weight_decay", float, 1e-4, "SGD weight decay", minimum=0.0),
    Param("sgd_impl", str, "foreach", "SGD kernels: foreach (PyTorch's default), fused (one kernel), for-loop",
          choices=("foreach", "fused", "for-loop")),
    Param("channels_last_inputs", bool, True, "with channels_last: convert the input batches too (CARAML converts "
          "only the model)"),
    Param("grad_scaler", str, "fp16", "gradient scaling: fp16 (fp16 only, PyTorch's defaults) or caraml (fp16 and "
          "bf16, initial scale 1, growth every 100 steps, as CARAML)", choices=("fp16", "caraml")),
    Param("cudnn_tf32", str, "auto", "TF32 convolutions on NVIDIA GPUs: auto (with precision=tf32 only) or on "
          "(PyTorch's default, kept by CARAML: its fp32 runs convolve in TF32)", choices=("auto", "on")),
    Param("convention", str, "steady", "steady: our steady-state images/s; caraml-epochs: also CARAML's epochs "
          "(FakeData, train + validation, images/s = dataset_size / epoch time) as caraml_images_per_s",
          choices=CONVENTIONS),
    Param("epochs", int, 100, "caraml-epochs: measured epochs", minimum=1),
    Param("warmup_epochs", int, 5, "caraml-epochs: epochs before the measured ones, not counted", minimum=0),
    Param("dataset_size", int, 10000, "caraml-epochs: FakeData images (train + validation)", minimum=2),
    Param("val_split", float, 0.1, "caraml-epochs: fraction of the images held out for validation", minimum=0.0,
          check=lambda v: None if v < 1 else "must be below 1 (a fraction of the data set)"),
    Param("lr_step_epochs", int, 10, "caraml-epochs: StepLR period in epochs (0: constant learning rate)",
          minimum=0),
    Param("lr_gamma", float, 0.1, "caraml-epochs: StepLR factor", minimum=0.0),
    Param("backend", str, "torch", "torch, or poptorch (Graphcore IPUs through PopTorch, as CARAML's GC200 runs)",
          choices=("torch", "poptorch")),
    Param("replicas", int, 1, "poptorch: model replicas over the IPUs (data parallel inside one process)",
          minimum=1),
    Param("gradient_accumulation", int, 1, "poptorch: micro-batches accumulated per weight update", minimum=1),
]

PRESETS = {
    # Small enough to finish in well under a minute on two CPU cores.
    "smoke": {"model": "resnet18", "image_size": 64, "num_classes": 100, "batch_size": 16,
              "data": "synthetic-device", "workers": 0, "warmup_steps": 2, "measure_steps": 8},
    # CARAML's setting: ResNet50 on 224x224 images, data generated on the host.
    "default": {"model": "resnet50", "image_size": 224, "num_classes": 1000, "batch_size": 64,
                "data": "synthetic-host"},
    # CARAML's image_classification_torch.py as its JUBE file runs it: fp16, TorchScript trace, channels_last on
    # the model, plain SGD at lr 0.01 with StepLR(10, 0.1), gradient scaling for fp16 and bf16, cuDNN left at
    # PyTorch's defaults, seed 1234 + rank; 5 + 100 FakeData epochs timed as CARAML does, besides our steady
    # state; energy also written as CARAML's per-node CSVs.
    "caraml": {"model": "resnet50", "image_size": 224, "num_classes": 1000, "batch_size": 64, "precision": "fp16",
               "compile": "trace", "channels_last": True, "channels_last_inputs": False, "data": "synthetic-host",
               "cudnn_benchmark": False, "cudnn_tf32": "on", "lr": 0.01, "momentum": 0.0, "weight_decay": 0.0,
               "grad_scaler": "caraml", "convention": "caraml-epochs", "epochs": 100, "warmup_epochs": 5,
               "dataset_size": 10000, "val_split": 0.1, "lr_step_epochs": 10, "lr_gamma": 0.1, "seed": 1234,
               "energy_files": "caraml"},
}


def _autocast_dtype(precision: str):
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)


def check_combination(p: dict[str, Any]) -> str | None:
    """What is wrong with parameters that each are valid but do not go together (checked before any run)."""
    if p["backend"] == "poptorch":
        if p["precision"] not in IPU_PRECISIONS:
            return (f"backend=poptorch runs the IPU precisions {', '.join(IPU_PRECISIONS)}, not "
                    f"precision={p['precision']}")
        if p["compile"] != "none":
            return f"backend=poptorch compiles for the IPU itself; use compile=none, not compile={p['compile']}"
        return None
    if p["precision"] in IPU_PRECISIONS:
        return f"precision={p['precision']} is a Graphcore IPU precision; it needs backend=poptorch"
    for name in ("replicas", "gradient_accumulation"):
        if p[name] != 1:
            return f"{name}={p[name]} applies to backend=poptorch only (torch runs one process per device)"
    return None


def check_launch(p: dict[str, Any], devices: int) -> str | None:
    problem = check_combination(p)
    if problem is None and p["backend"] == "poptorch" and devices != 1:
        problem = (f"backend=poptorch drives all IPUs from one process (replicas={p['replicas']}); "
                   f"launch 1 process, not {devices}")
    return problem


def check_device(p: dict[str, Any], device) -> None:
    problem = check_combination(p)
    if problem:
        raise BadInput(problem)
    if p["backend"] == "poptorch":
        from caraml.workloads._ipu import require_poptorch

        require_poptorch()
        return
    check_precision(p["precision"], device)


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
        out = logits(model(x))
        out.sum().backward()
    return counter.get_total_flops() / batch


def logits(out):
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
            torch.backends.cudnn.allow_tf32 = tf32 or p["cudnn_tf32"] == "on"
            torch.backends.cudnn.benchmark = p["cudnn_benchmark"]
        self.math = {
            "matmul_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "cudnn_tf32": bool(torch.backends.cudnn.allow_tf32),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        }
        self.precision_in_use = _precision_in_use(p["precision"], self.math["cudnn_tf32"], device)
        self.memory_format = torch.channels_last if p["channels_last"] else torch.contiguous_format
        self.input_format = self.memory_format if p["channels_last_inputs"] else torch.contiguous_format

        model = torchvision.models.get_model(p["model"], num_classes=p["num_classes"])
        model = model.to(device=device, memory_format=self.memory_format).train()
        self.criterion = torch.nn.CrossEntropyLoss()
        impl = {"foreach": {"foreach": True}, "fused": {"fused": True}, "for-loop": {"foreach": False}}[p["sgd_impl"]]
        self.optimizer = torch.optim.SGD(model.parameters(), lr=p["lr"], momentum=p["momentum"],
                                         weight_decay=p["weight_decay"], **impl)
        dtype = _autocast_dtype(p["precision"])
        self.autocast = (lambda: torch.autocast(device.type, dtype=dtype)) if dtype else nullcontext
        self.scaler = None
        if p["grad_scaler"] == "caraml" and dtype is not None:  # CARAML scales bf16 too, from a scale of 1
            self.scaler = torch.amp.GradScaler(device.type, init_scale=1.0, growth_factor=2.0, backoff_factor=0.5,
                                               growth_interval=100)
        elif p["precision"] == "fp16":
            self.scaler = torch.amp.GradScaler(device.type)

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
            flops_convention=FLOPS_CONVENTION, precision=self.precision_in_use, compiled=p["compile"] != "none",
            compile_setup_s=self.compile_setup_s)
        self.epochs = None
        self.extra_phase = "caraml-epochs" if p["convention"] == "caraml-epochs" else None

    # data -----------------------------------------------------------------------------------
    def _make_data(self):
        import torch

        p = self.p
        self._pool = []
        if p["data"] == "synthetic-device":
            gen = torch.Generator(device=self.device).manual_seed(p["seed"] + self.dist.rank)
            for _ in range(2):  # two batches, alternated, so no step reuses the previous input
                x = torch.randn(p["batch_size"], 3, p["image_size"], p["image_size"], device=self.device,
                                generator=gen).contiguous(memory_format=self.input_format)
                y = torch.randint(0, p["num_classes"], (p["batch_size"],), device=self.device, generator=gen)
                self._pool.append((x, y))
            return None
        from torch.utils.data import DataLoader

        from caraml.workloads._synthetic import SyntheticImages, ignore_stop_signals

        source = SyntheticImages(p["batch_size"], p["image_size"], p["num_classes"], p["seed"] + self.dist.rank)
        loader = DataLoader(source, batch_size=None, num_workers=p["workers"],
                            pin_memory=self.device.type == "cuda",
                            persistent_workers=p["workers"] > 0, worker_init_fn=ignore_stop_signals,
                            prefetch_factor=4 if p["workers"] > 0 else None)
        return iter(loader)

    def _next_batch(self):
        x8, y = next(self._data)
        x = x8.to(self.device, non_blocking=True).float().div_(127.5).sub_(1.0)  # normalise on the device
        return x.contiguous(memory_format=self.input_format), y.to(self.device, non_blocking=True)

    # training -------------------------------------------------------------------------------
    def _train_step(self, x, y):
        with self.autocast():
            loss = self.criterion(logits(self.model(x)), y)
        backward_and_step(loss, self.optimizer, self.scaler)
        return loss

    def step(self) -> None:
        if self._pool:
            self._i = (getattr(self, "_i", -1) + 1) % len(self._pool)
            x, y = self._pool[self._i]
        else:
            x, y = self._next_batch()
        self._train(x, y)

    def run_extra(self, should_stop) -> None:
        """CARAML's epochs (convention=caraml-epochs), after the steady-state window, on the same model."""
        from caraml.workloads._caraml_epochs import EpochRunner

        self._data = None  # the steady state's DataLoader workers must not compete with the epochs' ones
        self.epochs = EpochRunner(self)
        self.epochs.run(should_stop)

    def details(self) -> dict:
        out = {"math": self.math, "global_batch_size": self.p["batch_size"] * self.dist.world_size,
               "dataset": "Synthetic(Device)" if self.p["data"] == "synthetic-device" else "Synthetic(Host)",
               "throughput_convention": STEADY}
        if self.epochs is not None:
            out.update(self.epochs.results())
        return out

    def close(self) -> None:
        self._data = None  # stops DataLoader workers
        if self.epochs is not None:
            self.epochs.close()


def _precision_in_use(precision: str, cudnn_tf32: bool, device) -> str:
    """The precision MFU is taken against: an fp32 run convolves in TF32 where cuDNN may use it (NVIDIA,
    compute capability >= 8), and a ResNet's FLOPs are nearly all convolutions."""
    if precision != "fp32" or not cudnn_tf32 or device.type != "cuda":
        return precision
    import torch

    if getattr(torch.version, "hip", None) or torch.cuda.get_device_capability(device)[0] < 8:
        return precision
    return "tf32"


def build(p: dict[str, Any], ctx: RunContext):
    """The Bench of a run: PyTorch on CPUs and GPUs, PopTorch on Graphcore IPUs."""
    if p["backend"] == "poptorch":
        from caraml.workloads._ipu import IpuBench

        return IpuBench(p, ctx)
    return ClassificationBench(p, ctx)


WORKLOAD = register(Workload(
    name="image_classification",
    unit="images",
    params=PARAMS,
    presets=PRESETS,
    build=build,
    check_device=check_device,
    check_launch=check_launch,
    description="Image-classification training (torchvision models, ResNet50 by default), synthetic data",
    # CARAML's columns (its JUBE result table, in its order; those it shows always are shown by default), then ours.
    columns=(Col("job_id", "JobID", "shared:job_id", default=False), "system",
             Col("version", "Version", "shared:version", default=False),
             Col("queue", "Queue", "shared:queue", default=False),
             Col("runtime_s", "Runtime(s)", "shared:runtime_s", default=False),
             Col("model", "Model", "param:model"),
             Col("dataset", "Dataset", "metric:dataset", "word", default=False),
             "nodes", "devices",
             Col("tasks_per_node", "Tasks/Node", "shared:tasks_per_node", default=False),
             Col("threads_per_task", "Threads/Task", "shared:threads_per_task", default=False),
             Col("workers", "Workers", "param:workers", "int", default=False),
             "global_batch_size",
             Col("batch_size", "BatchSize/Device", "param:batch_size", "int"),
             Col("epochs", "Epoch", "metric:epochs", "int", default=False),
             Col("precision", "Precision", "param:precision"),
             Col("caraml_images_per_s", "Images/second", "metric:caraml_images_per_s.value", default="if-any"),
             Col("energy_file", "EnergyFile", "shared:energy_file", default=False),
             Col("compile", "Compiler", "param:compile"),
             Col("compile_mode", "CompileMode", "param:compile_mode"),
             Col("compile_scope", "TrainOptim", "param:compile_scope", default=False),
             Col("channels_last", "ChannelsLast", "param:channels_last", "bool"),
             "throughput", "energy_wh", "ours",
             Col("convention", "Convention", "param:convention", default=False),
             Col("image_size", "ImageSize", "param:image_size", "int", default=False),
             Col("data", "Data", "param:data", default=False)),
    metrics=("math", "global_batch_size", "dataset", "throughput_convention", "caraml_images_per_s", "caraml_epochs",
             "epochs", "ipu"),
))
