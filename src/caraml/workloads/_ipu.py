"""Image classification on Graphcore IPUs through PopTorch: CARAML's GC200 runs (graphcore's
`train.py --config=resnet50-pod4`) as a Bench.

One process drives all IPUs of the POD: the model is replicated `replicas` times (data parallel inside
PopTorch) and accumulates `gradient_accumulation` micro-batches before each weight update, so one step
trains micro-batch x replicas x accumulation images. PopTorch compiles the model for the IPU itself.
The pure functions (CARAML's accumulation table, the precision mapping) import nothing; the Bench needs
Graphcore's poptorch (the Poplar SDK), which is refused with one line where it is missing.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from caraml.errors import BadInput

# CARAML's gradient accumulation by global batch size (image_classification_torch_benchmark.xml, ipu_gas).
CARAML_ACCUMULATION = {16: 4, 32: 4, 64: 4, 128: 16, 256: 16, 512: 32, 1024: 64, 2048: 128, 4096: 256}
# graphcore train.py's --precision: model (weights, activations) . partials (convolution and matmul sums)
PRECISIONS = {"16.16": ("half", "half"), "16.32": ("half", "float"), "32.32": ("float", "float")}
# The peak rate MFU divides by: the arithmetic of the model's weights and activations.
PEAK_PRECISION = {"16.16": "fp16", "16.32": "fp16", "32.32": "fp32"}


def caraml_accumulation(global_batch_size: int) -> int:
    """Micro-batches accumulated per step for a global batch, as CARAML chooses them for the GC200."""
    if global_batch_size not in CARAML_ACCUMULATION:
        raise BadInput(f"CARAML's GC200 runs know the global batch sizes "
                       f"{', '.join(map(str, CARAML_ACCUMULATION))}, not {global_batch_size}; "
                       "set gradient_accumulation yourself for other sizes")
    return CARAML_ACCUMULATION[global_batch_size]


def precision_types(precision: str) -> tuple[str, str]:
    """('half'|'float' for the model, 'half'|'float' for the partials) of an IPU precision such as 16.32."""
    if precision not in PRECISIONS:
        raise BadInput(f"precision={precision} is not an IPU precision; choose one of: {', '.join(PRECISIONS)}")
    return PRECISIONS[precision]


def require_poptorch():
    try:
        import poptorch
    except ImportError:
        raise BadInput("backend=poptorch needs Graphcore's poptorch (the Poplar SDK), which is not importable here; "
                       "run on a GC200 host inside the SDK's container (caraml container pull --system GC200), "
                       "or use backend=torch") from None
    return poptorch


def ipu_options(poptorch, p: dict[str, Any]):
    """PopTorch's options for a run: replicas, accumulation, partials, seed, synthetic data on the IPU."""
    import torch

    _, partials = precision_types(p["precision"])
    opts = poptorch.Options()
    opts.deviceIterations(1)
    opts.replicationFactor(p["replicas"])
    opts.Training.gradientAccumulation(p["gradient_accumulation"])
    opts.Precision.setPartialsType(torch.float16 if partials == "half" else torch.float32)
    opts.randomSeed(p["seed"])
    if p["data"] == "synthetic-device":
        opts.enableSyntheticData(True)  # data made on the IPU: no host-to-IPU transfers
    return opts


class IpuBench:
    """One PopTorch training model; `step()` trains one global batch (replicas x accumulation micro-batches)."""

    extra_phase = None

    def __init__(self, p: dict[str, Any], ctx):
        import torch
        import torchvision

        from caraml.contract import BenchInfo
        from caraml.workloads.image_classification import FLOPS_CONVENTION, count_flops_per_image

        poptorch = require_poptorch()
        if ctx.dist.world_size != 1:
            raise BadInput("backend=poptorch runs one process that drives all IPUs (replicas); launch one process")
        self.p = p
        torch.manual_seed(p["seed"])
        half = precision_types(p["precision"])[0] == "half"
        model = torchvision.models.get_model(p["model"], num_classes=p["num_classes"])
        if half:
            model = model.half()
        opts = ipu_options(poptorch, p)
        if half:
            opts.Precision.enableStochasticRounding(True)  # Graphcore's advice for fp16 weight updates
        optimizer = poptorch.optim.SGD(model.parameters(), lr=p["lr"], momentum=p["momentum"],
                                       weight_decay=p["weight_decay"])
        self.model = poptorch.trainingModel(WithLoss(model), options=opts, optimizer=optimizer)
        self.images = p["batch_size"] * p["replicas"] * p["gradient_accumulation"]
        dtype = torch.float16 if half else torch.float32
        gen = torch.Generator().manual_seed(p["seed"])
        self.x = torch.randn(self.images, 3, p["image_size"], p["image_size"], generator=gen).to(dtype)
        self.y = torch.randint(0, p["num_classes"], (self.images,), generator=gen)
        start = time.perf_counter()
        self.model.compile(self.x, self.y)  # Poplar compilation: minutes, before the first step
        compile_s = time.perf_counter() - start
        self.info = BenchInfo(units_per_step=self.images, unit="images",
                              flops_per_unit=count_flops_per_image(p["model"], p["num_classes"], p["image_size"]),
                              flops_convention=FLOPS_CONVENTION, precision=PEAK_PRECISION[p["precision"]],
                              compiled=True, compile_setup_s=compile_s)
        self.epoch_times: list[float] = []
        if p["convention"] == "caraml-epochs":
            self.extra_phase = "caraml-epochs"

    def step(self) -> None:
        self.model(self.x, self.y)

    def run_extra(self, should_stop) -> None:
        """CARAML's IPU epochs: dataset_size // global batch steps each (its ipu_iterations_epoch), timed."""
        steps = max(1, self.p["dataset_size"] // self.images)
        for n in range(self.p["warmup_epochs"] + self.p["epochs"]):
            start = time.perf_counter()
            for _ in range(steps):
                self.step()
            if n >= self.p["warmup_epochs"]:
                self.epoch_times.append(time.perf_counter() - start)
            if should_stop():
                return

    def details(self) -> dict:
        p = self.p
        out = {"global_batch_size": self.images,
               "ipu": {"replicas": p["replicas"], "gradient_accumulation": p["gradient_accumulation"],
                       "micro_batch_size": p["batch_size"], "precision": p["precision"],
                       "model_type": precision_types(p["precision"])[0],
                       "partials_type": precision_types(p["precision"])[1]},
               "dataset": "Synthetic(Device)" if p["data"] == "synthetic-device" else "Synthetic(Host)",
               "throughput_convention": "steady-state: images of the measured steps / their wall time"}
        if self.extra_phase:
            steps = max(1, p["dataset_size"] // self.images)
            rates = [steps * self.images / t for t in self.epoch_times if t > 0]
            out["caraml_images_per_s"] = {
                "value": statistics.fmean(rates) if rates else None, "unit": "images/s",
                "convention": "caraml-epochs (IPU): images/s of an epoch = dataset_size // global batch steps x "
                              "global batch / the epoch's wall time, mean over the epochs after the warm-up ones"}
            out["caraml_epochs"] = {"epochs": len(self.epoch_times), "epochs_asked": p["epochs"],
                                    "warmup_epochs": p["warmup_epochs"], "steps_per_epoch": steps,
                                    "epoch_time_s": self.epoch_times, "images_per_s": rates}
            out["epochs"] = len(self.epoch_times)
        return out

    def close(self) -> None:
        try:
            self.model.detachFromDevice()
        except Exception:  # noqa: BLE001 - already detached or never attached
            pass


def _with_loss():
    import torch

    class _WithLoss(torch.nn.Module):
        """PopTorch trains a model whose forward returns the loss."""

        def __init__(self, model):
            super().__init__()
            self.model = model
            self.loss = torch.nn.CrossEntropyLoss()

        def forward(self, x, y):
            out = self.model(x)
            return out, self.loss(out, y)

    return _WithLoss


def WithLoss(model):  # noqa: N802 - a class made on first use, so that this module imports no torch
    return _with_loss()(model)
