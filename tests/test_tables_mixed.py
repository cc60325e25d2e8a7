"""Tables of a mixed results folder (a smoke run, a small suite sweep, another system, FNO on a CPU) at 80 and 120
columns, in a file as on a terminal: every line fits, the columns that tell rows apart are there and first, presets
are one column, measurement settings none, a row of two runs shows both runs' values, an interrupted run's figure
is marked."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
from conftest import cli, cli_env
from mixed_results import populate

from caraml.results import table as table_mod

MEASUREMENT = ("measure_steps", "warmup_steps", "measure_seconds", "log_interval", "seed")


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    results = tmp_path_factory.mktemp("mixed") / "results"
    populate(results)
    return results


def _shown(monkeypatch, width: int, *args) -> str:
    """What `caraml ARGS > file` writes with COLUMNS=width (stdout is no terminal here)."""
    monkeypatch.setenv("COLUMNS", str(width))
    return cli(*args, check=0).stdout


def _heads(text: str) -> str:
    """The header lines of the text tables (those drawn between ┃ or, compact, between │ above the rule)."""
    lines, out, head = text.splitlines(), [], False
    for line in lines:
        if line.startswith(("┏", "┌")):
            head = True
        elif line.startswith(("┡", "├")):
            head = False
        elif head:
            out.append(line)
    return "\n".join(out)


@pytest.mark.parametrize("width", [80, 120])
def test_result_of_a_mixed_folder_fits_and_shows_who_each_row_is(mixed, monkeypatch, width):
    text = _shown(monkeypatch, width, "result", "--results", mixed)
    assert max(map(len, text.splitlines())) <= width
    heads = _heads(text)
    for word in ("System", "Preset", "Global", "BatchSize/", "Precision", "Workers", "Images/s", "(steady)",
                 "Status"):
        assert word in heads, word
    assert not any(name in heads for name in MEASUREMENT + ("lr", "momentum", "num_classes", "cudnn"))
    # the identity comes first: the system, then the preset, before any figure
    first = next(line for line in heads.splitlines() if "System" in line and "Preset" in line)
    assert first.index("System") < first.index("Preset") < first.index("Precision")
    assert "Preset smoke: model=resnet18" in text.replace("\n  ", " ") and "lr=0.1" in text
    assert "Preset caraml: model=resnet50" in text.replace("\n  ", " ")
    assert "2,750.0 *" in text and "* interrupted: over its measured steps" in text


@pytest.mark.parametrize("width", [80, 120])
def test_compare_of_a_mixed_folder_fits_and_keeps_the_columns_that_differ(mixed, monkeypatch, width):
    text = _shown(monkeypatch, width, "compare", "--results", mixed, "--by", "precision")
    assert max(map(len, text.splitlines())) <= width
    heads = _heads(text)
    assert "Global" in heads and "BatchSize/" in heads  # what the compared rows differ in: never left out
    assert "×speed" in heads and "(steady)" in heads
    assert "same in every row: Preset caraml" in text  # one preset among the compared rows: a footnote
    assert not any(name in heads for name in MEASUREMENT)
    assert "not compared" in text and "smoke" in text  # the smoke run has no bf16 twin: listed apart


def test_a_row_of_two_runs_shows_both_runs_values(mixed, monkeypatch):
    text = _shown(monkeypatch, 120, "result", "--results", mixed, "--where", "system=H100", "--where",
                  "batch_size=64", "--where", "precision=fp16", "--columns", "system,measure_steps,throughput,runs")
    row = next(line for line in text.splitlines() if "H100" in line)
    assert "50, 2" in row and " 2 " in row.replace("│", " ")  # oldest run first; Runs 2


@pytest.mark.subprocess
def test_a_real_pipe_honours_columns(mixed):
    proc = subprocess.run([sys.executable, "-m", "caraml", "result", "--results", str(mixed)], capture_output=True,
                          text=True, env=cli_env(COLUMNS=80), check=True)
    assert max(map(len, proc.stdout.splitlines())) <= 80 and "not shown, to fit 80 columns" in proc.stdout


def test_a_cpu_table_says_device_not_gpu(mixed, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)  # every default column
    text = cli("result", "--results", mixed, "--workload", "fno", check=0).stdout
    assert "Energy/device (Wh)" in text and "GPU" not in text
    assert "reduce-overhead" not in text and "eager" in text  # compile=none: its compile mode does not apply


def test_markdown_and_html_head_figures_as_the_terminal_does(mixed, tmp_path, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    md = cli("result", "--results", mixed, "--workload", "image_classification", "--format", "markdown",
             check=0).stdout
    assert "| Images/s (steady) |" in md and "| Preset |" in md
    csv = cli("result", "--results", mixed, "--format", "csv", check=0).stdout
    assert "(steady)" not in csv  # CSV keeps CARAML's bare names
    cli("report", "--results", mixed, "--out", tmp_path / "r.html", check=0)
    html = (tmp_path / "r.html").read_text()
    assert "<th>Images/s (steady)</th>" in html and "2,750.0 *" in html and "Preset smoke:" in html


def test_compile_mode_does_not_apply_without_compile():
    from caraml import workloads

    for name, compiled in (("fno", {"compile": "inductor"}), ("image_classification", {"compile": "inductor"})):
        mode = next(p for p in workloads.get(name).params if p.name == "compile_mode")
        assert not mode.applies_to({"compile": "none"}) and mode.applies_to(compiled)


def test_a_cut_footnote_closes_its_parentheses():
    from caraml.results.select import _short

    cut = _short("energy unavailable (node1 GPU-0: permission denied reading the counter; " + "x " * 80 + ")", 60)
    assert cut.endswith("…)") and len(cut) <= 61


@pytest.mark.parametrize("header,lines", [("GlobalBatchSize", "Global\nBatchSize"),
                                          ("Images/s (steady)", "Images/s\n(steady)"),
                                          ("BatchSize/Device", "BatchSize/\nDevice"), ("MFU", "MFU")])
def test_long_headers_break_onto_two_lines(header, lines):
    assert table_mod.two_lines(header) == lines


@pytest.mark.subprocess
def test_the_table_module_imports_no_view_of_it():
    """select uses table; table needs nothing of select (no import cycle)."""
    code = "import sys, caraml.results.table; print('caraml.results.select' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), check=True)
    assert out.stdout.strip() == "False"


def test_a_presets_own_value_is_known_and_an_unknown_preset_explains_nothing():
    from caraml.results import presets

    assert presets._preset_value("image_classification", "smoke", "model") == "resnet18"
    assert presets._preset_value("image_classification", presets.NONE, "model") == "resnet50"
    assert presets._preset_value("image_classification", "no-such-preset", "model") is presets._UNKNOWN
    assert presets._preset_value("no_such_workload", "smoke", "model") is presets._UNKNOWN
    assert [presets._as_given(v) for v in (True, False, None, 0.1)] == ["on", "off", "-", "0.1"]


def test_columns_at_the_smallest_width_are_fitted_and_below_it_ignored(monkeypatch):
    from caraml.results import table

    monkeypatch.setattr(sys, "stdout", io.StringIO())  # not a terminal
    monkeypatch.setenv("COLUMNS", str(table.MIN_WIDTH))
    assert table.terminal_width() == table.MIN_WIDTH
    monkeypatch.setenv("COLUMNS", str(table.MIN_WIDTH - 1))
    assert table.terminal_width() is None
