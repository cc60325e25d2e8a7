"""GPT pre-training in the Megatron style (CARAML's llm_training): parameters declared, not built yet.

Sweeps over model sizes, nodes and tensor/pipeline parallelism expand (`caraml sweep llm_training
--dry-run`); running a point says plainly that this workload is not built in this version.
"""

from __future__ import annotations

from typing import Any

from caraml.params import Param
from caraml.workloads import Col, Workload, register

PARAMS = [
    Param("model_size", str, "800M", "label of the model shape (CARAML tags 800M, 13B, 175B; custom for your own)",
          choices=("117M", "800M", "13B", "175B", "custom")),
    Param("num_layers", int, 16, "transformer layers", minimum=1),
    Param("hidden_size", int, 2048, "model width", minimum=1),
    Param("num_attention_heads", int, 16, "attention heads", minimum=1),
    Param("ffn_hidden_size", int, 0, "MLP width (0: 4 x hidden_size)", minimum=0),
    Param("seq_length", int, 2048, "tokens per sample", minimum=1),
    Param("max_position_embeddings", int, 2048, "positions the model embeds", minimum=1),
    Param("vocab_size", int, 50257, "vocabulary (GPT-2 tokenizer)", minimum=1),
    Param("global_batch_size", int, 256, "samples per optimizer step, all ranks together", minimum=1),
    Param("micro_batch_size", int, 4, "samples per device per forward/backward", minimum=1),
    Param("tp", int, 1, "tensor-parallel size", minimum=1),
    Param("pp", int, 1, "pipeline-parallel size", minimum=1),
    Param("sequence_parallel", bool, False, "shard layer norms and dropout along the sequence (with tp > 1)"),
    Param("precision", str, "bf16", "fp32, fp16 or bf16", choices=("fp32", "fp16", "bf16")),
    Param("recompute", str, "none", "activation recomputation", choices=("none", "selective", "full")),
    Param("data", str, "synthetic", "synthetic tokens, or the OSCAR subset CARAML ships", choices=("synthetic", "oscar")),
    Param("lr", float, 1e-4, "Adam learning rate", minimum=0.0),
    Param("compile", bool, False, "torch.compile the model"),
]

PRESETS = {
    "117M": {"model_size": "117M", "num_layers": 12, "hidden_size": 768, "num_attention_heads": 12,
             "seq_length": 1024, "max_position_embeddings": 1024},
    "800M": {"model_size": "800M", "num_layers": 16, "hidden_size": 2048, "num_attention_heads": 16},
    "13B": {"model_size": "13B", "num_layers": 40, "hidden_size": 5120, "num_attention_heads": 40},
    "175B": {"model_size": "175B", "num_layers": 96, "hidden_size": 12288, "num_attention_heads": 96},
}


def check_launch(p: dict[str, Any], devices: int) -> str | None:
    model_parallel = p["tp"] * p["pp"]
    if devices % model_parallel:
        return f"tp*pp = {p['tp']}*{p['pp']} = {model_parallel} does not divide the {devices} devices"
    data_parallel = devices // model_parallel
    if p["global_batch_size"] % (p["micro_batch_size"] * data_parallel):
        return (f"global_batch_size={p['global_batch_size']} is not a multiple of micro_batch_size x data-parallel "
                f"size = {p['micro_batch_size']} x {data_parallel}")
    if p["hidden_size"] % p["num_attention_heads"]:
        return f"hidden_size={p['hidden_size']} is not a multiple of num_attention_heads={p['num_attention_heads']}"
    return None


WORKLOAD = register(Workload(
    name="llm_training", unit="tokens", params=PARAMS, presets=PRESETS, build=None,
    description="GPT pre-training, Megatron style (tensor/pipeline parallel) - not built yet",
    check_launch=check_launch,
    columns=("system", Col("model_size", "ModelSize", "param:model_size"), "nodes", "devices", "global_batch_size",
             Col("tp", "TP", "param:tp", "int"), Col("pp", "PP", "param:pp", "int"), "dp",
             "time_per_iteration_s", "throughput", "tflops_per_device", "energy_wh", "ours",
             Col("micro_batch_size", "MicroBatchSize", "param:micro_batch_size", "int", default=False),
             Col("seq_length", "SeqLength", "param:seq_length", "int", default=False),
             Col("precision", "Precision", "param:precision", default=False)),
    metrics=("time_per_iteration_s", "dp", "global_batch_size"),
))
