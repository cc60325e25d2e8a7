"""`caraml compare`: shared configurations side by side, ratios to the baseline, the rest listed apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import caraml, cli
from handmade import populate
from test_results_tables import golden


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> Path:
    results = tmp_path_factory.mktemp("campaign") / "results"
    populate(results, with_power=False)
    return results


def compare_json(campaign, *args) -> dict:
    out = json.loads(cli("compare", "--results", campaign, *args, "--format", "json", check=0).stdout)
    return {c["workload"]: c for c in out}


def test_by_system_ratios_and_configurations_apart(campaign):
    image = compare_json(campaign, "--by", "system")["image_classification"]
    assert image["baseline"] == "A100" and image["groups"] == ["A100", "H100"]
    rows = {r["config"]["batch_size"]: r["groups"] for r in image["rows"]}
    assert sorted(rows) == [64, 128]
    assert rows[64]["H100"]["throughput"] == 2500.0 and rows[64]["H100"]["runs"] == 3  # median of 3 repeats
    assert rows[64]["H100"]["speedup"] == pytest.approx(2500 / 1500)
    assert rows[64]["H100"]["energy_ratio"] == pytest.approx(950 / 600)
    assert rows[128]["H100"]["speedup"] == pytest.approx(2800 / 1600)
    apart = {(a["config"]["batch_size"], a["config"]["precision"], a["config"]["devices"]): a["why"]
             for a in image["not_compared"]}
    assert apart == {(256, "bf16", 1): "no successful run for system=A100 (oom)",
                     (64, "fp32", 1): "no system=A100 (baseline) run",
                     (64, "bf16", 4): "no system=A100 (baseline) run",
                     (64, "bf16", 8): "no system=A100 (baseline) run"}


def test_baseline_option_inverts_ratios(campaign):
    llm = compare_json(campaign, "--by", "system", "--baseline", "h100", "--workload", "llm_training")["llm_training"]
    assert llm["baseline"] == "H100"
    (row,) = llm["rows"]
    assert row["groups"]["A100"]["speedup"] == pytest.approx(0.5)
    assert row["groups"]["A100"]["energy_ratio"] == pytest.approx(1.25e6 / 2.0e6)


def test_scaling_by_devices_parallel_efficiency(campaign):
    image = compare_json(campaign, "--by", "devices", "--workload", "image_classification")["image_classification"]
    assert image["baseline"] == 1 and image["groups"] == [1, 4, 8]
    (row,) = image["rows"]
    assert row["config"]["system"] == "H100" and "devices" not in row["config"]
    assert row["groups"]["4"]["efficiency"] == pytest.approx((9600 / 2500) / 4)
    assert row["groups"]["8"]["efficiency"] == pytest.approx((18000 / 2500) / 8)
    # every other configuration ran at one device count only, and is said so
    assert len(image["not_compared"]) == 6


def test_by_any_parameter_and_golden_text(campaign):
    out = cli("compare", "--results", campaign, "--by", "precision", "--workload", "image_classification",
              "--format", "markdown", check=0).stdout
    golden("compare-precision.md", out)
    assert "0.40x" in out  # fp32 / bf16 on H100, batch 64: 1000 / 2500
    golden("compare-system.md", cli("compare", "--results", campaign, "--by", "system", "--format", "markdown",
                                    check=0).stdout)


@pytest.mark.subprocess
def test_compare_end_to_end(campaign):
    """The command as a user runs it: the same text as in this process."""
    args = ("compare", "--results", campaign, "--by", "system", "--format", "markdown")
    assert caraml(*args, check=0).stdout == cli(*args, check=0).stdout


@pytest.mark.parametrize("args, says", [
    (("--by", "system", "--where", "system=H100"), "needs at least two groups"),
    (("--by", "colour", "--workload", "fno"), "--by colour: not a field"),
    (("--by", "system", "--baseline", "TPU"), "--baseline TPU"),
    (("--by", "system", "--where", "system=TPU"), "no runs in"),
])
def test_bad_comparisons_exit_2(campaign, args, says):
    proc = cli("compare", "--results", campaign, *args, check=2)
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
