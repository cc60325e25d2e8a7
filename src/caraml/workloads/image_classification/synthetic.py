"""Synthetic host data, in a module of its own: it imports torch at the top, so the declaration (imported to
list and check parameters) stays light, and the dataset class stays picklable for DataLoader workers, which a
fork server starts (caraml.kit.loader_workers)."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from caraml.kit.loader_workers import worker_options


class SyntheticImages(IterableDataset):
    """Infinite batches of random uint8 images and labels made on the host (like FakeData, per batch)."""

    def __init__(self, batch_size: int, image_size: int, num_classes: int, seed: int):
        self.shape = (batch_size, 3, image_size, image_size)
        self.num_classes = num_classes
        self.seed = seed

    def __iter__(self):
        info = get_worker_info()
        gen = torch.Generator().manual_seed(self.seed * 1000 + (info.id if info else 0))
        while True:
            yield (torch.randint(0, 256, self.shape, dtype=torch.uint8, generator=gen),
                   torch.randint(0, self.num_classes, (self.shape[0],), generator=gen))


def loader(batch_size: int, image_size: int, num_classes: int, seed: int, workers: int, pin: bool) -> DataLoader:
    """The steady state's host data: SyntheticImages through a DataLoader with `workers` processes."""
    return DataLoader(SyntheticImages(batch_size, image_size, num_classes, seed), batch_size=None, pin_memory=pin,
                      prefetch_factor=4 if workers > 0 else None, **worker_options(workers, __name__))
