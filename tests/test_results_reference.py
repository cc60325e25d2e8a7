"""Published references: CARAML's 2024 figures shipped as data (source, configuration, convention), `caraml compare
--reference` putting records of that configuration beside them, and the report's section.

The records here are hand-made (tests/handmade.py) with every effective parameter as a run resolves them; their
TFLOP/s are made-up test data, not measurements."""

from __future__ import annotations

import fnmatch
import json
import re
import sys
from pathlib import Path

import pytest
from conftest import ROOT, cli
from handmade import record, write

from caraml.results import reference
from caraml.runner import RunSpec, resolve_params

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

RUN = "caraml run llm_training --preset 800M-2024 convention=caraml-log"


def caraml_2024_record(system: str, devices: int, global_batch: int, tflops: float, **settings) -> dict:
    """A record of the 800M-2024 preset (with `settings` on top) whose CARAML TFLOP/s per device is `tflops`."""
    given = {"convention": "caraml-log", "global_batch_size": global_batch, "device": "cpu", **settings}
    _, params = resolve_params(RunSpec("llm_training", given, preset="800M-2024"))
    tokens = global_batch * 2048 / 1.5  # a made-up 1.5 s per iteration
    return record("llm_training", system, params, tokens, devices=devices,
                  extra_metrics={"caraml_tflops_per_device": tflops, "global_batch_size": global_batch})


@pytest.fixture()
def mixed(tmp_path) -> Path:
    """Made-up runs: three global batches of the reference's configuration on one system, one compiled, one
    compiled in micro-batches of 16 (the engine's business), and three that must not stand beside the reference (our
    steady convention; the 2025 model's 16 heads; dropout off)."""
    results = tmp_path / "results"
    for gbs, tflops in ((16, 250.0), (64, 300.0), (512, 350.0)):
        write(results, caraml_2024_record("H200", 1, gbs, tflops))
    write(results, caraml_2024_record("H200", 1, 64, 330.0, compile="inductor"))
    write(results, caraml_2024_record("H200", 1, 512, 590.0, compile="inductor", micro_batch_size=16))
    write(results, caraml_2024_record("H200", 1, 512, 777.0, attention_dropout=0.0, hidden_dropout=0.0))
    write(results, caraml_2024_record("H100", 4, 64, 999.0, convention="steady"))
    write(results, caraml_2024_record("H100", 4, 64, 888.0, num_attention_heads=16, caraml_config="2025"))
    return results


def test_the_shipped_reference_names_its_source_and_is_package_data():
    ref = reference.load("caraml-2024")
    assert reference.names() == ["caraml-2024"]
    assert re.fullmatch(r"[0-9a-f]{40}", ref.source["commit"])
    assert ref.source["file"] == "llm_training/result/LLM_tflops_nvidia.pdf"
    assert ref.source["repo"].endswith("/CARAML")
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["caraml"]
    shipped = reference.FOLDER.relative_to(ROOT / "src" / "caraml") / "caraml-2024.yaml"
    assert any(fnmatch.fnmatch(str(shipped), pattern) for pattern in data), data


def test_the_published_points_every_global_batch_of_the_plot_its_labels_when_rounded():
    ref = reference.load("caraml-2024")
    systems = {s.name: s for s in ref.systems}
    assert list(systems) == ["A100", "H100-PCIe", "WAIH100", "JEDI", "JEDI-DP1", "GH200"]
    for s in ref.systems:
        assert sorted(s.points) == [16, 32, 64, 128, 256, 512], s.name
    # the whole TFLOP/s the plot prints over its bars at global batch 16 and 512
    labels = {"A100": (166, 183), "H100-PCIe": (200, 269), "WAIH100": (285, 319), "JEDI": (293, 325),
              "JEDI-DP1": (317, 333), "GH200": (287, 387)}
    assert {n: (round(s.points[16]), round(s.points[512])) for n, s in systems.items()} == labels
    assert {n: s.devices for n, s in systems.items()} == {"A100": 4, "H100-PCIe": 4, "WAIH100": 4, "JEDI": 4,
                                                         "JEDI-DP1": 1, "GH200": 1}


def test_the_configuration_is_the_800M_2024_preset_by_caramls_log_convention():
    ref = reference.load("caraml-2024")
    _, params = resolve_params(RunSpec("llm_training", {"convention": "caraml-log"}, preset=ref.preset))
    assert reference.differences(ref, params) == []
    _, steady = resolve_params(RunSpec("llm_training", {}, preset=ref.preset))
    assert reference.differences(ref, steady) == ["convention=steady (reference: caraml-log)"]
    assert ref.run == RUN and ref.metric == "caraml_tflops_per_device"
    assert "24*f*B*s*L*h^2" in ref.convention["tflops"] and "every 5 iterations" in ref.convention["log"]


def test_compare_puts_yours_beside_every_reference_system_with_the_ratio_per_global_batch(mixed):
    out = json.loads(cli("compare", "--reference", "caraml-2024", "--results", mixed, "--format", "json",
                         check=0).stdout)
    ref = reference.load("caraml-2024")
    rows = {(r["settings"], r["global_batch_size"]): r for r in out["rows"]}
    # the steady, the 16-head and the dropout-off runs are not of the reference's configuration
    assert sorted(rows) == [("micro_batch_size=16, compile=inductor", 512),
                            ("micro_batch_size=4, compile=inductor", 64), ("micro_batch_size=4, compile=none", 16),
                            ("micro_batch_size=4, compile=none", 64), ("micro_batch_size=4, compile=none", 512)]
    assert all(r["system"] == "H200" and r["devices"] == 1 for r in out["rows"])
    for (_, gbs), row in rows.items():
        for s in ref.systems:
            theirs = row["references"][s.name]
            assert theirs["value"] == s.points[gbs]
            assert theirs["ratio"] == pytest.approx(row["value"] / s.points[gbs])
    assert rows[("micro_batch_size=4, compile=none", 512)]["references"]["GH200"]["ratio"] == pytest.approx(
        350.0 / 387.35)
    assert rows[("micro_batch_size=16, compile=inductor", 512)]["references"]["GH200"]["ratio"] == pytest.approx(
        590.0 / 387.35)
    assert out["source"]["commit"] == ref.source["commit"] and out["configuration"]["num_attention_heads"] == 8


def test_the_text_table_names_the_source_and_each_reference_system(mixed):
    text = cli("compare", "--reference", "caraml-2024", "--results", mixed, "--wide", check=0).stdout
    assert "GH200 (1)" in text and "×GH200" in text and "A100 (4)" in text
    assert "LLM_tflops_nvidia.pdf" in text and "convention=caraml-log" in text
    assert "0.90x" in text  # 350 / 387.35 at global batch 512


def test_no_record_of_the_configuration_is_one_line_naming_what_differs_and_what_to_run(tmp_path):
    results = tmp_path / "results"
    write(results, caraml_2024_record("H100", 4, 64, 999.0, convention="steady"))
    proc = cli("compare", "--reference", "caraml-2024", "--results", results, check=2)
    (line,) = proc.stderr.strip().splitlines()
    assert "convention=steady (reference: caraml-log)" in line and f"run `{RUN}`" in line, line
    assert proc.stdout == ""


def test_an_unknown_reference_is_one_line_with_the_closest_name(mixed):
    proc = cli("compare", "--reference", "caraml-2042", "--results", mixed, check=2)
    (line,) = proc.stderr.strip().splitlines()
    assert "did you mean caraml-2024?" in line, line


@pytest.mark.parametrize("args, says", [((), "compare needs --by FIELD"),
                                        (("--reference", "caraml-2024", "--by", "system"), "leave out --by"),
                                        (("--reference", "caraml-2024", "--workload", "fno"), "is of workload")])
def test_compare_asks_for_by_or_reference_alone(mixed, args, says):
    proc = cli("compare", "--results", mixed, *args, check=2)
    (line,) = proc.stderr.strip().splitlines()
    assert says in line, line


def test_the_report_draws_your_points_over_the_reference_systems(mixed, tmp_path):
    html = Path(cli("report", "--results", mixed, "--out", tmp_path / "r.html", check=0).stdout.strip()).read_text()
    section = html[html.index('<h2 id="references">'):]
    assert 'alt="reference-caraml-2024"' in section and "data:image/png;base64," in section
    assert "LLM_tflops_nvidia.pdf" in section and RUN in section


def test_the_report_has_no_reference_section_without_a_record_of_its_configuration(tmp_path):
    results = tmp_path / "results"
    write(results, caraml_2024_record("H100", 4, 64, 999.0, convention="steady"))
    html = Path(cli("report", "--results", results, "--out", tmp_path / "r.html", check=0).stdout.strip()).read_text()
    assert 'id="references"' not in html


def test_the_refusal_names_the_closest_record_and_a_setting_it_never_recorded(tmp_path):
    results = tmp_path / "results"
    # one setting off (the convention) and three off: the refusal names the first, the closest
    write(results, caraml_2024_record("H100", 4, 64, 999.0, convention="steady"))
    write(results, caraml_2024_record("A100", 2, 32, 111.0, convention="steady", num_attention_heads=16,
                                      caraml_config="2025"))
    proc = cli("compare", "--reference", "caraml-2024", "--results", results, check=2)
    (line,) = proc.stderr.strip().splitlines()
    assert "the closest (H100, 4 device(s), global batch 64)" in line, line
    ref = reference.load("caraml-2024")
    key = next(iter(ref.configuration))
    params = {k: v for k, v in ref.configuration.items() if k != key}
    assert reference.differences(ref, params) == [f"{key} not recorded (reference: {ref.configuration[key]})"]
