"""The PyTorch Bench of image classification: one configured training setup; `step()` trains on one batch.

Built from the kit's parts (precision, gradient scaling, DDP, compile options, SGD kernels, FLOPs); reads its
typed config only. With convention=caraml-epochs its extra phase runs CARAML's epochs (epochs.py) on the same
model, optimizer and train step, after the steady-state window.
"""

from __future__ import annotations

import time

import torch

from caraml.contract import BenchInfo, RunContext
from caraml.kit.compile import TORCH_COMPILERS, compile_options
from caraml.kit.data_parallel import wrap_ddp
from caraml.kit.optim import kernel_flags
from caraml.kit.precision import autocast, check_precision, grad_scaler, precision_in_use
from caraml.kit.readback import Readback
from caraml.kit.step import backward_and_step
from caraml.workloads.image_classification.config import ClassificationConfig
from caraml.workloads.image_classification.flops import FLOPS_CONVENTION, count_flops_per_image
from caraml.workloads.image_classification.model import logits, make_model

CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # torch.compile modes that replay CUDA graphs
STEADY = "steady-state: images of the measured steps (all data-parallel ranks) / the slowest rank's window"


class ClassificationBench:
    """One configured training setup; `step()` trains on one batch."""

    def __init__(self, cfg: ClassificationConfig, ctx: RunContext):
        device, dist = ctx.device, ctx.dist
        self.cfg, self.device, self.dist, self.seed = cfg, device, dist, ctx.seed
        check_precision(cfg.precision, device)
        torch.manual_seed(ctx.seed + dist.rank)
        self.math = self._set_math(cfg, device)
        # A ResNet's FLOPs are nearly all convolutions: TF32 by cuDNN's flag.
        self.precision_in_use = precision_in_use(cfg.precision, device, tf32_allowed=self.math["cudnn_tf32"])
        self.memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
        self.input_format = self.memory_format if cfg.channels_last_inputs else torch.contiguous_format
        model = self._model_and_optimizer(cfg, device)
        self._data = self._make_data()
        self._compile(model)
        self.info = BenchInfo(
            units_per_step=cfg.batch_size, unit="images",
            flops_per_unit=count_flops_per_image(cfg.model, cfg.num_classes, cfg.image_size),
            flops_convention=FLOPS_CONVENTION, precision=self.precision_in_use, compiled=cfg.compile != "none",
            compile_setup_s=self.compile_setup_s)
        self.epochs = None
        self.extra_phase = "caraml-epochs" if cfg.epochs_asked else None
        # The live line's loss: the last step's, kept by reference (no kernel, no sync) - except where CUDA graphs
        # replay the step (its output is overwritten by the next replay, and reading it then is an error).
        self._keep_loss = not (cfg.compile == "inductor" and cfg.compile_mode in CUDA_GRAPH_MODES)
        self._last_loss = None
        self._loss_readback = Readback()

    # setup ----------------------------------------------------------------------------------
    @staticmethod
    def _set_math(cfg: ClassificationConfig, device) -> dict:
        """TF32 and cuDNN autotuning as asked (on GPUs), and what is in effect."""
        if device.type == "cuda":
            tf32 = cfg.precision == "tf32"
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32 or cfg.cudnn_tf32 == "on"
            torch.backends.cudnn.benchmark = cfg.cudnn_benchmark
        return {
            "matmul_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "cudnn_tf32": bool(torch.backends.cudnn.allow_tf32),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        }

    def _model_and_optimizer(self, cfg: ClassificationConfig, device):
        """The model on the device in its memory format, with its loss, SGD, autocast and gradient scaler."""
        model = make_model(cfg.model, cfg.num_classes)
        self.stem_padded = None
        if cfg.stem_pad_channels:
            from caraml.workloads.image_classification.stem import pad_stem

            self.stem_padded = pad_stem(model, cfg.stem_pad_channels)
        model = model.to(device=device, memory_format=self.memory_format).train()
        self.criterion = torch.nn.CrossEntropyLoss()
        self.optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                                         weight_decay=cfg.weight_decay, **kernel_flags(cfg.sgd_impl))
        self.autocast = autocast(cfg.precision, device)
        self.scaler = grad_scaler(cfg.precision, device, caraml=cfg.grad_scaler == "caraml")
        return model

    def _compile(self, model) -> None:
        """TorchScript tracing (before DDP, timed here), DDP, then torch.compile of the model or the step."""
        cfg = self.cfg
        self.compile_setup_s = 0.0
        if cfg.compile == "trace":
            start = time.perf_counter()
            x, _ = self._pool[0] if self._pool else self._next_batch()
            with self.autocast():
                model = torch.jit.trace(model, x, check_trace=False, strict=False)
            self.compile_setup_s = time.perf_counter() - start
        self.model = wrap_ddp(model, self.device, self.dist.world_size, gradient_as_bucket_view=True)
        self._train = self._train_step
        if cfg.compile in TORCH_COMPILERS:
            options = compile_options(cfg.compile, cfg.compile_mode, cfg.compile_tuning)
            if cfg.compile_scope == "model":
                self.model = torch.compile(self.model, **options)
            else:
                self._train = torch.compile(self._train_step, **options)

    # data -----------------------------------------------------------------------------------
    def _make_data(self):
        cfg = self.cfg
        self._pool = []
        if cfg.data == "synthetic-device":
            gen = torch.Generator(device=self.device).manual_seed(self.seed + self.dist.rank)
            for _ in range(2):  # two batches, alternated, so no step reuses the previous input
                x = torch.randn(cfg.batch_size, 3, cfg.image_size, cfg.image_size, device=self.device,
                                generator=gen).contiguous(memory_format=self.input_format)
                y = torch.randint(0, cfg.num_classes, (cfg.batch_size,), device=self.device, generator=gen)
                self._pool.append((x, y))
            return None
        from caraml.workloads.image_classification import synthetic

        loader = synthetic.loader(cfg.batch_size, cfg.image_size, cfg.num_classes, self.seed + self.dist.rank,
                                  cfg.workers, pin=self.device.type == "cuda")
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
        loss = self._train(x, y)
        if self._keep_loss:
            self._last_loss = loss.detach()

    def live_loss(self) -> float | None:
        """The loss of the newest step known to have completed (the contract's live_loss)."""
        self._loss_readback.request(self._last_loss)
        return self._loss_readback.latest()

    def extra_left(self, steps_done: int, elapsed_s: float) -> float | None:
        """The epochs' seconds left: their steps left at the mean step time so far."""
        total = self.epochs.total_steps if self.epochs is not None else None
        if not total or steps_done <= 0:
            return None
        return max(0, total - steps_done) * elapsed_s / steps_done

    def run_extra(self, should_stop) -> None:
        """CARAML's epochs (convention=caraml-epochs), after the steady-state window, on the same model;
        `should_stop()` is asked once per training and validation step."""
        from caraml.workloads.image_classification.epochs import EpochRunner

        self._data = None  # the steady state's DataLoader workers must not compete with the epochs' ones
        self.epochs = EpochRunner(self)
        self.epochs.run(should_stop)

    def health(self) -> str | None:
        """Why the run trained nothing (weights gone NaN or Inf); None when it trained."""
        from caraml.kit.health import weights_not_finite

        return weights_not_finite(self.optimizer, f"lower lr (now {self.cfg.lr:g})")

    def details(self) -> dict:
        out = {"math": self.math, "global_batch_size": self.cfg.batch_size * self.dist.world_size,
               "dataset": self.cfg.dataset_label, "throughput_convention": STEADY}
        if self.stem_padded:
            out["stem_padded"] = self.stem_padded
        if self.epochs is not None:
            out.update(self.epochs.results())
        return out

    def close(self) -> None:
        self._data = None  # stops DataLoader workers
        if self.epochs is not None:
            self.epochs.close()
