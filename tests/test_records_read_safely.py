"""Records and results: one bad record file never breaks a folder, records are strict JSON and never lost,
names from records stay inside their folders and are plain text in figures."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import caraml, cli_env, run_cli
from handmade import image, record, write

from caraml.campaign import sweep
from caraml.results import plots
from caraml.results.select import select
from caraml.results.store import Store


def strict(text: str):
    """JSON as every other tool reads it: NaN and Infinity are not JSON."""
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in strict JSON"))


def two_systems(results: Path) -> None:
    write(results, image("H100", 64, "bf16", 2400.0, energy_wh=10.0, units_per_wh=900.0,
                         started="2026-12-01T10:00:00.000+00:00"))
    write(results, image("A100", 64, "bf16", 1500.0, energy_wh=9.0, units_per_wh=600.0,
                         started="2026-12-01T10:01:00.000+00:00"))


WRONG_SHAPES = {  # record path -> a value of the wrong type
    "system": "CPU", "params": [1], "metrics": [], "launch": "torchrun", "id": [1], "started_at": 5, "workload": 7,
    "metrics.energy": "12 Wh", "launch.world_size": "two", "metrics.throughput": 5, "metrics.energy.phases.measure": 3,
    "env.slurm": "7", "status": ["ok"],
}


def _bad(path: str, value) -> dict:
    rec = image("H100", 128, "bf16", 2000.0, energy_wh=10.0, units_per_wh=900.0,
                started="2026-12-01T11:00:00.000+00:00")
    *parents, last = path.split(".")
    node = rec
    for part in parents:
        node = node[part]
    node[last] = value
    rec["run_id"] = f"bad-{path}"
    return rec


def test_records_of_the_wrong_shape_are_skipped_and_named(tmp_path, capsys):
    results = tmp_path / "results"
    two_systems(results)
    bad = [write(results, _bad(path, value)) for path, value in WRONG_SHAPES.items()]
    deep = results / "runs" / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    huge = results / "runs" / "huge.json"
    huge.write_text(json.dumps(image("H100", 32, "bf16", 1.0)).replace('"seed": 0', '"seed": ' + "9" * 30))
    selection = select(str(results), warn=False)
    assert len(selection.points) == 2 and len(selection.skipped) == len(bad) + 2
    for argv in (["result"], ["result", "--format", "json"], ["compare", "--by", "system"],
                 ["report", "--out", tmp_path / "r.html"]):
        code, out, err = run_cli(capsys, *argv, "--results", results)
        assert code == 0 and out, (argv, err)
        for path in bad + [deep, huge]:
            assert f"caraml: skipping unreadable record {path}: " in err, (argv, path, err)
        assert "Traceback" not in err
    one_line = tmp_path / "record.txt"  # as `caraml run --json` prints it
    one_line.write_text("some output\n" + json.dumps(_bad("system", "CPU")) + "\n")
    code, out, err = run_cli(capsys, "row", one_line)
    assert code == 2 and "system is str, not dict" in err and len(err.strip().splitlines()) == 1


@pytest.mark.subprocess
def test_a_fifo_among_the_records_is_skipped_not_read(tmp_path):
    results = tmp_path / "results"
    two_systems(results)
    os.mkfifo(results / "runs" / "x.json")
    proc = caraml("result", "--results", results, check=0)  # its own process: a regression would hang in open()
    assert f"skipping unreadable record {results / 'runs' / 'x.json'}: not a regular file" in proc.stderr


def test_index_follows_a_delete_and_an_add_of_the_same_count(tmp_path):
    store = Store(tmp_path)
    a = image("H100", 64, "bf16", 1.0, started="2026-12-01T10:00:00.000+00:00")
    b = image("H100", 128, "bf16", 2.0, started="2026-12-01T10:01:00.000+00:00")
    c = image("H100", 256, "bf16", 3.0, started="2026-12-01T10:02:00.000+00:00")
    Path(store.save(a)).unlink()
    store.save(b)
    write(tmp_path, c)  # copied in by hand (rsync): the index does not know it
    store.sync_index()
    assert {r for (r,) in store.query("SELECT run_id FROM runs")} == {b["run_id"], c["run_id"]}


def test_records_are_strict_json(tmp_path, capsys):
    from caraml.results.store import dumps

    rec = image("H100", 64, "bf16", 2400.0, energy_wh=10.0, units_per_wh=900.0)
    rec["metrics"]["energy"].update(total_wh=float("nan"), run_wh=float("inf"))
    saved = strict(Store(tmp_path).save(rec).read_text())
    assert saved["metrics"]["energy"]["total_wh"] is None and saved["metrics"]["energy"]["run_wh"] is None
    assert strict(dumps({"a": [float("-inf"), 1.5]})) == {"a": [None, 1.5]}
    legacy = tmp_path / "runs" / "legacy.json"  # written before: NaN in the file
    legacy.write_text(json.dumps(image("A100", 64, "bf16", 1.0, energy_wh=float("nan"))))
    code, out, _ = run_cli(capsys, "result", "--results", tmp_path, "--format", "json")
    assert code == 0 and len(strict(out)) == 2


@pytest.mark.parametrize("break_it", ["runs_is_a_file", "disk_full"])
def test_a_record_the_results_folder_refuses_is_saved_elsewhere(tmp_path, monkeypatch, capsys, break_it):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    results = tmp_path / "results"
    results.mkdir()
    if break_it == "runs_is_a_file":  # root ignores permissions: a file where the folder should be
        (results / "runs").write_text("")
    else:
        real = os.replace
        monkeypatch.setattr("os.replace", lambda a, b: (_ for _ in ()).throw(OSError(28, "No space left on device"))
                            if Path(b).parent == results / "runs" else real(a, b))
    rec = image("H100", 64, "bf16", 2400.0)
    path = Store(results).save(rec)
    assert path == tmp_path / "tmp" / "caraml-unsaved" / f"{rec['run_id']}.json"
    assert strict(path.read_text())["run_id"] == rec["run_id"]
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(results / "runs" / f"{rec['run_id']}.json") in err and str(path) in err
    assert not list(results.rglob("*.tmp"))


def test_names_from_records_stay_inside_their_folders(tmp_path, capsys):
    results, out = tmp_path / "results", tmp_path / "a" / "plots"
    rec = record("x/../../../escape", "H100", {"batch_size": 8}, 100.0)
    write(results, rec)
    (out / "throughput-x").mkdir(parents=True)  # what `..` needs to climb out
    code, printed, err = run_cli(capsys, "plot", "throughput", "--results", results, "--out", out)
    assert code == 0, err
    png = out / "throughput-x_.._.._.._escape.png"
    assert set(tmp_path.rglob("*.png")) == {png} and printed.split()[0] == str(png)
    # a crafted point id in sweep-state.json: the record for the job that wrote none stays in runs/
    crafted = {"id": "../../../../escaped", "workload": "image_classification", "system": "CPU", "params": {},
               "world_size": 1, "nodes": 1, "devices_per_node": 1}
    saved = Store(results).save(sweep.missing_record(crafted, "failed", "gone", "7"))
    assert [p.parent for p in tmp_path.rglob("*escaped*")] == [saved.parent] == [results / "runs"]


def test_names_with_dollars_are_plain_text_in_figures(tmp_path):
    results = tmp_path / "results"
    for system, model in (("M$\\foo$", "$\\frac{$"), ("H100", "$\\frac{$")):
        rec = image(system, 64, "bf16", 2400.0, energy_wh=10.0, units_per_wh=900.0)
        rec["params"]["model"] = model
        rec["params"]["batch_size"] = 64 if system == "H100" else 128
        write(results, rec)
    selection = select(str(results), warn=False)
    for kind in ("throughput", "efficiency", "pareto"):
        for _, fig in plots.figures(kind, selection.by_workload):
            assert plots.png_bytes(fig)[:4] == b"\x89PNG"
    from caraml.results.report import write_report

    assert write_report(str(results), str(tmp_path / "r.html")).stat().st_size > 1000


def test_plot_out_an_existing_file_is_one_line(tmp_path, capsys):
    results = tmp_path / "results"
    two_systems(results)
    (tmp_path / "taken").write_text("")
    code, _, err = run_cli(capsys, "plot", "throughput", "--results", results, "--out", tmp_path / "taken")
    assert code == 2 and err.startswith(f"caraml: error: --out {tmp_path / 'taken'}: cannot write the plots")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.subprocess
def test_output_survives_an_ascii_terminal(tmp_path):
    results = tmp_path / "results"
    write(results, image("H100-é", 64, "bf16", 2400.0))
    proc = caraml("result", "--results", results, env=cli_env(PYTHONIOENCODING="ascii"), check=0)
    assert "H100-\\xe9" in proc.stdout and "Traceback" not in proc.stderr


@pytest.mark.parametrize("argv", [("compare", "--by", "x" * 100_000), ("result", "--where", "system=" + "v" * 100_000),
                                  ("result", "--columns", "c" * 100_000), ("result", "--workload", "w" * 100_000),
                                  ("compare", "--by", "system", "--baseline", "b" * 100_000)],
                         ids=["by", "where", "columns", "workload", "baseline"])
def test_long_values_are_quoted_short(tmp_path, capsys, argv):
    results = tmp_path / "results"
    two_systems(results)
    code, _, err = run_cli(capsys, *argv, "--results", results)
    assert code == 2 and len(err) < 1000 and "…" in err and len(err.strip().splitlines()) == 1


HOSTILE = {"system": "H100\x1b[2J\x1b]0;owned\x07\x9b31m", "model": "<script>alert(1)</script>\n| x | y |\r[a](http://e)\\"}


def _hostile(results: Path) -> None:
    rec = image(HOSTILE["system"], 64, "bf16", 2400.0)
    rec["params"]["model"] = HOSTILE["model"]
    write(results, rec)


@pytest.mark.parametrize("fmt", ["table", "markdown", "csv"])
def test_record_strings_cannot_drive_the_terminal(tmp_path, capsys, fmt):
    """Escape codes and other control characters in record strings are shown as text, never sent to a terminal;
    rich markup is text too."""
    results = tmp_path / "results"
    _hostile(results)
    rec = image("[bold]CPU[/bold] :smile:", 128, "bf16", 1000.0)
    write(results, rec)
    code, out, err = run_cli(capsys, "result", "--results", results, "--format", fmt)
    assert code == 0, err
    controls = [c for c in out if (ord(c) < 32 and c not in "\n") or 0x7f <= ord(c) < 0xa0]
    assert not controls, controls
    assert "\\x1b[2J" in out and "\\x9b31m" in out
    if fmt != "csv":
        assert "[bold]CPU[/bold] :smile:" in out
    lines = out.splitlines()
    if fmt == "table":  # one line per row: a newline in a value is shown as \n
        assert sum("\\x1b[2J" in line for line in lines) == 1 and "<script>alert(1)</script>\\n" in out
    if fmt == "csv":  # faithful: newlines quoted (as CSV quotes them), escape codes as text
        import csv as csvlib
        import io

        rows = list(csvlib.DictReader(io.StringIO(out)))
        hostile = next(r for r in rows if r["System"].startswith("H100"))
        assert hostile["Model"] == HOSTILE["model"].replace("\r", "\\r")
        assert hostile["System"] == "H100\\x1b[2J\\x1b]0;owned\\x07\\x9b31m"


def test_markdown_cells_are_text(tmp_path, capsys):
    """No HTML, no links, no extra cells or rows from a record's strings."""
    results = tmp_path / "results"
    _hostile(results)
    code, out, err = run_cli(capsys, "result", "--results", results, "--format", "markdown")
    assert code == 0, err
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    header, _, body = rows[0], rows[1], rows[2:]
    assert len(body) == 1
    cells = [c for c in body[0].replace("\\\\", "").replace("\\|", "").split("|")]
    assert len(cells) == len(header.split("|"))
    assert "<script>" not in out and "&lt;script&gt;alert(1)&lt;/script&gt;<br>" in out
    assert "](http" not in out and "\\r" in out


def test_row_lines_cannot_drive_the_terminal(tmp_path, capsys):
    results = tmp_path / "results"
    _hostile(results)
    one_line = tmp_path / "record.txt"  # as `caraml run --json` prints it
    one_line.write_text(json.dumps(json.loads(next((results / "runs").glob("*.json")).read_text())) + "\n")
    code, out, err = run_cli(capsys, "row", one_line)
    assert code == 0, err
    assert not [c for c in out if (ord(c) < 32 and c != "\n") or 0x7f <= ord(c) < 0xa0]
    assert "system=H100\\x1b[2J\\x1b]0;owned\\x07\\x9b31m\n" in out


def test_error_messages_quote_values_as_text(tmp_path, capsys):
    results = tmp_path / "results"
    two_systems(results)
    code, _, err = run_cli(capsys, "result", "--results", results, "--workload", "x\x1b]0;owned\x07\u202e\r")
    assert code == 2 and "'x\\x1b]0;owned\\x07\\u202e\\r'" in err
    assert not [c for c in err if (ord(c) < 32 and c != "\n") or 0x7f <= ord(c) < 0xa0 or c == "\u202e"]


def test_skipped_record_files_are_named_as_text(tmp_path, capsys):
    results = tmp_path / "results"
    two_systems(results)
    (results / "runs" / "\x1b[2Jbad.json").write_text("{")
    odd = image("H100", 512, "bf16", 1.0)
    odd["status"] = "\x1b]0;owned\x07"
    (results / "runs" / "\x1b[31modd.json").write_text(json.dumps(odd))
    code, out, err = run_cli(capsys, "result", "--results", results)
    assert code == 0 and "skipping unreadable record" in err and "\\x1b[2Jbad.json" in err
    assert "skipping record" in err and "\\x1b[31modd.json" in err
    assert not [c for c in out + err if (ord(c) < 32 and c != "\n") or 0x7f <= ord(c) < 0xa0]


def test_run_summary_prints_the_error_as_text(capsys):
    from caraml.cli import _print_summary

    rec = image("H100", 64, "bf16", None, status="failed")
    rec["error"] = "RuntimeError: bad file /d/\x1b[2J\nline two"
    _print_summary(rec)
    out, err = capsys.readouterr()
    assert "caraml: failed: RuntimeError: bad file /d/\\x1b[2J\\nline two\n" in err
    assert not [c for c in out + err if (ord(c) < 32 and c != "\n") or 0x7f <= ord(c) < 0xa0]


def test_figures_with_control_characters_in_names_are_valid_svg(tmp_path, capsys, recwarn):
    import xml.dom.minidom

    results, out = tmp_path / "results", tmp_path / "plots"
    rec = image("H100\x1b[2J\x00", 64, "bf16", 100.0, energy_wh=10.0, units_per_wh=900.0)
    rec["params"]["model"] = "m\x07"
    write(results, rec)
    write(results, image("A100", 64, "bf16", 50.0, energy_wh=10.0, units_per_wh=500.0))
    for kind in ("throughput", "efficiency", "pareto"):
        code, _, err = run_cli(capsys, "plot", kind, "--results", results, "--out", out)
        assert code == 0, err
    svgs = sorted(out.glob("*.svg"))
    assert len(svgs) == 3
    for svg in svgs:
        xml.dom.minidom.parse(str(svg))  # an SVG holding a control character is not XML
    assert not [w for w in recwarn if "Glyph" in str(w.message)]


def test_the_report_holds_no_control_characters(tmp_path):
    from caraml.results.report import write_report

    results = tmp_path / "results"
    _hostile(results)
    html = write_report(str(results), str(tmp_path / "r.html")).read_text()
    assert not [c for c in html if (ord(c) < 32 and c not in "\n\t") or 0x7f <= ord(c) < 0xa0]
    assert "H100\\x1b[2J" in html and "<script>alert" not in html
