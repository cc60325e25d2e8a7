"""The GPT workload's typed configuration, torch-free: what the `Param` list of `__init__` resolves into.

One frozen `TrainingConfig`, in sections as torchtitan's job config has them: the model's shape, the batch,
the parallel layout asked for, how the step computes (precision, compilation, recompute, attention kernel),
the optimizer and its schedule, the data. `TrainingConfig.from_params` is the one reader of the flat parameter
values; everything else (layout checks, the bench, data, sizes) reads typed fields. The model's own `GPTConfig`
(model.py: padded vocabulary, MLP width resolved) is derived from the `model` section and the tensor-parallel
size, since padding depends on the layout.

The run's own settings (warm-up and measured steps, seed, device) are not here: they belong to the harness
(`caraml.settings.MeasureSettings`); the seed reaches the bench as `RunContext.seed`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from caraml.params import typed_fields
from caraml.workloads.llm_training.sizes import padded_vocab

DISTRIBUTED_OPTIMIZERS = ("zero1", "fsdp", "off")
CARAML_CONFIGS = ("none", "2024", "2025")
# exit-after-minutes of each CARAML version (its --exit-duration-in-mins)
CARAML_EXIT_MINUTES = {"2024": 30.0, "2025": 60.0, "none": 60.0}


@dataclass(frozen=True)
class ModelShape:
    model_size: str
    """label of the shape (CARAML's 800M, 13B, 175B; 117M GPT-2; smoke; custom)"""
    num_layers: int
    """transformer blocks"""
    hidden_size: int
    """model width"""
    num_attention_heads: int
    """attention heads (hidden_size / heads is the head size)"""
    ffn_hidden_size: int
    """MLP width as given; 0 means 4 x hidden_size (see `ffn`)"""
    seq_length: int
    """tokens per sample"""
    max_position_embeddings: int
    """positions the model knows (>= seq_length)"""
    vocab_size: int
    """vocabulary before padding (see `padded_vocab`)"""
    position: str
    """rope (rotary) or learned absolute position embeddings"""
    activation: str
    """MLP activation: gelu, or swiglu (gated)"""
    init_std: float
    """standard deviation of the initial weights"""

    @property
    def ffn(self) -> int:
        """The MLP width in use."""
        return self.ffn_hidden_size or 4 * self.hidden_size

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def padded_vocab(self, tp: int = 1) -> int:
        return padded_vocab(self.vocab_size, tp)


@dataclass(frozen=True)
class BatchConfig:
    micro_batch_size: int
    """samples per forward/backward on one replica"""
    grad_accumulation: int
    """micro-batches per iteration on each replica (the pipeline's micro-batches)"""
    global_batch_size: int
    """samples per iteration over all replicas as given; 0: derived (see `global_batch`)"""

    @property
    def replica_rows(self) -> int:
        """Samples one data-parallel replica trains per iteration."""
        return self.micro_batch_size * self.grad_accumulation

    def global_batch(self, dp: int) -> int:
        """Samples per iteration over `dp` replicas."""
        return dp * self.replica_rows


@dataclass(frozen=True)
class ParallelConfig:
    tp: int
    """tensor-parallel size"""
    pp: int
    """pipeline-parallel size (1F1B over the micro-batches)"""
    sequence_parallel: bool
    """norms and residuals on sequence shards (takes effect with tp > 1)"""
    loss_parallel: bool
    """cross-entropy on vocabulary-sharded logits (takes effect with tp > 1)"""
    distributed_optimizer: str
    """zero1 (optimizer state sharded over the data-parallel replicas, Megatron's), fsdp (FSDP2: parameters,
    gradients and optimizer state sharded) or off; zero1 and off reduce gradients by DDP (or a plain all-reduce
    where DDP cannot take DTensors)"""


@dataclass(frozen=True)
class ComputeConfig:
    precision: str
    """fp32, fp16 (dynamic loss scale) or bf16"""
    mixed_precision: str
    """megatron (half-precision parameters, fp32 main copies in the optimizer) or autocast (fp32 parameters)"""
    attention_dropout: float
    """dropout probability on the attention probabilities"""
    hidden_dropout: float
    """dropout probability on the embeddings and on each block's attention and MLP outputs"""
    compile: str
    """none, or inductor (torch.compile)"""
    compile_scope: str
    """model (forward and loss as one graph, where tp = pp = 1) or block (each transformer block)"""
    recompute: str
    """activation recompute: none, selective (the attention core), full (each block)"""
    attention: str
    """SDPA kernel preferred: auto, cudnn, flash, efficient, math"""
    fp8_recipe: str = "tensorwise"
    """precision=fp8: torchao's float8 scaling recipe (fp8.RECIPES)"""
    fp8_fast_accum: bool = False
    """precision=fp8: fast accumulation in the backward float8 products too (fp8.linear_config)"""
    fused_loss: str = "none"
    """none, chunked or liger: output layer + cross-entropy without the whole logits (fused.py)"""
    gelu_epilogue: bool = False
    """the MLP's first product with its bias and GELU as one cuBLASLt epilogue (fused.py)"""
    fused_norm_residual: bool = False
    """the residual add and the MLP's LayerNorm as one autograd node (fused.py)"""

    @property
    def compiled(self) -> bool:
        return self.compile != "none"

    @property
    def megatron_precision(self) -> bool:
        """Half-precision parameters with fp32 main copies (mixed_precision=megatron with fp16 or bf16; fp8 keeps
        torchao's fp32 weights, cast per product, under bf16 autocast)."""
        return self.mixed_precision == "megatron" and self.precision in ("fp16", "bf16")

    @property
    def mechanism(self) -> str:
        """How the precision is used, for the record."""
        if self.precision == "fp32":
            return "fp32 parameters and compute"
        if self.megatron_precision:
            return (f"megatron: {self.precision} parameters and compute, fp32 main copies in the optimizer"
                    + (", dynamic loss scale" if self.precision == "fp16" else ""))
        return (f"autocast: fp32 parameters, {self.precision} autocast"
                + (", dynamic loss scale" if self.precision == "fp16" else ""))


@dataclass(frozen=True)
class OptimizerConfig:
    lr: float
    """peak learning rate (AdamW)"""
    min_lr: float
    """learning rate at the end of the cosine decay"""
    lr_warmup_samples: int
    """linear warm-up from 0, in samples"""
    lr_decay_samples: int
    """cosine decay to min_lr, in samples (then min_lr)"""
    weight_decay: float
    """AdamW weight decay (not on biases and norms)"""
    clip_grad: float
    """clip gradients to this global norm (0: off)"""

    def learning_rate(self, samples: int) -> float:
        """Megatron's schedule in samples consumed: linear warm-up from 0, cosine decay to min_lr, then min_lr."""
        warm, decay = self.lr_warmup_samples, self.lr_decay_samples
        if warm > 0 and samples <= warm:
            return self.lr * samples / warm
        if samples > decay:
            return self.min_lr
        ratio = (samples - warm) / max(1, decay - warm)
        return self.min_lr + 0.5 * (math.cos(math.pi * ratio) + 1.0) * (self.lr - self.min_lr)


@dataclass(frozen=True)
class DataConfig:
    source: str
    """synthetic (random tokens made on the device) or oscar (a Megatron .bin/.idx); the parameter `data`"""
    path: str
    """data=oscar: prefix of the .bin/.idx, relative to CARAML_DATA unless absolute; "" for CARAML's default;
    the parameter `data_path`"""


@dataclass(frozen=True)
class EngineConfig:
    backend: str
    """native (this package's model and loop), megatron-core (Megatron's GPTModel, optimizer and schedules) or
    poptorch (Graphcore IPUs)"""
    megatron_spec: str
    """backend=megatron-core: te (Transformer Engine's layers), local (megatron-core's own), auto (te where
    transformer_engine imports)"""

    @property
    def poptorch(self) -> bool:
        return self.backend == "poptorch"


@dataclass(frozen=True)
class IpuConfig:
    replicas: int
    """poptorch: model replicas"""
    ipus_per_replica: int
    """poptorch: IPUs of one replica"""
    layers_per_ipu: str
    """poptorch: blocks on each IPU of a replica, e.g. 0 4 4 4 (CARAML's)"""
    device_iterations: int
    """poptorch: optimizer steps per host call"""
    lr_warmup_fraction: float
    """poptorch: warm-up over this fraction of the updates"""


@dataclass(frozen=True)
class CaramlConvention:
    caraml_config: str
    """the CARAML configuration this point reproduces, by CARAML's version: 2024, 2025 or none"""
    convention: str
    """steady (ours only) or caraml-log (also CARAML's figure over every log interval of the whole run)"""
    caraml_log_interval: int
    """caraml-log: iterations per logged interval"""
    exit_minutes: float
    """caraml-log: minutes of training before it stops; 0: CARAML's of caraml_config"""

    @property
    def logs(self) -> bool:
        return self.convention == "caraml-log"

    @property
    def exit_after_minutes(self) -> float:
        """The minutes in use: as given, or CARAML's of its configuration."""
        return self.exit_minutes or CARAML_EXIT_MINUTES[self.caraml_config]


@dataclass(frozen=True)
class TrainingConfig:
    """Every setting of one GPT pre-training point, by section."""

    model: ModelShape
    batch: BatchConfig
    parallel: ParallelConfig
    compute: ComputeConfig
    optim: OptimizerConfig
    data: DataConfig
    engine: EngineConfig
    caraml: CaramlConvention
    ipu: IpuConfig

    @classmethod
    def from_params(cls, values: dict[str, Any]) -> "TrainingConfig":
        """The typed config of resolved parameter values (the only reader of the flat values)."""
        return cls(model=typed_fields(ModelShape, values), batch=typed_fields(BatchConfig, values),
                   parallel=typed_fields(ParallelConfig, values), compute=typed_fields(ComputeConfig, values),
                   optim=typed_fields(OptimizerConfig, values),
                   data=DataConfig(source=values["data"], path=values["data_path"]),
                   engine=typed_fields(EngineConfig, values), caraml=typed_fields(CaramlConvention, values),
                   ipu=typed_fields(IpuConfig, values))
