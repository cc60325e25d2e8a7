"""CARAML's epoch measurement of image classification (its image_classification_torch.py), on a built Bench.

FakeData images (made and converted per sample by the DataLoader workers, as torchvision does), split into
train and validation sets, a DistributedSampler per set, pinned memory, persistent workers. Each epoch trains
over the train set, steps the learning rate and validates; its images/s is the whole data set's size over the
epoch's wall time on rank 0. Warm-up epochs come first and are not counted; the figure is the mean over the
measured epochs. The loop is the kit's (caraml.kit.epochs.run_epochs), run as the harness's extra phase: a stop
is asked for at every training and validation step, and a stopped run keeps the epochs it completed.
"""

from __future__ import annotations

import statistics
import time

import torch
from torch.utils.data import DataLoader, random_split
from torch.utils.data.distributed import DistributedSampler

from caraml.kit.epochs import run_epochs
from caraml.kit.loader_workers import worker_options
from caraml.measure.timing import figure_spread
from caraml.workloads.image_classification.config import ClassificationConfig
from caraml.workloads.image_classification.model import logits

CONVENTION = ("caraml-epochs: images/s of an epoch = dataset_size (train + validation images, all ranks) / that "
              "epoch's wall time on rank 0 (training, learning-rate step, validation; device synchronised), mean "
              "over the measured epochs after warmup_epochs warm-up epochs, as CARAML's image_classification_torch.py")
FAKE_CLASSES = 10  # torchvision FakeData's default, which CARAML uses (the model keeps num_classes outputs)


def split_sizes(dataset_size: int, val_split: float) -> tuple[int, int]:
    """(train, validation) images; CARAML holds out a tenth: 10000 -> 9000 / 1000."""
    val = int(dataset_size * val_split + 1e-9)
    return dataset_size - val, val


def fake_data(cfg: ClassificationConfig, seed: int):
    """The train and validation sets: FakeData of 3 x image_size^2 float images in [0, 1] (ToTensor)."""
    import torchvision
    from torchvision import transforms

    data = torchvision.datasets.FakeData(size=cfg.dataset_size, image_size=(3, cfg.image_size, cfg.image_size),
                                         num_classes=min(FAKE_CLASSES, cfg.num_classes),
                                         transform=transforms.ToTensor())
    # One split for all ranks (CARAML's differs per rank, by its per-rank seed; the images are alike).
    return random_split(data, list(split_sizes(cfg.dataset_size, cfg.val_split)),
                        generator=torch.Generator().manual_seed(seed))


def loader(data, cfg: ClassificationConfig, dist, pin: bool, shuffle: bool) -> DataLoader:
    sampler = DistributedSampler(data, num_replicas=dist.world_size, rank=dist.rank) if dist.world_size > 1 else None
    return DataLoader(data, batch_size=cfg.batch_size, shuffle=shuffle and sampler is None, sampler=sampler,
                      pin_memory=pin, **worker_options(cfg.workers, "torchvision.datasets"))


def on_device(batches, device, memory_format):
    """The loader's batches on the device. On a GPU the next batch is copied on a side stream while this one
    trains (the prefetcher of CARAML's script)."""
    if device.type != "cuda":
        for x, y in batches:
            yield x.to(device).contiguous(memory_format=memory_format), y.to(device)
        return
    stream = torch.cuda.Stream(device)
    source = iter(batches)

    def load():
        try:
            x, y = next(source)
        except StopIteration:
            return None
        with torch.cuda.stream(stream):
            return (x.to(device, non_blocking=True).contiguous(memory_format=memory_format),
                    y.to(device, non_blocking=True))

    ahead = load()
    while ahead is not None:
        current = torch.cuda.current_stream(device)
        current.wait_stream(stream)
        x, y = ahead
        x.record_stream(current)
        y.record_stream(current)
        ahead = load()
        yield x, y


def mean_over_ranks(value: torch.Tensor, dist) -> float:
    """A loss averaged over all ranks, read on the host (CARAML reads every step's loss so)."""
    return dist.all_reduce(float(value.detach()), "sum") / dist.world_size


class EpochRunner:
    """CARAML's epochs on a ClassificationBench's model, optimizer, scaler and train step."""

    def __init__(self, bench):
        cfg = bench.cfg
        self.bench, self.cfg = bench, cfg
        start = time.perf_counter()
        train, val = fake_data(cfg, bench.seed)
        pin = bench.device.type == "cuda"
        self.train = loader(train, cfg, bench.dist, pin, shuffle=True)
        self.val = loader(val, cfg, bench.dist, pin, shuffle=False)
        step, gamma = cfg.lr_step_epochs, cfg.lr_gamma
        self.scheduler = torch.optim.lr_scheduler.StepLR(bench.optimizer, step, gamma) if step > 0 else None
        self.input_format = bench.input_format
        self.sizes = (len(train), len(val))
        # every step the epochs ask should_stop() for: training and validation batches of every epoch
        self.total_steps = (cfg.warmup_epochs + cfg.epochs) * (len(self.train) + len(self.val))
        self.setup_s = time.perf_counter() - start
        self.epoch_times: list[float] = []
        self.warmup_times: list[float] = []
        self.last_train_loss = self.last_val_loss = None
        self.stopped_in = None  # where a stop came: the epoch, its part and the steps of that part done
        self._at = None

    def _sync(self):
        if self.bench.device.type == "cuda":
            torch.cuda.synchronize(self.bench.device)

    def _number(self, epoch: int) -> tuple[bool, int]:
        """(warm-up?, CARAML's number) of the loop's epoch index: warm-up epochs 0.., then measured ones 1.."""
        warmup = epoch < self.cfg.warmup_epochs
        return warmup, epoch if warmup else epoch - self.cfg.warmup_epochs + 1

    def _train_steps(self, epoch: int):
        b = self.bench
        _, number = self._number(epoch)
        if isinstance(self.train.sampler, DistributedSampler):
            self.train.sampler.set_epoch(number)
        b.model.train()
        self._at = [epoch, "train", 0]
        for x, y in on_device(self.train, b.device, self.input_format):
            self.last_train_loss = mean_over_ranks(b._train(x, y), b.dist)
            self._at[2] += 1
            yield

    def _val_steps(self, epoch: int):
        b = self.bench
        b.model.eval()
        self._at = [epoch, "validation", 0]
        total, batches = torch.zeros((), device=b.device), 0
        for x, y in on_device(self.val, b.device, self.input_format):
            with torch.no_grad(), b.autocast():  # per step: a stop leaves no grad mode behind
                total += b.criterion(logits(b.model(x)), y).float()
            batches += 1
            self._at[2] += 1
            yield
        b.model.train()
        self.last_val_loss = mean_over_ranks(total / max(1, batches), b.dist)

    def _end_of_epoch(self, epoch: int) -> None:
        # CARAML steps StepLR after training, in measured epochs only (validation does not read the lr).
        if not self._number(epoch)[0] and self.scheduler is not None:
            self.scheduler.step()

    def run(self, should_stop) -> None:
        cfg = self.cfg
        try:
            times = run_epochs(cfg.warmup_epochs + cfg.epochs, self._train_steps, self._val_steps, self._sync,
                               should_stop, self._end_of_epoch)
        finally:
            self.bench.model.train()
        for epoch, (train_s, val_s) in enumerate(zip(times.train_s, times.val_s)):
            (self.warmup_times if self._number(epoch)[0] else self.epoch_times).append(train_s + val_s)
        if times.stopped and self._at is not None:
            epoch, part, steps = self._at
            warmup, number = self._number(epoch)
            self.stopped_in = {"epoch": number, "warmup": warmup, "part": part, "steps_done": steps,
                               "steps": len(self.train if part == "train" else self.val)}

    def close(self) -> None:
        self.train = self.val = None  # stops the persistent workers

    def results(self) -> dict:
        """The record's metrics: caraml_images_per_s (with its convention), its spread and the epochs behind it."""
        cfg = self.cfg
        rates = [cfg.dataset_size / t for t in self.epoch_times if t > 0]
        value = statistics.fmean(rates) if rates else None
        done = len(self.epoch_times)
        return {
            "caraml_images_per_s": {"value": value, "unit": "images/s", "convention": CONVENTION},
            "caraml_spread": figure_spread(rates, "epochs", "images/s"),
            "caraml_epochs": {
                "epochs": done, "epochs_asked": cfg.epochs, "completed": done == cfg.epochs,
                "warmup_epochs": len(self.warmup_times), "dataset_size": cfg.dataset_size,
                "train_images": self.sizes[0], "val_images": self.sizes[1], "batch_size": cfg.batch_size,
                "workers": cfg.workers, "epoch_time_s": self.epoch_times, "images_per_s": rates,
                "warmup_time_s": self.warmup_times, "data_setup_s": self.setup_s,
                "last_lr": self.bench.optimizer.param_groups[0]["lr"],
                "train_loss": self.last_train_loss,  # a NaN is stored as null (strict JSON)
                "val_loss": self.last_val_loss,
                # None: not stopped; else the epoch (CARAML's number, warm-up or measured) and the step a stop ended
                "stopped_in": self.stopped_in,
                "timed_on": "each rank; the record is rank 0's",
            },
            "epochs": done,
        }
