"""The spread of CARAML's figures: each one is a mean over epochs or log intervals, and the record keeps how much
those differed (n, lowest, highest, coefficient of variation) in `metrics.caraml_spread`, beside the figure. In
process, hand-chosen times, no training.
"""

from __future__ import annotations

import json
import statistics
from types import SimpleNamespace

import pytest
from test_caraml_epoch_figures import fno_figures, ic_results

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


# tables and the report --------------------------------------------------------------------------------------------
def _ic(images_per_s: float, epochs: list[float], started: str = "10", system: str = "H100") -> dict:
    """An image-classification record with CARAML's figure: the mean of its epochs' images/s."""
    from handmade import image

    return image(system, 64, "bf16", 2500.0, started=f"2026-12-01T{started}:00:00.000+00:00", extra_metrics={
        "caraml_images_per_s": {"value": images_per_s, "unit": "images/s", "convention": "caraml-epochs"},
        "caraml_spread": figure_spread(epochs, "epochs", "images/s")})


def test_a_caraml_figure_whose_epochs_varied_is_flagged(tmp_path):
    from conftest import cli
    from handmade import write

    results = tmp_path / "r"
    write(results, _ic(1500.0, [1000.0, 1500.0, 2000.0]))  # cv 33 %
    write(results, _ic(1500.0, [1490.0, 1500.0, 1510.0], system="A100"))  # cv 0.7 %
    text = cli("result", "--results", results, check=0).stdout
    assert "33.3% !" in text and "0.7% !" not in text
    assert "! CaramlCV above 10%: CARAML's figure is a mean over epochs or log intervals" in text
    rows = json.loads(cli("result", "--results", results, "--format", "rows-json", check=0).stdout)
    assert sorted(r["caraml_cv"] for r in rows) == pytest.approx([0.00667, 1 / 3], rel=1e-2)


def test_a_steady_caraml_figure_has_no_flag(tmp_path):
    from conftest import cli
    from handmade import write

    results = tmp_path / "r"
    write(results, _ic(1500.0, [1490.0, 1500.0, 1510.0]))
    assert "CaramlCV above" not in cli("result", "--results", results, check=0).stdout


def test_repeats_show_the_median_caraml_figure_and_its_spread(tmp_path):
    from conftest import cli
    from handmade import write

    results = tmp_path / "r"
    for started, value in (("10", 1000.0), ("11", 1400.0), ("12", 1200.0)):  # median 1200, (1400-1000)/1200
        write(results, _ic(value, [value] * 3, started))
    [row] = json.loads(cli("result", "--results", results, "--format", "rows-json", check=0).stdout)
    assert row["runs"] == 3 and row["caraml_images_per_s"] == 1200.0
    assert row["caraml_repeat_spread"] == pytest.approx(400 / 1200)
    text = cli("result", "--results", results, check=0).stdout
    assert "33.3% !" in text and "! CaramlSpread above 10%: the repeats' CARAML figures differ" in text


def test_the_report_flags_what_the_text_table_flags(tmp_path):
    from handmade import write

    from caraml.results.report import build
    from caraml.results.select import select

    results = tmp_path / "r"
    write(results, _ic(1500.0, [1000.0, 1500.0, 2000.0]))
    html = build(select(str(results)))
    assert "33.3% !" in html and "! CaramlCV above 10%" in html
