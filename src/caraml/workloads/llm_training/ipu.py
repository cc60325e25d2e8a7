"""GPT pre-training on Graphcore IPUs through PopTorch: CARAML's GC200 runs (llm_benchmark_ipu.yaml, Graphcore's
`train_gpt2.py`) as a Bench.

CARAML's IPU run: GPT-2 117M (12 layers, 768 wide, 12 heads, sequence 1024), one replica over 4 IPUs pipelined
by `--layers-per-ipu 0 4 4 4` (IPU 0 the embedding, then 4 blocks on each of IPUs 1-3; the output layer, tied
to the embedding, back on IPU 0), micro-batch 1, 128 micro-batches accumulated per weight update, 4 device
iterations per host call: one `step()` = 4 optimizer steps of 128 samples = 512 samples; AdamW at 1.5e-4 with
a cosine schedule after a linear warm-up over the first 1 % of the training (`--lr-warmup 0.01`), half-precision
weights and partials (`--enable-half-partials`), recompute at every layer.

The pure functions (the layout of the layers over the IPUs, the samples per host step, the schedule) import
nothing; the Bench needs Graphcore's poptorch (the Poplar SDK), which is refused with one line where missing.
"""

from __future__ import annotations

import math
import time

from caraml.errors import BadInput
from caraml.kit.ipu import require_one_process, require_poptorch

# CARAML's llm_benchmark_ipu.yaml (2024.01)
CARAML_IPU = {"replicas": 1, "ipus_per_replica": 4, "layers_per_ipu": "0 4 4 4", "micro_batch_size": 1,
              "grad_accumulation": 128, "device_iterations": 4, "lr": 1.5e-4, "lr_warmup_fraction": 0.01,
              "matmul_proportion": 0.15, "embedding_serialization": 4}


def layers_per_ipu(text: str) -> list[int]:
    """`--layers-per-ipu` as numbers: "0 4 4 4" -> [0, 4, 4, 4]."""
    try:
        counts = [int(t) for t in str(text).replace(",", " ").split()]
    except ValueError:
        counts = []
    if not counts or any(c < 0 for c in counts):
        raise BadInput(f"layers_per_ipu={text!r} is not a list of layer counts, one per IPU (CARAML's \"0 4 4 4\")")
    return counts


def placement_problem(num_layers: int, ipus_per_replica: int, text: str) -> str | None:
    """Why these layers cannot be laid out over the IPUs of one replica, in one line; None when they can."""
    try:
        counts = layers_per_ipu(text)
    except BadInput as exc:
        return str(exc)
    if len(counts) != ipus_per_replica:
        return (f"layers_per_ipu={text!r} names {len(counts)} IPUs, but ipus_per_replica={ipus_per_replica}; "
                f"give one count per IPU")
    if sum(counts) != num_layers:
        return f"layers_per_ipu={text!r} places {sum(counts)} layers, but the model has num_layers={num_layers}"
    return None


def layer_ipus(text: str) -> list[int]:
    """The IPU of each transformer block, in order: "0 4 4 4" -> [1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]."""
    return [ipu for ipu, count in enumerate(layers_per_ipu(text)) for _ in range(count)]


def samples_per_step(micro_batch_size: int, grad_accumulation: int, replicas: int, device_iterations: int) -> int:
    """Samples of one host step: micro-batch x accumulation x replicas per optimizer step, device_iterations of
    them (CARAML: 1 x 128 x 1 x 4 = 512)."""
    return micro_batch_size * grad_accumulation * replicas * device_iterations


def learning_rate(update: int, total_updates: int, peak: float, warmup_fraction: float) -> float:
    """Graphcore's GPT-2 schedule: linear warm-up over the first `warmup_fraction` of the updates, then cosine
    decay to 0 at `total_updates`."""
    warm = int(warmup_fraction * total_updates)
    if warm and update < warm:
        return peak * update / warm
    ratio = min(1.0, (update - warm) / max(1, total_updates - warm))
    return 0.5 * peak * (1.0 + math.cos(math.pi * ratio))


class IpuGPTBench:
    """One PopTorch training model of the GPT of model.py, pipelined over one replica's IPUs; `step()` is one
    host call: device_iterations optimizer steps."""

    extra_phase = None

    def __init__(self, cfg, ctx):
        import torch

        from caraml.contract import BenchInfo
        from caraml.workloads.llm_training import sizes
        from caraml.workloads.llm_training.model import GPT, GPTConfig, init_weights

        poptorch = require_poptorch()
        require_one_process(ctx.dims.world)
        self.cfg, ipu = cfg, cfg.ipu
        torch.manual_seed(ctx.seed)
        model_cfg = GPTConfig.of(cfg)
        model = GPT(model_cfg)
        init_weights(model, model_cfg, ctx.seed)
        # the pipeline: the embedding (and the tied output layer) on IPU 0, the blocks as layers_per_ipu says
        model.embed = poptorch.BeginBlock(model.embed, ipu_id=0)
        for block_name, ipu_id in zip(list(model.layers), layer_ipus(ipu.layers_per_ipu)):
            model.layers[block_name] = poptorch.BeginBlock(model.layers[block_name], ipu_id=ipu_id,
                                                           user_id=f"layer{block_name}")
        model.norm = poptorch.BeginBlock(model.norm, ipu_id=0)
        if cfg.compute.precision != "fp32":
            model = model.half()
        opts = poptorch.Options()
        opts.deviceIterations(ipu.device_iterations)
        opts.replicationFactor(ipu.replicas)
        opts.Training.gradientAccumulation(cfg.batch.grad_accumulation)
        opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.AutoIncrement))
        opts.Precision.setPartialsType(torch.float16 if cfg.compute.precision != "fp32" else torch.float32)
        opts.Precision.enableStochasticRounding(cfg.compute.precision != "fp32")
        opts.randomSeed(ctx.seed)
        self.updates_per_step = ipu.device_iterations
        optimizer = poptorch.optim.AdamW(model.parameters(), lr=cfg.optim.lr, betas=(0.9, 0.999), eps=1e-8,
                                         weight_decay=cfg.optim.weight_decay)
        self.optimizer = optimizer
        self.model = poptorch.trainingModel(_WithLoss(model), options=opts, optimizer=optimizer)
        self.samples = samples_per_step(cfg.batch.micro_batch_size, cfg.batch.grad_accumulation, ipu.replicas,
                                        ipu.device_iterations)
        gen = torch.Generator().manual_seed(ctx.seed)
        tokens = torch.randint(0, cfg.model.vocab_size, (self.samples, cfg.model.seq_length + 1), generator=gen)
        self.x, self.y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        start = time.perf_counter()
        self.model.compile(self.x, self.y)  # Poplar compilation: minutes, before the first step
        found = sizes.sizes(cfg.model, 1)
        self.info = BenchInfo(units_per_step=float(self.samples * cfg.model.seq_length), unit="tokens",
                              flops_per_unit=found["flops_per_token"], flops_convention=sizes.FLOPS_CONVENTION,
                              precision="fp16" if cfg.compute.precision != "fp32" else "fp32", compiled=True,
                              compile_setup_s=time.perf_counter() - start)
        self.sizes, self.updates, self.loss = found, 0, None
        self.total_updates = max(1, cfg.optim.lr_decay_samples // (self.samples // ipu.device_iterations))

    def step(self) -> None:
        lr = learning_rate(self.updates, self.total_updates, self.cfg.optim.lr, self.cfg.ipu.lr_warmup_fraction)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.model.setOptimizer(self.optimizer)
        self.loss = self.model(self.x, self.y)
        self.updates += self.updates_per_step

    def details(self) -> dict:
        ipu = self.cfg.ipu
        # CARAML's GlobalBatchSize of its IPU runs: the samples of one host call (512), not of one update (128)
        return {"global_batch_size": self.samples,
                "parameters": self.sizes["parameters"], "padded_vocab_size": self.sizes["padded_vocab_size"],
                "ipu": {"replicas": ipu.replicas, "ipus_per_replica": ipu.ipus_per_replica,
                        "layers_per_ipu": ipu.layers_per_ipu, "device_iterations": ipu.device_iterations,
                        "gradient_accumulation": self.cfg.batch.grad_accumulation, "samples_per_step": self.samples,
                        "lr_warmup_fraction": ipu.lr_warmup_fraction},
                "throughput_convention": "steady-state: tokens of the measured host steps / their wall time"}

    def close(self) -> None:
        try:
            self.model.detachFromDevice()
        except Exception:  # noqa: BLE001 - already detached or never attached
            pass


def _WithLoss(model):  # noqa: N802 - a class made on first use, so that this module imports no torch
    import torch
    import torch.nn.functional as F

    class WithLoss(torch.nn.Module):
        """PopTorch trains a model whose forward returns the loss."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, x, y):  # only the loss comes back to the host
            logits = self.model(x)
            return poptorch_identity_loss(F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(0, 1)))

    return WithLoss(model)


def poptorch_identity_loss(loss):
    import poptorch

    return poptorch.identityLoss(loss, reduction="none")
