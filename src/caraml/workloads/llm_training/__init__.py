"""GPT pre-training, Megatron's recipe in plain PyTorch (CARAML's llm_training): tensor, pipeline and data
parallelism, sequence parallelism, activation recompute, fp16/bf16 with fp32 master weights.

This module only declares the workload (presets, layout checks, result columns) and imports no torch; its
parameters are the fields of the typed `TrainingConfig` of config.py (torch-free too), which every function here
and the bench read. model.py, parallel.py and bench.py are loaded when a run builds
the benchmark.
"""

from __future__ import annotations

from caraml.errors import BadInput
from caraml.kit import torch_features as tf
from caraml.workloads import Col, Workload, register
from caraml.workloads.llm_training import engines
from caraml.workloads.llm_training.config import ModelShape, TrainingConfig

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


def check_launch(cfg: TrainingConfig, devices: int) -> str | None:
    """What makes this model and batch impossible on `devices` processes with its engine, in one line; None when
    it fits."""
    m, b, par = cfg.model, cfg.batch, cfg.parallel
    tp, pp = par.tp, par.pp
    engine = engines.chosen(cfg)
    unsupported = engine.problem(cfg, devices)
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
    problem = _training_problem(cfg, dp) if engine.torch_step else None
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
    if c.precision == "fp8" and fp8.tensor_parallel_problem(tp):
        return fp8.tensor_parallel_problem(tp)
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
    """Dropout, mixed precision and optimizer settings that cannot work together in a torch engine's step, in one
    line; None when they can."""
    c, par = cfg.compute, cfg.parallel
    for name in ("attention_dropout", "hidden_dropout"):
        if getattr(c, name) >= 1.0:
            return f"{name}={getattr(c, name):g} drops everything; give a probability below 1 (CARAML's 0.1)"
    if c.megatron_precision and par.distributed_optimizer == "fsdp" and dp > 1:
        return ("mixed_precision=megatron keeps half-precision parameters with fp32 main copies in the optimizer, "
                "which FSDP2's sharded parameters cannot hold; give distributed_optimizer=zero1 (Megatron's) or off, "
                "or mixed_precision=autocast")
    return caraml_problem(cfg)


# The 800M shape differs between CARAML's versions: 8 heads in 2024.01, 16 in the newest 2025.01.
CARAML_HEADS = {("2024", "800M"): 8, ("2025", "800M"): 16}
CARAML_PRESETS = {"2024": "800M-2024", "2025": "800M"}
CARAML_VERSIONS = {"2024": "2024.01", "2025": "2025.01"}  # caraml_config -> CARAML's version (its Version column)


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
    out, default = [], ModelShape()
    for preset in PRESETS.values():
        if preset.get("model_size") != model_size:
            continue
        shape = {k: preset.get(k, getattr(default, k)) for k in SIZE_FIELDS}
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

    problem = check_launch(cfg, world)
    if problem:
        raise BadInput(f"llm_training: {problem}")
    return ParallelDims.split(world, cfg.parallel.tp, cfg.parallel.pp)


def check_device(cfg: TrainingConfig, device) -> None:
    """Before anything starts: the engine finds what it needs on this device (engines.py)."""
    engines.chosen(cfg).check_device(cfg, device)


def torch_features(cfg: TrainingConfig, dims) -> tuple:
    """What of torch a run needs beyond the oldest supported one: the layout's parallelisms, compilation, a chosen
    attention kernel."""
    wanted = ((tf.PIPELINING, dims.pp_enabled), (tf.TENSOR_PARALLEL, dims.tp_enabled),
              (tf.FSDP2, dims.dp_enabled and cfg.parallel.distributed_optimizer == "fsdp"),
              (tf.COMPILE, cfg.compute.compiled), (tf.SDPA_KERNELS, cfg.compute.attention != "auto"))
    return tuple(feature for feature, needed in wanted if needed)


def build(cfg: TrainingConfig, ctx):
    return engines.chosen(cfg).build(cfg, ctx)


WORKLOAD = register(Workload(
    name="llm_training", unit="tokens", presets=PRESETS, build=build, config=TrainingConfig,
    check_device=check_device, check_launch=check_launch, dims=dims, torch_features=torch_features,
    description="GPT pre-training, Megatron's recipe in PyTorch (tensor, pipeline, data parallel)",
    # CARAML's columns (its jube result's, in its order), then ours (MFU, Tokens/Wh, ...). CARAML's headers carry
    # CARAML's figures (convention=caraml-log; shown where a run has them), ours our steady figures.
    columns=(Col("job_id", "JobID", "shared:job_id", default=False), "system",
             Col("version", "Version", "param:caraml_config", default=False,
                 shows=lambda v, _: CARAML_VERSIONS.get(v)),
             Col("queue", "Queue", "shared:queue", default=False),
             Col("job_time", "JobTime", "shared:job_time", default=False),
             Col("runtime_min", "Runtime(min)", "shared:runtime_min", default=False),
             Col("model", "Model", "label:model", default=False),
             Col("model_size", "ModelSize", "param:model_size"),
             # the engine, wherever the rows differ in it (records from before it was a setting: native)
             Col("engine", "Engine", "param:engine", default="if-differs", shows=lambda v, _: v or "native"),
             Col("dataset", "Dataset", "metric:dataset", "word", default=False),
             "nodes", "devices", "global_batch_size",
             Col("pp", "PipelineParallel", "param:pp", "int"), Col("tp", "TensorParallel", "param:tp", "int"),
             Col("dp", "DataParallel", "shared:dp"),
             Col("caraml_iterations", "Iterations", "metric:caraml_iterations", "int", default="if-any"),
             Col("caraml_time_per_iteration_s", "Time/iteration(s)", "metric:caraml_time_per_iteration_s",
                 default="if-any"),
             Col("caraml_tokens_per_s", "Tokens/second", "metric:caraml_tokens_per_s.value", default="if-any"),
             Col("caraml_tflops_per_device", "Avg_TFLOPs/GPU", "metric:caraml_tflops_per_device", default="if-any"),
             Col("time_to_report_s", "time_to_report_in_seconds", "metric:time_to_report_s", default=False),
             Col("energy_file", "EnergyFile", "shared:energy_file", default=False),
             # ours, of the steady window
             Col("iterations", "MeasuredSteps", "metric:measured_steps", "int"),
             Col("time_per_iteration_s", "IterationTime s", "shared:time_per_iteration_s"),
             "throughput",
             Col("tflops_caraml_per_device", "TFLOP/s/GPU (CARAML formula)", "metric:tflops_caraml_per_device", "num"),
             # the last measured step's global-batch loss (records without one: no column)
             Col("loss", "Loss", "metric:loss.last", "num", default="if-any"),
             "energy_wh", "ours",
             Col("micro_batch_size", "MicroBatchSize", "param:micro_batch_size", "int", default=False),
             Col("grad_accumulation", "GradAccumulation", "param:grad_accumulation", "int", default=False),
             Col("seq_length", "SeqLength", "param:seq_length", "int", default=False),
             Col("precision", "Precision", "param:precision", default=False),
             Col("mixed_precision", "MixedPrecision", "param:mixed_precision", default=False),
             Col("distributed_optimizer", "DistributedOptimizer", "param:distributed_optimizer", default=False),
             Col("caraml_config", "CaramlConfig", "param:caraml_config", default=False),
             Col("convention", "Convention", "param:convention", default=False)),
    metrics=("time_per_iteration_s", "dp", "global_batch_size", "loss", "tflops_caraml_per_device", "flops",
             "parameters", "padded_vocab_size", "loss_scale", "parallel_setup", "throughput_convention",
             "caraml_config", "precision_mechanism", "caraml_tokens_per_s", "caraml_time_per_iteration_s",
             "caraml_tflops_per_device", "caraml_iterations", "caraml_spread", "caraml_log", "model", "dataset",
             "time_to_report_s", "ipu"),
))
