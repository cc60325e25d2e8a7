"""Image-classification training: any torchvision classifier, SGD, synthetic data; CARAML's settings as a preset.

`build` returns a `Bench` whose `step()` runs one training step without synchronising the device; the harness
owns timing, warm-up and the record. Two conventions: `steady` (ours: the harness's steady-state images/s) and
`caraml-epochs` (also CARAML's figure: FakeData epochs of train + validation, images/s = data set size / epoch
time, mean after the warm-up epochs, run as the harness's extra phase and stoppable at every step; epochs.py),
reported apart as `caraml_images_per_s`. With `engine=poptorch` the same workload runs on Graphcore IPUs
(CARAML's GC200 runs; ipu.py).

Declaring the workload imports no torch: its parameters are the fields of its typed config (config.py); the Bench
(bench.py), the torchvision model (model.py), its stem on padded channels (stem.py), the FLOP count (flops.py),
the epochs (epochs.py), the PopTorch Bench (ipu.py) and the synthetic host data (synthetic.py) are loaded by
`build`.
"""

from __future__ import annotations

from caraml.errors import BadInput
from caraml.kit import torch_features as tf
from caraml.kit.compile import TORCH_COMPILERS
from caraml.kit.precision import HALF
from caraml.workloads import Col, Workload, register
from caraml.workloads.image_classification.config import ClassificationConfig, check_combination

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


def check_launch(cfg: ClassificationConfig, devices: int) -> str | None:
    problem = check_combination(cfg)
    if problem is None and cfg.ipu and devices != 1:
        problem = (f"engine=poptorch drives all IPUs from one process (replicas={cfg.replicas}); "
                   f"launch 1 process, not {devices}")
    return problem


def check_device(cfg: ClassificationConfig, device) -> None:
    problem = check_combination(cfg)
    if problem:
        raise BadInput(problem)
    if cfg.ipu:
        from caraml.kit.ipu import require_poptorch

        require_poptorch()
        return
    from caraml.kit.optim import check_kernels
    from caraml.kit.precision import check_precision

    check_precision(cfg.precision, device)
    check_kernels("sgd_impl", cfg.sgd_impl, "sgd", device)


def torch_features(cfg: ClassificationConfig, dims) -> tuple:
    """What of torch a run needs beyond the oldest supported one; PopTorch brings its own torch (2.0.1 in the
    Poplar SDK 3.3) and compiles for the IPU itself."""
    if cfg.ipu:
        return ()
    scaled = cfg.precision == "fp16" or (cfg.grad_scaler == "caraml" and cfg.precision in HALF)
    return ((tf.COMPILE,) if cfg.compile in TORCH_COMPILERS else ()) + ((tf.GRAD_SCALER,) if scaled else ())


def build(cfg: ClassificationConfig, ctx):
    """The Bench of a run: PyTorch on CPUs and GPUs, PopTorch on Graphcore IPUs."""
    if cfg.ipu:
        from caraml.workloads.image_classification.ipu import IpuBench

        return IpuBench(cfg, ctx)
    from caraml.workloads.image_classification.bench import ClassificationBench

    return ClassificationBench(cfg, ctx)


WORKLOAD = register(Workload(
    name="image_classification",
    unit="images",
    presets=PRESETS,
    build=build,
    config=ClassificationConfig,
    check_device=check_device,
    check_launch=check_launch,
    torch_features=torch_features,
    description="Image-classification training (torchvision models, ResNet50 by default), synthetic data",
    # CARAML's columns (its JUBE result table, in its order; those it shows always are shown by default), then ours.
    columns=(Col("job_id", "JobID", "shared:job_id", default=False), "system",
             Col("version", "Version", "shared:version", default=False),
             Col("queue", "Queue", "shared:queue", default=False),
             Col("runtime_s", "Runtime(s)", "shared:runtime_s", default=False),
             Col("model", "Model", "param:model"),
             Col("engine", "Engine", "param:engine", default="if-differs", shows=lambda v, _: v or "torch"),
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
    metrics=("math", "global_batch_size", "dataset", "throughput_convention", "caraml_images_per_s", "caraml_spread",
             "caraml_epochs", "epochs", "ipu", "stem_padded"),
))
