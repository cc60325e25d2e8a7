"""A GPT point on paper (llm_training as caraml builds it): memory per device, the pipeline bubble, communication
per iteration, and from them a time per iteration and tokens/s. Plain arithmetic, no torch.

Memory (bytes per device, the busiest stage: the first, which holds the embedding and, under 1F1B, pp
micro-batches in flight):
- states: fp32 parameters (4), fp32 gradients (4), AdamW's two fp32 moments (8) per parameter; under the
  distributed optimizer (FSDP2) all three sharded over dp, the parameters kept gathered from forward to backward
  (+4 per parameter); plus the bf16/fp16 copies autocast keeps of the weights during the step (+2).
- activations per layer and micro-batch, in units of s*b*h bytes (s sequence, b micro-batch, h width, f MLP
  width), as autograd saves them with SDPA's flash/cuDNN kernels (no s^2 terms): the two LayerNorms' fp32 inputs
  8, q/k/v input 2, the q/k/v output 6 plus rotated q and k 4, the attention output 2 and its reshaped copy 2,
  the MLP input 2; MLP 4*f/h (the GELU's input and output) -- 26 + 4f/h (42 at f = 4h). Selective recompute keeps
  the attention core's inputs, not its output (-2); full recompute keeps each block's input (2) and rebuilds one
  block at a time. Divided by tp under sequence parallelism (without it only the tp-split parts). Micro-batches
  in flight: 1 without a pipeline, pp on the first stage under 1F1B.
- the loss, on the last stage: the logits in the half precision (2), their fp32 copy (4) and log-softmax (4)
  per token and vocabulary entry: 10*b*s*V/tp at once (fused_loss: one chunk of rows).
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


def activation_units(ffn_over_h: float, recompute: str) -> tuple[float, float]:
    """Bytes per s*b*h one transformer layer keeps for the backward (see the module's text), as (the part every
    tensor-parallel rank holds whole without sequence parallelism: the norms' inputs, the q/k/v and MLP inputs;
    the part split by tp)."""
    if recompute == "full":
        return 2.0, 0.0
    split = 14.0 + 4.0 * ffn_over_h  # q/k/v output 6, rotated q, k 4, attention output 2 + copy 2; MLP 4f/h
    return 12.0, split - 2.0 if recompute == "selective" else split


def memory(cfg, layout: Layout) -> dict:
    """Bytes per device on the busiest stage, by part."""
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
    if par.distributed_optimizer == "fsdp" and dp > 1:
        states = params * 16 / dp + params * 4
    elif par.distributed_optimizer == "zero1" and dp > 1:
        states = params * 8 + params * 8 / dp
    else:
        states = params * 16
    half_copies = params * 2 if c.precision in ("fp16", "bf16", "fp8") else 0
    mb, sp = b.micro_batch_size, par.sequence_parallel and tp > 1
    whole, split = activation_units(f / h, c.recompute)
    per_layer_act = s * mb * h * ((whole + split) / tp if sp else whole + split / tp)
    in_flight = min(pp, b.grad_accumulation) if pp > 1 else 1
    activations = per_layer_act * (L // pp) * in_flight
    if c.recompute == "full":  # the one block being rebuilt holds its whole set
        whole, split = activation_units(f / h, "none")
        activations += s * mb * h * ((whole + split) / tp if sp else whole + split / tp)
    rows = mb * s if c.fused_loss == "none" else min(mb * s, 8192)
    loss = 10.0 * rows * vocab / tp if pp == 1 else 0.0  # the last stage's; the first (embedding) is busier
    total = states + half_copies + activations + loss
    return {"parameters_per_device": params, "states_bytes": states, "half_copies_bytes": half_copies,
            "activations_bytes": activations, "loss_bytes": loss, "total_bytes": total}


def communication(cfg, layout: Layout) -> dict:
    """Bytes each device sends per iteration over each kind of link."""
    m, b, par, c = cfg.model, cfg.batch, cfg.parallel, cfg.compute
    h, s, L, tp, pp, dp = m.hidden_size, m.seq_length, m.num_layers, layout.tp, layout.pp, layout.dp
    mb, micro = b.micro_batch_size, b.grad_accumulation
    act = mb * s * h * 2.0  # one micro-batch's residual stream in the half precision
    per_layer = (4 + (2 if c.recompute == "full" else 0)) * 2 * (tp - 1) / tp * act if tp > 1 else 0.0
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

    m, b, c = cfg.model, cfg.batch, cfg.compute
    peak_precision = "bf16" if c.precision == "fp8" else c.precision  # fp8: only the block products run in fp8
    peak = (profile.get("peak_tflops") or {}).get(peak_precision)
    tokens = b.global_batch(layout.dp) * m.seq_length
    vocab = sizes.padded_vocab(m.vocab_size, layout.tp)
    per_token = sizes.flops_per_token(m.num_layers, m.hidden_size, m.ffn, vocab, m.seq_length, m.activation)
    matmul = sizes.parameter_counts(m.num_layers, m.hidden_size, m.ffn, vocab, 0, "rope", m.activation)["matmul"]
    extra = {"none": 0.0, "selective": 4.0 * m.num_layers * m.hidden_size * m.seq_length,
             "full": 2.0 * matmul + 4.0 * m.num_layers * m.hidden_size * m.seq_length}[c.recompute]
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
                                                    m.hidden_size, vocab, c.recompute != "none", m.activation)
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
            "tflops_caraml_per_device": caraml_flops / (iteration * layout.devices * 1e12) if iteration else None}
