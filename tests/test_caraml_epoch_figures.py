"""CARAML's epoch figures of FNO and image classification, each pinned where a changed formula would still pass
looser tests: Timesteps/s over all counted epochs, TrainTimesteps/s over training time only, images/s as
the mean over epochs. Hand-chosen epoch times that are not all alike, so mean and median, train and train +
validation, one epoch and several, give different numbers. In process, no training.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from caraml.kit.epochs import EpochTimes


class OneRank:
    rank, world_size = 0, 1

    def all_reduce(self, value, op="sum"):
        return value


class TwoRanks:
    """Two ranks: the other one's times are 1.5x this one's, its sample counts equal."""

    rank, world_size = 0, 2

    def all_reduce(self, value, op="sum"):
        return 1.5 * value if op == "max" else 2 * value


def fno_figures(times: EpochTimes, n_train: int, n_val: int, dist=None) -> dict:
    """`n_train`, `n_val`: the data set's samples per epoch, all ranks' (CARAML's count)."""
    from caraml.workloads.fno.bench import FNOBench

    stub = SimpleNamespace(dist=dist or OneRank(), data=SimpleNamespace(n_train=n_train, n_val=n_val, batch=10),
                           flops={"per_sample": 1.0})
    state = {"train_loss": 0.5, "val_loss": 0.6, "batches": [1] * times.epochs, "memory": None}
    return FNOBench._epoch_figures(stub, times, state)


def test_fno_timesteps_per_s_count_every_epoch_after_the_first():
    # epochs 2..4 counted: train 2 + 3 + 5 = 10 s, validation 1 + 1 + 2 = 4 s
    times = EpochTimes(train_s=[9.0, 2.0, 3.0, 5.0], val_s=[4.0, 1.0, 1.0, 2.0])
    out = fno_figures(times, n_train=100, n_val=40)
    assert out["counted_epochs"] == 3 and out["first_epoch_left_out"] is True
    assert out["caraml_timesteps_per_s"] == pytest.approx(3 * (100 + 40) / 14.0)
    assert out["train_timesteps_per_s"] == pytest.approx(3 * 100 / 10.0)


def test_fno_train_timesteps_per_s_leave_validation_time_out():
    times = EpochTimes(train_s=[1.0, 4.0], val_s=[1.0, 4.0])  # validation as long as training
    out = fno_figures(times, n_train=80, n_val=20)
    assert out["train_timesteps_per_s"] == pytest.approx(80 / 4.0)
    assert out["caraml_timesteps_per_s"] == pytest.approx(100 / 8.0)


def test_fno_figures_over_ranks_use_the_slowest_time_and_all_samples():
    times = EpochTimes(train_s=[9.0, 2.0, 3.0], val_s=[4.0, 1.0, 1.0])
    out = fno_figures(times, n_train=200, n_val=80, dist=TwoRanks())
    assert out["train_samples_per_epoch"] == 200 and out["val_samples_per_epoch"] == 80
    assert out["train_timesteps_per_s"] == pytest.approx(2 * 200 / (1.5 * 5.0))
    assert out["caraml_timesteps_per_s"] == pytest.approx(2 * 280 / (1.5 * 7.0))


def test_fno_one_epoch_is_counted_itself():
    out = fno_figures(EpochTimes(train_s=[2.0], val_s=[0.5]), n_train=50, n_val=10)
    assert out["counted_epochs"] == 1 and out["first_epoch_left_out"] is False
    assert out["caraml_timesteps_per_s"] == pytest.approx(60 / 2.5)
    assert out["train_timesteps_per_s"] == pytest.approx(50 / 2.0)


def ic_results(epoch_times: list[float], dataset_size: int = 1000) -> dict:
    from caraml.workloads.image_classification.epochs import EpochRunner

    runner = object.__new__(EpochRunner)
    runner.cfg = SimpleNamespace(dataset_size=dataset_size, epochs=len(epoch_times), batch_size=10, workers=0)
    runner.bench = SimpleNamespace(optimizer=SimpleNamespace(param_groups=[{"lr": 0.1}]))
    runner.epoch_times, runner.warmup_times = list(epoch_times), [9.0]
    runner.sizes, runner.setup_s = (900, 100), 0.1
    runner.last_train_loss = runner.last_val_loss = None
    runner.stopped_in = None
    return runner.results()


def test_ic_caraml_images_per_s_is_the_mean_over_epochs():
    out = ic_results([1.0, 2.0, 4.0])  # 1000, 500 and 250 images/s: mean 583.3, median 500
    assert out["caraml_epochs"]["images_per_s"] == pytest.approx([1000.0, 500.0, 250.0])
    assert out["caraml_images_per_s"]["value"] == pytest.approx(1750.0 / 3)
    assert out["caraml_epochs"]["epochs"] == 3 and out["caraml_epochs"]["completed"] is True


def test_ic_caraml_images_per_s_is_not_all_images_over_all_time():
    out = ic_results([1.0, 4.0], dataset_size=2000)  # 2000 and 500 images/s: mean 1250, 4000 images / 5 s = 800
    assert out["caraml_images_per_s"]["value"] == pytest.approx(1250.0)


class Counter:
    def __init__(self):
        self.calls = 0

    def step(self):
        self.calls += 1


def test_ic_warmup_epochs_are_kept_apart_and_do_not_step_the_learning_rate():
    """Two warm-up and three measured epochs: the warm-up ones are not in the figure, StepLR steps 3 times."""
    from caraml.workloads.image_classification.epochs import EpochRunner

    runner = object.__new__(EpochRunner)
    runner.cfg = SimpleNamespace(warmup_epochs=2, epochs=3, dataset_size=100, batch_size=10, workers=0)
    runner.bench = SimpleNamespace(device=SimpleNamespace(type="cpu"), model=SimpleNamespace(train=lambda: None),
                                   optimizer=SimpleNamespace(param_groups=[{"lr": 0.1}]))
    runner.scheduler = Counter()
    runner.epoch_times, runner.warmup_times, runner.stopped_in, runner._at = [], [], None, None
    runner.sizes, runner.setup_s = (90, 10), 0.0
    runner.last_train_loss = runner.last_val_loss = None
    seen = []
    runner._train_steps = lambda epoch: (seen.append(epoch) for _ in range(1))  # one step per part, instantly
    runner._val_steps = lambda epoch: iter([None])
    runner.run(lambda: False)
    assert seen == [0, 1, 2, 3, 4]
    assert len(runner.warmup_times) == 2 and len(runner.epoch_times) == 3
    assert runner.scheduler.calls == 3
    assert [runner._number(e) for e in range(5)] == [(True, 0), (True, 1), (False, 1), (False, 2), (False, 3)]
    out = runner.results()["caraml_epochs"]
    assert out["epochs"] == 3 and out["warmup_epochs"] == 2 and out["completed"] is True


def test_fno_record_carries_each_epoch_figure_under_its_own_name():
    """A smoke FNO's three epochs in this process: the record's TrainTimesteps/s and Timesteps/s are the epoch
    figures, each from its own times (epochs 2 and 3), not swapped."""
    import torch

    from caraml.runner import RunSpec, build_bench

    torch.manual_seed(0)
    bench = build_bench(RunSpec("fno", {"epochs": 3}, preset="smoke-RBC2D"), device="cpu")
    try:
        bench.run_extra(lambda: False)
        m = bench.details()
    finally:
        bench.close()
    e = m["epochs"]
    n_train, n_val = e["train_samples_per_epoch"], e["val_samples_per_epoch"]
    assert e["counted_epochs"] == 2 and n_train > 0 and n_val > 0
    # the smoke data are whole batches: every sample of each set is trained or validated once per epoch
    assert (n_train, n_val) == (m["data"]["train_samples"], m["data"]["val_samples"]) and n_train != n_val
    train_s, val_s = sum(e["train_time_s"][1:]), sum(e["val_time_s"][1:])
    assert m["train_throughput"] == {"value": pytest.approx(2 * n_train / train_s), "unit": "timesteps/s"}
    assert m["caraml_timesteps_per_s"] == pytest.approx(2 * (n_train + n_val) / (train_s + val_s))
    assert m["train_throughput"]["value"] != pytest.approx(m["caraml_timesteps_per_s"])
    assert m["caraml_spread"]["n"] == 2 and m["caraml_spread"] == e["spread"]
