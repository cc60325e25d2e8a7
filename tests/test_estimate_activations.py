"""caraml plan's activation bytes (estimate/llm.py: activation_bytes, head_bytes) against the bytes our own GPT
(model.py) really keeps for the backward on this CPU: autograd's saved tensors (saved_tensors_hooks, one count per
storage) eager, and the inputs of AOT autograd's backward graph under inductor's decompositions and min-cut
partitioner compiled. Per layer and token = the slope over the batch of two layers minus that of one (weights and
their half-precision copies do not grow with the batch, so they drop out)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from caraml.estimate import llm
from caraml.workloads.llm_training.model import GPT, GPTConfig

H, FFN, HEADS, SEQ, VOCAB = 128, 512, 4, 32, 128


def _cfg(recompute="none", hidden_dropout=0.0, ffn=FFN):
    return GPTConfig(num_layers=1, hidden_size=H, num_heads=HEADS, ffn_hidden_size=ffn, seq_length=SEQ,
                     max_positions=SEQ, vocab_size=VOCAB, recompute=recompute, hidden_dropout=hidden_dropout)


def _model(cfg, precision):
    torch.manual_seed(0)
    model = GPT(cfg)
    if precision == "fp8":
        pytest.importorskip("torchao.float8")
        from caraml.workloads.llm_training import fp8

        fp8.convert(model, "tensorwise")
    return model


def _forward_loss(model, tokens, precision):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision != "fp32"):
        logits = model(tokens)
        return F.cross_entropy(logits.flatten(0, 1).float(), tokens.flatten(0, 1))


def eager_saved(cfg, batch, precision):
    model = _model(cfg, precision)
    tokens = torch.randint(0, cfg.vocab_size, (batch, cfg.seq_length))
    storages = {}

    def pack(t):
        parts = [t] if type(t) is torch.Tensor else [getattr(t, n) for n in ("_data", "_scale") if hasattr(t, n)]
        for part in parts:
            storage = part.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _forward_loss(model, tokens, precision)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(n for ptr, n in storages.items() if ptr not in weights)


def compiled_saved(cfg, batch, precision):
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor.decomposition import select_decomp_table
    from torch.multiprocessing.reductions import StorageWeakRef

    torch._dynamo.reset()
    model = _model(cfg, precision)
    tokens = torch.randint(0, cfg.vocab_size, (batch, cfg.seq_length))
    saved = {}

    def backward_graph(gm, inputs):
        storages = {}
        for node in gm.graph.nodes:
            value = node.meta.get("val")
            if node.op == "placeholder" and not node.name.startswith("tangents") and isinstance(value, torch.Tensor):
                storages[StorageWeakRef(value.untyped_storage())] = value.untyped_storage().nbytes()
        saved["bytes"] = sum(storages.values())
        return make_boxed_func(gm)

    backend = aot_autograd(fw_compiler=lambda gm, inputs: make_boxed_func(gm), bw_compiler=backward_graph,
                           partition_fn=min_cut_rematerialization_partition, decompositions=select_decomp_table())
    torch.compile(lambda x: _forward_loss(model, x, precision), backend=backend, fullgraph=True)(tokens).backward()
    return saved["bytes"]


def per_token(count, cfg, precision):
    """(bytes per token one layer keeps, bytes per token outside the layers)."""
    def slope(c):
        return (count(c, 2, precision) - count(c, 1, precision)) / c.seq_length

    one, two = slope(cfg), slope(replace(cfg, num_layers=2))
    return two - one, 2 * one - two


def _estimate(precision, recompute="none", compiled=False, hidden_dropout=0.0, ffn=FFN):
    # on the CPU F.dropout multiplies by a mask in the activations' dtype (CUDA's fused dropout: a bool mask)
    mask = 4 if precision == "fp32" else 2
    return sum(llm.activation_bytes(H, ffn, HEADS, precision, recompute, compiled, hidden_dropout, mask_bytes=mask))


@pytest.mark.parametrize("precision,recompute,dropout", [
    ("bf16", "none", 0.0), ("bf16", "selective", 0.0), ("bf16", "full", 0.0), ("fp32", "none", 0.0),
    ("bf16", "none", 0.1), ("fp8", "none", 0.0)])
def test_eager_layer_bytes_are_what_autograd_saves(precision, recompute, dropout):
    layer, outside = per_token(eager_saved, _cfg(recompute, dropout), precision)
    assert _estimate(precision, recompute, False, dropout) == pytest.approx(layer, rel=0.01)
    if recompute != "full":
        kept, logits = llm.head_bytes(H, VOCAB, precision, compiled=False)
        embedding_mask = 4 * H if dropout else 0  # the embedding's dropout mask, fp32 on the CPU (CUDA: bool)
        assert kept + logits / 3 + embedding_mask == pytest.approx(outside, rel=0.001)  # the log-softmax kept


# each case compiles four graphs (about 10 s on this CPU): the f-dependence is pinned eager (the same terms)
# torch 2.3's dynamo cannot trace model.py's autocast query (get_autocast_cpu_dtype) in one graph: the counts pin
# the partitioner of the torch the GPU runs use (2.11 on the H200, 2.14 here)
@pytest.mark.skipif(tuple(map(int, torch.__version__.split(".")[:2])) < (2, 5),
                    reason="torch < 2.5: dynamo cannot trace the autocast query in one graph")
@pytest.mark.parametrize("precision,recompute,ffn", [("bf16", "none", FFN), ("bf16", "selective", FFN),
                                                     ("fp8", "none", 2 * H)])
def test_compiled_layer_bytes_are_what_inductors_partitioner_saves(precision, recompute, ffn):
    layer, outside = per_token(compiled_saved, _cfg(recompute, ffn=ffn), precision)
    assert _estimate(precision, recompute, True, ffn=ffn) == pytest.approx(layer, rel=0.01)
    kept, logits = llm.head_bytes(H, VOCAB, precision, compiled=True)
    assert kept + logits / 2 == pytest.approx(outside, rel=0.01)  # the half-precision logits kept


def test_the_800m_measured_on_the_h200_within_ten_percent():
    """The four H200 points of docs/performance.md (peak GiB by torch.cuda.max_memory_allocated)."""
    from caraml import estimate, systems
    from caraml.runner import RunSpec, resolve

    plain = {"mixed_precision": "autocast", "hidden_dropout": 0.0, "attention_dropout": 0.0, "recompute": "none",
             "compile": "inductor", "micro_batch_size": 16}
    points = [("800M-2024", {"compile": "none"}, 26.1),
              ("800M-2024", {"compile": "none", "grad_accumulation": 128}, 27.8),
              ("800M", {**plain, "precision": "bf16"}, 54.3), ("800M", {**plain, "precision": "fp8"}, 40.8)]
    for preset, params, measured in points:
        run = resolve(RunSpec("llm_training", params, preset))
        est = estimate.estimate(run.workload, run.values, systems.get("H200"), 1)
        assert est["memory"]["total_bytes"] / 2 ** 30 == pytest.approx(measured, rel=0.10), (preset, params)
