"""engine=megatron-core: CARAML's engine (NVIDIA's megatron-core) trains the GPT, our harness measures it.

Megatron-LM's training step, built from megatron-core's parts as Megatron-LM's `pretrain` builds it:
`parallel_state` from our `ParallelDims` (the same rank order: tp innermost, then dp, then pp), `GPTModel`
with Transformer Engine's layer spec or megatron-core's local one, `Float16Module` for fp16/bf16 (parameters in
half precision, fp32 main copies in the optimizer), Megatron's `DistributedDataParallel` and optimizer
(`distributed_optimizer=zero1`: its distributed optimizer, optimizer state sharded over the replicas), its
dynamic loss scaler with CARAML's settings, its learning-rate scheduler, and its forward-backward schedule
(1F1B when pp > 1). The batches come from the same data reader as the native engine, and the weights start
from the same numbers: every part is initialised by model.py's `init_weights` and copied into Megatron's layout
(`MegatronLayout`), so the two engines can be compared loss for loss.

Imports torch and megatron-core; engines.py holds the torch-free checks that run first.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from caraml.contract import RunContext
from caraml.distributed import start_group
from caraml.workloads.llm_training import data as data_mod
from caraml.workloads.llm_training import sizes
from caraml.workloads.llm_training.bench import ADAM_BETAS, ADAM_EPS, GPTBench
from caraml.workloads.llm_training.config import TrainingConfig
from caraml.workloads.llm_training.engine_names import te_available
from caraml.workloads.llm_training.fast_paths import FastPaths
from caraml.workloads.llm_training.model import Block, Embedding, GPTConfig, init_weights
from caraml.workloads.llm_training.parallel import ParallelPlan, stage_layers
from caraml.workloads.llm_training.scaler import LossScaler

# the weights: our layout -> Megatron's ----------------------------------------------------------------------------
# Megatron's name inside a layer -> (our name inside a block, how tensor parallelism splits it: 0 by output rows,
# 1 by input columns, None replicated). Transformer Engine's spec fuses each norm into the projection after it.
LAYER_NAMES = {
    "input_layernorm.weight": ("attn_norm.weight", None),
    "input_layernorm.bias": ("attn_norm.bias", None),
    "self_attention.linear_qkv.layer_norm_weight": ("attn_norm.weight", None),
    "self_attention.linear_qkv.layer_norm_bias": ("attn_norm.bias", None),
    # both lay q/k/v out head by head ([q_0 k_0 v_0 q_1 ...]), so a split by rows gives each rank whole heads
    "self_attention.linear_qkv.weight": ("attn.wqkv.weight", 0),
    "self_attention.linear_qkv.bias": ("attn.wqkv.bias", 0),
    "self_attention.linear_proj.weight": ("attn.wo.weight", 1),
    "self_attention.linear_proj.bias": ("attn.wo.bias", None),
    "pre_mlp_layernorm.weight": ("mlp_norm.weight", None),
    "pre_mlp_layernorm.bias": ("mlp_norm.bias", None),
    "mlp.linear_fc1.layer_norm_weight": ("mlp_norm.weight", None),
    "mlp.linear_fc1.layer_norm_bias": ("mlp_norm.bias", None),
    "mlp.linear_fc1.weight": ("mlp.w1.weight", 0),  # SwiGLU: [gate w3; up w1], per tensor-parallel rank
    "mlp.linear_fc1.bias": ("mlp.w1.bias", 0),
    "mlp.linear_fc2.weight": ("mlp.w2.weight", 1),
    "mlp.linear_fc2.bias": ("mlp.w2.bias", None),
}
MODEL_NAMES = {
    "embedding.word_embeddings.weight": ("embed.tok.weight", 0),  # vocabulary-parallel rows
    "embedding.position_embeddings.weight": ("embed.pos.weight", None),
    "decoder.final_layernorm.weight": ("norm.weight", None),
    "decoder.final_layernorm.bias": ("norm.bias", None),
    "output_layer.weight": ("embed.tok.weight", 0),  # the last stage's copy of the tied embedding
}


@dataclass(frozen=True)
class MegatronLayout:
    """Where each of Megatron's parameters comes from in our model (model.py), on one rank of the layout."""

    tp: int = 1
    tp_rank: int = 0
    first_layer: int = 0  # our global index of this stage's first layer (Megatron numbers a stage's layers from 0)
    swiglu: bool = False

    def source(self, name: str) -> tuple[str, int | None]:
        """Our full parameter name behind Megatron's `name`, and its tensor-parallel split dimension."""
        if name in MODEL_NAMES:
            return MODEL_NAMES[name]
        parts = name.split(".", 3)  # decoder.layers.<i>.<rest>
        if parts[:2] == ["decoder", "layers"] and len(parts) == 4 and parts[3] in LAYER_NAMES:
            ours, split = LAYER_NAMES[parts[3]]
            return f"layers.{self.first_layer + int(parts[2])}.{ours}", split
        raise KeyError(f"no parameter of the native GPT corresponds to megatron-core's {name}")

    def shard(self, t: torch.Tensor, split: int | None) -> torch.Tensor:
        return t if split is None or self.tp == 1 else t.chunk(self.tp, dim=split)[self.tp_rank]

    def tensor(self, name: str, ours: dict[str, torch.Tensor]) -> torch.Tensor:
        """This rank's value of Megatron's parameter `name`, from our full (unsplit) parameters `ours`."""
        source, split = self.source(name)
        if self.swiglu and source.endswith(("mlp.w1.weight", "mlp.w1.bias")):
            gate = source.replace("mlp.w1.", "mlp.w3.")  # Megatron's GLU: act(first half) * second half
            return torch.cat((self.shard(ours[gate], split), self.shard(ours[source], split)))
        return self.shard(ours[source], split)

    def native(self, megatron: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Our parameters from Megatron's, on a single rank (tp = 1): the inverse of `tensor`."""
        if self.tp != 1:
            raise ValueError("native() reads a whole model; gather the tensor-parallel shards first")
        out: dict[str, torch.Tensor] = {}
        for name, value in megatron.items():
            source, _ = self.source(name)
            if self.swiglu and source.endswith(("mlp.w1.weight", "mlp.w1.bias")):
                gate, up = value.chunk(2)
                out[source.replace("mlp.w1.", "mlp.w3.")], out[source] = gate, up
            else:
                out.setdefault(source, value)  # the TE norms and the tied output copy repeat a source
        return out


@torch.no_grad()
def load_native_init(model: nn.Module, cfg: GPTConfig, seed: int, layout: MegatronLayout, device) -> None:
    """Fill megatron-core's `model` (unwrapped GPTModel, this rank's stage and shard) with the weights model.py's
    `init_weights` gives the native GPT for `seed`: one part at a time (the embedding, each layer, the final
    norm), each made whole on `device`, then split as Megatron splits it. Every parameter is set exactly once."""
    params = dict(model.named_parameters())
    done: set[str] = set()

    def fill(part: nn.Module, prefix: str) -> None:
        part.to_empty(device=device)
        init_weights(part, cfg, seed, prefix)
        ours = {prefix + k: v for k, v in part.named_parameters()}
        for name, param in params.items():
            if name not in done and layout.source(name)[0] in ours:
                param.copy_(layout.tensor(name, ours))
                done.add(name)

    with torch.device("meta"):
        embed, norm = Embedding(cfg), nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
    fill(embed, "embed.")  # also the last stage's output copy of the tied embedding
    for name in {n.split(".")[2] for n in params if n.startswith("decoder.layers.")}:
        with torch.device("meta"):
            block = Block(cfg)
        fill(block, f"layers.{layout.first_layer + int(name)}.")
    fill(norm, "norm.")
    missed = sorted(set(params) - done)
    if missed:
        raise RuntimeError(f"megatron-core parameters with no native counterpart: {', '.join(missed)}")


# the bench --------------------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MegatronBench(GPTBench):
    """One Megatron-LM training iteration per `step()`; the records, timing and details are the native bench's."""

    def __init__(self, cfg: TrainingConfig, ctx: RunContext):
        from megatron.core import parallel_state

        self.started = time.monotonic()  # Megatron's exit-after-minutes counts from here (set-up included)
        self.cfg, self.device, self.dims, self.seed = cfg, ctx.device, ctx.dims, ctx.seed
        self.model_cfg = GPTConfig.of(cfg, ctx.dims.tp)
        self.global_batch = cfg.batch.global_batch(ctx.dims.dp)
        self.accumulation, self.micro = cfg.batch.grad_accumulation, cfg.batch.micro_batch_size
        self.distributed = ctx.dims.world > 1
        self.compile_scope, self.scaler = None, None  # Megatron's optimizer holds the fp16 loss scaler
        self.fast = FastPaths(cfg.compute, ctx.device)  # none taken (engines.py refuses them): the record says so
        distributed_optimizer = cfg.parallel.distributed_optimizer != "off"  # Megatron's own for zero1 and fsdp
        self.plan = ParallelPlan(sequence_parallel=cfg.parallel.sequence_parallel and ctx.dims.tp > 1,
                                 loss_parallel=ctx.dims.tp > 1,
                                 dp_mode="megatron-distributed-optimizer" if distributed_optimizer else "megatron-ddp")
        self._own_group = self._start_process_group()
        self._start_parallel_state(parallel_state)
        self.spec = "te" if cfg.runtime.megatron_spec == "te" or (
            cfg.runtime.megatron_spec == "auto" and te_available()) else "local"
        self.config = self._transformer_config()
        self.model = self._model()
        self.optimizer, self.scheduler = self._megatron_optimizer()
        self._wire_schedule()
        self.data = data_mod.make(cfg, self.global_batch, ctx.dims.dp_rank, ctx.device, ctx.seed, ctx.data_root)
        self._set_up_records()
        self.sizes = sizes.sizes(cfg.model, ctx.dims.tp)
        self.info = self._info()
        self.extra_phase = self._caraml_phase()

    # setup ----------------------------------------------------------------------------------------------------
    def _start_process_group(self) -> bool:
        """megatron-core needs a process group even for one process; True when this bench started it."""
        if dist.is_initialized():
            return False
        start_group("nccl" if self.device.type == "cuda" else "gloo",
                    init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
        return True

    def _start_parallel_state(self, parallel_state) -> None:
        """Megatron's groups from our layout; its rank order is ours (tp innermost, then dp, then pp)."""
        from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

        dims = self.dims
        if parallel_state.model_parallel_is_initialized():
            parallel_state.destroy_model_parallel()
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=dims.tp,
                                                 pipeline_model_parallel_size=dims.pp,
                                                 create_gloo_process_groups=False)
        theirs = (parallel_state.get_data_parallel_rank(), parallel_state.get_tensor_model_parallel_rank(),
                  parallel_state.get_pipeline_model_parallel_rank())
        if theirs != dims.coords():
            raise RuntimeError(f"megatron-core placed rank {dims.rank} at (dp, tp, pp) = {theirs}, ours at "
                               f"{dims.coords()}: the two rank orders differ")
        torch.manual_seed(self.seed)
        model_parallel_cuda_manual_seed(self.seed)

    def _transformer_config(self):
        """Megatron's TransformerConfig of our model and settings: the native model's dropout, fp32
        softmax, Megatron-LM's fusions where their kernels exist (the jit-scripted bias-GELU/SwiGLU and
        bias-dropout-add always; softmax, rope and weight-gradient fusions with Transformer Engine)."""
        from megatron.core.transformer.transformer_config import TransformerConfig

        m, par, precision = self.model_cfg, self.cfg.parallel, self.cfg.compute.precision
        te = self.spec == "te"
        recompute = {"none": {}, "selective": {"recompute_granularity": "selective"},
                     "full": {"recompute_granularity": "full", "recompute_method": "uniform",
                              "recompute_num_layers": 1}}[par.recompute]
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision, torch.float32)
        return TransformerConfig(
            num_layers=m.num_layers, hidden_size=m.hidden_size, num_attention_heads=m.num_heads,
            ffn_hidden_size=m.ffn_hidden_size, init_method_std=m.init_std, layernorm_epsilon=m.norm_eps,
            attention_dropout=self.cfg.compute.attention_dropout, hidden_dropout=self.cfg.compute.hidden_dropout,
            gated_linear_unit=m.activation == "swiglu", activation_func=F.silu if m.activation == "swiglu" else F.gelu,
            tensor_model_parallel_size=self.dims.tp, pipeline_model_parallel_size=self.dims.pp,
            sequence_parallel=self.cfg.parallel.sequence_parallel and self.dims.tp > 1,
            fp16=precision == "fp16", bf16=precision == "bf16", params_dtype=dtype,
            pipeline_dtype=dtype if self.dims.pp > 1 else None,
            perform_initialization=False,  # load_native_init sets every weight
            bias_activation_fusion=True, bias_dropout_fusion=True, masked_softmax_fusion=te, apply_rope_fusion=te,
            gradient_accumulation_fusion=te, **recompute)

    def _model(self) -> nn.Module:
        """This rank's GPTModel stage with our initial weights, in half precision as Megatron's Float16Module
        keeps it, wrapped in Megatron's DistributedDataParallel (its gradient buffers feed the optimizer)."""
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.models.gpt import GPTModel
        from megatron.core.models.gpt import gpt_layer_specs as specs
        from megatron.core.transformer.module import Float16Module

        spec = (specs.get_gpt_layer_with_transformer_engine_spec() if self.spec == "te"
                else specs.get_gpt_layer_local_spec())
        dims, m = self.dims, self.model_cfg
        model = GPTModel(self.config, spec, vocab_size=m.vocab_size, max_sequence_length=m.max_positions,
                         pre_process=dims.first_stage, post_process=dims.last_stage,
                         share_embeddings_and_output_weights=True,
                         position_embedding_type="rope" if m.position == "rope" else "learned_absolute",
                         rotary_base=int(m.rope_base))
        model.to(self.device)
        layout = MegatronLayout(dims.tp, dims.tp_rank, stage_layers(m.num_layers, dims.pp, dims.pp_rank).start,
                                m.activation == "swiglu")
        load_native_init(model, m, self.seed, layout, self.device)
        if self.config.fp16 or self.config.bf16:
            model = Float16Module(self.config, model)
        zero1 = self.cfg.parallel.distributed_optimizer != "off"  # Megatron's distributed optimizer: ZeRO-1
        ddp = DistributedDataParallelConfig(grad_reduce_in_fp32=self.config.bf16,  # Megatron-LM's rule for bf16
                                            use_distributed_optimizer=zero1,
                                            overlap_grad_reduce=False, check_for_nan_in_grad=False)
        return DistributedDataParallel(self.config, ddp, model)

    def _megatron_optimizer(self):
        """Megatron's Adam (decoupled weight decay, none on biases and norms), fp16's dynamic loss scaler with
        CARAML's settings, gradient clipping, and its learning-rate scheduler in samples (warm-up from 0, cosine
        to min_lr): our OptimizerConfig's numbers."""
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

        o, scaler = self.cfg.optim, LossScaler()
        config = OptimizerConfig(
            optimizer="adam", lr=o.lr, min_lr=o.min_lr, weight_decay=o.weight_decay, adam_beta1=ADAM_BETAS[0],
            adam_beta2=ADAM_BETAS[1], adam_eps=ADAM_EPS, clip_grad=o.clip_grad, fp16=self.config.fp16,
            bf16=self.config.bf16, params_dtype=self.config.params_dtype,
            use_distributed_optimizer=self.cfg.parallel.distributed_optimizer != "off",
            initial_loss_scale=scaler.scale, loss_scale_window=scaler.window, hysteresis=scaler.hysteresis,
            min_loss_scale=scaler.min_scale)
        optimizer = get_megatron_optimizer(config, [self.model], use_gloo_process_groups=False)
        scheduler = OptimizerParamScheduler(
            optimizer, init_lr=0.0, max_lr=o.lr, min_lr=o.min_lr, lr_warmup_steps=o.lr_warmup_samples,
            lr_decay_steps=o.lr_decay_samples, lr_decay_style="cosine", start_wd=o.weight_decay,
            end_wd=o.weight_decay, wd_incr_steps=o.lr_decay_samples, wd_incr_style="constant")
        return optimizer, scheduler

    def _wire_schedule(self) -> None:
        """What Megatron-LM's `train` hands the schedule: the loss scaling, the gradient reduction over replicas
        (and of the tied embedding between the first and last stage), the forward-backward function."""
        from megatron.core.distributed import finalize_model_grads
        from megatron.core.pipeline_parallel import get_forward_backward_func

        self.config.grad_scale_func = self.optimizer.scale_loss
        self.config.finalize_model_grads_func = finalize_model_grads
        self.forward_backward = get_forward_backward_func()
        self.schedule = "1F1B" if self.dims.pp > 1 else None
        self.updates = 0

    # one iteration ----------------------------------------------------------------------------------------------
    def step(self) -> None:
        self._mark_start()
        x, y = self.data.next()
        m = self.micro
        batches = iter([(x[i * m:(i + 1) * m], y[i * m:(i + 1) * m]) for i in range(self.accumulation)])
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        losses = self.forward_backward(forward_step_func=self._forward_step, data_iterator=batches,
                                       model=[self.model], num_microbatches=self.accumulation,
                                       seq_length=self.model_cfg.seq_length, micro_batch_size=m, forward_only=False)
        updated, _, _ = self.optimizer.step()
        if updated:
            self.scheduler.step(increment=self.global_batch)
            self.updates += 1
        self.losses.append(self._global_loss(losses))
        self.iteration += 1
        self._mark_end()

    def _forward_step(self, batches, model):
        tokens, labels = next(batches)
        positions = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
        per_token = model(tokens, positions, None, labels=labels)  # the last stage's fp32 loss per token

        def mean_loss(output):
            loss = output.float().mean()
            return loss, {"lm loss": loss.detach().clone()}  # a copy: the schedule divides `loss` in place

        return per_token, mean_loss

    def _global_loss(self, losses: list[dict]) -> torch.Tensor:
        """The global batch's mean loss, on every rank: the last stage's mean over its micro-batches, averaged over
        the replicas in one all-reduce (tp rank 0 of the last stage speaks for its replica)."""
        mine = (torch.stack([d["lm loss"] for d in losses]).mean() if losses
                else torch.zeros((), device=self.device))
        if self.distributed:
            mine = mine / self.dims.dp if self.dims.counts_units() else torch.zeros_like(mine)
            dist.all_reduce(mine)
        return mine.detach().float()

    # the record -------------------------------------------------------------------------------------------------
    def details(self) -> dict:
        import megatron.core

        out = super().details()
        te = None
        if self.spec == "te":
            import transformer_engine

            te = getattr(transformer_engine, "__version__", "installed")
        scale = self.optimizer.get_loss_scale() if self.config.fp16 else None
        out["loss_scale"] = ({"scale": float(scale), "settings": LossScaler().state()} if scale is not None
                             else None)
        out["backend"] = {"name": "megatron-core", "megatron_core": megatron.core.__version__, "spec": self.spec,
                          "transformer_engine": te,
                          "mixed_precision": ("Float16Module: half-precision parameters, fp32 main parameters in "
                                              "the optimizer") if self.config.fp16 or self.config.bf16 else None,
                          "optimizer": type(self.optimizer).__name__}
        return out

    def health(self) -> str | None:
        problem = super().health()
        if problem and "fp16 loss scaler" not in problem and self.config.fp16:
            scale = self.optimizer.get_loss_scale()
            problem = problem.replace("no update was taken", f"Megatron's fp16 loss scaler skipped every one for "
                                                             f"overflow (loss scale now {float(scale):g})")
        return problem

    def close(self) -> None:
        from megatron.core import parallel_state

        self.data = None
        parallel_state.destroy_model_parallel()
        if self._own_group and dist.is_initialized():
            dist.destroy_process_group()

