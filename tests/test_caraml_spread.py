"""The spread of CARAML's figures: each one is a mean over epochs or log intervals, and the record keeps how much
those differed (n, lowest, highest, coefficient of variation) in `metrics.caraml_spread`, beside the figure. In
process, hand-chosen times, no training.
"""

from __future__ import annotations

import statistics
from types import SimpleNamespace

import pytest
from test_mutations_fno_ic import fno_figures, ic_results

from caraml.kit.epochs import EpochTimes
from caraml.measure.timing import figure_spread


def test_a_figure_spread_is_count_lowest_highest_and_cv():
    s = figure_spread([100.0, 200.0, 300.0], "epochs", "images/s")
    assert s == {"over": "epochs", "unit": "images/s", "n": 3, "min": 100.0, "max": 300.0, "cv": pytest.approx(0.5)}
    assert figure_spread([150.0], "epochs", "images/s")["cv"] is None  # one part: no spread known
    assert figure_spread([], "epochs", "images/s") is None


def test_image_classification_keeps_the_spread_of_its_epochs():
    out = ic_results([1.0, 2.0, 4.0])  # 1000, 500, 250 images/s
    s = out["caraml_spread"]
    assert (s["over"], s["n"], s["min"], s["max"]) == ("epochs", 3, 250.0, 1000.0)
    assert s["cv"] == pytest.approx(statistics.stdev([1000, 500, 250]) / statistics.fmean([1000, 500, 250]))


def test_image_classification_on_ipus_keeps_the_spread_of_its_epochs():
    from caraml.workloads.image_classification.ipu import ipu_details

    cfg = SimpleNamespace(epochs_asked=True, warmup_epochs=1, epochs=2, dataset_size=1024, batch_size=16, replicas=4,
                          grad_accumulation=4, precision="16.16", dataset_label="FakeData")
    out = ipu_details(cfg, EpochTimes(train_s=[9.0, 1.0, 2.0], val_s=[0.0] * 3))  # 1024 and 512 images/s
    assert out["caraml_spread"]["n"] == 2 and out["caraml_spread"]["min"] == pytest.approx(512.0)
    assert out["caraml_spread"]["max"] == pytest.approx(1024.0)


def test_fno_keeps_the_spread_of_its_counted_epochs():
    times = EpochTimes(train_s=[9.0, 2.0, 3.0, 5.0], val_s=[4.0, 1.0, 1.0, 2.0])  # the first left out
    s = fno_figures(times, n_train=100, n_val=40)["spread"]  # the record's metrics.caraml_spread
    assert (s["over"], s["n"]) == ("epochs", 3)
    assert (s["min"], s["max"]) == (pytest.approx(140 / 7.0), pytest.approx(140 / 3.0))


def test_the_llm_keeps_the_spread_of_its_log_intervals():
    from caraml.workloads.llm_training import caraml_log

    # intervals of 2 iterations: 1.0 s and 0.5 s per iteration (a last partial interval is not logged)
    found = caraml_log.figures([1.0, 1.0, 0.5, 0.5, 9.0], 2, global_batch=4, seq_length=100, devices=1,
                               flops_per_iteration=1e12, exit_minutes=1.0)
    s = found["spread"]
    assert (s["over"], s["n"], s["min"], s["max"]) == ("log intervals", 2, 400.0, 800.0)
    assert s["cv"] == pytest.approx(statistics.stdev([400, 800]) / 600)
