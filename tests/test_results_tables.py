"""`caraml result`: workload tables from real smoke runs and hand-written records, golden output, bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import caraml, cli, records_in
from handmade import populate

GOLDEN = Path(__file__).parent / "golden"


def golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("CARAML_REGOLD"):  # regenerate after an intended change, then review the diff
        path.write_text(text)
    assert text == path.read_text(), f"output differs from {path}"


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    results = tmp_path_factory.mktemp("campaign") / "results"
    populate(results)
    return results


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> Path:
    """Two real smoke runs of one configuration: they must collapse into one row."""
    results = tmp_path_factory.mktemp("smoke") / "results"
    for _ in range(2):
        caraml("run", "image_classification", "--preset", "smoke", "measure_steps=2", "image_size=32", "--results",
               results, check=0)
    return results


@pytest.mark.subprocess  # two real `caraml run`s, and `caraml result` end to end
def test_smoke_repeats_collapse_into_one_row_with_median_and_spread(smoke):
    recs = records_in(smoke)
    assert len(recs) == 2 and recs[0]["id"] == recs[1]["id"]
    rows = json.loads(cli("result", "--results", smoke, "--format", "rows-json", check=0).stdout)
    assert len(rows) == 1
    row = rows[0]
    values = sorted(r["metrics"]["throughput"]["value"] for r in recs)
    assert row["runs"] == 2 and sorted(row["run_ids"]) == sorted(r["run_id"] for r in recs)
    assert row["throughput"] == pytest.approx(sum(values) / 2)  # the median of two
    assert row["spread"] == pytest.approx((values[1] - values[0]) / (sum(values) / 2))
    assert (row["system"], row["model"], row["batch_size"], row["global_batch_size"], row["status"]) == (
        "CPU", "resnet18", 16, 16, "ok")
    assert row["energy_wh"] is None and row["units_per_wh"] is None  # no monitor on this CPU run: absent, not 0
    text = caraml("result", "--results", smoke, check=0).stdout
    for header in ("System", "GlobalBatchSize", "BatchSize/Device", "Images/s", "Energy Wh", "Images/Wh", "Status"):
        assert header in text


def test_golden_tables_of_every_workload(campaign):
    golden("result.md", cli("result", "--results", campaign, "--format", "markdown", check=0).stdout)
    golden("result-llm.csv", cli("result", "--results", campaign, "--workload", "llm_training", "--format", "csv",
                                 check=0).stdout)
    text = cli("result", "--results", campaign, "--workload", "fno", check=0).stdout  # rich's drawing: no golden
    assert text.splitlines()[0].strip() == "fno"
    for cell in ("Timesteps/s", "TrainTimesteps/second", "PeakMemory GiB", "Energy/GPU (Wh)", "3,757.0",
                 "max-autotune"):
        assert cell in text


def test_derived_columns(campaign):
    rows = json.loads(cli("result", "--results", campaign, "--format", "rows-json", check=0).stdout)
    llm = {r["devices"]: r for r in rows if r["workload"] == "llm_training" and r["system"] == "H100"}
    assert (llm[8]["tp"], llm[8]["pp"], llm[8]["dp"]) == (2, 1, 4)
    assert llm[4]["time_per_iteration_s"] == pytest.approx(256 * 2048 / 400_000)
    fno = [r for r in rows if r["workload"] == "fno" and r["system"] == "A100"][0]
    assert fno["energy_per_device_wh"] == 1.5 and fno["train_throughput"] == 1950.0
    assert fno["peak_memory_gib"] == pytest.approx(3.0) and fno["precision"] == "fp16"
    assert fno["input_shape"] == "[20,4,256,64]" and fno["caraml_timesteps_per_s"] == pytest.approx(2145.0)
    h100 = [r for r in rows if r["workload"] == "image_classification" and r["system"] == "H100"
            and r["devices"] == 1 and r["batch_size"] == 64 and r["precision"] == "bf16"][0]
    assert h100["runs"] == 3 and h100["throughput"] == 2500.0 and h100["units_per_wh"] == 950.0
    assert h100["spread"] == pytest.approx(200 / 2500) and h100["mfu"] == pytest.approx(0.31)
    oom = [r for r in rows if r["workload"] == "image_classification" and r["batch_size"] == 256
           and r["system"] == "A100"][0]
    assert oom["status"] == "oom" and oom["throughput"] is None


def test_where_and_columns(campaign):
    out = cli("result", "--results", campaign, "--workload", "image_classification", "--where", "system=H100",
              "--where", "BatchSize/Device=64", "--columns", "system,devices,throughput", "--columns", "runs",
              "--format", "csv", check=0).stdout
    assert out.splitlines() == ["System,Devices,Images/s,Runs", "H100,1,2500.0,3", "H100,1,1000.0,1",
                                "H100,4,9600.0,1", "H100,8,18000.0,1"]
    failed = cli("result", "--results", campaign, "--where", "status=oom", "--format", "rows-json", check=0).stdout
    assert [r["system"] for r in json.loads(failed)] == ["A100"]
    # a column of one workload only: the others' tables simply leave it out
    both = cli("result", "--results", campaign, "--columns", "system,tp", "--format", "csv", check=0).stdout
    assert "# llm_training\nSystem,TensorParallel\n" in both and "# fno\nSystem\n" in both


@pytest.mark.parametrize("args, says", [
    (("--where", "system=Z80"), "no runs in"),
    (("--where", "colour=red"), "unknown key 'colour'"),
    (("--where", "system"), "not key=value"),
    (("--columns", "system,bogus"), "unknown column 'bogus'"),
    (("--workload", "nbody"), "no records of workload 'nbody'"),
])
def test_bad_input_is_one_line_exit_2(campaign, args, says):
    proc = cli("result", "--results", campaign, *args, check=2)
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_empty_or_missing_results_folder(tmp_path):
    (tmp_path / "empty" / "runs").mkdir(parents=True)
    assert "no run records" in cli("result", "--results", tmp_path / "empty", check=2).stderr
    assert "does not exist" in cli("result", "--results", tmp_path / "nowhere", check=2).stderr


def test_corrupt_and_half_written_records_are_named_and_skipped(tmp_path):
    results = tmp_path / "results"
    populate(results, with_power=False)
    runs = results / "runs"
    good = sorted(runs.glob("*.json"))[0]
    (runs / "half.json").write_text(good.read_text()[:200])
    (runs / "notschema.json").write_text(json.dumps({"workload": "fno", "status": "ok"}))
    proc = cli("result", "--results", results, "--format", "csv", check=0)
    assert "half.json" in proc.stderr and "notschema.json" in proc.stderr
    assert "2,000.0" not in proc.stdout and "RBC2D" in proc.stdout and "800M" in proc.stdout
