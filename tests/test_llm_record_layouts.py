"""GPT's record under a tensor-parallel layout, in one process: torch's fake process group (collectives that move
nothing) stands in for the other rank, so the bench is built as rank 0 of tp = 2 builds it. The figures pinned
here depend on the layout, not on what the collectives compute: the vocabulary padded by tp, and CARAML's
per-device TFLOP/s over every device of the run (tp included), not over the data-parallel replicas.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from caraml.contract import RunContext
from caraml.kit import torch_features
from caraml.parallel_dims import ParallelDims
from caraml.runner import RunSpec, resolve
from caraml.workloads.llm_training import caraml_log, sizes


@pytest.fixture
def fake_world():
    """A fake process group of `world` ranks, this process rank 0; gone after the test."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    def start(world: int):
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)

    yield start
    if dist.is_initialized():
        dist.destroy_process_group()


def tp2_bench(fake_world, **overrides):
    """Rank 0 of a tp = 2 run (dp = 1), built on the CPU."""
    if not torch_features.TENSOR_PARALLEL.present():
        pytest.skip(torch_features.TENSOR_PARALLEL.problem())
    fake_world(2)
    run = resolve(RunSpec("llm_training", {"tp": 2, **overrides}, "smoke"))
    torch.manual_seed(0)
    ctx = RunContext(device=torch.device("cpu"), seed=0, dist=SimpleNamespace(rank=0, world_size=2),
                     dims=ParallelDims(tp=2))
    return run.workload.build(run.config, ctx)


def test_the_record_pads_the_vocabulary_by_tp_as_the_model_does(fake_world):
    """300 entries: 384 at tp = 1 (a multiple of 128), 512 at tp = 2 (of 256)."""
    b = tp2_bench(fake_world, vocab_size=300)
    m = b.cfg.model
    details = b.details()
    assert b.model_cfg.vocab_size == details["padded_vocab_size"] == 512
    assert details["flops"]["per_token"] == sizes.flops_per_token(m.num_layers, m.hidden_size, m.ffn, 512,
                                                                  m.seq_length)
    assert details["parameters"]["embedding"] == 512 * m.hidden_size
    assert details["flops"]["caraml_per_iteration"] == pytest.approx(sizes.caraml_flops_per_iteration(
        b.global_batch, m.seq_length, m.num_layers, m.hidden_size, 512, recompute=False))


def test_caraml_log_tflops_per_device_divide_by_every_device_of_the_run(fake_world):
    """dp = 1, tp = 2: each logged interval's FLOPs over its time and both devices."""
    b = tp2_bench(fake_world, convention="caraml-log", caraml_log_interval=2)
    for _ in range(4):
        b.step()
    details = b.details()
    logged = caraml_log.interval_times(b.run_step_times(), 2)
    assert len(logged) == 2
    flops = details["flops"]["caraml_per_iteration"]
    expected = sum(flops / (t * 2 * 1e12) for t in logged) / 2
    assert details["caraml_tflops_per_device"] == pytest.approx(expected)
    assert details["caraml_log"]["iterations"] == 4
    assert details["caraml_tokens_per_s"]["value"] == pytest.approx(b.global_batch * b.cfg.model.seq_length /
                                                                    (sum(logged) / 2))
