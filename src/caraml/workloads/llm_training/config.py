"""The GPT workload's typed configuration, torch-free: its fields are the workload's parameters.

One frozen `TrainingConfig`, in sections as torchtitan's job config has them: the model's shape, the batch,
the parallel layout asked for (and what a replica recomputes), how the step computes (precision, compilation,
attention kernel), the data, the optimizer and its schedule, the engine, CARAML's IPU settings and conventions.
Each setting is declared once, as a section's field (caraml.params.setting), under the name a person types;
the sections are the code's only, in the order `caraml workloads` lists the parameters. caraml.params.read_config
is the one reader of the flat parameter values; everything else (layout checks, the bench, data, sizes) reads
typed fields. The model's own `GPTConfig`
(model.py: padded vocabulary, MLP width resolved) is derived from the `model` section and the tensor-parallel
size, since padding depends on the layout.

The run's own settings (warm-up and measured steps, seed, device) are not here: they belong to the harness
(`caraml.settings.MeasureSettings`); the seed reaches the bench as `RunContext.seed`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from caraml.kit.compile import compile_tuning_setting, inductor_only
from caraml.params import setting
from caraml.workloads.llm_training.caraml_log import CONVENTIONS, LOG_INTERVAL
from caraml.workloads.llm_training.engine_names import INSTALL, NAMES, SPECS
from caraml.workloads.llm_training.fp8 import RECIPES as FP8_RECIPES
from caraml.workloads.llm_training.ipu import CARAML_IPU
from caraml.workloads.llm_training.sizes import padded_vocab

DISTRIBUTED_OPTIMIZERS = ("zero1", "fsdp", "off")
CARAML_CONFIGS = ("none", "2024", "2025")
COMPILERS = ("none", "inductor")
# torch.compile's modes without CUDA graphs: an iteration is hundreds of milliseconds of large kernels, where fewer
# launches gain nothing; max-autotune-no-cudagraphs benchmarks Triton templates against cuBLAS for each product
GPT_COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")
# the former boolean distributed_optimizer: on meant FSDP2
_ON_OFF_FSDP = tuple((v, "fsdp") for v in ("true", "on", "yes", "1")) + tuple((v, "off") for v in
                                                                                ("false", "no", "0"))
# exit-after-minutes of each CARAML version (its --exit-duration-in-mins)
CARAML_EXIT_MINUTES = {"2024": 30.0, "2025": 60.0, "none": 60.0}


@dataclass(frozen=True)
class ModelShape:
    model_size: str = setting("800M", "label of the model shape (CARAML's 800M, 13B, 175B; 117M GPT-2; smoke): a "
                              "named size has its preset's layers, width, heads and MLP width; custom for any other "
                              "shape", choices=("smoke", "117M", "800M", "13B", "175B", "custom"))
    num_layers: int = setting(16, "transformer layers", minimum=1)
    hidden_size: int = setting(2048, "model width", minimum=1)
    num_attention_heads: int = setting(16, "attention heads", minimum=1)  # hidden_size / heads is the head size
    ffn_hidden_size: int = setting(0, "MLP width (0: 4 x hidden_size)", minimum=0)  # the width in use: `ffn`
    seq_length: int = setting(2048, "tokens per sample", minimum=1)
    max_position_embeddings: int = setting(2048, "positions the model knows (>= seq_length)", minimum=1)
    vocab_size: int = setting(50257, "vocabulary (GPT-2's); padded to a multiple of 128 x tp as Megatron does",
                              minimum=2)  # before padding (see `padded_vocab`)
    position: str = setting("rope", "rope (rotary, CARAML's) or learned absolute position embeddings",
                            choices=("rope", "learned"))
    activation: str = setting("gelu", "MLP activation: gelu, or swiglu (gated)", choices=("gelu", "swiglu"))
    init_std: float = setting(0.0048, "standard deviation of the initial weights (CARAML's 0.0048)", minimum=0.0)

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
    micro_batch_size: int = setting(4, "samples per forward/backward on one replica", minimum=1)
    grad_accumulation: int = setting(1, "micro-batches per iteration on each replica (the pipeline's "
                                     "micro-batches)", minimum=1)
    # as given; the one in use: `global_batch`
    global_batch_size: int = setting(0, "samples per iteration over all replicas: dp x micro_batch_size x "
                                     "grad_accumulation; 0 derives it, a given value must equal it", minimum=0)

    @property
    def replica_rows(self) -> int:
        """Samples one data-parallel replica trains per iteration."""
        return self.micro_batch_size * self.grad_accumulation

    def global_batch(self, dp: int) -> int:
        """Samples per iteration over `dp` replicas."""
        return dp * self.replica_rows


@dataclass(frozen=True)
class ParallelConfig:
    """The layout over the devices, and what a replica recomputes and shards to fit its memory."""

    tp: int = setting(1, "tensor-parallel size", minimum=1)
    pp: int = setting(1, "pipeline-parallel size (1F1B schedule over the micro-batches)", minimum=1)
    sequence_parallel: bool = setting(True, "norms and residuals on sequence shards (takes effect with tp > 1)")
    loss_parallel: bool = setting(True, "cross-entropy on vocabulary-sharded logits (takes effect with tp > 1)")
    recompute: str = setting("selective", "activation recompute: none, selective (the attention core), full "
                             "(each block)", choices=("none", "selective", "full"))
    # zero1 and off reduce gradients by DDP (or a plain all-reduce where DDP cannot take DTensors)
    distributed_optimizer: str = setting("fsdp", "zero1: Megatron's distributed optimizer (CARAML's), optimizer "
                                         "state sharded over the data-parallel replicas, gradients all-reduced; fsdp: "
                                         "FSDP2, parameters, gradients and optimizer state sharded; off: DDP "
                                         "(all-reduce of gradients), every replica steps everything",
                                         choices=DISTRIBUTED_OPTIMIZERS, value_aliases=_ON_OFF_FSDP,
                                         id_values=(("fsdp", True), ("off", False)))


@dataclass(frozen=True)
class ComputeConfig:
    precision: str = setting("bf16", "fp32, fp16 (dynamic loss scale), bf16, or fp8 (the blocks' linear layers in "
                             "float8 by torchao, the rest bf16; sm_89+); mixed_precision says how the half precision "
                             "is used", choices=("fp32", "fp16", "bf16", "fp8"), headline=True)
    # fp8.linear_config reads these two
    fp8_recipe: str = setting("tensorwise", "precision=fp8: torchao's scaling recipe (tensorwise: one scale per "
                              "tensor; rowwise; rowwise_with_gw_hp: the weight gradient in bf16)", choices=FP8_RECIPES,
                              identifies_at_default=False)
    fp8_fast_accum: bool = setting(False, "precision=fp8: fast accumulation in the backward float8 products too "
                                   "(torchao's recipes use it in the forward product only): faster, gradients rounded "
                                   "more coarsely", identifies_at_default=False)
    # these three: fused.py
    fused_loss: str = setting("none", "output layer + cross-entropy without holding the logits: chunked (PyTorch), "
                              "liger (liger-kernel where it imports, else chunked, named in the record); tp = pp = 1",
                              choices=("none", "chunked", "liger"), identifies_at_default=False)
    gelu_epilogue: bool = setting(False, "the MLP's first product with bias + GELU as one cuBLASLt epilogue (tanh "
                                  "GELU on CUDA); backward recomputes the pre-activation", identifies_at_default=False)
    fused_norm_residual: bool = setting(False, "residual add + the MLP's LayerNorm as one autograd node",
                                        identifies_at_default=False)
    mixed_precision: str = setting("autocast", "how fp16/bf16 train: megatron (Megatron's, CARAML's: parameters in "
                                   "the half precision, fp32 main copies in the optimizer) or autocast (fp32 "
                                   "parameters under autocast)", choices=("megatron", "autocast"),
                                   identifies_at_default=False)
    attention_dropout: float = setting(0.0, "dropout on the attention probabilities (SDPA's dropout_p; Megatron's "
                                       "default and CARAML's 0.1)", minimum=0.0, identifies_at_default=False)
    hidden_dropout: float = setting(0.0, "dropout on the embeddings and on each block's attention and MLP outputs "
                                    "(Megatron's default and CARAML's 0.1)", minimum=0.0, identifies_at_default=False)
    compile: str = setting("none", "none, or inductor: torch.compile the model (compile_scope says what is one "
                           "graph)", choices=COMPILERS, headline=True,
                           value_aliases=(("on", "inductor"), ("true", "inductor"), ("off", "none"),
                                          ("false", "none")))
    compile_mode: str = setting("default", "torch.compile mode for compile=inductor: max-autotune-no-cudagraphs "
                                "times Triton's matrix-product templates against cuBLAS for each shape and keeps the "
                                "fastest, with compile_tuning's coordinate descent included (minutes more compiling; "
                                "sums may round differently)", choices=GPT_COMPILE_MODES,
                                identifies_at_default=False, applies=inductor_only)
    compile_tuning: str = compile_tuning_setting()
    attention: str = setting("auto", "SDPA kernel preferred: auto (PyTorch's choice), cudnn, flash, efficient, math",
                             choices=("auto", "cudnn", "flash", "efficient", "math"))
    compile_scope: str = setting("model", "model: forward and loss as one graph (head and cross-entropy fused), "
                                 "where tp = pp = 1; block: each transformer block on its own (any layout; the "
                                 "fallback)", choices=("model", "block"))

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
    lr: float = setting(1e-4, "peak learning rate (AdamW, betas 0.9/0.999, eps 1e-8)", minimum=0.0)
    min_lr: float = setting(1e-5, "learning rate at the end of the cosine decay", minimum=0.0)
    lr_warmup_samples: int = setting(216_320, "linear warm-up, in samples", minimum=0)  # from 0
    lr_decay_samples: int = setting(128_953_125, "cosine decay to min_lr, in samples", minimum=1)  # then min_lr
    weight_decay: float = setting(0.1, "AdamW weight decay (not on biases and norms)", minimum=0.0)
    clip_grad: float = setting(1.0, "clip gradients to this global norm (0: off)", minimum=0.0)

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
    data: str = setting("synthetic", "synthetic tokens made on the device, or oscar (a Megatron .bin/.idx)",
                        choices=("synthetic", "oscar"), headline=True)
    # relative to CARAML_DATA unless absolute
    data_path: str = setting("", "data=oscar: prefix of the .bin/.idx (default: $CARAML_DATA/oscar_text_document)")


@dataclass(frozen=True)
class EngineConfig:
    # formerly `backend`: stored records and their ids keep that name (aliases, id_name)
    engine: str = setting("native", "native (this package's model and loop, on GPUs and CPUs), megatron-core "
                          "(CARAML's engine: Megatron's GPTModel, optimizer and schedules; " + INSTALL + ") "
                          "or poptorch (Graphcore IPUs through PopTorch, as CARAML's GC200 runs: one process, the "
                          "blocks pipelined over the IPUs of a replica); backend: its former name",
                          choices=NAMES, headline=True, identifies_at_default=False, aliases=("backend",),
                          id_name="backend")
    megatron_spec: str = setting("auto", "engine=megatron-core's layers: te (Transformer Engine), local "
                                 "(megatron-core's own), auto (te where transformer_engine imports)",
                                 choices=SPECS, identifies_at_default=False)


@dataclass(frozen=True)
class IpuConfig:
    replicas: int = setting(1, "poptorch: model replicas (data parallel inside one process; CARAML's 1)", minimum=1,
                            identifies_at_default=False)
    ipus_per_replica: int = setting(CARAML_IPU["ipus_per_replica"], "poptorch: IPUs of one replica (CARAML's 4)",
                                    minimum=1, identifies_at_default=False)
    layers_per_ipu: str = setting(CARAML_IPU["layers_per_ipu"], "poptorch: transformer blocks on each IPU of a "
                                  "replica (CARAML's \"0 4 4 4\": the embedding alone on IPU 0)",
                                  identifies_at_default=False)
    device_iterations: int = setting(CARAML_IPU["device_iterations"], "poptorch: optimizer steps per host call "
                                     "(CARAML's 4: 4 x 128 samples per step)", minimum=1, identifies_at_default=False)
    lr_warmup_fraction: float = setting(CARAML_IPU["lr_warmup_fraction"], "poptorch: linear warm-up over this "
                                        "fraction of the updates in lr_decay_samples, then cosine to 0 (Graphcore's "
                                        "--lr-warmup; CARAML's 0.01)", minimum=0.0, identifies_at_default=False)


@dataclass(frozen=True)
class CaramlConvention:
    caraml_config: str = setting("none", "which of CARAML's configurations this point reproduces, by CARAML's "
                                 "version: 2024 (2024.01, behind the published figures: 800M with 8 heads, exit after "
                                 "30 min), 2025 (2025.01 newest, JUPITER/MI300A: 16 heads, 60 min); none",
                                 choices=CARAML_CONFIGS, identifies_at_default=False)
    convention: str = setting("steady", "steady: our steady-state tokens/s; caraml-log: also CARAML's figure, "
                              "training on after the steady window until exit_minutes, tokens/s = global batch x seq "
                              "/ mean time per iteration of every caraml_log_interval iterations of the whole run",
                              choices=CONVENTIONS, identifies_at_default=False)
    caraml_log_interval: int = setting(LOG_INTERVAL, "caraml-log: iterations per logged interval "
                                       "(Megatron's --log-interval; CARAML's 5)", minimum=1,
                                       identifies_at_default=False)
    # the minutes in use: `exit_after_minutes`
    exit_minutes: float = setting(0.0, "caraml-log: stop training this many minutes after it started (Megatron's "
                                  "--exit-duration-in-mins); 0: CARAML's of caraml_config (2024: 30, 2025 and none: "
                                  "60)", minimum=0.0, identifies_at_default=False)

    @property
    def logs(self) -> bool:
        return self.convention == "caraml-log"

    @property
    def exit_after_minutes(self) -> float:
        """The minutes in use: as given, or CARAML's of its configuration."""
        return self.exit_minutes or CARAML_EXIT_MINUTES[self.caraml_config]


@dataclass(frozen=True)
class TrainingConfig:
    """Every setting of one GPT pre-training point, by section (in the order of the parameters' listing)."""

    model: ModelShape = field(default_factory=ModelShape)
    batch: BatchConfig = field(default_factory=BatchConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    dataset: DataConfig = field(default_factory=DataConfig)
    optim: OptimizerConfig = field(default_factory=OptimizerConfig)
    runtime: EngineConfig = field(default_factory=EngineConfig)  # which engine, and megatron-core's layers
    ipu: IpuConfig = field(default_factory=IpuConfig)
    caraml: CaramlConvention = field(default_factory=CaramlConvention)
