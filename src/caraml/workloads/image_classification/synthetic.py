"""Synthetic host data, in a module of its own: it imports torch at the top, so the declaration (imported to
list and check parameters) stays light, and the dataset class stays picklable for DataLoader workers started
with spawn or forkserver."""

from __future__ import annotations

import signal

import torch
from torch.utils.data import IterableDataset, get_worker_info


def ignore_stop_signals(_worker_id: int) -> None:
    """DataLoader worker_init_fn: a SIGTERM/SIGINT/SIGHUP sent to the whole process group is the main process's
    to handle (it stops between steps and closes the loader); a worker dying of it would turn a clean stop into
    a 'DataLoader worker killed' failure. Workers still end with their parent."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)


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
