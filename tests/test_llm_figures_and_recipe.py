"""GPT figures and recipe pieces, each pinned where a changed formula would still pass looser tests.

In process, CPU, seeded: the CARAML TFLOP/s factor for selective recompute, tokens counted once per replica,
the loss scaler's growth window after an overflow, the learning rate following optimizer updates (not skipped
fp16 steps), Megatron's `.idx` dtype codes, and each data-parallel replica reading its own rows.
"""

from __future__ import annotations

import struct
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from caraml.measure.harness import Measurement, metrics
from caraml.parallel_dims import ParallelDims
from caraml.runner import RunSpec, build_bench, resolve
from caraml.workloads.llm_training import sizes


def config(preset: str = "smoke", **overrides):
    return resolve(RunSpec("llm_training", overrides, preset)).config


def bench(**overrides):
    import torch

    torch.manual_seed(0)
    return build_bench(RunSpec("llm_training", overrides, "smoke"), device="cpu")


# CARAML's TFLOP/s: f = 4 with any recompute ------------------------------------------------------------------------
@pytest.mark.parametrize("recompute", ["selective", "full"])
def test_caraml_flops_count_recompute_as_caraml_does(recompute):
    """CARAML's patch uses f = 4 for selective and full recompute alike, f = 3 without (its newest patch scales
    the vocabulary term by 4/f, so only the other terms grow by 4/3)."""
    plain = bench(recompute="none").details()["flops"]["caraml_per_iteration"]
    flops = bench(recompute=recompute).details()["flops"]["caraml_per_iteration"]
    m = config(recompute=recompute).model
    expected = sizes.caraml_flops_per_iteration(2, m.seq_length, m.num_layers, m.hidden_size, 512, recompute=True)
    assert flops == pytest.approx(expected)
    assert plain == pytest.approx(sizes.caraml_flops_per_iteration(2, m.seq_length, m.num_layers, m.hidden_size,
                                                                   512, recompute=False))
    assert flops - plain == pytest.approx(24 * (4 - 3) * (2 * m.seq_length * m.num_layers * m.hidden_size ** 2) * (
        1 + m.seq_length / (6 * m.hidden_size)))  # the vocabulary term is the same with and without recompute


# tokens per second: one replica's tokens per step, summed once over the replicas --------------------------------
class TwoReplicas:
    """A process group of two identical data-parallel ranks, seen from rank 0."""

    rank, world_size, local_rank, is_main = 0, 2, 0, True

    def all_reduce(self, value, op="sum"):
        return value if op == "max" else 2 * value

    def barrier(self):
        pass


def test_tokens_per_step_are_one_replicas_so_dp_counts_once():
    from caraml.workloads.llm_training.bench import GPTBench

    cfg = config(micro_batch_size=2, grad_accumulation=3)
    stub = SimpleNamespace(cfg=cfg, micro=2, accumulation=3, global_batch=cfg.batch.global_batch(2),
                           sizes=sizes.sizes(cfg.model, 1), device=SimpleNamespace(type="cpu"))
    info = GPTBench._info(stub)
    seq = cfg.model.seq_length
    assert info.units_per_step == 2 * 3 * seq  # this replica's rows, not the global batch's
    m = Measurement(phase="done", step_times=[0.5] * 4, wall_s=2.0, steps=4)
    out = metrics(info, ParallelDims(dp=2), TwoReplicas(), m, None, interrupted=False)
    assert out["units"] == 4 * 12 * seq  # 4 steps x global batch of 12 samples x seq tokens
    assert out["throughput"]["value"] == pytest.approx(4 * 12 * seq / 2.0)


# the loss scaler -------------------------------------------------------------------------------------------------
def test_loss_scaler_restarts_its_growth_window_after_an_overflow():
    from caraml.workloads.llm_training.scaler import LossScaler

    s = LossScaler()
    for _ in range(300):
        s.update(overflow=False)
    s.update(overflow=True)  # hysteresis 2: the scale stays, but the window of good steps starts again
    assert s.scale == 4096.0
    for _ in range(499):
        s.update(overflow=False)
    assert s.scale == 4096.0  # 799 good steps in all, only 499 since the overflow
    s.update(overflow=False)
    assert s.scale == 8192.0


# the learning rate follows optimizer updates -----------------------------------------------------------------------
def test_learning_rate_does_not_advance_on_a_skipped_fp16_step():
    b = bench(precision="fp16", lr_warmup_samples=100)
    b.step()
    assert b.updates == 1
    b.scaler.scale = 1e38  # the next step overflows and is skipped
    b.step()
    assert b.scaler.skipped == 1 and b.updates == 1 and b.iteration == 2
    b.scaler.scale = 4096.0
    b.step()
    lr = b.optimizer.param_groups[0]["lr"]
    assert lr == pytest.approx(b.lr_at(1)) and lr != pytest.approx(b.lr_at(2))
    assert b.updates == 2


# Megatron's .idx dtype codes -----------------------------------------------------------------------------------------
def write_dataset(prefix: Path, documents: list[list[int]], dtype, code: int) -> None:
    """A Megatron indexed dataset written byte by byte (not through the module under test), with `code`."""
    tokens = [np.asarray(d, dtype=dtype) for d in documents]
    itemsize = np.dtype(dtype).itemsize
    Path(f"{prefix}.bin").write_bytes(b"".join(t.tobytes() for t in tokens))
    lengths = np.array([len(t) for t in tokens], dtype=np.int32)
    pointers = np.concatenate(([0], np.cumsum(lengths[:-1].astype(np.int64) * itemsize))).astype(np.int64)
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", code))
        f.write(struct.pack("<Q", len(tokens)) + struct.pack("<Q", len(tokens) + 1))
        f.write(lengths.tobytes() + pointers.tobytes() + np.arange(len(tokens) + 1, dtype=np.int64).tobytes())


@pytest.mark.parametrize("code, dtype", [(1, np.uint8), (2, np.int8), (3, np.int16), (4, np.int32), (5, np.int64),
                                         (6, np.float64), (7, np.float32), (8, np.uint16)])
def test_idx_dtype_codes_are_megatrons(tmp_path, code, dtype):
    from caraml.data.megatron import IndexedDataset, IndexedDatasetWriter

    docs = [[1, 2, 3, 4, 5], [6, 7], [8, 9, 10]]
    write_dataset(tmp_path / "ds", docs, dtype, code)
    ds = IndexedDataset(tmp_path / "ds")
    assert ds.index.dtype == np.dtype(dtype)
    assert [ds[i].tolist() for i in range(len(ds))] == docs
    with IndexedDatasetWriter(tmp_path / "out", dtype) as w:  # the writer stamps the same code
        for d in docs:
            w.add_document(d)
    assert (tmp_path / "out.idx").read_bytes()[17] == code


# each data-parallel replica reads its own rows ----------------------------------------------------------------------
def test_synthetic_replicas_take_their_own_rows_of_the_global_batch():
    import torch

    from caraml.workloads.llm_training.data import SyntheticTokens

    cpu = torch.device("cpu")
    whole = SyntheticTokens(config(micro_batch_size=4), 4, 0, cpu, seed=1)
    halves = [SyntheticTokens(config(micro_batch_size=2), 4, r, cpu, seed=1) for r in (0, 1)]
    for _ in range(3):
        x, y = whole.next()
        parts = [h.next() for h in halves]
        assert torch.equal(torch.cat([p[0] for p in parts]), x) and torch.equal(torch.cat([p[1] for p in parts]), y)
        assert not torch.equal(parts[0][0], parts[1][0])


def test_oscar_replicas_take_their_own_rows_of_the_global_batch(tmp_path):
    import torch

    from caraml.workloads.llm_training.data import IndexedTokens

    rng = np.random.default_rng(0)
    write_dataset(tmp_path / "ds", [rng.integers(0, 500, size=n).tolist() for n in (300, 129, 700, 65, 400)],
                  np.uint16, 8)
    cpu = torch.device("cpu")
    prefix = str(tmp_path / "ds")
    whole = IndexedTokens(config(micro_batch_size=4), prefix, 4, 0, cpu, seed=1)
    halves = [IndexedTokens(config(micro_batch_size=2), prefix, 4, r, cpu, seed=1) for r in (0, 1)]
    for _ in range(3):
        x, y = whole.next()
        parts = [h.next() for h in halves]
        assert torch.equal(torch.cat([p[0] for p in parts]), x) and torch.equal(torch.cat([p[1] for p in parts]), y)
        assert not torch.equal(parts[0][0], parts[1][0])


# vocabulary padding: to a multiple of 128 x tp in the record, the FLOPs and the model ----------------------------
@pytest.mark.parametrize("tp, padded", [(1, 50304), (2, 50432), (8, 51200)])
def test_record_flops_and_model_pad_the_vocabulary_by_tp(tp, padded):
    from caraml.workloads.llm_training.model import GPTConfig

    c = config("13B")
    s = sizes.sizes(c.model, tp)
    m = c.model
    assert s["padded_vocab_size"] == padded and GPTConfig.of(c, tp).vocab_size == padded
    assert s["flops_per_token"] == sizes.flops_per_token(m.num_layers, m.hidden_size, m.ffn, padded, m.seq_length)
    assert s["parameters"]["embedding"] == padded * m.hidden_size


# CARAML's TFLOP/s per device: the global batch's FLOPs over every device, tp and pp included -------------------------
def test_caraml_tflops_per_device_divide_the_global_batch_by_every_device():
    """A single-process bench given the figures of a dp=2 x tp=2 layout (8 samples per iteration on 4 devices)."""
    b = bench()
    for _ in range(3):
        b.step()
    b.dims, b.global_batch = ParallelDims(dp=2, tp=2), 8
    details = b.details()
    m = config().model
    flops = sizes.caraml_flops_per_iteration(8, m.seq_length, m.num_layers, m.hidden_size, 512, recompute=False)
    assert details["flops"]["caraml_per_iteration"] == pytest.approx(flops)
    t_iter = details["time_per_iteration_s"]
    assert details["tflops_caraml_per_device"] == pytest.approx(flops / (t_iter * 4 * 1e12))
    assert details["global_batch_size"] == 8 and details["dp"] == 2


def test_learning_rate_schedule_counts_samples_of_the_global_batch():
    from caraml.workloads.llm_training.bench import GPTBench

    cfg = config(lr_warmup_samples=100, micro_batch_size=2)
    stub = SimpleNamespace(cfg=cfg, global_batch=cfg.batch.global_batch(4), micro=2, accumulation=1)  # 8 samples
    assert GPTBench.lr_at(stub, 5) == pytest.approx(cfg.optim.learning_rate(40))
    assert GPTBench.lr_at(stub, 5) == pytest.approx(cfg.optim.lr * 0.4)
