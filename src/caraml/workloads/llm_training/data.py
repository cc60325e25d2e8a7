"""Token batches: each data-parallel replica gets its own slice of the same global batch.

Sample j of the global batch of iteration i is the same sample whatever the layout, so a run on
dp x tp x pp processes trains on exactly the numbers a single process trains on (in a different order
of summation). Replica r takes samples [r*n, (r+1)*n) of each global batch, n = micro x accumulation.
"""

from __future__ import annotations

import os

import torch

from caraml.errors import BadInput
from caraml.workloads.llm_training.config import DataConfig, TrainingConfig

SYNTHETIC_BATCHES = 2  # distinct global batches, alternated (as image_classification's synthetic data)
ROWS_PER_DRAW = 256  # the random tokens are drawn in chunks of global rows, the same chunks in every layout


class SyntheticTokens:
    """Random tokens made on the device from a seeded generator: two global batches, only this replica's rows kept."""

    def __init__(self, cfg: TrainingConfig, global_batch: int, dp_rank: int, device: torch.device, seed: int):
        n = cfg.batch.replica_rows  # rows of this replica
        vocab, seq = cfg.model.vocab_size, cfg.model.seq_length
        lo, hi = dp_rank * n, (dp_rank + 1) * n
        gen = torch.Generator(device=device).manual_seed(seed + 7919)
        self.batches = []
        for _ in range(SYNTHETIC_BATCHES):
            kept = []
            for start in range(0, global_batch, ROWS_PER_DRAW):
                rows = min(ROWS_PER_DRAW, global_batch - start)
                draw = torch.randint(0, vocab, (rows, seq + 1), device=device, generator=gen)
                a, b = max(lo, start), min(hi, start + rows)
                if a < b:
                    kept.append(draw[a - start:b - start])
            tokens = torch.cat(kept)
            self.batches.append((tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()))
        self.iteration = 0

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        batch = self.batches[self.iteration % len(self.batches)]
        self.iteration += 1
        return batch


class IndexedTokens:
    """Samples of a Megatron indexed dataset (.bin/.idx) through caraml.data.megatron.GPTSamples."""

    def __init__(self, cfg: TrainingConfig, prefix: str, global_batch: int, dp_rank: int, device: torch.device,
                 seed: int):
        from caraml.data.megatron import GPTSamples

        seq = cfg.model.seq_length
        self.samples = GPTSamples(prefix, seq, seed)
        if len(self.samples) == 0:
            raise BadInput(f"data=oscar: {prefix} holds no sample of {seq + 1} tokens")
        self.rows = cfg.batch.replica_rows
        self.global_batch, self.dp_rank, self.device = global_batch, dp_rank, device
        self.iteration = 0

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        import numpy as np

        first = self.iteration * self.global_batch + self.dp_rank * self.rows
        rows = [np.asarray(self.samples[(first + j) % len(self.samples)], dtype=np.int64) for j in range(self.rows)]
        tokens = torch.from_numpy(np.stack(rows))
        if self.device.type == "cuda":
            tokens = tokens.pin_memory().to(self.device, non_blocking=True)
        self.iteration += 1
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def check_indexed(data: DataConfig, data_root: str | None, vocab_size: int | None = None) -> None:
    """Before a run starts: the .bin/.idx pair exists and agrees, and (given vocab_size) every token id is one
    of the vocabulary's, 0 .. vocab_size-1 (see check_token_ids)."""
    from caraml.data.megatron import IndexedDataset

    prefix = dataset_prefix(data, data_root)
    if not os.path.isfile(prefix + ".bin"):
        raise BadInput(f"data=oscar: {prefix}.bin does not exist beside its .idx; give data_path=PREFIX of a "
                       ".bin/.idx pair (e.g. made by `caraml data prepare`)")
    if vocab_size is not None:
        check_token_ids(IndexedDataset(prefix), vocab_size)


def check_token_ids(dataset, vocab_size: int) -> None:
    """Every token id of the dataset lies in [0, vocab_size): integer tokens (a float dtype holds no ids), none
    negative, the largest below vocab_size. The dtype alone settles it where it can (uint16 ids under a vocabulary
    of 65,536 or more); else a scan of the memory-mapped .bin in chunks."""
    import numpy as np

    from caraml.data.megatron import bin_path, token_id_range

    dtype = dataset.index.dtype
    where = bin_path(dataset.prefix)
    if dtype.kind not in "iu":
        raise BadInput(f"data=oscar: {dataset.index.path} stores tokens as {dtype.name}, which are not token ids; "
                       f"prepare the dataset with integer ids (uint16, or int32 for vocabularies of 65,500 or more)")
    if dtype.kind == "u" and np.iinfo(dtype).max < vocab_size:
        return  # every value the dtype can hold is an id of the vocabulary
    span = token_id_range(dataset)
    if span is None:
        return
    lo, hi = span
    if lo < 0:
        raise BadInput(f"data=oscar: {where} holds token id {lo} ({dtype.name} tokens): ids must be 0 or more; "
                       f"prepare the dataset again from its text")
    if hi >= vocab_size:
        raise BadInput(f"data=oscar: the largest token id {hi} in {where} is outside vocab_size={vocab_size}; "
                       f"use vocab_size >= {hi + 1}")


def dataset_prefix(data: DataConfig, data_root: str | None) -> str:
    """data_path (a prefix, or its .bin/.idx), looked up under CARAML_DATA when relative; CARAML's
    oscar_text_document there by default."""
    from caraml.data.megatron import locate

    return str(locate(data.data_path or "oscar_text_document", data_root))


def make(cfg: TrainingConfig, global_batch: int, dp_rank: int, device: torch.device, seed: int,
         data_root: str | None):
    """This replica's token batches of the data source `cfg.dataset` names."""
    if cfg.dataset.data == "synthetic":
        return SyntheticTokens(cfg, global_batch, dp_rank, device, seed)
    return IndexedTokens(cfg, dataset_prefix(cfg.dataset, data_root), global_batch, dp_rank, device, seed)
