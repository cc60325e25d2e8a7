"""The LLM comparison's run settings (bench/llm_bench.py): the model and micro-batch it measures, where and how,
and its environment knobs, read when a run starts (never at import). The GPU run's: CARAML's 800M GPT at
micro-batch 4, compiled, on CUDA; the self-check's: the smoke model on the CPU, uncompiled."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace

from caraml.workloads.llm_training import PRESETS, sizes

MODEL_KEYS = ("num_layers", "hidden_size", "num_attention_heads", "seq_length", "max_position_embeddings")
BIG_MICRO = 16  # the micro-batch that gave the most tokens/s in the first H200 runs (micro 32 no faster)
# the plain loop's training (bf16 autocast, no dropout) over the 800M preset's CARAML values
LIKE_PLAIN = ("precision=bf16", "mixed_precision=autocast", "attention_dropout=0", "hidden_dropout=0")
# the smoke model with CARAML's settings (bf16: fp16 is slow on a CPU)
CPU_CARAML_2024 = ("--preset", "smoke", "device=cpu", "mixed_precision=megatron", "precision=bf16",
                   "distributed_optimizer=zero1", "attention_dropout=0.1", "hidden_dropout=0.1", "recompute=selective",
                   "caraml_config=none")


@dataclass(frozen=True)
class LLMSetup:
    """Where and what one run of bench/llm_bench.py measures."""

    model: dict = field(default_factory=lambda: {k: PRESETS["800M"][k] for k in MODEL_KEYS})
    micro: int = 4
    vocab: int = 50257
    device: str = "cuda"
    compile: bool = True
    caraml: tuple = ("--preset", "800M", "compile=inductor", "device=cuda")  # caraml run's base for every point
    max_micro: int = 1 << 20
    caraml_2024: tuple = ("--preset", "800M-2024", "device=cuda")
    gbs: int = 512  # caraml_2024_log: CARAML's global batch (LLM_BENCH_CARAML_GBS)
    exit_min: float = 4.0  # caraml_2024_log: minutes before the exit, CARAML's 30 (LLM_BENCH_EXIT_MIN)
    attention: str = "auto"  # the SDPA kernel for every point (LLM_BENCH_ATTENTION)
    acc: int = 8  # caraml_acc: micro-batches per iteration (LLM_BENCH_ACC)
    fp8_set: tuple = ()  # settings added to every caraml fp8 point of the groups (LLM_BENCH_FP8_SET)
    loss_lr: str = "1e-4"  # fp8_loss's peak learning rate (LLM_BENCH_LOSS_LR)
    crosscheck_given: dict = field(default_factory=dict)  # over the cross-check's settings (LLM_BENCH_CROSSCHECK)
    skip: frozenset = frozenset()  # --skip: group points not run this time
    peak_tflops: float | None = None  # the device's dense bf16 peak (its system profile's)

    @property
    def self_check(self) -> bool:
        return self.device == "cpu"

    @property
    def big_micro(self) -> int:
        return min(BIG_MICRO, self.max_micro)

    def flops_per_token(self) -> float:
        h, layers = self.model["hidden_size"], self.model["num_layers"]
        return sizes.flops_per_token(layers, h, 4 * h, sizes.padded_vocab(self.vocab), self.model["seq_length"])

    def rates(self, tokens_per_s: float | None, per_token: float | None = None) -> dict:
        """tokens/s with TFLOP/s by 6N + 12*L*h*s per token and the MFU against the device's peak."""
        if not tokens_per_s:
            return {"tokens_per_s": tokens_per_s}
        tflops = tokens_per_s * (per_token or self.flops_per_token()) / 1e12
        return {"tokens_per_s": tokens_per_s, "tflops_6n": tflops,
                "mfu": tflops / self.peak_tflops if self.peak_tflops else None}


def from_env(env=None) -> LLMSetup:
    """The GPU run's settings with the environment's knobs (LLM_BENCH_*) over them."""
    env = os.environ if env is None else env
    return LLMSetup(gbs=int(env.get("LLM_BENCH_CARAML_GBS", "512")),
                    exit_min=float(env.get("LLM_BENCH_EXIT_MIN", "4")),
                    attention=env.get("LLM_BENCH_ATTENTION", "auto"), acc=int(env.get("LLM_BENCH_ACC", "8")),
                    fp8_set=tuple(env.get("LLM_BENCH_FP8_SET", "").split()),
                    loss_lr=env.get("LLM_BENCH_LOSS_LR", "1e-4"),
                    crosscheck_given=json.loads(env.get("LLM_BENCH_CROSSCHECK", "{}")))


def on_cpu(setup: LLMSetup) -> LLMSetup:
    """The self-check's: the smoke preset's model, no compilation, two micro-batch sizes at most."""
    return replace(setup, model={k: PRESETS["smoke"][k] for k in MODEL_KEYS}, micro=2, vocab=500, device="cpu",
                   compile=False, caraml=("--preset", "smoke", "device=cpu", "compile=none"), max_micro=4,
                   caraml_2024=CPU_CARAML_2024, gbs=8, exit_min=0.3, peak_tflops=None)


def caraml_schedule():
    """caraml's learning rate and warm-up of the 800M preset (llm_plain.Schedule), which the plain loop follows."""
    from caraml.compare.llm_plain import Schedule
    from caraml.runner import RunSpec, resolve

    optim = resolve(RunSpec("llm_training", preset="800M")).config.optim
    return Schedule(optim.lr, optim.lr_warmup_samples)
