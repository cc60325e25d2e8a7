"""Image classification on Graphcore IPUs through PopTorch: CARAML's GC200 runs (graphcore's
`train.py --config=resnet50-pod4`) as a Bench.

One process drives all IPUs of the POD: the model is replicated `replicas` times (data parallel inside
PopTorch) and accumulates `grad_accumulation` micro-batches before each weight update, so one step
trains micro-batch x replicas x accumulation images. PopTorch compiles the model for the IPU itself.
The pure functions (CARAML's accumulation table, the precision mapping) import nothing; the Bench needs
Graphcore's poptorch (the Poplar SDK), which is refused with one line where it is missing.
"""

from __future__ import annotations

import statistics
import time

from caraml.errors import BadInput
from caraml.kit.ipu import require_one_process, require_poptorch
from caraml.measure.timing import figure_spread

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
                       "set grad_accumulation yourself for other sizes")
    return CARAML_ACCUMULATION[global_batch_size]


def precision_types(precision: str) -> tuple[str, str]:
    """('half'|'float' for the model, 'half'|'float' for the partials) of an IPU precision such as 16.32."""
    if precision not in PRECISIONS:
        raise BadInput(f"precision={precision} is not an IPU precision; choose one of: {', '.join(PRECISIONS)}")
    return PRECISIONS[precision]


def ipu_options(poptorch, cfg, seed: int):
    """PopTorch's options for a run: replicas, accumulation, partials, seed, synthetic data on the IPU."""
    import torch

    _, partials = precision_types(cfg.precision)
    opts = poptorch.Options()
    opts.deviceIterations(1)
    opts.replicationFactor(cfg.replicas)
    opts.Training.gradientAccumulation(cfg.grad_accumulation)
    opts.Precision.setPartialsType(torch.float16 if partials == "half" else torch.float32)
    opts.randomSeed(seed)
    if cfg.data == "synthetic-device":
        opts.enableSyntheticData(True)  # data made on the IPU: no host-to-IPU transfers
    return opts


class IpuBench:
    """One PopTorch training model; `step()` trains one global batch (replicas x accumulation micro-batches)."""

    extra_phase = None

    def __init__(self, cfg, ctx):
        import torch

        from caraml.contract import BenchInfo
        from caraml.workloads.image_classification.flops import FLOPS_CONVENTION, count_flops_per_image
        from caraml.workloads.image_classification.model import make_model

        poptorch = require_poptorch()
        require_one_process(ctx.dist.world_size)
        self.cfg = cfg
        torch.manual_seed(ctx.seed)
        half = precision_types(cfg.precision)[0] == "half"
        model = make_model(cfg.model, cfg.num_classes)
        if half:
            model = model.half()
        opts = ipu_options(poptorch, cfg, ctx.seed)
        if half:
            opts.Precision.enableStochasticRounding(True)  # Graphcore's advice for fp16 weight updates
        optimizer = poptorch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                                       weight_decay=cfg.weight_decay)
        self.model = poptorch.trainingModel(WithLoss(model), options=opts, optimizer=optimizer)
        self.images = global_batch(cfg)
        dtype = torch.float16 if half else torch.float32
        gen = torch.Generator().manual_seed(ctx.seed)
        self.x = torch.randn(self.images, 3, cfg.image_size, cfg.image_size, generator=gen).to(dtype)
        self.y = torch.randint(0, cfg.num_classes, (self.images,), generator=gen)
        start = time.perf_counter()
        self.model.compile(self.x, self.y)  # Poplar compilation: minutes, before the first step
        compile_s = time.perf_counter() - start
        self.info = BenchInfo(units_per_step=self.images, unit="images",
                              flops_per_unit=count_flops_per_image(cfg.model, cfg.num_classes, cfg.image_size),
                              flops_convention=FLOPS_CONVENTION, precision=PEAK_PRECISION[cfg.precision],
                              compiled=True, compile_setup_s=compile_s)
        self.times = None
        self.at = None  # [epoch index, steps done in it] while the epochs run
        if cfg.epochs_asked:
            self.extra_phase = "caraml-epochs"

    def step(self) -> None:
        self.model(self.x, self.y)

    def run_extra(self, should_stop) -> None:
        """CARAML's IPU epochs: dataset_size // global batch steps each (its ipu_iterations_epoch), timed, no
        validation; `should_stop()` is asked at every step."""
        from caraml.kit.epochs import run_epochs

        steps = ipu_steps_per_epoch(self.cfg)

        def train(epoch):
            self.at = [epoch, 0]
            for _ in range(steps):
                self.step()
                self.at[1] += 1
                yield

        self.times = run_epochs(self.cfg.warmup_epochs + self.cfg.epochs, train, lambda _epoch: (),
                                lambda: None, should_stop)

    def details(self) -> dict:
        return ipu_details(self.cfg, self.times, self.at)

    def close(self) -> None:
        try:
            self.model.detachFromDevice()
        except Exception:  # noqa: BLE001 - already detached or never attached
            pass


def global_batch(cfg) -> int:
    """Images of one step: micro-batch x replicas x accumulated micro-batches."""
    return cfg.batch_size * cfg.replicas * cfg.grad_accumulation


def ipu_steps_per_epoch(cfg) -> int:
    return max(1, cfg.dataset_size // global_batch(cfg))


def ipu_details(cfg, times, at=None) -> dict:
    """The record's metrics of an IPU run; `times`: the epochs' caraml.kit.epochs.EpochTimes, or None; `at`:
    [epoch index, steps done in it] when the epochs ran."""
    images = global_batch(cfg)
    model_type, partials_type = precision_types(cfg.precision)
    out = {"global_batch_size": images,
           # the metric keeps its key `gradient_accumulation` (the parameter is grad_accumulation now)
           "ipu": {"replicas": cfg.replicas, "gradient_accumulation": cfg.grad_accumulation,
                   "micro_batch_size": cfg.batch_size, "precision": cfg.precision,
                   "model_type": model_type, "partials_type": partials_type},
           "dataset": cfg.dataset_label,
           "throughput_convention": "steady-state: images of the measured steps / their wall time"}
    if cfg.epochs_asked:
        steps = ipu_steps_per_epoch(cfg)
        every = times.train_s if times is not None else []
        epoch_times = every[cfg.warmup_epochs:]
        rates = [steps * images / t for t in epoch_times if t > 0]
        out["caraml_images_per_s"] = {
            "value": statistics.fmean(rates) if rates else None, "unit": "images/s",
            "convention": "caraml-epochs (IPU): images/s of an epoch = dataset_size // global batch steps x "
                          "global batch / the epoch's wall time, mean over the epochs after the warm-up ones"}
        out["caraml_spread"] = figure_spread(rates, "epochs", "images/s")
        out["caraml_epochs"] = {"epochs": len(epoch_times), "epochs_asked": cfg.epochs,
                                "warmup_epochs": cfg.warmup_epochs, "steps_per_epoch": steps,
                                "epoch_time_s": epoch_times, "images_per_s": rates,
                                "stopped_in": _stopped_in(cfg, at, steps) if times is not None and times.stopped
                                else None}
        out["epochs"] = len(epoch_times)
    return out


def _stopped_in(cfg, at, steps: int) -> dict:
    """Where a stop came, as the torch path says it: the epoch (CARAML's number), warm-up or not, the steps done."""
    epoch, done = at
    warmup = epoch < cfg.warmup_epochs
    return {"epoch": epoch if warmup else epoch - cfg.warmup_epochs + 1, "warmup": warmup, "part": "train",
            "steps_done": done, "steps": steps}


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
