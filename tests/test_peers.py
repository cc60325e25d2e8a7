"""The peer comparison (caraml.peers, bench/peer_bench.py): pairing, alternation, statistics, reading figures."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import cli_env

from caraml import peers

# A stand-in for a peer's script: prints its figure as CARAML's script does, and appends its call to a journal.
FAKE_PEER = """
import sys
value, journal = sys.argv[1], sys.argv[2]
with open(journal, "a") as f:
    f.write(sys.argv[3] + "\\n")
print("Training for 1 epoch(s) took 3.2 s")
print(f"Average Images/s: {value}")
"""


def fake_side(tmp_path, label: str, value: str, figure: str = r"Average Images/s: ([\d.]+)") -> peers.Side:
    script = tmp_path / "fake_peer.py"
    script.write_text(FAKE_PEER)
    return peers.Side(label, (sys.executable, script, value, tmp_path / "journal", label),
                      {"images_per_s": peers.last_number(figure)})


def test_each_repeat_is_a_pair_whose_order_swaps():
    a = peers.Point("a", peers.Side("p", (), {}), peers.Side("c", (), {}))
    b = peers.Point("b", peers.Side("p", (), {}), peers.Side("c", (), {}))
    got = [(p.name, side, r) for p, side, r in peers.order([a, b], 3)]
    assert got == [("a", "peer", 0), ("a", "caraml", 0), ("a", "caraml", 1), ("a", "peer", 1),
                   ("a", "peer", 2), ("a", "caraml", 2),
                   ("b", "peer", 0), ("b", "caraml", 0), ("b", "caraml", 1), ("b", "peer", 1),
                   ("b", "peer", 2), ("b", "caraml", 2)]


def test_the_comparison_gives_both_medians_ranges_ratio_and_overlap():
    got = peers.compare([100.0, 90.0, 120.0], [101.0, 99.0, 130.0, None])
    assert got["peer"] == {"n": 3, "median": 100.0, "min": 90.0, "max": 120.0}
    assert got["caraml"] == {"n": 3, "median": 101.0, "min": 99.0, "max": 130.0}
    assert got["ratio"] == pytest.approx(1.01)
    assert got["overlap"] is True and got["agrees"] is True


def test_disjoint_ranges_do_not_overlap_and_a_far_median_disagrees():
    got = peers.compare([100.0, 101.0, 102.0], [110.0, 111.0, 112.0])
    assert got["overlap"] is False
    assert got["ratio"] == pytest.approx(111 / 101)
    assert got["agrees"] is False


def test_a_median_inside_a_wide_peer_range_agrees_beyond_the_tolerance():
    # 8 % apart, but the peer's own runs spread from 80 to 130: inside its range counts as agreement
    got = peers.compare([80.0, 100.0, 130.0], [108.0, 108.0, 108.0])
    assert got["ratio"] == pytest.approx(1.08)
    assert got["agrees"] is True
    assert peers.compare([100.0, 100.5], [108.0])["agrees"] is False


def test_no_figures_on_one_side_gives_no_ratio():
    got = peers.compare([None, None], [5.0])
    assert got["peer"] is None and got["ratio"] is None and got["overlap"] is None


@pytest.mark.subprocess
def test_runs_alternate_and_each_reads_its_own_figure(tmp_path):
    point = peers.Point("p1", fake_side(tmp_path, "peer", "950"), fake_side(tmp_path, "caraml", "1000.5"))
    lines = []
    runs = peers.run_all([point], 2, tmp_path / "work", timeout=60, log=lines.append)
    assert (tmp_path / "journal").read_text().split() == ["peer", "caraml", "caraml", "peer"]
    assert [(r["side"], r["repeat"], r["figures"]["images_per_s"]) for r in runs] == [
        ("peer", 0, 950.0), ("caraml", 0, 1000.5), ("caraml", 1, 1000.5), ("peer", 1, 950.0)]
    assert all(r["rc"] == 0 for r in runs) and len(lines) == 4
    (row,) = peers.summarise([point], runs)
    assert row["ratio"] == pytest.approx(1000.5 / 950) and row["overlap"] is False
    table = peers.markdown([row])
    assert "| p1 | images_per_s | peer: 950 (950-950, n=2) | caraml: 1,000 (1,000-1,000, n=2) | 1.053 | no | no |" \
        in table


@pytest.mark.subprocess
def test_a_spent_budget_starts_no_more_runs(tmp_path):
    point = peers.Point("p1", fake_side(tmp_path, "peer", "1"), fake_side(tmp_path, "caraml", "1"))
    lines = []
    runs = peers.run_all([point], 3, tmp_path / "work", timeout=60, budget=0.0, log=lines.append)
    assert len(runs) == 1  # the first run starts; the budget is checked before each later one
    assert "budget" in lines[-1]


@pytest.mark.subprocess
def test_a_hung_side_is_killed_with_its_children_and_kept_as_a_failed_run(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text("import subprocess, sys, time\n"
                      "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                      "print('started', flush=True)\ntime.sleep(600)\n")
    side = peers.Side("hangs", (sys.executable, script), {"x": peers.last_number(r"x (\d+)")})
    done, wall = peers.run_side(side, tmp_path / "w", timeout=3)
    assert done.rc != 0 and "killed after 3 s" in done.output and "started" in done.output
    assert wall < 60


def test_a_record_value_comes_from_the_one_record_of_the_run(tmp_path):
    runs = tmp_path / "results" / "runs"
    runs.mkdir(parents=True)
    (runs / "r.json").write_text(json.dumps({"metrics": {"caraml_images_per_s": {"value": 1234.5}, "flag": True}}))
    (runs / "r.events.jsonl").write_text("{}\n")
    done = peers.Finished(0, "", tmp_path)
    assert peers.record_value("metrics", "caraml_images_per_s", "value")(done) == 1234.5
    assert peers.record_value("metrics", "missing", "value")(done) is None
    assert peers.record_value("metrics", "flag")(done) is None  # a flag is no figure
    assert peers.record_value("metrics")(peers.Finished(1, "", tmp_path / "none")) is None


def test_the_last_matching_line_gives_the_figure():
    read = peers.last_number(r"elapsed time per iteration \(ms\): ([\d.,]+)")
    out = "elapsed time per iteration (ms): 1,200.5\nelapsed time per iteration (ms): 1,100.0\n"
    assert read(peers.Finished(0, out, None)) == 1100.0
    assert read(peers.Finished(0, "nothing", None)) is None


@pytest.mark.subprocess
def test_a_real_caraml_run_is_read_beside_a_fake_peer(tmp_path):
    """caraml's side as the bench runs it (its own folder, `--results results`), on a tiny CPU configuration."""
    env = cli_env()
    ours = peers.Side("caraml", (sys.executable, "-m", "caraml", "run", "image_classification", "--preset", "smoke",
                                 "convention=caraml-epochs", "epochs=1", "warmup_epochs=0", "dataset_size=32",
                                 "workers=0", "warmup_steps=1", "measure_steps=2", "--results", "results"),
                      {"images_per_s": peers.record_value("metrics", "caraml_images_per_s", "value")},
                      {"PYTHONPATH": env["PYTHONPATH"]})
    point = peers.Point("ic", fake_side(tmp_path, "peer", "10"), ours)
    runs = peers.run_all([point], 1, tmp_path / "work", timeout=300, log=lambda line: None)
    (caraml_run,) = [r for r in runs if r["side"] == "caraml"]
    assert caraml_run["rc"] == 0, caraml_run["tail"]
    assert caraml_run["figures"]["images_per_s"] > 0
