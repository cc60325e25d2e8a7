"""The loss on screen: a GPT run's live line shows its loss (read back without a device synchronisation) and the
measured window's ETA; `caraml show` prints the loss, and the GPT table has a Loss column. A sweep of until-steady
points gives its ETA an upper bound from measure_max_seconds."""

from __future__ import annotations

import json

import torch
from conftest import cli

from caraml.campaign.expand import SweepPoint
from caraml.campaign.progress import Tally, window_cap
from caraml.kit.readback import Readback

EVERY_STEP = "log_interval=0.000001"  # a line after every step
TINY_GPT = ("run", "llm_training", "--preset", "smoke", "power=off", "warmup_steps=1", "measure_steps=4")


def _measuring_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("caraml: measuring step ")]


def test_a_gpt_run_shows_its_loss_and_eta_and_keeps_the_loss_in_show_and_the_table(tmp_path):
    proc = cli(*TINY_GPT, EVERY_STEP, "--results", tmp_path, "--json", check=0)
    record = json.loads(proc.stdout)
    lines = _measuring_lines(proc.stderr)
    assert lines and all(" loss " in line and "  ETA " in line for line in lines), proc.stderr
    assert lines[-1].startswith("caraml: measuring step 4/4") and lines[-1].endswith("ETA 0.0 ms"), lines[-1]
    shown_loss = float(lines[-1].split(" loss ")[1].split()[0])
    assert abs(shown_loss - record["metrics"]["loss"]["last"]) <= 1e-3 * abs(shown_loss)  # on the CPU: at hand
    events = [json.loads(e) for e in next((tmp_path / "runs").glob("*.events.jsonl")).read_text().splitlines()]
    measured = [e["metadata"] for e in events if e["key"] == "throughput" and e["metadata"]["phase"] == "measuring"]
    assert all("loss" in e and "eta_s" in e for e in measured)
    show = cli("show", record["run_id"], "--results", tmp_path, check=0).stdout
    line = next(la for la in show.splitlines() if la.startswith("  loss "))
    assert " last " in line and f"{record['metrics']['loss']['steps']} steps)" in line, show
    table = cli("result", "--results", tmp_path, "--workload", "llm_training", "--format", "csv", check=0).stdout
    header, row = table.splitlines()[:2]
    loss_at = header.split(",").index("Loss")
    assert float(row.split(",")[loss_at]) == record["metrics"]["loss"]["last"]


def test_an_until_steady_window_says_its_eta_is_at_most_the_caps(tmp_path):
    proc = cli(*TINY_GPT[:-1], EVERY_STEP, "measure=until-steady", "measure_max_steps=12", "measure_ci=0.0001",
               "--results", tmp_path, check=0)
    lines = _measuring_lines(proc.stderr)
    assert lines and all("  ETA <= " in line and "/" not in line.split()[3] for line in lines), proc.stderr


def test_the_readback_gives_the_newest_completed_value_and_none_before_any():
    back = Readback()
    assert back.latest() is None
    back.request(None)
    assert back.latest() is None
    back.request(torch.tensor(2.5))
    back.request(torch.tensor([7.0]))
    assert back.latest() == 7.0


def _point(params: dict) -> SweepPoint:
    return SweepPoint(id="p", workload="image_classification", system="CPU", preset=None, params=params)


def test_a_sweep_of_until_steady_points_bounds_its_eta_by_the_window_cap():
    assert window_cap([_point({"measure": "fixed"})]) is None
    assert window_cap([_point({"measure": "until-steady", "measure_max_seconds": 60.0}),
                       _point({"measure": "until-steady", "measure_max_seconds": 90.0})]) == 90.0
    tally = Tally(total=3, to_run=3, started=0.0, window_cap_s=60.0)
    tally.finished_one(20.0)
    assert tally.eta() == 40.0 and tally.eta_upper() == 2 * (20.0 + 60.0)
    assert "ETA 40s (at most 2m40s)" in tally.clock(now=30.0)
    assert "at most" not in Tally(total=2, to_run=2, durations=[5.0]).clock(now=1.0)
