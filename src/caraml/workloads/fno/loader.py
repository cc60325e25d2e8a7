"""CARAML's FNO data path (operator_learning's getDataLoaders): samples on the host, served by DataLoaders and
copied to the device batch by batch.

- The samples in file order split 80/20 into a training and a validation subset (CARAML: `seed: null`).
- One process: the training loader shuffles. Several: a DistributedSampler per subset (training shuffled, reseeded
  each epoch with `set_epoch`; validation not), each rank taking its share of the *global* batch.
- Pinned memory on CUDA, `workers` worker processes (CARAML: 4), kept alive between epochs, the last partial batch
  kept (drop_last off), as CARAML's loaders. The workers are started by a fork server, never forked from the rank
  (caraml.kit.loader_workers says why).
- data=file reads each sample from the HDF5 file when a worker asks for it (CARAML's datasets read lazily too);
  data=synthetic-host serves arrays generated on the host instead, through the same loaders.

CARAML's Timesteps count the subsets' lengths (all ranks' samples), so `n_train`/`n_val` here are global.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, Subset
from torch.utils.data.distributed import DistributedSampler

from caraml.errors import BadInput
from caraml.kit.loader_workers import worker_options
from caraml.workloads.fno import files
from caraml.workloads.fno.problems import TRAIN_FRACTION, Problem

CHECK_BLOCK = 16  # samples read at once by the finite check before the run


def resolve_source(data: str, data_path: str, problem: Problem, data_root: str | None) -> str:
    """data=auto as the path it takes: file where CARAML's file (or data_path) exists, else synthetic-host."""
    if data != "auto":
        return data
    try:
        found = files.resolve_path(data_path, problem, data_root).is_file()
    except BadInput:  # neither data_path nor CARAML_DATA names a place
        found = False
    return "file" if found else "synthetic-host"


class FileSamples(Dataset):
    """The first `count` samples of an HDF5 file, each read when asked for; the file is opened in the process that
    reads (a DataLoader worker), never shared across a fork."""

    def __init__(self, path: Path, problem: Problem, count: int, domain: float):
        self.path, self.problem, self.count = path, problem, count
        # the model's transforms take PIC positions in [0, 2 pi)
        self.scale = files.DOMAIN / domain if problem.position_channels and domain != files.DOMAIN else None
        self._file = None

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int):
        if self._file is None:
            self._file = files.DataFile(self.path, self.problem)
        x, y = (torch.from_numpy(a[0]) for a in self._file.rows(i, i + 1))
        if self.scale is not None:
            x[:self.problem.position_channels] *= self.scale
        return x, y

    def __getstate__(self):
        return {**self.__dict__, "_file": None}

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class HostSamples(Dataset):
    """Random samples of the problem's shapes made on the host, the same on every rank (the samplers split them)."""

    def __init__(self, problem: Problem, count: int, spatial: tuple[int, ...], seed: int):
        gen = torch.Generator().manual_seed(seed)
        self.x = torch.randn(count, problem.in_channels, *spatial, generator=gen)
        if problem.position_channels:
            self.x[:, :problem.position_channels] = files.DOMAIN * torch.rand(
                count, problem.position_channels, *spatial, generator=gen)
        self.y = torch.randn(count, problem.out_channels, *spatial, generator=gen)

    def __len__(self) -> int:
        return self.x.shape[0]

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]

    def close(self) -> None:
        pass


class LoaderData:
    """This rank's loaders over the global training and validation subsets; batches arrive on the device."""

    def __init__(self, cfg, ctx, source: str, batch: int):
        pb, world = cfg.problem_spec, ctx.world_size
        self.source, self.batch, self.device = source, batch, ctx.device
        self.path = None
        if source == "file":
            self.dataset = self._open_file(cfg, ctx)
        else:
            n = cfg.samples or 5 * batch * world  # 4 global batches train, 1 validates
            self.spatial = cfg.spatial
            self.dataset = HostSamples(pb, n, self.spatial, ctx.seed)
        n = len(self.dataset)
        self.n_train = int(TRAIN_FRACTION * n)
        self.n_val = n - self.n_train
        per_rank = self.n_train // world
        if per_rank < batch:
            where = self.path or "data=synthetic-host"
            raise BadInput(f"fno: {where} has {n} samples: {self.n_train} train, {per_rank} per device, fewer than "
                           f"the batch of {batch} per device; use a smaller batch or more samples")
        self.val_batch = max(1, min(cfg.val_batch_size or batch, self.n_val // world or 1))
        train_set = Subset(self.dataset, range(self.n_train))
        val_set = Subset(self.dataset, range(self.n_train, n))
        self.train_sampler = self.val_sampler = None
        if world > 1:
            self.train_sampler = DistributedSampler(train_set, world, ctx.rank, shuffle=True, seed=ctx.seed)
            self.val_sampler = DistributedSampler(val_set, world, ctx.rank, shuffle=False)
        self.workers = cfg.workers
        common = {**worker_options(cfg.workers, __name__), "pin_memory": ctx.device.type == "cuda"}
        gen = torch.Generator().manual_seed(ctx.seed)
        self.train_loader = DataLoader(train_set, batch_size=batch, sampler=self.train_sampler,
                                       shuffle=self.train_sampler is None, generator=gen, **common)
        self.val_loader = DataLoader(val_set, batch_size=self.val_batch, sampler=self.val_sampler, shuffle=False,
                                     **common) if self.n_val else None
        self._epoch, self._steady = 0, None

    def _open_file(self, cfg, ctx) -> Dataset:
        pb = cfg.problem_spec
        path = files.resolve_path(cfg.data_path, pb, ctx.data_root)
        with files.DataFile(path, pb) as data:  # layout, dtypes and the first sample checked here
            got = data.describe()
            count = data.samples if not cfg.samples else min(cfg.samples, data.samples)
            # every sample the run reads must be finite: each rank checks its share (a refusal reaches every rank)
            first, last = ctx.rank * count // ctx.world_size, (ctx.rank + 1) * count // ctx.world_size
            for start in range(first, last, CHECK_BLOCK):
                for name, values in zip(("inputs", "outputs"), data.rows(start, min(start + CHECK_BLOCK, last))):
                    files.check_finite(values, f"{data.where}: {name}", first=start)
        self.path, self.samples_in_file, self.synthetic_file = str(path), got["samples_in_file"], got["synthetic"]
        self.file_dtype = got.get("file_dtype")
        self.spatial = got["spatial"]
        return FileSamples(path, pb, count, got["domain"])

    # batches on the device -----------------------------------------------------------------------------
    def _to_device(self, x, y):
        blocking = self.device.type != "cuda"
        return x.to(self.device, non_blocking=not blocking), y.to(self.device, non_blocking=not blocking)

    def _batches(self, loader, sampler, epoch: int):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for x, y in loader:
            yield self._to_device(x, y)

    def train_epoch(self, epoch: int):
        """This rank's training batches of one epoch, on the device (the last one may be smaller)."""
        self._steady = None  # persistent workers serve one iterator at a time: the steady state's ends here
        return self._batches(self.train_loader, self.train_sampler, epoch)

    def val_epoch(self, epoch: int):
        self._steady = None
        return self._batches(self.val_loader, self.val_sampler, epoch) if self.val_loader is not None else iter(())

    def next_batch(self):
        """The next full training batch for the steady state: the loaders' epochs one after the other, each batch
        copied host -> device as CARAML's are; a smaller last batch is passed over (the step's units are fixed)."""
        while True:
            if self._steady is None:
                self._epoch += 1
                # seeds of its own (negative): not those of the epochs CARAML's runner numbers
                self._steady = self._batches(self.train_loader, self.train_sampler, -self._epoch)
            for x, y in self._steady:
                if x.shape[0] == self.batch:
                    return x, y
            self._steady = None

    def sample_batch(self):
        """One training batch on the device (the memory split, the compile report)."""
        xs, ys = zip(*(self.dataset[i] for i in range(min(self.batch, self.n_train))))
        self.dataset.close()  # read here, in the main process: its file handle must not reach forked workers
        return self._to_device(torch.stack(xs), torch.stack(ys))

    def describe(self) -> dict:
        out = {"source": self.source, "path_taken": "host DataLoader, batches copied to the device",
               "train_samples": self.n_train, "val_samples": self.n_val, "per": "all devices (global)",
               "batch_per_device": self.batch, "val_batch_per_device": self.val_batch, "workers": self.workers,
               "pinned_memory": self.device.type == "cuda",
               "shuffle": "DistributedSampler, training shuffled" if self.train_sampler else "training shuffled"}
        if self.path:
            out.update(path=self.path, samples_in_file=self.samples_in_file, synthetic_file=self.synthetic_file)
            if self.file_dtype:
                out["file_dtype"] = self.file_dtype
        return out

    def close(self) -> None:
        self._steady = None
        self.train_loader = self.val_loader = None
        self.dataset.close()
