"""Tables that fit the terminal, the parameters that tell rows apart
shown, any parameter or record field usable as a column, key or --by, headers that say their convention, unsteady
step times flagged and energy's '-' explained. In-process, with hand-written records."""

from __future__ import annotations

import csv
import io
import json

import pytest
from conftest import cli
from handmade import fno, image, populate, write

from caraml.results import table as table_mod


def has_header(text: str, header: str) -> bool:
    """Whether a text table shows `header`, on one line or broken onto two at a space."""
    parts = header.split(" ")
    return header in text or any(" ".join(parts[:i]) in text and " ".join(parts[i:]) in text
                                 for i in range(1, len(parts)))


@pytest.fixture
def campaign(tmp_path):
    results = tmp_path / "results"
    populate(results)
    return results


@pytest.fixture
def terminal(monkeypatch):
    """stdout a terminal of 120 columns."""
    monkeypatch.setattr(table_mod, "terminal_width", lambda: 120)


def _fno_pair(results, **second):
    """Two FNO records that differ only in the parameter `data` (not a default column)."""
    a = fno("H100", "RBC2D", 1, 20, "fp16", "default", 3757.0, train=3700.0)
    b = fno("H100", "RBC2D", 1, 20, "fp16", "default", 1200.0, train=1100.0, started="2026-12-01T11:00:00.000+00:00")
    a["params"]["data"], b["params"]["data"] = "synthetic", "file"
    for k, v in second.items():
        b["params"][k] = v
    write(results, a)
    write(results, b)
    return a, b


def test_a_table_on_a_terminal_fits_its_width_and_names_what_it_left_out(campaign, terminal):
    out = cli("result", "--results", campaign, check=0).stdout
    assert max(len(line) for line in out.splitlines()) <= 120
    assert has_header(out, "Timesteps/s (steady)") and "Status" in out  # throughput and status always stay
    # configuration columns that do not differ, in CARAML's column order (Devices before Problem)
    assert "same in every row: Devices 1, Problem RBC2D" in out
    assert "not shown, to fit 120 columns:" in out and "--wide" in out
    assert "H100" in out and "A100" in out  # the system differs between rows: kept


def test_wide_and_non_terminals_show_every_default_column(campaign, terminal):
    wide = cli("result", "--results", campaign, "--workload", "fno", "--wide", check=0).stdout
    assert max(len(line) for line in wide.splitlines()) > 120 and "not shown" not in wide
    for header in ("ModelParam (Million)", "TrainTimesteps/second (CARAML)", "PeakMemory GiB", "Spread"):
        assert header in wide


def test_a_pipe_gets_every_default_column(campaign, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)  # COLUMNS would narrow it, as on a terminal
    text = cli("result", "--results", campaign, "--workload", "fno", check=0).stdout  # stdout not a terminal
    assert "not shown" not in text and "ModelParam (Million)" in text and "Energy/GPU (Wh)" in text


def test_a_parameter_that_differs_between_rows_becomes_a_column(tmp_path):
    results = tmp_path / "r"
    _fno_pair(results)
    rows = json.loads(cli("result", "--results", results, "--format", "rows-json", check=0).stdout)
    assert sorted(r["data"] for r in rows) == ["file", "synthetic"]
    text = cli("result", "--results", results, check=0).stdout
    assert "Data" in text.splitlines()[2]  # the workload's own header of `data`
    header = next(csv.reader(io.StringIO(cli("result", "--results", results, "--format", "csv", check=0).stdout)))
    assert "Data" in header


def test_rows_alike_in_shown_columns_keep_no_extra_columns(campaign):
    rows = json.loads(cli("result", "--results", campaign, "--workload", "llm_training", "--format", "rows-json",
                          check=0).stdout)
    assert not any("micro_batch_size" in r or "seq_length" in r for r in rows)  # the same in every row


def test_a_parameter_without_a_column_of_its_own_is_a_column(tmp_path):
    results = tmp_path / "r"
    a, b = image("H100", 64, "bf16", 2500.0), image("H100", 64, "bf16", 2400.0, started="2026-12-01T11:00:00+00:00")
    b["params"]["lr"] = 0.2
    b["id"] = a["id"] + "-lr"  # another configuration
    write(results, a)
    write(results, b)
    rows = json.loads(cli("result", "--results", results, "--columns", "system,momentum", "--format", "rows-json",
                          check=0).stdout)
    assert [r["momentum"] for r in rows] == [0.9, 0.9]
    rows = json.loads(cli("result", "--results", results, "--format", "rows-json", check=0).stdout)
    assert sorted(r["lr"] for r in rows) == [0.1, 0.2]  # differs between the rows: shown without asking


@pytest.mark.parametrize("name,key", [("params.data", "data"),
                                      ("launch.world_size", "launch.world_size"),
                                      ("metrics.energy.reason", "metrics.energy.reason")])
def test_any_parameter_or_record_field_is_a_column(tmp_path, name, key):
    results = tmp_path / "r"
    _fno_pair(results)
    rows = json.loads(cli("result", "--results", results, "--columns", f"system,{name}", "--format", "rows-json",
                          check=0).stdout)
    assert all(key in r for r in rows)
    if key == "launch.world_size":
        assert {r[key] for r in rows} == {1}
    if key == "metrics.energy.reason":
        assert {r[key] for r in rows} == {"no power monitor was attached"}


def test_a_parameter_or_record_field_filters_with_where(tmp_path):
    results = tmp_path / "r"
    _fno_pair(results)
    for where in ("data=file", "params.data=file"):
        rows = json.loads(cli("result", "--results", results, "--where", where, "--format", "rows-json",
                              check=0).stdout)
        assert [r["throughput"] for r in rows] == [1200.0]
    rows = json.loads(cli("result", "--results", results, "--where", "launch.world_size=1", "--format",
                          "rows-json", check=0).stdout)
    assert len(rows) == 2


def test_data_shows_what_auto_became_and_filters_on_either(tmp_path):
    results = tmp_path / "r"
    a, b = _fno_pair(results)
    a["params"]["data"], a["metrics"]["data_source"] = "auto", "file"  # data=auto ran from the data set's file
    write(results, a)
    rows = json.loads(cli("result", "--results", results, "--format", "rows-json", check=0).stdout)
    assert sorted(r["data"] for r in rows) == ["file", "file"]  # what each run used
    for where, throughput in (("data=auto", [3757.0]), ("data=file", [1200.0, 3757.0]), ("data=synthetic", [])):
        proc = cli("result", "--results", results, "--where", where, "--format", "rows-json")
        found = json.loads(proc.stdout) if proc.returncode == 0 else []
        assert sorted(r["throughput"] for r in found) == throughput, where


def test_compare_shows_an_if_any_column_only_where_a_run_has_it(tmp_path):
    for version in (None, "2025.02"):
        results = tmp_path / str(version)
        for system in ("A100", "H100"):
            rec = fno(system, "RBC2D", 1, 20, "fp16", "default", 1000.0)
            if version:
                rec["params"]["caraml_version"] = version
            write(results, rec)
        text = cli("compare", "--results", results, "--by", "system", "--format", "markdown", check=0).stdout
        if version:  # CARAML's FNO column, first after the system as in CARAML's table
            assert "| Version | Devices | Problem |" in text and "| 2025.02 | 1 | RBC2D |" in text
        else:  # no run has it: no column of dashes
            assert "| Devices | Problem |" in text and "Version" not in text


def test_an_unknown_column_is_one_line_exit_2(campaign):
    proc = cli("result", "--results", campaign, "--columns", "nosuch", check=2)
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1
    assert "launch.world_size" in proc.stderr  # says that record fields work


@pytest.mark.parametrize("by", ["params.precision", "launch.world_size", "system.tag"])
def test_compare_by_a_record_path(campaign, by):
    out = json.loads(cli("compare", "--results", campaign, "--workload", "image_classification", "--by", by,
                         "--format", "json", check=0).stdout)
    assert out[0]["by"] == {"params.precision": "precision", "launch.world_size": "devices",
                            "system.tag": "system"}[by]
    assert out[0]["rows"]


def test_headers_say_their_convention_in_the_text_table_only(campaign):
    text = cli("result", "--results", campaign, check=0).stdout
    for header in ("Timesteps/s (steady)", "Timesteps/second (CARAML)", "TrainTimesteps/second (CARAML)",
                   "IterationTime s (median)", "Tokens/s (steady)", "Images/s (steady)"):
        assert header in text
    header = next(csv.reader(io.StringIO(cli("result", "--results", campaign, "--workload", "fno", "--format", "csv",
                                             check=0).stdout)))
    assert "Timesteps/second" in header and "Timesteps/s" in header  # CARAML's names, as JUBE reads them
    assert not any("(" in h and ("steady" in h or "CARAML" in h) for h in header)


def test_an_unsteady_step_time_is_flagged(tmp_path):
    results = tmp_path / "r"
    write(results, image("H100", 64, "bf16", 2500.0, spread=0.5))
    write(results, image("A100", 64, "bf16", 1500.0, spread=0.1))
    text = cli("result", "--results", results, check=0).stdout
    assert "50.0% !" in text and "10.0% !" not in text
    assert "! StepSpread above 25%" in text
    rows = json.loads(cli("result", "--results", results, "--format", "rows-json", check=0).stdout)
    assert sorted(r["step_spread"] for r in rows) == pytest.approx([0.1, 0.5])  # numbers stay numbers


def test_steady_step_times_have_no_flag(tmp_path):
    results = tmp_path / "r"
    write(results, image("H100", 64, "bf16", 2500.0, spread=0.1))
    assert "StepSpread above" not in cli("result", "--results", results, check=0).stdout


def test_energy_shown_as_dash_says_why_once_per_reason(tmp_path):
    results = tmp_path / "r"
    long = "energy unavailable: " + "; ".join(f"node{i} GPU-{i}: permission denied reading the counter"
                                              for i in range(5))
    recs = [image("H100", 64, "bf16", 2500.0), image("H100", 128, "bf16", 2600.0),
            image("H100", 256, "bf16", 2700.0), image("A100", 64, "bf16", 1500.0, energy_wh=9.0, units_per_wh=800.0)]
    recs[2]["metrics"]["energy"]["reason"] = long
    for rec in recs:
        write(results, rec)
    text = cli("result", "--results", results, check=0).stdout
    assert text.count("no power monitor was attached") == 1
    assert "energy -: no power monitor was attached (2 rows)" in text
    [line] = [x for x in text.splitlines() if "permission denied" in x]
    assert line.endswith("(1 row)") and "…" in line and len(line) < len(long)
    md = cli("result", "--results", results, "--format", "markdown", check=0).stdout
    assert "energy -" not in md  # Markdown and CSV stay tables only


def test_energy_present_everywhere_has_no_footnote(tmp_path):
    results = tmp_path / "r"
    write(results, image("H100", 64, "bf16", 2500.0, energy_wh=10.0, units_per_wh=900.0))
    assert "energy -" not in cli("result", "--results", results, check=0).stdout


def test_llm_row_fits_with_its_headline(campaign, terminal):
    out = cli("result", "--results", campaign, "--workload", "llm_training", check=0).stdout
    assert has_header(out, "Tokens/s (steady)") and max(map(len, out.splitlines())) <= 120


def test_compare_on_a_terminal_fits_and_keeps_its_ratios(campaign, terminal):
    out = cli("compare", "--results", campaign, "--by", "system", check=0).stdout
    assert max(len(line) for line in out.splitlines()) <= 120
    assert has_header(out, "H100 ×speed") and "1.88x" in out  # the ratios are what a comparison is for
    assert "not shown, to fit 120 columns:" in out and "Mode train" in out  # a single row's configuration
    wide = cli("compare", "--results", campaign, "--by", "system", "--wide", check=0).stdout
    assert "not shown" not in wide and max(len(line) for line in wide.splitlines()) > 120


def test_a_run_summary_says_why_energy_is_missing(monkeypatch):
    from caraml.results.select import render

    monkeypatch.setattr(table_mod, "terminal_width", lambda: 100)
    out = render([image("H100", 64, "bf16", 2500.0)], "table")  # what `caraml run` prints after a run
    assert "energy -: no power monitor was attached (1 row)" in out
    assert max(len(line) for line in out.splitlines()) <= 100 and has_header(out, "Images/s (steady)")


def test_the_width_is_the_terminals_and_none_for_a_pipe(monkeypatch):
    import sys

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setenv("COLUMNS", "97")
    monkeypatch.setattr(sys, "stdout", Tty())
    assert table_mod.terminal_width() == 97
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert table_mod.terminal_width() == 97  # COLUMNS holds for a file or a pipe too
    monkeypatch.delenv("COLUMNS")
    assert table_mod.terminal_width() is None


@pytest.mark.parametrize("name", ["params.nosuch", "launch.nosuch", "metrics"])
def test_an_unknown_parameter_or_field_is_refused(campaign, name):
    proc = cli("result", "--results", campaign, "--columns", name, check=2)
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1
    proc = cli("result", "--results", campaign, "--where", f"{name}=1", check=2)
    assert len(proc.stderr.strip().splitlines()) == 1


def test_an_unsteady_step_time_keeps_its_column_when_the_table_is_narrowed(tmp_path, monkeypatch):
    monkeypatch.setattr(table_mod, "terminal_width", lambda: 60)
    results = tmp_path / "r"
    write(results, image("H100", 64, "bf16", 2500.0, spread=0.5))
    write(results, image("A100", 64, "bf16", 1500.0, spread=0.1))
    out = cli("result", "--results", results, check=0).stdout
    assert "not shown, to fit 60 columns:" in out and "50.0% !" in out and "! StepSpread above 25%" in out


def test_an_unknown_where_key_says_record_fields_work(campaign):
    proc = cli("result", "--results", campaign, "--where", "nosuch=1", check=2)
    assert len(proc.stderr.strip().splitlines()) == 1 and "launch.world_size" in proc.stderr


def test_repeats_that_disagree_are_flagged(tmp_path):
    """The spread across repeats gets the same '!' and footnote as an unsteady step time."""
    results = tmp_path / "r"
    for started, ips in (("10", 2000.0), ("11", 2600.0), ("12", 2300.0)):  # (2600-2000)/2300 = 26 %
        write(results, image("H100", 64, "bf16", ips, started=f"2026-12-01T{started}:00:00.000+00:00"))
    for started, ips in (("13", 1500.0), ("14", 1510.0)):  # 0.7 %
        write(results, image("A100", 64, "bf16", ips, started=f"2026-12-01T{started}:00:00.000+00:00"))
    text = cli("result", "--results", results, check=0).stdout
    assert "26.1% !" in text and "0.7% !" not in text
    assert "! Spread above 10%: the repeats' throughputs differ" in text


def test_repeats_that_agree_have_no_flag(tmp_path):
    results = tmp_path / "r"
    for started, ips in (("10", 2000.0), ("11", 2050.0)):
        write(results, image("H100", 64, "bf16", ips, started=f"2026-12-01T{started}:00:00.000+00:00"))
    assert "Spread above" not in cli("result", "--results", results, check=0).stdout


def test_the_sweeps_end_table_fits_a_log(capsys, monkeypatch):
    """The sweep's end table in a log (stdout not a terminal) fits 120 columns, or COLUMNS."""
    from caraml.campaign.local import print_points

    records = [fno("H100", "RBC2D", 1, 20, "fp16", "default", 3757.0, train=3700.0),
               fno("H100", "RBC3D", 4, 20, "bf16", "max-autotune", 1200.0, train=1100.0,
                   started="2026-12-01T11:00:00.000+00:00")]
    monkeypatch.delenv("COLUMNS", raising=False)
    print_points(records)
    lines = capsys.readouterr().out.splitlines()
    assert lines and max(map(len, lines)) <= 120
    assert any("not shown, to fit 120 columns" in line for line in lines)
    monkeypatch.setenv("COLUMNS", "160")  # a job script's or user's choice wins
    print_points(records)
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 160 and "to fit 120 columns" not in out


def test_a_spread_at_its_limit_is_not_flagged_only_one_above_it(tmp_path):
    """'above 25 %' and 'above 10 %': a step-time spread of exactly 25 % and repeats exactly 10 % apart are not."""
    results = tmp_path / "r"
    write(results, image("H100", 64, "bf16", 2500.0, spread=0.25))  # (p90 - p10) / median = 0.25
    for started, ips in (("10", 1900.0), ("11", 2000.0), ("12", 2100.0)):  # (2100 - 1900) / 2000 = 0.10
        write(results, image("A100", 64, "bf16", ips, spread=0.1, started=f"2026-12-01T{started}:00:00.000+00:00"))
    text = cli("result", "--results", results, "--wide", check=0).stdout
    assert "25.0%" in text and "10.0%" in text and "!" not in text, text
    write(results, image("H100", 64, "bf16", 2500.0, spread=0.26, started="2026-12-01T13:00:00.000+00:00"))
    assert "! StepSpread above 25%" in cli("result", "--results", results, "--wide", check=0).stdout


def test_a_column_of_two_sources_keeps_a_first_value_of_zero():
    """`metric:A|param:B` shows A where the record has it, 0 included; B only where A is missing."""
    from handmade import record

    from caraml.results.aggregate import group
    from caraml.results.columns import _declared
    from caraml.workloads import Col

    column = _declared(Col("retries", "Retries", "metric:retries|param:retries_asked", "int"))
    with_zero = record("image_classification", "H100", {"retries_asked": 3}, 100.0, extra_metrics={"retries": 0})
    without = record("image_classification", "A100", {"retries_asked": 3}, 100.0)
    assert [column.get(p) for p in group([with_zero])] == [0]
    assert [column.get(p) for p in group([without])] == [3]


def test_a_tuned_compile_and_an_untuned_one_are_told_apart_in_the_table(tmp_path):
    """compile_tuning stays out of the configuration id at its default: a record without it and a tuned one
    still differ in a column of their own."""
    results = tmp_path / "r"
    a, b = image("H100", 64, "bf16", 2500.0), image("H100", 64, "bf16", 2600.0, started="2026-12-01T11:00:00+00:00")
    b["params"]["compile_tuning"] = "coordinate-descent"
    b["id"] = a["id"] + "-tuned"
    write(results, a)
    write(results, b)
    rows = json.loads(cli("result", "--results", results, "--format", "rows-json", check=0).stdout)
    assert sorted(str(r.get("compile_tuning")) for r in rows) == ["None", "coordinate-descent"]
    assert "coordinate-descent" in cli("result", "--results", results, check=0).stdout
