"""CARAML's epoch loop (train over the training set, then validate, each timed), stoppable at every step.

A workload gives two generators per epoch, one step per item (`train(epoch)`, `validate(epoch)`), and gets
each epoch's train and validation wall time back, the device synchronised at each boundary. The loop runs as
the harness's extra phase (`Bench.run_extra(should_stop)`), so a stop signal ends it within one step and the
run still leaves an `interrupted` record with the epochs completed so far.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable


@dataclass
class EpochTimes:
    train_s: list[float] = field(default_factory=list)
    val_s: list[float] = field(default_factory=list)
    epoch_s: list[float] = field(default_factory=list)  # the whole epoch: train, validation and end_of_epoch
    stopped: bool = False  # a stop came: the epochs listed are the complete ones

    @property
    def epochs(self) -> int:
        return len(self.train_s)


def run_epochs(epochs: int, train: Callable[[int], Iterable], validate: Callable[[int], Iterable],
               sync: Callable[[], None], should_stop: Callable[[], bool],
               end_of_epoch: Callable[[int], None] | None = None) -> EpochTimes:
    """`epochs` epochs; `should_stop()` is called once per step (equally often on every rank)."""
    times = EpochTimes()
    for epoch in range(epochs):
        sync()
        start = time.perf_counter()
        if _stopped_during(train(epoch), should_stop):
            times.stopped = True
            return times
        sync()
        middle = time.perf_counter()
        if _stopped_during(validate(epoch), should_stop):
            times.stopped = True
            return times
        sync()
        end = time.perf_counter()
        times.train_s.append(middle - start)
        times.val_s.append(end - middle)
        if end_of_epoch is not None:
            end_of_epoch(epoch)
            sync()
        times.epoch_s.append(time.perf_counter() - start)
    return times


def _stopped_during(steps: Iterable, should_stop: Callable[[], bool]) -> bool:
    for _ in steps:
        if should_stop():
            return True
    return False
