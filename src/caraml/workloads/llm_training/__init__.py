"""GPT pre-training, Megatron's recipe in plain PyTorch (CARAML's llm_training): tensor, pipeline and data
parallelism, sequence parallelism, activation recompute, fp16/bf16 with fp32 master weights.

This module only declares the workload (parameters, presets, layout checks, result columns) and imports
no torch; the parameters resolve into the typed `TrainingConfig` of config.py (torch-free too), which every
function here and the bench read. model.py, parallel.py and bench.py are loaded when a run builds
the benchmark.
"""

from __future__ import annotations

from caraml.errors import BadInput
from caraml.kit import torch_features as tf
from caraml.params import Param
from caraml.workloads import Col, Workload, register
from caraml.workloads.llm_training import backend, caraml_log, ipu
from caraml.workloads.llm_training.config import CARAML_CONFIGS, DISTRIBUTED_OPTIMIZERS, TrainingConfig
from caraml.workloads.llm_training.fp8 import RECIPES as FP8_RECIPES

COMPILERS = ("none", "inductor")
# the former boolean distributed_optimizer: on meant FSDP2
_ON_OFF_FSDP = tuple((v, "fsdp") for v in ("true", "on", "yes", "1")) + tuple((v, "off") for v in
                                                                                ("false", "no", "0"))

PARAMS = [
    Param("model_size", str, "800M", "label of the model shape (CARAML's 800M, 13B, 175B; 117M GPT-2; smoke): a named "
          "size has its preset's layers, width, heads and MLP width; custom for any other shape",
          choices=("smoke", "117M", "800M", "13B", "175B", "custom")),
    Param("num_layers", int, 16, "transformer layers", minimum=1),
    Param("hidden_size", int, 2048, "model width", minimum=1),
    Param("num_attention_heads", int, 16, "attention heads", minimum=1),
    Param("ffn_hidden_size", int, 0, "MLP width (0: 4 x hidden_size)", minimum=0),
    Param("seq_length", int, 2048, "tokens per sample", minimum=1),
    Param("max_position_embeddings", int, 2048, "positions the model knows (>= seq_length)", minimum=1),
    Param("vocab_size", int, 50257, "vocabulary (GPT-2's); padded to a multiple of 128 x tp as Megatron does",
          minimum=2),
    Param("position", str, "rope", "rope (rotary, CARAML's) or learned absolute position embeddings",
          choices=("rope", "learned")),
    Param("activation", str, "gelu", "MLP activation: gelu, or swiglu (gated)", choices=("gelu", "swiglu")),
    Param("init_std", float, 0.0048, "standard deviation of the initial weights (CARAML's 0.0048)", minimum=0.0),
    Param("micro_batch_size", int, 4, "samples per forward/backward on one replica", minimum=1),
    Param("grad_accumulation", int, 1, "micro-batches per iteration on each replica (the pipeline's micro-batches)",
          minimum=1),
    Param("global_batch_size", int, 0, "samples per iteration over all replicas: dp x micro_batch_size x "
          "grad_accumulation; 0 derives it, a given value must equal it", minimum=0),
    Param("tp", int, 1, "tensor-parallel size", minimum=1),
    Param("pp", int, 1, "pipeline-parallel size (1F1B schedule over the micro-batches)", minimum=1),
    Param("sequence_parallel", bool, True, "norms and residuals on sequence shards (takes effect with tp > 1)"),
    Param("loss_parallel", bool, True, "cross-entropy on vocabulary-sharded logits (takes effect with tp > 1)"),
    Param("recompute", str, "selective", "activation recompute: none, selective (the attention core), full "
          "(each block)", choices=("none", "selective", "full")),
    Param("distributed_optimizer", str, "fsdp", "zero1: Megatron's distributed optimizer (CARAML's), optimizer "
          "state sharded over the data-parallel replicas, gradients all-reduced; fsdp: FSDP2, parameters, gradients "
          "and optimizer state sharded; off: DDP (all-reduce of gradients), every replica steps everything",
          choices=DISTRIBUTED_OPTIMIZERS, value_aliases=_ON_OFF_FSDP, id_values=(("fsdp", True), ("off", False))),
    Param("precision", str, "bf16", "fp32, fp16 (dynamic loss scale), bf16, or fp8 (the blocks' linear layers in "
          "float8 by torchao, the rest bf16; sm_89+); mixed_precision says how the half precision is used",
          choices=("fp32", "fp16", "bf16", "fp8"), headline=True),
    Param("fp8_recipe", str, "tensorwise", "precision=fp8: torchao's scaling recipe (tensorwise: one scale per "
          "tensor; rowwise; rowwise_with_gw_hp: the weight gradient in bf16)", choices=FP8_RECIPES,
          identifies_at_default=False),
    Param("fp8_fast_accum", bool, False, "precision=fp8: fast accumulation in the backward float8 products too "
          "(torchao's recipes use it in the forward product only): faster, gradients rounded more coarsely",
          identifies_at_default=False),
    Param("fused_loss", str, "none", "output layer + cross-entropy without holding the logits: chunked (PyTorch), "
          "liger (liger-kernel where it imports, else chunked, named in the record); tp = pp = 1",
          choices=("none", "chunked", "liger"), identifies_at_default=False),
    Param("gelu_epilogue", bool, False, "the MLP's first product with bias + GELU as one cuBLASLt epilogue (tanh "
          "GELU on CUDA); backward recomputes the pre-activation", identifies_at_default=False),
    Param("fused_norm_residual", bool, False, "residual add + the MLP's LayerNorm as one autograd node",
          identifies_at_default=False),
    Param("mixed_precision", str, "autocast", "how fp16/bf16 train: megatron (Megatron's, CARAML's: parameters in "
          "the half precision, fp32 main copies in the optimizer) or autocast (fp32 parameters under autocast)",
          choices=("megatron", "autocast"), identifies_at_default=False),
    Param("attention_dropout", float, 0.0, "dropout on the attention probabilities (SDPA's dropout_p; Megatron's "
          "default and CARAML's 0.1)", minimum=0.0, identifies_at_default=False),
    Param("hidden_dropout", float, 0.0, "dropout on the embeddings and on each block's attention and MLP outputs "
          "(Megatron's default and CARAML's 0.1)", minimum=0.0, identifies_at_default=False),
    Param("compile", str, "none", "none, or inductor: torch.compile the model (compile_scope says what is one "
          "graph)", choices=COMPILERS, headline=True,
          value_aliases=(("on", "inductor"), ("true", "inductor"), ("off", "none"), ("false", "none"))),
    Param("attention", str, "auto", "SDPA kernel preferred: auto (PyTorch's choice), cudnn, flash, efficient, math",
          choices=("auto", "cudnn", "flash", "efficient", "math")),
    Param("compile_scope", str, "model", "model: forward and loss as one graph (head and cross-entropy fused), "
          "where tp = pp = 1; block: each transformer block on its own (any layout; the fallback)",
          choices=("model", "block")),
    Param("data", str, "synthetic", "synthetic tokens made on the device, or oscar (a Megatron .bin/.idx)",
          choices=("synthetic", "oscar"), headline=True),
    Param("data_path", str, "", "data=oscar: prefix of the .bin/.idx (default: $CARAML_DATA/oscar_text_document)"),
    Param("lr", float, 1e-4, "peak learning rate (AdamW, betas 0.9/0.999, eps 1e-8)", minimum=0.0),
    Param("min_lr", float, 1e-5, "learning rate at the end of the cosine decay", minimum=0.0),
    Param("lr_warmup_samples", int, 216_320, "linear warm-up, in samples", minimum=0),
    Param("lr_decay_samples", int, 128_953_125, "cosine decay to min_lr, in samples", minimum=1),
    Param("weight_decay", float, 0.1, "AdamW weight decay (not on biases and norms)", minimum=0.0),
    Param("clip_grad", float, 1.0, "clip gradients to this global norm (0: off)", minimum=0.0),
    Param("backend", str, "native", "native (this package's model and loop, on GPUs and CPUs), megatron-core "
          "(CARAML's engine: Megatron's GPTModel, optimizer and schedules; " + backend.INSTALL + ") or poptorch "
          "(Graphcore IPUs through PopTorch, as CARAML's GC200 runs: one process, the blocks pipelined over the IPUs "
          "of a replica)", choices=backend.BACKENDS, headline=True, identifies_at_default=False),
    Param("megatron_spec", str, "auto", "backend=megatron-core's layers: te (Transformer Engine), local "
          "(megatron-core's own), auto (te where transformer_engine imports)", choices=backend.SPECS,
          identifies_at_default=False),
    Param("replicas", int, 1, "poptorch: model replicas (data parallel inside one process; CARAML's 1)", minimum=1,
          identifies_at_default=False),
    Param("ipus_per_replica", int, ipu.CARAML_IPU["ipus_per_replica"], "poptorch: IPUs of one replica (CARAML's 4)",
          minimum=1, identifies_at_default=False),
    Param("layers_per_ipu", str, ipu.CARAML_IPU["layers_per_ipu"], "poptorch: transformer blocks on each IPU of a "
          "replica (CARAML's \"0 4 4 4\": the embedding alone on IPU 0)", identifies_at_default=False),
    Param("device_iterations", int, ipu.CARAML_IPU["device_iterations"], "poptorch: optimizer steps per host call "
          "(CARAML's 4: 4 x 128 samples per step)", minimum=1, identifies_at_default=False),
    Param("lr_warmup_fraction", float, ipu.CARAML_IPU["lr_warmup_fraction"], "poptorch: linear warm-up over this "
          "fraction of the updates in lr_decay_samples, then cosine to 0 (Graphcore's --lr-warmup; CARAML's 0.01)",
          minimum=0.0, identifies_at_default=False),
    Param("caraml_config", str, "none", "which of CARAML's configurations this point reproduces, by CARAML's "
          "version: 2024 (2024.01, behind the published figures: 800M with 8 heads, exit after 30 min), 2025 "
          "(2025.01 newest, JUPITER/MI300A: 16 heads, 60 min); none", choices=CARAML_CONFIGS,
          identifies_at_default=False),
    Param("convention", str, "steady", "steady: our steady-state tokens/s; caraml-log: also CARAML's figure, "
          "training on after the steady window until exit_minutes, tokens/s = global batch x seq / mean time per "
          "iteration of every caraml_log_interval iterations of the whole run", choices=caraml_log.CONVENTIONS,
          identifies_at_default=False),
    Param("caraml_log_interval", int, caraml_log.LOG_INTERVAL, "caraml-log: iterations per logged interval (Megatron's "
          "--log-interval; CARAML's 5)", minimum=1, identifies_at_default=False),
    Param("exit_minutes", float, 0.0, "caraml-log: stop training this many minutes after it started (Megatron's "
          "--exit-duration-in-mins); 0: CARAML's of caraml_config (2024: 30, 2025 and none: 60)", minimum=0.0,
          identifies_at_default=False),
]

# CARAML's runs: Megatron with rope, selective recompute, sequence parallelism, its distributed optimizer (ZeRO-1),
# fp16/bf16 as Megatron keeps them (half-precision parameters, fp32 main copies), Megatron's default dropout, seed 42.
_CARAML = {"seq_length": 2048, "max_position_embeddings": 2048, "position": "rope", "recompute": "selective",
           "sequence_parallel": True, "distributed_optimizer": "zero1", "mixed_precision": "megatron",
           "attention_dropout": 0.1, "hidden_dropout": 0.1, "caraml_config": "2025", "seed": 42}

PRESETS = {
    # Trains on a CPU in seconds; the loss falls within ten steps.
    "smoke": {"model_size": "smoke", "num_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "seq_length": 64, "max_position_embeddings": 64, "vocab_size": 500, "micro_batch_size": 2,
              "grad_accumulation": 1, "precision": "fp32", "recompute": "none", "lr": 3e-3, "min_lr": 3e-4,
              "lr_warmup_samples": 0, "lr_decay_samples": 10_000, "warmup_steps": 2, "measure_steps": 10,
              "seed": 42},
    # GPT-2 small, the model of CARAML's IPU benchmark (micro-batch 1, 128 micro-batches per iteration).
    "117M": {"model_size": "117M", "num_layers": 12, "hidden_size": 768, "num_attention_heads": 12,
             "seq_length": 1024, "max_position_embeddings": 1024, "position": "learned", "micro_batch_size": 1,
             "grad_accumulation": 128, "precision": "fp16", "lr": 1.5e-4, "seed": 42},
    # CARAML 2025.01 newest (JUPITER, MI300A): 16 heads
    "800M": {**_CARAML, "model_size": "800M", "num_layers": 16, "hidden_size": 2048, "num_attention_heads": 16,
             "ffn_hidden_size": 0, "micro_batch_size": 4, "grad_accumulation": 1, "tp": 1, "pp": 1,
             "precision": "fp16"},
    # CARAML 2024.01 (and early 2025.01), behind the published 800M figures: 8 heads (nheads [8,32,96])
    "800M-2024": {**_CARAML, "model_size": "800M", "num_layers": 16, "hidden_size": 2048, "num_attention_heads": 8,
                  "ffn_hidden_size": 0, "micro_batch_size": 4, "grad_accumulation": 1, "tp": 1, "pp": 1,
                  "precision": "fp16", "caraml_config": "2024"},
    "13B": {**_CARAML, "model_size": "13B", "num_layers": 40, "hidden_size": 5120, "num_attention_heads": 32,
            "ffn_hidden_size": 20480, "micro_batch_size": 2, "grad_accumulation": 64, "tp": 2, "pp": 2,
            "precision": "fp16"},
    "175B": {**_CARAML, "model_size": "175B", "num_layers": 96, "hidden_size": 12288, "num_attention_heads": 96,
             "ffn_hidden_size": 0, "micro_batch_size": 2, "grad_accumulation": 64, "tp": 8, "pp": 8,
             "precision": "bf16"},
}


def layout_problem(cfg: TrainingConfig, devices: int) -> str | None:
    """What makes this model and batch impossible on `devices` processes, in one line; None when it fits."""
    m, b, par = cfg.model, cfg.batch, cfg.parallel
    tp, pp = par.tp, par.pp
    unsupported = backend.option_problem(cfg)
    if unsupported:
        return unsupported
    if devices % (tp * pp):
        return f"tp*pp = {tp}*{pp} = {tp * pp} does not divide the {devices} devices"
    dp = devices // (tp * pp)
    heads, hidden, layers = m.num_attention_heads, m.hidden_size, m.num_layers
    if hidden % heads:
        return f"hidden_size={hidden} is not a multiple of num_attention_heads={heads}"
    if heads % tp:
        return f"num_attention_heads={heads} is not a multiple of tp={tp} (each rank needs whole heads)"
    if m.ffn % tp:
        return f"ffn_hidden_size={m.ffn} is not a multiple of tp={tp}"
    if layers % pp:
        return f"num_layers={layers} is not a multiple of pp={pp} (equal pipeline stages)"
    if pp > 1 and b.grad_accumulation < pp:
        return (f"grad_accumulation={b.grad_accumulation} micro-batches cannot fill a pipeline of pp={pp} "
                f"stages; use grad_accumulation >= {pp}")
    if m.position == "rope" and m.head_dim % 2:
        return f"position=rope needs an even head size; hidden_size/num_attention_heads = {m.head_dim}"
    if m.seq_length > m.max_position_embeddings:
        return f"seq_length={m.seq_length} exceeds max_position_embeddings={m.max_position_embeddings}"
    if par.sequence_parallel and tp > 1 and m.seq_length % tp:
        return f"sequence_parallel needs seq_length={m.seq_length} to be a multiple of tp={tp}"
    problem = _training_problem(cfg, dp)
    if problem:
        return problem
    derived = b.global_batch(dp)
    if b.global_batch_size and b.global_batch_size != derived:
        return (f"global_batch_size={b.global_batch_size} is not dp x micro_batch_size x grad_accumulation = "
                f"{dp} x {b.micro_batch_size} x {b.grad_accumulation} = {derived}; "
                + _global_batch_fix(b.global_batch_size, dp * b.micro_batch_size, pp))
    return size_problem(cfg) or speed_problem(cfg, dp)


def speed_problem(cfg: TrainingConfig, dp: int) -> str | None:
    """What keeps precision=fp8 or a fused kernel (fp8.py, fused.py) from this layout; None when nothing does."""
    from caraml.workloads.llm_training import fp8

    c, tp, pp = cfg.compute, cfg.parallel.tp, cfg.parallel.pp
    if c.precision == "fp8" and fp8.layout_problem(tp):
        return fp8.layout_problem(tp)
    if c.precision != "fp8" and fp8.settings_problem(c):
        return fp8.settings_problem(c)
    if c.precision == "fp8" and c.gelu_epilogue:
        return "gelu_epilogue=true would bypass precision=fp8's float8 MLP layer: use one of them"
    if c.gelu_epilogue and cfg.model.activation != "gelu":
        return f"gelu_epilogue=true needs activation=gelu (this model has activation={cfg.model.activation})"
    if (c.gelu_epilogue or c.fused_norm_residual) and tp > 1:
        return f"gelu_epilogue and fused_norm_residual run with tp=1 (not the tensor-parallel layers); tp={tp}"
    if c.fused_loss != "none" and (tp > 1 or pp > 1):
        return (f"fused_loss={c.fused_loss} runs with tp=1 and pp=1 (the head and its loss on one rank); this "
                f"layout has tp={tp}, pp={pp}: use fused_loss=none")
    if c.fused_loss != "none" and cfg.parallel.distributed_optimizer != "off" and dp > 1:
        return (f"fused_loss={c.fused_loss} is not wired with the distributed optimizer over dp={dp} replicas: "
                f"use distributed_optimizer=off (DDP)")
    return None


def _training_problem(cfg: TrainingConfig, dp: int) -> str | None:
    """Dropout, mixed precision and optimizer settings that cannot work together, in one line; None when they can."""
    c, par = cfg.compute, cfg.parallel
    if cfg.engine.poptorch:
        return _ipu_problem(cfg, dp)
    for name in ("attention_dropout", "hidden_dropout"):
        if getattr(c, name) >= 1.0:
            return f"{name}={getattr(c, name):g} drops everything; give a probability below 1 (CARAML's 0.1)"
    if c.megatron_precision and par.distributed_optimizer == "fsdp" and dp > 1:
        return ("mixed_precision=megatron keeps half-precision parameters with fp32 main copies in the optimizer, "
                "which FSDP2's sharded parameters cannot hold; give distributed_optimizer=zero1 (Megatron's) or off, "
                "or mixed_precision=autocast")
    return caraml_problem(cfg)


def _ipu_problem(cfg: TrainingConfig, dp: int) -> str | None:
    """What backend=poptorch cannot run, in one line: one process, no tp/pp of ours, the layers laid out over the
    IPUs, our steady state only."""
    if dp != 1 or cfg.parallel.tp != 1 or cfg.parallel.pp != 1:
        return ("backend=poptorch drives all IPUs from one process (replicas, ipus_per_replica); launch one process "
                "with tp=1 pp=1")
    if cfg.caraml.logs:
        return "backend=poptorch measures our steady state only; give convention=steady"
    return ipu.layout_problem(cfg.model.num_layers, cfg.ipu.ipus_per_replica, cfg.ipu.layers_per_ipu)


# The 800M shape differs between CARAML's versions: 8 heads in 2024.01, 16 in the newest 2025.01.
CARAML_HEADS = {("2024", "800M"): 8, ("2025", "800M"): 16}
CARAML_PRESETS = {"2024": "800M-2024", "2025": "800M"}


def caraml_problem(cfg: TrainingConfig) -> str | None:
    """caraml_config names a CARAML version whose model this is not; None when it is (or for none)."""
    m, version = cfg.model, cfg.caraml.caraml_config
    heads = CARAML_HEADS.get((version, m.model_size))
    if heads is not None and m.num_attention_heads != heads:
        other = [v for (v, size), n in CARAML_HEADS.items() if size == m.model_size and n == m.num_attention_heads]
        fix = f"caraml_config={other[0]} (--preset {CARAML_PRESETS[other[0]]})" if other else "caraml_config=none"
        return (f"caraml_config={version} is CARAML's {version} configuration, whose {m.model_size} GPT has {heads} "
                f"heads, not num_attention_heads={m.num_attention_heads}; give num_attention_heads={heads} "
                f"(--preset {CARAML_PRESETS[version]}), or {fix}")
    return None


SIZE_FIELDS = ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size")


def named_shape(model_size: str) -> dict[str, int] | None:
    """The shape a named model_size stands for (its preset's; the MLP width resolved); None for custom."""
    shapes = named_shapes(model_size)
    return shapes[0] if shapes else None


def named_shapes(model_size: str) -> list[dict[str, int]]:
    """Every shape a named model_size stands for: that of each preset labelled so (800M: CARAML's 16 heads, and
    its 2024 configuration's 8); empty for custom."""
    out = []
    for preset in PRESETS.values():
        if preset.get("model_size") != model_size:
            continue
        shape = {k: preset.get(k, next(p.default for p in PARAMS if p.name == k)) for k in SIZE_FIELDS}
        shape["ffn_hidden_size"] = shape["ffn_hidden_size"] or 4 * shape["hidden_size"]
        if shape not in out:
            out.append(shape)
    return out


def size_problem(cfg: TrainingConfig) -> str | None:
    """A named model_size whose shape is not this model's (the tables would label it wrongly); None when it
    matches, or for model_size=custom."""
    m = cfg.model
    shapes = named_shapes(m.model_size)
    if not shapes:
        return None
    shape = {"num_layers": m.num_layers, "hidden_size": m.hidden_size, "num_attention_heads": m.num_attention_heads,
             "ffn_hidden_size": m.ffn}
    if shape in shapes:
        return None
    named = shapes[0]
    text = ", ".join
    return (f"model_size={m.model_size} is the shape {text(f'{k}={v}' for k, v in named.items())}, but this model "
            f"has {text(f'{k}={shape[k]}' for k in SIZE_FIELDS if shape[k] != named[k])}; give model_size=custom "
            f"for this shape, or --preset {m.model_size} for {m.model_size}'s")


def _global_batch_fix(wanted: int, unit: int, pp: int) -> str:
    """Only values the check accepts: the grad_accumulation that gives `wanted` samples, or, when none does, the
    nearest global batch sizes that one does (a multiple of dp x micro_batch_size, with a pipeline filled)."""
    least = max(1, pp)  # micro-batches per iteration a pipeline of pp stages needs
    if wanted % unit == 0 and wanted // unit >= least:
        return f"give global_batch_size=0 or grad_accumulation={wanted // unit}"
    near = sorted({max(least, wanted // unit), max(least, -(-wanted // unit))})  # micro-batches per replica
    need = f"a multiple of dp x micro_batch_size = {unit}" + (f", at least {least * unit} to fill pp={pp} stages"
                                                               if least > 1 else "")
    return (f"no grad_accumulation gives {wanted} samples ({need}): give "
            + " or ".join(f"global_batch_size={n * unit} grad_accumulation={n}" for n in near)
            + ", or global_batch_size=0")


def dims(cfg: TrainingConfig, world: int):
    """The layout of `world` processes: dp = world / (tp x pp), after the model and batch checks."""
    from caraml.parallel_dims import ParallelDims

    problem = layout_problem(cfg, world)
    if problem:
        raise BadInput(f"llm_training: {problem}")
    return ParallelDims.split(world, cfg.parallel.tp, cfg.parallel.pp)


def check_device(cfg: TrainingConfig, device) -> None:
    """Before anything starts: the precision runs on this device, and data=oscar finds its reader and files."""
    import os

    from caraml.kit.precision import check_precision

    if cfg.engine.poptorch:
        ipu.require_poptorch()
        return
    if cfg.compute.precision == "fp8":
        from caraml.workloads.llm_training import fp8

        fp8.check(device)
    check_precision(cfg.compute.precision, device)
    backend.check_installed(cfg, device)
    if cfg.data.source == "oscar":
        from caraml.workloads.llm_training.data import check_indexed

        check_indexed(cfg.data, os.environ.get("CARAML_DATA"), cfg.model.vocab_size)


def torch_features(cfg: TrainingConfig, dims) -> tuple:
    """What of torch a run needs beyond the oldest supported one: the layout's parallelisms, compilation, a chosen
    attention kernel."""
    wanted = ((tf.PIPELINING, dims.pp_enabled), (tf.TENSOR_PARALLEL, dims.tp_enabled),
              (tf.FSDP2, dims.dp_enabled and cfg.parallel.distributed_optimizer == "fsdp"),
              (tf.COMPILE, cfg.compute.compiled), (tf.SDPA_KERNELS, cfg.compute.attention != "auto"))
    return tuple(feature for feature, needed in wanted if needed)


def build(cfg: TrainingConfig, ctx):
    if cfg.engine.backend == "megatron-core":
        from caraml.workloads.llm_training.megatron_core import MegatronBench

        return MegatronBench(cfg, ctx)
    if cfg.engine.poptorch:
        return ipu.IpuGPTBench(cfg, ctx)
    from caraml.workloads.llm_training.bench import GPTBench

    return GPTBench(cfg, ctx)


WORKLOAD = register(Workload(
    name="llm_training", unit="tokens", params=PARAMS, presets=PRESETS, build=build, config=TrainingConfig,
    check_device=check_device, check_launch=layout_problem, dims=dims, torch_features=torch_features,
    description="GPT pre-training, Megatron's recipe in PyTorch (tensor, pipeline, data parallel)",
    # CARAML's columns (its jube result's, in its order; those it always shows are shown by default), then ours
    # (MFU, Tokens/Wh, ...); CARAML's figures by its convention (convention=caraml-log) where a run has them
    columns=(Col("job_id", "JobID", "shared:job_id", default=False), "system",
             Col("version", "Version", "shared:version", default=False),
             Col("queue", "Queue", "shared:queue", default=False),
             Col("job_time", "JobTime", "shared:job_time", default=False),
             Col("runtime_min", "Runtime(min)", "shared:runtime_min", default=False),
             Col("model", "Model", "label:model", default=False),
             Col("model_size", "ModelSize", "param:model_size"),
             Col("dataset", "Dataset", "metric:dataset", "word", default=False),
             "nodes", "devices", "global_batch_size",
             Col("pp", "PipelineParallel", "param:pp", "int"), Col("tp", "TensorParallel", "param:tp", "int"),
             Col("dp", "DataParallel", "shared:dp"),
             Col("iterations", "Iterations", "metric:measured_steps", "int"),
             Col("time_per_iteration_s", "Time/iteration(s)", "shared:time_per_iteration_s"),
             Col("throughput", "Tokens/second", "metric:throughput.value", "num"),
             Col("tflops_caraml_per_device", "Avg_TFLOPs/GPU", "metric:tflops_caraml_per_device", "num"),
             Col("time_to_report_s", "time_to_report_in_seconds", "metric:time_to_report_s", default=False),
             Col("energy_file", "EnergyFile", "shared:energy_file", default=False),
             Col("caraml_iterations", "Iterations(caraml-log)", "metric:caraml_iterations", "int", default="if-any"),
             Col("caraml_time_per_iteration_s", "Time/iteration(s)(caraml-log)", "metric:caraml_time_per_iteration_s",
                 default="if-any"),
             Col("caraml_tokens_per_s", "Tokens/second(caraml-log)", "metric:caraml_tokens_per_s.value",
                 default="if-any"),
             Col("caraml_tflops_per_device", "Avg_TFLOPs/GPU(caraml-log)", "metric:caraml_tflops_per_device",
                 default="if-any"),
             "energy_wh", "ours",
             Col("micro_batch_size", "MicroBatchSize", "param:micro_batch_size", "int", default=False),
             Col("grad_accumulation", "GradAccumulation", "param:grad_accumulation", "int", default=False),
             Col("seq_length", "SeqLength", "param:seq_length", "int", default=False),
             Col("precision", "Precision", "param:precision", default=False),
             Col("mixed_precision", "MixedPrecision", "param:mixed_precision", default=False),
             Col("distributed_optimizer", "DistributedOptimizer", "param:distributed_optimizer", default=False),
             Col("caraml_config", "CaramlConfig", "param:caraml_config", default=False),
             Col("convention", "Convention", "param:convention", default=False),
             Col("backend", "Backend", "param:backend", default=False)),
    metrics=("time_per_iteration_s", "dp", "global_batch_size", "loss", "tflops_caraml_per_device", "flops",
             "parameters", "padded_vocab_size", "loss_scale", "parallel_setup", "throughput_convention",
             "caraml_config", "precision_mechanism", "caraml_tokens_per_s", "caraml_time_per_iteration_s",
             "caraml_tflops_per_device", "caraml_iterations", "caraml_log", "model", "dataset", "time_to_report_s",
             "ipu"),
))
