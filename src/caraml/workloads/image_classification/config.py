"""The typed config of image classification: one frozen dataclass, made once from the resolved parameters.

Torch-free (the declaration imports it). `from_params` is the only reader of the flat parameter values; the
Bench, the PopTorch Bench and the epochs read the fields. The seed is not here: it is the run's (`ctx.seed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from caraml.params import typed_fields

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
IPU_PRECISIONS = ("16.16", "16.32", "32.32")  # graphcore train.py's model.partials precisions
CONVENTIONS = ("steady", "caraml-epochs")
COMPILERS = ("none", "inductor", "aot_eager", "trace")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
COMPILE_SCOPES = ("model", "step")
DATA = ("synthetic-host", "synthetic-device")
BACKENDS = ("torch", "poptorch")


@dataclass(frozen=True)
class ClassificationConfig:
    """One image-classification training setup (torchvision model, SGD, synthetic data)."""

    model: str
    """torchvision classification model"""
    image_size: int
    """height and width of the square input images"""
    num_classes: int
    """classifier outputs"""
    batch_size: int
    """images per device per step (poptorch: per replica per micro-batch)"""
    precision: str
    """fp32, tf32, fp16 (autocast + GradScaler), bf16 (autocast); IPU: 16.16, 16.32, 32.32 (model.partials)"""
    compile: str
    """none, inductor (torch.compile), aot_eager, trace (TorchScript)"""
    compile_mode: str
    """torch.compile mode for compile=inductor"""
    compile_scope: str
    """compile the model, or the whole train step"""
    channels_last: bool
    """NHWC memory format for the model (and the inputs, with channels_last_inputs)"""
    data: str
    """synthetic-host (DataLoader, workers, pinned memory) or synthetic-device"""
    workers: int
    """DataLoader worker processes (synthetic-host data, CARAML's epochs)"""
    cudnn_benchmark: bool
    """let cuDNN pick the fastest convolution algorithms"""
    lr: float
    """SGD learning rate"""
    momentum: float
    """SGD momentum"""
    weight_decay: float
    """SGD weight decay"""
    sgd_impl: str
    """SGD kernels: foreach, fused, for-loop (caraml.kit.optim)"""
    channels_last_inputs: bool
    """with channels_last: convert the input batches too (CARAML converts only the model)"""
    grad_scaler: str
    """fp16 (PyTorch's scaler, fp16 only) or caraml (fp16 and bf16, from a scale of 1, growth every 100 steps)"""
    cudnn_tf32: str
    """TF32 convolutions on NVIDIA GPUs: auto (with precision=tf32 only) or on (PyTorch's default)"""
    convention: str
    """steady (the harness's steady state only) or caraml-epochs (also CARAML's epochs, an extra phase)"""
    epochs: int
    """caraml-epochs: measured epochs"""
    warmup_epochs: int
    """caraml-epochs: epochs before the measured ones, not counted"""
    dataset_size: int
    """caraml-epochs: FakeData images (train + validation)"""
    val_split: float
    """caraml-epochs: fraction of the images held out for validation"""
    lr_step_epochs: int
    """caraml-epochs: StepLR period in epochs (0: constant learning rate)"""
    lr_gamma: float
    """caraml-epochs: StepLR factor"""
    backend: str
    """torch, or poptorch (Graphcore IPUs)"""
    replicas: int
    """poptorch: model replicas over the IPUs (data parallel inside one process)"""
    grad_accumulation: int
    """poptorch: micro-batches accumulated per weight update (formerly gradient_accumulation)"""
    stem_pad_channels: int = 0
    """the stem convolution on its input padded with zero channels up to this count (0: off); the same math"""

    @classmethod
    def from_params(cls, values: dict[str, Any]) -> ClassificationConfig:
        return typed_fields(cls, values)

    @property
    def ipu(self) -> bool:
        return self.backend == "poptorch"

    @property
    def epochs_asked(self) -> bool:
        """Whether CARAML's epochs run after the steady-state window (convention=caraml-epochs)."""
        return self.convention == "caraml-epochs"

    @property
    def dataset_label(self) -> str:
        """CARAML's Dataset column."""
        return "Synthetic(Device)" if self.data == "synthetic-device" else "Synthetic(Host)"


def check_combination(cfg: ClassificationConfig) -> str | None:
    """What is wrong with parameters that each are valid but do not go together (checked before any run)."""
    if cfg.ipu:
        if cfg.precision not in IPU_PRECISIONS:
            return (f"backend=poptorch runs the IPU precisions {', '.join(IPU_PRECISIONS)}, not "
                    f"precision={cfg.precision}")
        if cfg.compile != "none":
            return f"backend=poptorch compiles for the IPU itself; use compile=none, not compile={cfg.compile}"
        if cfg.stem_pad_channels:
            return (f"stem_pad_channels={cfg.stem_pad_channels} shapes the stem for cuDNN (backend=torch); use "
                    "stem_pad_channels=0 with backend=poptorch")
        return None
    if cfg.precision in IPU_PRECISIONS:
        return f"precision={cfg.precision} is a Graphcore IPU precision; it needs backend=poptorch"
    for name in ("replicas", "grad_accumulation"):
        value = getattr(cfg, name)
        if value != 1:
            return f"{name}={value} applies to backend=poptorch only (torch runs one process per device)"
    return None
