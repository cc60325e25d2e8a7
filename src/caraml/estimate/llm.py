"""A GPT point on paper (llm_training as caraml builds it): memory per device, the pipeline bubble, communication
per iteration, and from them a time per iteration and tokens/s. Plain arithmetic, no torch.

Memory (bytes per device, the busiest stage: the first, which holds the embedding and, under 1F1B, pp
micro-batches in flight), at the peak: the start of the backward, or the optimizer step if larger:
- states: fp32 parameters (4), fp32 gradients (4), AdamW's two fp32 moments (8) per parameter; under the
  distributed optimizer (FSDP2) all three sharded over dp, the parameters kept gathered from forward to backward
  (+4 per parameter), under ZeRO-1 the moments; plus the half-precision weights (2): autocast's copies kept for
  the backward, or Megatron's half-precision parameters (fp8: float8 copies of the blocks' product weights, 1).
  At the start of the backward the gradients are not there (zero_grad(set_to_none)) unless earlier micro-batches
  left theirs (gradient accumulation; Megatron's in the half precision).
- activations per layer and token, as our model (model.py) saves them for the backward, counted on the CPU
  eager and compiled (activation_bytes; tests/test_estimate_activations.py pins it): 20h + 4f bytes in the half
  precision, eager or compiled (36h at f = 4h). Divided by tp under sequence parallelism (without it only the
  tp-split parts). Micro-batches in flight: 1 without a pipeline, pp on the first stage under 1F1B.
- the loss, on the last stage (head_bytes): eager, 12 bytes per token and vocabulary entry at the worst moment
  (the fp32 log-softmax kept, the incoming gradient and the result); compiled, 4 (the bf16 logits and their
  gradient); fused_loss: one chunk of rows.
- the cuBLAS workspace the CUDA caching allocator hands out (CUDA_WORKSPACE_BYTES).
Time: FLOPs by the record's convention (6N + 12*L*h*s per token; recompute adds its forward), at `efficiency` x
the profile's peak for the precision; x (m + pp - 1)/m for the pipeline; plus communication not overlapped.
Communication per iteration per device (ring collectives move 2(n-1)/n of the data for an all-reduce,
(n-1)/n for a reduce-scatter or all-gather):
- tp: per layer and micro-batch 4 all-reduces of b*s*h half-precision values (forward 2, backward 2), or with
  sequence parallelism the same volume as all-gathers + reduce-scatters; full recompute adds the forward's 2.
- pp: per micro-batch the activations b*s*h (/tp with sequence parallelism) sent forward and their gradient back.
- dp: the distributed optimizer gathers fp32 parameters once and reduce-scatters fp32 gradients; DDP
  all-reduces fp32 gradients.
tp runs over the intra-node link when tp <= devices per node; dp and pp over the inter-node link once their
groups span nodes (ranks: tp innermost, then dp, then pp).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

GIB = 2 ** 30


@dataclass(frozen=True)
class Layout:
    devices: int
    devices_per_node: int
    tp: int
    pp: int
    dp: int

    @property
    def nodes(self) -> int:
        return -(-self.devices // self.devices_per_node)


def bubble(pp: int, micro_batches: int) -> float:
    """The 1F1B pipeline's idle fraction: (pp - 1) / (m + pp - 1)."""
    return (pp - 1) / (micro_batches + pp - 1)


# The CUDA caching allocator's own share of the measured peak (torch.cuda.max_memory_allocated): the cuBLAS/cuBLASLt
# workspace it allocates for the stream, 4096 KiB x 8 = 32 MiB on Hopper (PyTorch's default CUBLAS_WORKSPACE_CONFIG
# ":4096:8" for sm_90, aten/src/ATen/cuda/CublasHandlePool.cpp). Blocks are rounded to 512 bytes (negligible), and
# what the allocator reserves beyond what it hands out is not in max_memory_allocated, so not here either.
CUDA_WORKSPACE_BYTES = 32 * 2 ** 20
FP8_BYTES = 1


def activation_bytes(h: int, f: int, heads: int, precision: str, recompute: str, compiled: bool,
                     hidden_dropout: float = 0.0, activation: str = "gelu", mask_bytes: int = 1) -> tuple[float, float]:
    """Bytes per token one transformer layer keeps for the backward, as (the part every tensor-parallel rank holds
    whole without sequence parallelism; the part split by tp). Counted on the CPU from autograd's saved tensors
    (eager) and from the inputs of AOT autograd's backward graph under inductor's partitioner (compiled):
    tests/test_estimate_activations.py pins this against those counts. With a = the activations' bytes (2 in
    fp16/bf16/fp8, 4 in fp32):
    - whole: the two LayerNorms' inputs and the q/k/v and MLP inputs, a*h each; the norms' mean and rstd, 4 bytes
      each (fp32 eager; inductor keeps them in the half precision: 2);
    - split: the q/k/v product kept whole (3a*h: v is a view of it), the rotated q and k (2a*h), the attention
      output, which is also the output projection's input (a*h), the attention's log-sum-exp (4 per head), the
      GELU's input and output (2a*f; SwiGLU: its two inputs and the product, 3a*f).
    selective recompute drops the log-sum-exp; compiled, also the attention output (eager keeps it as the output
    projection's input). full keeps each block's input (a*h). fp8 (torchao): eager, its autograd function keeps
    the high-precision inputs (as bf16); compiled, inductor keeps the four products' inputs as float8 copies
    (1 byte) and the GELU's output only as that copy: -(3h + 2f) (measured). hidden dropout: the mask of each
    of the two dropouts, h elements of `mask_bytes` (1: CUDA's fused dropout keeps a bool mask; on a CPU
    F.dropout multiplies by a mask in the activations' dtype)."""
    a = 4 if precision == "fp32" else 2
    if recompute == "full":
        return float(a * h), 0.0
    stats = 2 * 2 * (2 if compiled and a == 2 else 4)
    whole = 4.0 * a * h + stats
    up = 3 if activation == "swiglu" else 2
    split = 6.0 * a * h + up * a * f + 4 * heads
    if recompute == "selective":
        split -= 4 * heads + (a * h if compiled else 0)
    if precision == "fp8" and compiled:  # the q/k/v, output projection and MLP inputs kept as float8 copies
        whole -= 2 * (a - FP8_BYTES) * h
        split -= (a - FP8_BYTES) * (h + 2 * f)  # and the GELU's output only as that float8 copy
    whole += 2 * h * mask_bytes * (hidden_dropout > 0)
    return whole, split


def head_bytes(h: int, vocab: int, precision: str, compiled: bool) -> tuple[float, float]:
    """Bytes per token outside the layers on the last stage, as (kept for the backward apart from the logits: the
    token ids 8, the final LayerNorm's input and the output layer's input a*h each, its mean and rstd; the
    logits' share at the loss's worst moment, per token). Eager: cross-entropy keeps the fp32 log-softmax (4V);
    its backward holds it, the incoming gradient and its result, all fp32: 12V. Compiled: the half-precision
    logits are kept (2V) and the fused backward writes the half-precision gradient beside them: 4V."""
    a = 4 if precision == "fp32" else 2
    kept = 8 + 2 * a * h + 8
    return kept, (2 * a if compiled else 12) * vocab


def memory(cfg, layout: Layout) -> dict:
    """Bytes per device on the busiest stage, by part, at the peak: the start of the backward (every activation
    kept, the loss's gradient at its largest), or the optimizer step (all gradients), whichever is larger."""
    from caraml.workloads.llm_training import sizes

    m, b, par, c = cfg.model, cfg.batch, cfg.parallel, cfg.compute
    h, f, s, L, tp, pp, dp = (m.hidden_size, m.ffn, m.seq_length, m.num_layers, layout.tp, layout.pp,
                              layout.dp)
    vocab = sizes.padded_vocab(m.vocab_size, tp)
    counts = sizes.parameter_counts(L, h, f, vocab, m.max_position_embeddings, m.position, m.activation)
    per_layer = (counts["non_embedding"] - 2 * h) / L
    # the first stage: its layers and the embedding (the last one holds as much: its layers and the tied copy)
    params = (L // pp) * per_layer / tp + counts["embedding"] / tp + (2 * h if pp == 1 else 0)
    # fp32 parameters, gradients and AdamW's two moments: 16 bytes each; FSDP2 shards all four (and gathers the
    # parameters in the step), ZeRO-1 only the moments
    sharded = dp > 1 and par.distributed_optimizer in ("fsdp", "zero1")
    if par.distributed_optimizer == "fsdp" and dp > 1:
        states, grads = params * 16 / dp + params * 4, params * 4 / dp
    elif par.distributed_optimizer == "zero1" and dp > 1:
        states, grads = params * 8 + params * 8 / dp, params * 4
    else:
        states, grads = params * 16, params * 4
    half = c.precision in ("fp16", "bf16", "fp8")
    megatron = half and c.megatron_precision
    # the half-precision weights: Megatron's parameters themselves, or the copies autocast casts and autograd
    # keeps until each layer's backward; fp8: the blocks' product weights as float8 copies instead
    block_matmul = (L // pp) * (per_layer - 9 * h - (2 if m.activation == "swiglu" else 1) * f) / tp
    half_copies = params * 2 - (block_matmul * (2 - FP8_BYTES) if c.precision == "fp8" else 0) if half else 0
    # gradients present when the backward starts: none after zero_grad(set_to_none), those of the earlier
    # micro-batches with gradient accumulation (Megatron's in the half precision, moved to fp32 after it)
    accumulated = (grads / 2 if megatron else grads) if b.grad_accumulation > 1 else 0.0
    mb, sp = b.micro_batch_size, par.sequence_parallel and tp > 1
    compiled = c.compiled
    whole, split = activation_bytes(h, f, m.num_attention_heads, c.precision, par.recompute, compiled,
                                    c.hidden_dropout, m.activation)
    per_layer_act = s * mb * ((whole + split) / tp if sp else whole + split / tp)
    in_flight = min(pp, b.grad_accumulation) if pp > 1 else 1
    activations = per_layer_act * (L // pp) * in_flight
    if par.recompute == "full":  # the one block being rebuilt holds its whole set
        whole, split = activation_bytes(h, f, m.num_attention_heads, c.precision, "none", compiled, c.hidden_dropout,
                                        m.activation)
        activations += s * mb * ((whole + split) / tp if sp else whole + split / tp)
    if c.hidden_dropout > 0:  # the embedding's dropout mask (the first stage), 1 byte per element on CUDA
        activations += s * mb * h
    rows = mb * s if c.fused_loss == "none" else min(mb * s, 8192)
    kept, loss_peak = head_bytes(h, vocab, c.precision, compiled)
    # the last stage's; the first (embedding) is busier. fused_loss: one chunk of rows of the logits at a time
    loss = mb * s * kept + rows * loss_peak / tp if pp == 1 else 0.0
    backward = states - grads + accumulated + half_copies + activations + loss
    step = states + (half_copies if megatron else 0)
    total = max(backward, step) + CUDA_WORKSPACE_BYTES
    return {"parameters_per_device": params, "states_bytes": states, "gradients_bytes": grads,
            "accumulated_gradients_bytes": accumulated, "half_copies_bytes": half_copies,
            "activations_bytes": activations, "loss_bytes": loss, "workspace_bytes": CUDA_WORKSPACE_BYTES,
            "peak_at": "backward" if backward >= step else "step", "sharded": sharded, "total_bytes": total}


def communication(cfg, layout: Layout) -> dict:
    """Bytes each device sends per iteration over each kind of link."""
    m, b, par = cfg.model, cfg.batch, cfg.parallel
    h, s, L, tp, pp, dp = m.hidden_size, m.seq_length, m.num_layers, layout.tp, layout.pp, layout.dp
    mb, micro = b.micro_batch_size, b.grad_accumulation
    act = mb * s * h * 2.0  # one micro-batch's residual stream in the half precision
    per_layer = (4 + (2 if par.recompute == "full" else 0)) * 2 * (tp - 1) / tp * act if tp > 1 else 0.0
    tp_bytes = per_layer * (L // pp) * micro
    pp_bytes = 2 * act / (tp if par.sequence_parallel and tp > 1 else 1) * micro if pp > 1 else 0.0
    params = memory(cfg, layout)["parameters_per_device"]
    dp_bytes = 0.0
    if dp > 1:
        ring = (dp - 1) / dp
        dp_bytes = (2 * ring * 4 * params)  # fp32: gather + reduce-scatter, or one all-reduce: the same volume
    return {"tp_bytes": tp_bytes, "pp_bytes": pp_bytes, "dp_bytes": dp_bytes}


def links(layout: Layout) -> dict:
    """Which link each group's traffic crosses: intra (within a node) or inter (between nodes)."""
    per_node = layout.devices_per_node
    one_node = layout.devices <= per_node
    return {"tp": "intra" if layout.tp <= per_node else "inter",
            "dp": "intra" if one_node or layout.tp * layout.dp <= per_node else "inter",
            "pp": "intra" if one_node else "inter"}


def estimate(cfg, layout: Layout, profile: dict, efficiency: float) -> dict:
    """The whole estimate of one point on one system: memory, bubble, communication, time, tokens/s."""
    from caraml.workloads.llm_training import sizes

    m, b, c, par = cfg.model, cfg.batch, cfg.compute, cfg.parallel
    peak_precision = "bf16" if c.precision == "fp8" else c.precision  # fp8: only the block products run in fp8
    peak = (profile.get("peak_tflops") or {}).get(peak_precision)
    tokens = b.global_batch(layout.dp) * m.seq_length
    vocab = sizes.padded_vocab(m.vocab_size, layout.tp)
    per_token = sizes.flops_per_token(m.num_layers, m.hidden_size, m.ffn, vocab, m.seq_length, m.activation)
    matmul = sizes.parameter_counts(m.num_layers, m.hidden_size, m.ffn, vocab, 0, "rope", m.activation)["matmul"]
    extra = {"none": 0.0, "selective": 4.0 * m.num_layers * m.hidden_size * m.seq_length,
             "full": 2.0 * matmul + 4.0 * m.num_layers * m.hidden_size * m.seq_length}[par.recompute]
    flops = tokens * (per_token + extra) / layout.devices
    bub = bubble(layout.pp, b.grad_accumulation)
    compute_s = flops / (peak * 1e12 * efficiency) / (1 - bub) if peak else None
    comm = communication(cfg, layout)
    where = links(layout)
    bandwidth = profile.get("links_gbps") or {}
    comm_s, missing = 0.0, []
    for group in ("tp", "pp", "dp"):
        volume = comm[f"{group}_bytes"]
        if not volume:
            continue
        gbps = bandwidth.get(f"{where[group]}_node")
        if gbps:
            comm_s += volume / (gbps * 1e9)
        else:
            missing.append(f"{where[group]}_node")
    iteration = compute_s + comm_s if compute_s is not None and not missing else None
    caraml_flops = sizes.caraml_flops_per_iteration(b.global_batch(layout.dp), m.seq_length, m.num_layers,
                                                    m.hidden_size, vocab, par.recompute != "none", m.activation)
    mem = memory(cfg, layout)
    capacity = profile.get("memory_per_device_gb")
    return {"layout": {**asdict(layout), "nodes": layout.nodes}, "memory": mem,
            "memory_capacity_bytes": capacity * 1e9 if capacity else None,
            "fits": mem["total_bytes"] <= capacity * 1e9 if capacity else None,
            "bubble": bub, "flops_per_device": flops, "peak_tflops": peak, "peak_precision": peak_precision,
            "efficiency": efficiency, "compute_s": compute_s, "communication": comm, "links": where,
            "link_gbps": {k: bandwidth.get(k) for k in ("intra_node", "inter_node")},
            "communication_s": comm_s if not missing else None,
            "missing_links": sorted(set(missing)), "time_per_iteration_s": iteration,
            "tokens_per_s": tokens / iteration if iteration else None, "tokens_per_iteration": tokens,
            # what CARAML's Megatron patch would print for this time (its convention, sizes.CARAML_TFLOPS_FORMULA)
            "tflops_caraml_per_device": caraml_flops / (iteration * layout.devices * 1e12) if iteration else None,
            "caraml_flops_ratio": caraml_flops / (flops * layout.devices)}  # its count over ours, per iteration


# Why CARAML's count differs from ours, by recompute (its formula: f = 4 with any recompute, else 3)
CARAML_COUNT_WHY = {
    "selective": "it counts every matrix product of the forward again whenever recompute is on (f = 4), where "
                 "selective recompute re-runs only the attention core",
    "full": "both count the blocks' forward again (f = 4); ours also repeats the output layer's product",
    "none": "without recompute both count one forward and its backward (f = 3)",
}


def caraml_count_note(cfg, ratio: float) -> str:
    """One line: how many times our FLOPs CARAML's formula counts for this point, and why."""
    why = CARAML_COUNT_WHY[cfg.parallel.recompute]
    m = cfg.model
    if m.ffn != 4 * m.hidden_size:  # its 24 (32 with SwiGLU) counts an MLP of 4h
        why += f"; it assumes an MLP of 4 x hidden_size (this one: {m.ffn})"
    return f"CARAML's formula counts {ratio:.2f}x our FLOPs per iteration: {why}"
