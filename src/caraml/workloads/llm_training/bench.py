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

import torch
import torch.distributed as dist
import torch.nn.functional as F

from caraml.contract import BenchInfo, RunContext
from caraml.kit.compile import compile_options
from caraml.kit.optim import kernel_flags
from caraml.kit.precision import autocast, autocast_dtype, matmul_tf32_allowed, precision_in_use
from caraml.kit.readback import Readback
from caraml.workloads.llm_training import caraml_log, fp8, parallel, sizes
from caraml.workloads.llm_training import data as data_mod
from caraml.workloads.llm_training.config import TrainingConfig
from caraml.workloads.llm_training.fast_paths import FastPaths
from caraml.workloads.llm_training.model import GPTConfig, attention_kernels, rope_cache
from caraml.workloads.llm_training.optimizer import MainParams, ZeroOneOptimizer
from caraml.workloads.llm_training.optimizer import local_tensor as _local
from caraml.workloads.llm_training.scaler import LossScaler

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8
# The loss record's tail mean: the mean of the last LOSS_TAIL measured iterations. One iteration's loss is one
# batch's (micro-batch 4: a few documents), which moves by several % from batch to batch; over 20 the batches'
# spread averages out, while at the end of a 200-iteration window the curve has flattened enough that the mean
# still describes where training ended.
LOSS_TAIL = 20


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy in fp32 (logits may be vocabulary-sharded DTensors under loss_parallel)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))


class GPTBench:
    """One GPT pre-training iteration per `step()`, on this rank's part of the layout `ctx.dims`."""

    def __init__(self, cfg: TrainingConfig, ctx: RunContext):
        self.started = time.monotonic()  # Megatron's exit-after-minutes counts from here (set-up included)
        self.cfg, self.device, self.dims, self.seed = cfg, ctx.device, ctx.dims, ctx.seed
        self.plan = parallel.ParallelPlan.of(cfg.parallel, ctx.dims)
        self.model_cfg = GPTConfig.of(cfg, ctx.dims.tp)
        self.global_batch = cfg.batch.global_batch(ctx.dims.dp)
        self.accumulation, self.micro = cfg.batch.grad_accumulation, cfg.batch.micro_batch_size
        self.distributed = ctx.dims.world > 1

        if self.distributed:
            ctx.mesh()  # the device mesh on this run's device type, made once: every group below is a slice of it
        torch.manual_seed(ctx.seed)
        self._set_up_precision()
        self._set_up_model()
        self.optimizer = self._optimizer()
        self.schedule = self._pipeline() if ctx.dims.pp_enabled else None
        self.data = data_mod.make(cfg, self.global_batch, ctx.dims.dp_rank, ctx.device, ctx.seed, ctx.data_root)
        self._set_up_records()
        self.sizes = sizes.sizes(cfg.model, ctx.dims.tp)
        self.info = self._info()
        self.extra_phase = self._caraml_phase()

    # setup --------------------------------------------------------------------------------------------------
    def _caraml_phase(self) -> str | None:
        """convention=caraml-log: CARAML's figures after the steady window, training on until the exit time (every
        engine: its step() marks the iterations through _mark_start/_mark_end)."""
        return "caraml-log" if self.cfg.caraml.logs else None

    def _set_up_precision(self) -> None:
        """The activations' dtype, fp16's loss scaler, and autocast in the half precision over fp32 parameters
        (mixed_precision=autocast) or none (megatron: the parameters themselves are in the half precision)."""
        precision = self.cfg.compute.precision
        self.compute_dtype = autocast_dtype(precision) or torch.float32  # the half precision, or fp32
        self.autocast = nullcontext if self.cfg.compute.megatron_precision else autocast(precision, self.device)
        self.scaler = LossScaler() if precision == "fp16" else None

    def _compile_scope(self) -> str | None:
        """What is compiled as one graph: the model with its loss needs a plain module (no tensor or pipeline
        split); otherwise each block. None: nothing compiled."""
        compute, dims = self.cfg.compute, self.dims
        if not compute.compiled:
            return None
        plain = not dims.tp_enabled and not dims.pp_enabled
        return "model" if compute.compile_scope == "model" and plain else "block"

    def _set_up_model(self) -> None:
        """This rank's stage, tensor-parallel and compiled, then data-parallel; the tied embedding's copy and its
        group across the first and last stage; the parameters trained; forward and loss, compiled or not."""
        self.compile_scope = self._compile_scope()
        compute = self.cfg.compute
        options = (compile_options(compute.compile, compute.compile_mode, compute.compile_tuning) if self.compile_scope
                   else None)
        self.fast = FastPaths(self.cfg.compute, self.device)
        model = parallel.build_stage(self.model_cfg, self.dims, self.plan, self.device, self.seed,
                                     options if self.compile_scope == "block" else None,
                                     self.fast.convert_block if self.fast.any_block_change() else None)
        if self.cfg.compute.megatron_precision:  # Megatron's Float16Module: parameters in the half precision
            model.to(self.compute_dtype)
            if model.rope is not None:
                model.rope = rope_cache(self.model_cfg, device=self.device)  # rotation angles stay fp32
        self.model = parallel.apply_data_parallel(model, self.dims, self.plan, self.device)
        self.fast.attach_loss(self.model)
        self.tied = parallel.tied_weight(self.model, self.dims)  # after FSDP2, which replaces the parameters
        self.tied_group = parallel.tied_embedding_group(self.dims) if self.distributed else None
        self.params = [q for q in self.model.parameters() if q.requires_grad]
        # what the optimizer steps: fp32 main copies (megatron) or the parameters themselves
        self.main = MainParams(self.params) if self.cfg.compute.megatron_precision else None
        self.update_params = self.main.main if self.main is not None else self.params
        self.update_tied = self.main.of(self.tied) if self.main is not None else self.tied
        self.forward_loss = (torch.compile(self._forward_loss, **options) if self.compile_scope == "model"
                             else self._forward_loss)

    def _set_up_records(self) -> None:
        """The per-step figures details() reports: losses on the device, step ends on the device's clock."""
        self.iteration = 0
        self.updates = 0  # optimizer steps taken (fp16 overflows skip one): the learning rate follows these
        self.losses: list[torch.Tensor] = []  # the global-batch mean loss of each step, on the device
        self._ends: list = []  # end of each step: CUDA events, or host clock readings
        self._measured_from: int | None = None  # index of the first measured step (begin_measure)
        self._updates_at_measure = 0  # optimizer steps taken before the measured window
        self._window_start = None  # the clock reading at begin_measure: the start of the first measured step
        self._first_start = None  # the clock reading at the start of the first step
        self._loss_readback = Readback()  # the live line's loss, copied to the host without a synchronisation

    def _info(self) -> BenchInfo:
        compute = self.cfg.compute
        tf32 = matmul_tf32_allowed()
        return BenchInfo(
            units_per_step=float(self.micro * self.accumulation * self.cfg.model.seq_length), unit="tokens",
            flops_per_unit=self.sizes["flops_per_token"], flops_convention=sizes.FLOPS_CONVENTION,
            precision=precision_in_use(compute.precision, self.device, tf32_allowed=tf32), compiled=compute.compiled,
            mfu_also=fp8.mfu_also(compute.precision))

    def _optimizer(self):
        """AdamW; no weight decay on biases and norms (Megatron's rule: parameters of fewer than 2 dimensions);
        fused kernels on GPUs; with zero1 its state sharded over the data-parallel replicas."""
        decay = [q for q in self.update_params if q.ndim >= 2]
        no_decay = [q for q in self.update_params if q.ndim < 2]
        groups = [{"params": decay, "weight_decay": self.cfg.optim.weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        fused = kernel_flags("fused") if self.device.type == "cuda" else {}

        def make(groups):
            return torch.optim.AdamW(groups, lr=self.cfg.optim.lr, betas=ADAM_BETAS, eps=ADAM_EPS, **fused)

        return ZeroOneOptimizer(groups, make, self.dims.group("dp")) if self.plan.zero1 else make(groups)

    def _pipeline(self):
        import inspect

        from torch.distributed.pipelining import PipelineStage, Schedule1F1B

        # Shapes given up front (static mode): no shape inference, which in newer torch runs a real forward and
        # backward through the stage and upsets DDP's and FSDP's gradient bookkeeping.
        stage = PipelineStage(self.model, self.dims.pp_rank, self.dims.pp, self.device, *self._stage_shapes(),
                              group=self.dims.group("pp"))
        n = self.accumulation

        def scaled_loss(logits, targets):  # mean over the global batch's micro-batches, times the fp16 loss scale
            return loss_fn(logits, targets) * (self._scale() / n)

        kwargs = {"scale_grads": False} if "scale_grads" in inspect.signature(Schedule1F1B).parameters else {}
        return Schedule1F1B(stage, n_microbatches=n, loss_fn=scaled_loss, **kwargs)

    def _stage_shapes(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Example (meta) input and output of one micro-batch on this stage: tokens into the first stage, the
        residual stream (a sequence shard under sequence parallelism) between stages, logits out of the last; both
        in the autocast precision."""
        cfg, dims, plan, m = self.model_cfg, self.dims, self.plan, self.micro
        seq = cfg.seq_length // dims.tp if plan.sequence_parallel else cfg.seq_length
        dtype = self.compute_dtype
        hidden = torch.empty(m, seq, cfg.hidden_size, dtype=dtype, device="meta", requires_grad=True)
        vocab = cfg.vocab_size // dims.tp if plan.loss_parallel else cfg.vocab_size
        inputs = torch.empty(m, cfg.seq_length, dtype=torch.long, device="meta") if dims.first_stage else hidden
        outputs = torch.empty(m, cfg.seq_length, vocab, dtype=dtype, device="meta") if dims.last_stage else hidden
        return inputs, outputs

    def _scale(self) -> float:
        return self.scaler.scale if self.scaler is not None else 1.0

    def lr_at(self, updates: int) -> float:
        return self.cfg.optim.learning_rate(updates * self.global_batch)

    # one iteration --------------------------------------------------------------------------------------------
    def _mark_start(self) -> None:
        if not self._ends:
            self._first_start = self._clock()  # the start of the first iteration: CARAML's first log interval's

    def step(self) -> None:
        self._mark_start()
        x, y = self.data.next()
        lr = self.lr_at(self.updates)
        for settings in self.optimizer.param_groups:
            settings["lr"] = lr
        loss_ctx = nullcontext()
        if self.plan.loss_parallel:
            from torch.distributed.tensor.parallel import loss_parallel

            loss_ctx = loss_parallel()
        with self.autocast(), loss_ctx, attention_kernels(self.cfg.compute.attention):
            loss = self._pipeline_step(x, y) if self.schedule is not None else self._accumulate(x, y)
        if self.plan.dp_mode == "allreduce":
            parallel.all_reduce_gradients(self.params, self.dims.group("dp"))
        parallel.sync_tied_gradient(self.tied, self.tied_group)
        if self.main is not None:
            self.main.grads_to_main()
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
        if self.fast.loss is not None:  # fused_loss: the model gives the final norm's output
            return self.fast.loss(self.model(x), y)
        return loss_fn(self.model(x), y)

    def _grad_sync(self, last: bool):
        """Reduce gradients over replicas only after the last micro-batch."""
        if self.plan.dp_mode == "ddp" and not last:
            return self.model.no_sync()
        if self.plan.dp_mode == "fsdp2" and self.accumulation > 1:
            self.model.set_requires_gradient_sync(last)
            self.model.set_reshard_after_backward(last)  # keep parameters gathered between micro-batches
        return nullcontext()

    def _pipeline_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        losses: list[torch.Tensor] = []
        target = y if self.dims.last_stage else None
        if self.dims.first_stage:
            self.schedule.step(x, target=target, losses=losses)
        else:
            self.schedule.step(target=target, losses=losses)
        if not self.dims.last_stage:
            return torch.zeros((), device=self.device)
        return torch.stack([_local(v.detach()).float() for v in losses]).sum() / self._scale()

    def _update(self, loss: torch.Tensor) -> torch.Tensor:
        """Unscale (fp16), skip on overflow, clip by the global norm, step. Returns the global-batch mean loss:
        it travels in the same all-reduce as the gradient norm, from the last stage's tp rank 0 of each replica."""
        params = self.update_params
        if self.scaler is not None:
            grads = [_local(q.grad) for q in params if q.grad is not None]
            if grads:
                torch._foreach_mul_(grads, 1.0 / self.scaler.scale)
        exclude = self.update_tied if self.dims.last_stage and self.dims.pp_enabled else None
        square = parallel.grad_square_share(params, self.dims, exclude).to(self.device)
        loss = loss.detach().float().to(self.device)
        if self.distributed:
            mine = loss / self.dims.dp if self.dims.counts_units() else torch.zeros_like(loss)
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
        clip = self.cfg.optim.clip_grad
        if clip > 0:
            coef = (clip / (norm + 1e-6)).clamp(max=1.0)
            grads = [_local(q.grad) for q in params if q.grad is not None]
            if grads:
                torch._foreach_mul_(grads, coef.to(grads[0].device))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.main is not None:
            self.main.main_to_model()
        self.updates += 1
        return loss

    def _mark_end(self) -> None:
        self._ends.append(self._clock())

    def _clock(self):
        """A reading of the device's clock: a recorded CUDA event, or the host's clock."""
        if self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def begin_measure(self) -> None:
        """Called by the harness right before the measured window: the steps from here on are the measured ones."""
        self._measured_from = len(self._ends)
        self._updates_at_measure = self.updates
        self._window_start = self._clock()

    def live_loss(self) -> float | None:
        """The global-batch loss of the newest step known to have completed (the contract's live_loss)."""
        if self.losses:
            self._loss_readback.request(self.losses[-1])
        return self._loss_readback.latest()

    def extra_left(self, steps_done: int, elapsed_s: float) -> float:
        """Seconds until exit_after_minutes (counted from the start, as Megatron does)."""
        return max(0.0, self.cfg.caraml.exit_after_minutes * 60.0 - (time.monotonic() - self.started))

    # convention=caraml-log --------------------------------------------------------------------------------------
    def run_extra(self, should_stop) -> None:
        """Train on, as CARAML's Megatron run does, until exit_minutes after the start (the decision agreed over
        every rank, as Megatron's all-reduce of it) or a stop."""
        limit = self.cfg.caraml.exit_after_minutes * 60.0
        while not self._exit_due(limit) and not should_stop():
            self.step()

    def _exit_due(self, limit: float) -> bool:
        due = time.monotonic() - self.started >= limit
        if not self.distributed:
            return due
        flag = torch.tensor(1.0 if due else 0.0, device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def run_step_times(self) -> list[float]:
        """Seconds of every iteration of the run from the first one (device time on GPUs): what Megatron's log
        intervals are made of."""
        if self._first_start is None:
            return []
        marks = [self._first_start, *self._ends]
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return [a.elapsed_time(b) / 1e3 for a, b in zip(marks, marks[1:])]
        return [b - a for a, b in zip(marks, marks[1:])]

    def _caraml_log(self, caraml_flops: float) -> dict:
        conv, model = self.cfg.caraml, self.cfg.model
        found = caraml_log.figures(self.run_step_times(), conv.caraml_log_interval, self.global_batch, model.seq_length,
                                   self.dims.world, caraml_flops, conv.exit_after_minutes)
        return {"caraml_tokens_per_s": found.pop("tokens_per_s"),
                "caraml_time_per_iteration_s": found["time_per_iteration_s"],
                "caraml_tflops_per_device": found["tflops_per_device"],
                "caraml_iterations": found["iterations"], "caraml_spread": found.pop("spread"), "caraml_log": found}

    # the record -------------------------------------------------------------------------------------------------
    def iteration_times(self) -> list[float]:
        """Seconds per iteration of the measured steps, device time on GPUs. Without a measured window (a loop
        that drives step() itself) every step but the first, which has no start mark."""
        if self._measured_from is None:
            marks = self._ends
        else:
            marks = [self._window_start, *self._ends[self._measured_from:]]
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return [a.elapsed_time(b) / 1e3 for a, b in zip(marks, marks[1:])]
        return [b - a for a, b in zip(marks, marks[1:])]

    def loss_values(self) -> list[float]:
        """The global-batch mean loss of every step so far."""
        return torch.stack(self.losses).cpu().tolist() if self.losses else []

    def measured_losses(self) -> list[float]:
        """The losses of the measured steps (all of them when none was measured)."""
        values = self.loss_values()
        return values[self._measured_from or 0:] or values

    def details(self) -> dict:
        model, dims = self.cfg.model, self.dims
        times = self.iteration_times()
        t_iter = statistics.median(times) if times else None
        losses = self.measured_losses()
        loss = None
        if losses:
            finite = all(math.isfinite(v) for v in losses)
            tail = losses[-LOSS_TAIL:]
            loss = {"first": losses[0], "last": losses[-1], "finite": finite,
                    "falling": finite and len(losses) > 1 and losses[-1] < losses[0], "steps": len(losses),
                    "tail_mean": sum(tail) / len(tail), "tail_steps": len(tail)}
        vocab = self.sizes["padded_vocab_size"]
        caraml_flops = sizes.caraml_flops_per_iteration(self.global_batch, model.seq_length, model.num_layers,
                                                        model.hidden_size, vocab, self.cfg.parallel.recompute != "none",
                                                        model.activation)
        out = (self._caraml_log(caraml_flops) if self.cfg.caraml.logs else  # convention=steady: none of CARAML's
               dict.fromkeys(("caraml_tokens_per_s", "caraml_time_per_iteration_s", "caraml_tflops_per_device",
                              "caraml_iterations", "caraml_spread", "caraml_log")))
        return {
            **out,
            "throughput_convention": "steady-state: tokens of the measured steps / their wall time",
            "caraml_config": self.cfg.caraml.caraml_config,
            "model": "GPT",
            "ipu": None,  # engine=poptorch's layout (ipu.py)
            "dataset": "OSCAR" if self.cfg.dataset.data == "oscar" else "synthetic",
            # CARAML's time_to_report_in_seconds: 20M tokens at its Tokens/second (caraml-log only)
            "time_to_report_s": (out["caraml_log"] or {}).get("time_to_report_s"),
            "precision_mechanism": self.cfg.compute.mechanism,
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
            "parallel_setup": {**self.plan.as_dict(), "distributed_optimizer": self.cfg.parallel.distributed_optimizer,
                               "pipeline_schedule": "1F1B" if self.schedule is not None else None,
                               "micro_batches": self.accumulation},
            "compile_scope": self.compile_scope,
            "fast_paths": self.fast.as_dict(),
        }

    def health(self) -> str | None:
        """Why the measured window trained nothing (None when it did): the loss is not finite at its end, or the
        optimizer never stepped in it (fp16 with every step skipped for overflow). The same on every rank: the
        losses are global-batch means and the overflow decision is taken on the all-reduced gradient norm."""
        losses = self.measured_losses()
        if losses and not math.isfinite(losses[-1]):
            return (f"the loss is {losses[-1]} at the end of the measured window ({len(losses)} steps): training "
                    f"diverged; lower lr (now {self.cfg.optim.lr:g}) or init_std (now {self.cfg.model.init_std:g})")
        steps = self.iteration - (self._measured_from or 0)
        if steps and self.updates == self._updates_at_measure:
            why = (f"the fp16 loss scaler skipped every one for overflow (loss scale now {self.scaler.scale:g})"
                   if self.scaler is not None else "no update was taken")
            return f"the optimizer never stepped in the {steps} measured steps: {why}; the weights were not trained"
        return None

    def close(self) -> None:
        self.data = None

