"""The epoch loop (caraml.kit.epochs.run_epochs) on a fake device and clock: each step queues device work that
only a synchronisation puts on the clock, so an epoch's train, validation and whole time are exact numbers, and
a time read before the device was synchronised, or across the wrong boundary, shows."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from caraml.kit import epochs as epochs_mod

TRAIN_STEPS, VAL_STEPS = 3, 2
TRAIN_S, VAL_S, END_S = 1.0, 10.0, 100.0  # device seconds a training step, a validation step, the end of an epoch


class FakeDevice:
    """Work is queued (asynchronous, as CUDA's) and reaches the clock when `sync()` waits for it."""

    def __init__(self):
        self.now, self.queued = 0.0, 0.0
        self.steps: list[tuple[str, int]] = []

    def run(self, seconds: float) -> None:
        self.queued += seconds

    def sync(self) -> None:
        self.now += self.queued
        self.queued = 0.0

    def train(self, epoch: int):
        for _ in range(TRAIN_STEPS):
            self.run(TRAIN_S)
            self.steps.append(("train", epoch))
            yield

    def validate(self, epoch: int):
        for _ in range(VAL_STEPS):
            self.run(VAL_S)
            self.steps.append(("val", epoch))
            yield

    def end_of_epoch(self, epoch: int) -> None:
        self.run(END_S)


@pytest.fixture
def device(monkeypatch) -> FakeDevice:
    d = FakeDevice()
    monkeypatch.setattr(epochs_mod, "time", SimpleNamespace(perf_counter=lambda: d.now))
    return d


def stop_at(call: int):
    """should_stop that says stop at its `call`-th question; `asked` counts the questions."""
    asked = []

    def should_stop() -> bool:
        asked.append(1)
        return len(asked) >= call

    return should_stop, asked


def test_each_epoch_times_training_validation_and_the_whole_apart(device):
    should_stop, asked = stop_at(10**9)
    times = epochs_mod.run_epochs(2, device.train, device.validate, device.sync, should_stop, device.end_of_epoch)
    assert times.train_s == [TRAIN_STEPS * TRAIN_S] * 2  # validation is not training time
    assert times.val_s == [VAL_STEPS * VAL_S] * 2
    assert times.epoch_s == [TRAIN_STEPS * TRAIN_S + VAL_STEPS * VAL_S + END_S] * 2  # end_of_epoch waited for
    assert times.epochs == 2 and not times.stopped
    assert len(asked) == 2 * (TRAIN_STEPS + VAL_STEPS)  # once per step
    assert device.steps == [("train", 0)] * 3 + [("val", 0)] * 2 + [("train", 1)] * 3 + [("val", 1)] * 2


def test_without_an_end_of_epoch_the_epoch_is_training_and_validation(device):
    times = epochs_mod.run_epochs(1, device.train, device.validate, device.sync, lambda: False)
    assert times.epoch_s == [TRAIN_STEPS * TRAIN_S + VAL_STEPS * VAL_S]


@pytest.mark.parametrize("call, complete, steps_run", [
    (1, 0, 1),  # the first training step of the first epoch
    (TRAIN_STEPS + 1, 0, TRAIN_STEPS + 1),  # the first validation step
    (TRAIN_STEPS + VAL_STEPS + 2, 1, TRAIN_STEPS + VAL_STEPS + 2),  # in the second epoch's training
])
def test_a_stop_ends_the_loop_at_that_step_keeping_the_complete_epochs(device, call, complete, steps_run):
    should_stop, asked = stop_at(call)
    times = epochs_mod.run_epochs(3, device.train, device.validate, device.sync, should_stop, device.end_of_epoch)
    assert times.stopped and times.epochs == complete
    assert len(times.val_s) == len(times.epoch_s) == complete
    assert len(asked) == call and len(device.steps) == steps_run  # no step after the one that was told to stop
