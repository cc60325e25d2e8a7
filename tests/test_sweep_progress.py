"""What a local sweep shows while it runs: n/N, elapsed and an ETA from the finished points,
each finished point's status and headline figure under a short label, and at the end the sweep's points as a
result table with the counts per status."""

from __future__ import annotations

import io
import re

import pytest
from conftest import caraml, records_in

SUITE = """
workload: image_classification
preset: smoke
params:
  model: resnet18
  image_size: 32
  warmup_steps: 1
  measure_steps: 2
  power: "off"
  batch_size: 2,4,8
derived:
  precision: "'tf32' if batch_size == 2 else 'fp32'"   # tf32 does not exist on a CPU: that point fails at once
"""


@pytest.mark.subprocess
def test_a_local_sweep_shows_n_of_n_each_points_figure_and_a_table_at_the_end(tmp_path, results):
    from caraml.results.table import format_value

    suite = tmp_path / "tiny.yaml"
    suite.write_text(SUITE)
    proc = caraml("sweep", suite, "--system", "CPU", "--results", results, check=1)
    lines = proc.stderr.splitlines()
    by_id = {r["id"]: r for r in records_in(results)}
    assert len(by_id) == 3
    assert lines[0] == "caraml: sweep tiny: 3 points"
    for n in (1, 2, 3):
        assert any(ln.startswith(f"caraml: [{n}/3] ") for ln in lines), proc.stderr
    finished = [ln for ln in lines if re.match(r"caraml: \[\d/3\] \w+ (ok|failed): ", ln)]
    assert len(finished) == 3, proc.stderr
    for rec in by_id.values():
        [line] = [ln for ln in finished if f" {rec['id']} " in ln]
        size = rec["params"]["batch_size"]
        assert f"batch_size={size} precision={rec['params']['precision']}" in line  # what differs ...
        assert "model=" not in line and "image_size=" not in line  # ... and not what all points share
        if rec["status"] == "ok":
            figure = f"{format_value(rec['metrics']['throughput']['value'])} images/s"
            assert f" ok: {figure}  " in line
            assert figure.split()[0] in proc.stdout  # the same figure in the table
        else:
            assert size == 2 and rec["status"] == "failed" and " failed: " in line and "tf32" in line
    first = lines.index(finished[0])
    assert "ETA" not in "".join(lines[:first]) and "elapsed" in lines[1]  # no ETA before a point finished
    assert "ETA" in finished[0] and "took " in finished[0]
    assert lines[-1] == "caraml: sweep done: 1 failed, 2 ok"
    # the end: the sweep's points as `caraml result` shows them, on stdout as `caraml run` prints its table
    assert proc.stdout.splitlines()[0].strip() == "image_classification"
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("│") and ("tf32" in ln or "fp32" in ln)]
    assert all(len(ln) <= 120 for ln in proc.stdout.splitlines())  # fitted to a log's width
    assert "same in every row:" in proc.stdout and "resnet18" in proc.stdout
    assert len(rows) == 3 and sum(" failed " in r for r in rows) == 1 and sum(" ok " in r for r in rows) == 2


def _point(pid: str, **shown):
    from caraml.campaign.expand import SweepPoint

    return SweepPoint(id=pid, workload="image_classification", system="CPU", preset="smoke", params=dict(shown),
                      shown=dict(shown))


def test_a_points_label_is_what_differs_between_the_points():
    from caraml.campaign.progress import point_labels

    points = [_point("a", model="resnet18", batch_size=4, precision="fp32", nodes=1, time_limit="00:10:00"),
              _point("b", model="resnet18", batch_size=8, precision="fp32", nodes=1, time_limit="00:20:00"),
              _point("c", model="resnet18", batch_size=8, precision="bf16", nodes=1, extra="[red]x\x1b")]
    assert point_labels(points) == {"a": "batch_size=4 precision=fp32", "b": "batch_size=8 precision=fp32",
                                    "c": "batch_size=8 precision=bf16 extra=[red]x\\x1b"}
    assert point_labels(points[:1]) == {"a": ""}  # one point: nothing differs


def test_duration_eta_and_headline_formatting():
    from caraml.campaign.progress import Tally, duration, headline

    assert [duration(s) for s in (0, 12.4, 65, 3725)] == ["0s", "12s", "1m05s", "1h02m05s"]
    tally = Tally(total=5, to_run=4, started=100.0)  # one point was already ok
    assert tally.eta() is None and tally.clock(now=112.0) == "elapsed 12s"
    tally.finished_one(10.0)
    tally.finished_one(20.0)
    assert tally.eta() == 30.0  # 2 points left to run, 15 s each on average
    assert tally.clock(took=20.0, now=130.0) == "took 20s, elapsed 30s, ETA 30s"
    tally.passed_over()  # a point running elsewhere is not run: one point left
    assert tally.eta() == 15.0
    tally.starting(now=200.0)  # the last point, running for 5 s: 10 s to go; longer than the mean: 0 s
    assert tally.eta(now=205.0) == 10.0 and tally.eta(now=230.0) == 0.0
    ok = {"status": "ok", "metrics": {"throughput": {"value": 1234.5, "unit": "images/s"}}}
    assert headline(ok) == "1,234.5 images/s"
    failed = {"status": "failed", "error": "RuntimeError: CUDA out of memory.\nTried to allocate 2.00 GiB (GPU 0; "
                                           "79.1 GiB total capacity; 77.2 GiB already allocated)"}
    assert headline(failed) == "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; …"
    assert headline({"status": "timeout", "error": "time limit 00:00:02 reached; stopped"}) == \
        "time limit 00:00:02 reached; stopped"


def test_a_point_whose_record_the_results_folder_would_not_take_is_named_where_it_went(tmp_path):
    from caraml.campaign.local import _saved_elsewhere

    results = tmp_path / "results"
    (results / "runs").mkdir(parents=True)
    assert _saved_elsewhere({"path": str(results / "runs" / "a.json")}, str(results)) is None
    assert _saved_elsewhere({"path": None}, str(results)) is None
    fallback = str(tmp_path / "caraml-unsaved" / "a.json")
    assert _saved_elsewhere({"path": fallback}, str(results)) == fallback


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_in_a_terminal_the_bar_keeps_its_width_and_labels_are_text(monkeypatch):
    import sys

    from caraml.campaign import progress

    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv("NO_COLOR", "1")
    tally = progress.Tally(total=3, to_run=3)
    with progress.display("fno", tally) as display:
        assert isinstance(display, progress.RichDisplay)
        display.starting(1, "0123456789abcdef", "[bold]k=v[/bold] " + "key=value " * 40)
        display.bar.refresh()
        display.line("caraml: [1/3] 0123456789abcdef ok: 5.5 timesteps/s  [red]batch_size=4[/red]")
        tally.finished_one(3.0)
        tally.passed += 1
        display.advance()
        display.bar.refresh()
    shown = term.getvalue()
    assert "caraml: [1/3] 0123456789abcdef ok: 5.5 timesteps/s  [red]batch_size=4[/red]" in shown  # not markup
    bars = [ln for ln in re.split(r"[\r\n]", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\n", shown)) if "sweep fno" in ln]
    assert bars, shown
    running = next(ln for ln in bars if "0123456789abcdef" in ln)
    assert "0/3" in running and "[bold]k=v[/bold]" in running and running.endswith("…") and len(running) <= 250
    bar = bars[-1]
    assert "1/3" in bar and "ETA" in bar and "0123456789abcdef" not in bar, bar  # the point ended: no label
    assert len(bar) <= 250 and bar.startswith("sweep fno ━━━"), bar
    assert bar.index(" 1/3") - len("sweep fno ") >= 30, bar  # the bar (its undone part blank without colour)
