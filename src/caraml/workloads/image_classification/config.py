"""The typed config of image classification: one frozen dataclass, made once from the resolved parameters.

Its fields are the workload's parameters (caraml.params.setting), read from the flat values by
caraml.params.read_config; the Bench, the PopTorch Bench and the epochs read the fields. Torch-free (the
declaration imports it; the model check imports torchvision when it runs). The seed is not here: it is the run's
(`ctx.seed`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from caraml.kit.compile import COMPILE_MODES, compile_tuning_setting, inductor_only
from caraml.kit.optim import KERNELS
from caraml.params import setting

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
IPU_PRECISIONS = ("16.16", "16.32", "32.32")  # graphcore train.py's model.partials precisions
CONVENTIONS = ("steady", "caraml-epochs")
COMPILERS = ("none", "inductor", "aot_eager", "trace")
COMPILE_SCOPES = ("model", "step")
DATA = ("synthetic-host", "synthetic-device")
ENGINES = ("torch", "poptorch")


@lru_cache(maxsize=1)
def classification_models() -> tuple[str, ...]:
    import torchvision

    return tuple(torchvision.models.list_models(module=torchvision.models))


def _check_model(name: str) -> str | None:
    known = classification_models()
    if name in known:
        return None
    return "is not a torchvision classification model; choose one of: " + ", ".join(known)


def _check_stem_pad(channels: int) -> str | None:
    return None if channels == 0 or channels > 3 else "must be 0 (off) or more than the images' 3 channels"


@dataclass(frozen=True)
class ClassificationConfig:
    """One image-classification training setup (torchvision model, SGD, synthetic data)."""

    model: str = setting("resnet50", "torchvision classification model", check=_check_model, headline=True)
    image_size: int = setting(224, "height and width of the square input images", minimum=16, headline=True)
    num_classes: int = setting(1000, "classifier outputs", minimum=2)
    batch_size: int = setting(64, "images per device per step (poptorch: per replica per micro-batch)", minimum=1,
                              headline=True)
    precision: str = setting("fp32", "fp32, tf32 (matmul/conv in TF32), fp16 (autocast+GradScaler), bf16 "
                             "(autocast); IPU (engine=poptorch): 16.16, 16.32, 32.32 (model.partials)",
                             choices=PRECISIONS + IPU_PRECISIONS, headline=True)
    compile: str = setting("none", "none, inductor (torch.compile), aot_eager, trace (TorchScript)", choices=COMPILERS,
                           headline=True)
    compile_mode: str = setting("default", "torch.compile mode for compile=inductor", choices=COMPILE_MODES,
                                headline=True, applies=inductor_only)
    compile_tuning: str = compile_tuning_setting()
    compile_scope: str = setting("model", "compile the model, or the whole train step", choices=COMPILE_SCOPES)
    channels_last: bool = setting(False, "NHWC memory format for model and inputs", headline=True)
    data: str = setting("synthetic-host", "synthetic-host (DataLoader, workers, pinned memory) or synthetic-device",
                        choices=DATA, headline=True)
    # also the loaders of CARAML's epochs
    workers: int = setting(4, "DataLoader worker processes for data=synthetic-host", minimum=0)
    cudnn_benchmark: bool = setting(True, "let cuDNN pick the fastest convolution algorithms (warm-up)")
    lr: float = setting(0.1, "SGD learning rate", minimum=0.0)
    momentum: float = setting(0.9, "SGD momentum", minimum=0.0)
    weight_decay: float = setting(1e-4, "SGD weight decay", minimum=0.0)
    sgd_impl: str = setting("foreach", "SGD kernels: foreach (PyTorch's default), fused (one kernel), for-loop",
                            choices=KERNELS)
    channels_last_inputs: bool = setting(True, "with channels_last: convert the input batches too (CARAML converts "
                                         "only the model)")
    grad_scaler: str = setting("fp16", "gradient scaling: fp16 (fp16 only, PyTorch's defaults) or caraml (fp16 and "
                               "bf16, initial scale 1, growth every 100 steps, as CARAML)", choices=("fp16", "caraml"))
    cudnn_tf32: str = setting("auto", "TF32 convolutions on NVIDIA GPUs: auto (with precision=tf32 only) or on "
                              "(PyTorch's default, kept by CARAML: its fp32 runs convolve in TF32)",
                              choices=("auto", "on"))
    # caraml-epochs runs them as the harness's extra phase, after the steady-state window
    convention: str = setting("steady", "steady: our steady-state images/s; caraml-epochs: also CARAML's epochs "
                              "(FakeData, train + validation, images/s = dataset_size / epoch time) as "
                              "caraml_images_per_s", choices=CONVENTIONS)
    epochs: int = setting(100, "caraml-epochs: measured epochs", minimum=1)
    warmup_epochs: int = setting(5, "caraml-epochs: epochs before the measured ones, not counted", minimum=0)
    dataset_size: int = setting(10000, "caraml-epochs: FakeData images (train + validation)", minimum=2)
    val_split: float = setting(0.1, "caraml-epochs: fraction of the images held out for validation", minimum=0.0,
                               check=lambda v: None if v < 1 else "must be below 1 (a fraction of the data set)")
    lr_step_epochs: int = setting(10, "caraml-epochs: StepLR period in epochs (0: constant learning rate)",
                                  minimum=0)
    lr_gamma: float = setting(0.1, "caraml-epochs: StepLR factor", minimum=0.0)
    # formerly `backend`: stored records and their ids keep that name (aliases, id_name)
    engine: str = setting("torch", "torch, or poptorch (Graphcore IPUs through PopTorch, as CARAML's GC200 runs); "
                          "backend: its former name", choices=ENGINES, aliases=("backend",), id_name="backend")
    replicas: int = setting(1, "poptorch: model replicas over the IPUs (data parallel inside one process)",
                            minimum=1)
    grad_accumulation: int = setting(1, "poptorch: micro-batches accumulated per weight update (the LLM's name; "
                                     "gradient_accumulation still accepted)", minimum=1,
                                     aliases=("gradient_accumulation",))
    # the same math (zero channels, zero weights); added later: at its default, ids stay as before
    stem_pad_channels: int = setting(0, "the stem convolution on its input padded with zero channels up to this "
                                     "count, its weight with zero input channels (the same math; 8: bf16 NHWC as "
                                     "cuDNN's tensor-core kernels take it, without cuDNN's own padding); 0: off",
                                     minimum=0, check=_check_stem_pad, identifies_at_default=False)

    @property
    def ipu(self) -> bool:
        return self.engine == "poptorch"

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
            return (f"engine=poptorch runs the IPU precisions {', '.join(IPU_PRECISIONS)}, not "
                    f"precision={cfg.precision}")
        if cfg.compile != "none":
            return f"engine=poptorch compiles for the IPU itself; use compile=none, not compile={cfg.compile}"
        if cfg.stem_pad_channels:
            return (f"stem_pad_channels={cfg.stem_pad_channels} shapes the stem for cuDNN (engine=torch); use "
                    "stem_pad_channels=0 with engine=poptorch")
        return None
    if cfg.precision in IPU_PRECISIONS:
        return f"precision={cfg.precision} is a Graphcore IPU precision; it needs engine=poptorch"
    for name in ("replicas", "grad_accumulation"):
        value = getattr(cfg, name)
        if value != 1:
            return f"{name}={value} applies to engine=poptorch only (torch runs one process per device)"
    return None
