"""One optimizer iteration of GPT pre-training over the global batch, Megatron's recipe in plain PyTorch.

`GPTBench.step()` = one iteration: this replica's micro-batches (through the 1F1B pipeline schedule when
pp > 1), gradients reduced over data-parallel replicas, the tied embedding's copies summed over the first
and last stage, fp16 loss scaling with overflow skip, clipping by the global norm, AdamW with Megatron's
warm-up + cosine learning rate. No host synchronisation per step except fp16's overflow check; the loss
stays on the device until details().
"""

from __future__ import annotations

import math
import statistics
import time
from contextlib import nullcontext
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from caraml.contract import BenchInfo, RunContext
from caraml.parallel_dims import ParallelDims
from caraml.workloads.llm_training import data as data_mod
from caraml.workloads.llm_training import parallel, sizes
from caraml.workloads.llm_training.model import GPTConfig, attention_kernels
from caraml.workloads.llm_training.scaler import LossScaler

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy in fp32 (logits may be vocabulary-sharded DTensors under loss_parallel)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))


def learning_rate(p: dict[str, Any], samples: int) -> float:
    """Megatron's schedule in samples consumed: linear warm-up from 0, cosine decay to min_lr, then min_lr."""
    warm, decay = p["lr_warmup_samples"], p["lr_decay_samples"]
    if warm > 0 and samples <= warm:
        return p["lr"] * samples / warm
    if samples > decay:
        return p["min_lr"]
    ratio = (samples - warm) / max(1, decay - warm)
    return p["min_lr"] + 0.5 * (math.cos(math.pi * ratio) + 1.0) * (p["lr"] - p["min_lr"])


def global_batch(p: dict[str, Any], dims: ParallelDims) -> int:
    return dims.dp * p["micro_batch_size"] * p["grad_accumulation"]


def dp_mode(p: dict[str, Any], dims: ParallelDims) -> str:
    if dims.dp == 1:
        return "none"
    if p["distributed_optimizer"]:
        return "fsdp2"
    return "ddp" if dims.tp == 1 else "allreduce"  # DDP cannot broadcast DTensor parameters


def precision_in_use(precision: str, device: torch.device) -> str:
    """fp32 matrix products run as TF32 on GPUs when the process allows it (not by PyTorch's default)."""
    if precision == "fp32" and device.type == "cuda" and torch.get_float32_matmul_precision() != "highest":
        return "tf32"
    return precision


def _local(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


class GPTBench:
    def __init__(self, p: dict[str, Any], ctx: RunContext):
        self.p, self.device, self.dims = p, ctx.device, ctx.dims
        dims, device = ctx.dims, ctx.device
        dp_rank, tp_rank, pp_rank = dims.coords(ctx.rank)
        self.distributed = ctx.world_size > 1
        self.lay = parallel.Layout(
            dp=dims.dp, tp=dims.tp, pp=dims.pp, dp_rank=dp_rank, tp_rank=tp_rank, pp_rank=pp_rank,
            mesh=ctx.mesh() if self.distributed else None,
            sequence_parallel=p["sequence_parallel"] and dims.tp > 1,
            loss_parallel=p["loss_parallel"] and dims.tp > 1, dp_mode=dp_mode(p, dims))
        self.cfg = GPTConfig.from_params(p, dims.tp)
        self.global_batch = global_batch(p, dims)
        self.accumulation = p["grad_accumulation"]
        self.micro = p["micro_batch_size"]

        torch.manual_seed(ctx.seed)
        # One graph for forward + loss needs a plain module: no tensor or pipeline split.
        self.compile_scope = None
        if p["compile"]:
            self.compile_scope = "model" if p["compile_scope"] == "model" and dims.tp == dims.pp == 1 else "block"
        model = parallel.build_stage(self.cfg, self.lay, device, ctx.seed, self.compile_scope == "block")
        self.model = parallel.apply_data_parallel(model, self.lay, device)
        self.tied = parallel.tied_weight(self.model, self.lay)  # after FSDP2, which replaces the parameters
        self.tied_group = parallel.tied_embedding_group(self.lay) if self.distributed else None
        self.params = [q for q in self.model.parameters() if q.requires_grad]
        self.forward_loss = torch.compile(self._forward_loss) if self.compile_scope == "model" else self._forward_loss
        self.optimizer = self._optimizer()
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(p["precision"])
        self.compute_dtype = dtype or torch.float32  # of the activations: autocast's half precision, or fp32
        self.autocast = (lambda: torch.autocast(device.type, dtype=dtype)) if dtype else nullcontext
        self.schedule = self._pipeline() if dims.pp > 1 else None
        self.scaler = LossScaler() if p["precision"] == "fp16" else None
        self.data = data_mod.make(p, self.global_batch, dp_rank, device, ctx.seed, ctx.data_root)

        self.iteration = 0
        self.updates = 0  # optimizer steps taken (fp16 overflows skip one): the learning rate follows these
        self.losses: list[torch.Tensor] = []  # the global-batch mean loss of each step, on the device
        self._ends: list = []  # end of each step: CUDA events, or host clock readings
        self.sizes = sizes.sizes(p, dims.tp)
        self.info = BenchInfo(
            units_per_step=float(self.micro * self.accumulation * p["seq_length"]), unit="tokens",
            flops_per_unit=self.sizes["flops_per_token"], flops_convention=sizes.FLOPS_CONVENTION,
            precision=precision_in_use(p["precision"], device), compiled=p["compile"])

    # setup --------------------------------------------------------------------------------------------------
    def _optimizer(self) -> torch.optim.Optimizer:
        """AdamW; no weight decay on biases and norms (Megatron's rule: parameters of fewer than 2 dimensions)."""
        decay = [q for q in self.params if q.ndim >= 2]
        no_decay = [q for q in self.params if q.ndim < 2]
        groups = [{"params": decay, "weight_decay": self.p["weight_decay"]},
                  {"params": no_decay, "weight_decay": 0.0}]
        fused = {"fused": True} if self.device.type == "cuda" else {}
        return torch.optim.AdamW(groups, lr=self.p["lr"], betas=ADAM_BETAS, eps=ADAM_EPS, **fused)

    def _pipeline(self):
        import inspect

        from torch.distributed.pipelining import PipelineStage, Schedule1F1B

        # Shapes given up front (static mode): no shape inference, which in newer torch runs a real forward and
        # backward through the stage and upsets DDP's and FSDP's gradient bookkeeping.
        stage = PipelineStage(self.model, self.lay.pp_rank, self.lay.pp, self.device, *self._stage_shapes(),
                              group=self.lay.group("pp"))
        n = self.accumulation

        def scaled_loss(logits, targets):  # mean over the global batch's micro-batches, times the fp16 loss scale
            return loss_fn(logits, targets) * (self._scale() / n)

        kwargs = {"scale_grads": False} if "scale_grads" in inspect.signature(Schedule1F1B).parameters else {}
        return Schedule1F1B(stage, n_microbatches=n, loss_fn=scaled_loss, **kwargs)

    def _stage_shapes(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Example (meta) input and output of one micro-batch on this stage: tokens into the first stage, the
        residual stream (a sequence shard under sequence parallelism) between stages, logits out of the last; both
        in the autocast precision."""
        cfg, lay, m = self.cfg, self.lay, self.micro
        seq = cfg.seq_length // lay.tp if lay.sequence_parallel else cfg.seq_length
        dtype = self.compute_dtype
        hidden = torch.empty(m, seq, cfg.hidden_size, dtype=dtype, device="meta", requires_grad=True)
        vocab = cfg.vocab_size // lay.tp if lay.loss_parallel else cfg.vocab_size
        inputs = torch.empty(m, cfg.seq_length, dtype=torch.long, device="meta") if lay.first else hidden
        outputs = torch.empty(m, cfg.seq_length, vocab, dtype=dtype, device="meta") if lay.last else hidden
        return inputs, outputs

    def _scale(self) -> float:
        return self.scaler.scale if self.scaler is not None else 1.0

    def lr_at(self, updates: int) -> float:
        return learning_rate(self.p, updates * self.global_batch)

    # one iteration --------------------------------------------------------------------------------------------
    def step(self) -> None:
        x, y = self.data.next()
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(self.updates)
        loss_ctx = nullcontext()
        if self.lay.loss_parallel:
            from torch.distributed.tensor.parallel import loss_parallel

            loss_ctx = loss_parallel()
        with self.autocast(), loss_ctx, attention_kernels(self.p["attention"]):
            loss = self._pipeline_step(x, y) if self.schedule is not None else self._accumulate(x, y)
        if self.lay.dp_mode == "allreduce":
            parallel.all_reduce_gradients(self.params, self.lay.group("dp"))
        parallel.sync_tied_gradient(self.tied, self.tied_group)
        self.losses.append(self._update(loss))
        self.iteration += 1
        self._mark_end()

    def _accumulate(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        total = torch.zeros((), device=self.device)
        n, m = self.accumulation, self.micro
        for i in range(n):
            last = i == n - 1
            with self._grad_sync(last):
                loss = self.forward_loss(x[i * m:(i + 1) * m], y[i * m:(i + 1) * m])
                (loss * (self._scale() / n)).backward()
            total += _local(loss.detach())
        return total / n

    def _forward_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return loss_fn(self.model(x), y)

    def _grad_sync(self, last: bool):
        """Reduce gradients over replicas only after the last micro-batch."""
        if self.lay.dp_mode == "ddp" and not last:
            return self.model.no_sync()
        if self.lay.dp_mode == "fsdp2" and self.accumulation > 1:
            self.model.set_requires_gradient_sync(last)
            self.model.set_reshard_after_backward(last)  # keep parameters gathered between micro-batches
        return nullcontext()

    def _pipeline_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        losses: list[torch.Tensor] = []
        target = y if self.lay.last else None
        if self.lay.first:
            self.schedule.step(x, target=target, losses=losses)
        else:
            self.schedule.step(target=target, losses=losses)
        if not self.lay.last:
            return torch.zeros((), device=self.device)
        return torch.stack([_local(v.detach()).float() for v in losses]).sum() / self._scale()

    def _update(self, loss: torch.Tensor) -> torch.Tensor:
        """Unscale (fp16), skip on overflow, clip by the global norm, step. Returns the global-batch mean loss:
        it travels in the same all-reduce as the gradient norm, from the last stage's tp rank 0 of each replica."""
        params = self.params
        if self.scaler is not None:
            grads = [_local(q.grad) for q in params if q.grad is not None]
            if grads:
                torch._foreach_mul_(grads, 1.0 / self.scaler.scale)
        exclude = self.tied if self.lay.last and self.lay.pp > 1 else None
        square = parallel.grad_square_share(params, self.lay, exclude).to(self.device)
        loss = loss.detach().float().to(self.device)
        if self.distributed:
            mine = loss / self.dims.dp if self.dims.counts_units(dist.get_rank()) else torch.zeros_like(loss)
            both = torch.stack((square, mine))
            dist.all_reduce(both)
            square, loss = both[0], both[1]
        norm = square.sqrt()
        if self.scaler is not None:
            overflow = not bool(torch.isfinite(norm).item())  # the one host synchronisation, fp16 only
            self.scaler.update(overflow)
            if overflow:
                self.optimizer.zero_grad(set_to_none=True)
                return loss
        if self.p["clip_grad"] > 0:
            coef = (self.p["clip_grad"] / (norm + 1e-6)).clamp(max=1.0)
            grads = [_local(q.grad) for q in params if q.grad is not None]
            if grads:
                torch._foreach_mul_(grads, coef.to(grads[0].device))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.updates += 1
        return loss

    def _mark_end(self) -> None:
        if self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._ends.append(event)
        else:
            self._ends.append(time.perf_counter())

    # the record -------------------------------------------------------------------------------------------------
    def iteration_times(self) -> list[float]:
        """Seconds per iteration of the measured steps (those after warmup_steps), device time on GPUs."""
        ends, first = self._ends, max(1, self.p["warmup_steps"])
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return [ends[i - 1].elapsed_time(ends[i]) / 1e3 for i in range(first, len(ends))]
        return [ends[i] - ends[i - 1] for i in range(first, len(ends))]

    def loss_values(self) -> list[float]:
        return torch.stack(self.losses).cpu().tolist() if self.losses else []

    def details(self) -> dict:
        p, dims = self.p, self.dims
        times = self.iteration_times()
        t_iter = statistics.median(times) if times else None
        losses = self.loss_values()[max(0, p["warmup_steps"]):] or self.loss_values()
        loss = None
        if losses:
            finite = all(math.isfinite(v) for v in losses)
            loss = {"first": losses[0], "last": losses[-1], "finite": finite,
                    "falling": finite and len(losses) > 1 and losses[-1] < losses[0], "steps": len(losses)}
        vocab = self.sizes["padded_vocab_size"]
        caraml_flops = sizes.caraml_flops_per_iteration(self.global_batch, p["seq_length"], p["num_layers"],
                                                        p["hidden_size"], vocab, p["recompute"] != "none",
                                                        p["activation"])
        return {
            "time_per_iteration_s": t_iter,
            "dp": dims.dp,
            "global_batch_size": self.global_batch,
            "loss": loss,
            "tflops_caraml_per_device": caraml_flops / (t_iter * dims.world * 1e12) if t_iter else None,
            "flops": {"per_token": self.sizes["flops_per_token"], "convention": sizes.FLOPS_CONVENTION,
                      "caraml_per_iteration": caraml_flops, "caraml_formula": sizes.CARAML_TFLOPS_FORMULA},
            "parameters": self.sizes["parameters"],
            "padded_vocab_size": vocab,
            "loss_scale": self.scaler.state() if self.scaler is not None else None,
            "parallel_setup": {"dp_mode": self.lay.dp_mode, "sequence_parallel": self.lay.sequence_parallel,
                               "loss_parallel": self.lay.loss_parallel, "pipeline_schedule":
                                   "1F1B" if self.schedule is not None else None,
                               "micro_batches": self.accumulation},
            "compile_scope": self.compile_scope,
        }

    def close(self) -> None:
        self.data = None


def train_losses(overrides: dict[str, Any], steps: int, preset: str | None = "smoke",
                 device: str = "cpu") -> list[float]:
    """Train `steps` iterations in this process and return each iteration's global-batch mean loss: the same on
    every rank. With WORLD_SIZE > 1 (torchrun) the process group must be up; the layout comes from tp and pp.
    For comparing layouts: the same model, seed and global batch give the same losses in every layout."""
    from caraml import distributed
    from caraml.settings import RUN_PARAMS
    from caraml.params import resolve
    from caraml.workloads.llm_training import PRESETS, WORKLOAD

    p = resolve(WORKLOAD.params + RUN_PARAMS, overrides, WORKLOAD.name, PRESETS.get(preset) if preset else None)
    launch = distributed.launch_env()
    if launch.world_size > 1:
        launch.backend = dist.get_backend()
    ctx = RunContext(device=torch.device(device), seed=p["seed"], dist=launch, dims=WORKLOAD.dims(p, launch.world_size))
    bench = GPTBench(p, ctx)
    try:
        for _ in range(steps):
            bench.step()
        return bench.loss_values()
    finally:
        bench.close()
