"""measure=until-steady: the window runs until the mean step time's 95 % interval is within measure_ci (batch means,
a drift check, at least 20 steps and 20 s, caps), the same step on every rank; the record's metrics.window says how it
ended, `caraml show` and the `interval` column show it, and a window length given with it is refused."""

from __future__ import annotations

import json
import random

import pytest
from conftest import ROOT, cli, cli_env, records_in, run, torchrun

from caraml.measure import steady
from caraml.results.table import format_value

TINY = ("run", "image_classification", "--preset", "smoke", "power=off", "data=synthetic-device", "batch_size=2",
        "image_size=32", "num_classes=10", "warmup_steps=2", "log_interval=0")
# A GPT of two layers: steps of milliseconds, so a window of 20-150 steps takes seconds on a CPU.
TINY_GPT = ("run", "llm_training", "--preset", "smoke", "power=off", "warmup_steps=1", "log_interval=0")
GPT_NO_WARMUP = tuple(a for a in TINY_GPT if not a.startswith("warmup_steps="))
TOKENS_PER_STEP = 2 * 64  # the smoke preset's micro-batch of 2 sequences of 64 tokens, per replica
STEADY = ("measure=until-steady", "measure_ci=0.05", "measure_max_steps=150")


def _noise(n: int, mean: float = 0.01, rel: float = 0.05, seed: int = 1) -> list[float]:
    r = random.Random(seed)
    return [mean * (1 + rel * r.gauss(0, 1)) for _ in range(n)]


def test_steady_noise_stops_once_the_interval_is_narrow_enough():
    v = steady.verdict(_noise(300), target_ci=0.01)
    assert v.stop and not v.drifting and v.steps == 300
    assert v.mean == pytest.approx(0.01, rel=0.01) and v.ci_rel <= 0.01


def test_never_before_the_minimum_steps_even_when_narrow():
    v = steady.verdict(_noise(steady.MIN_STEPS - 1, rel=0.001), target_ci=0.05)
    assert not v.stop and v.ci_rel is not None and v.ci_rel < 0.05
    assert steady.MIN_STEPS == steady.BATCHES == 20  # one step per batch mean at the least


def test_slow_steady_steps_stop_after_one_step_per_batch():
    # a GPT step of 10 s (global batch 512 takes 10-20 s) varying 0.3 %: 20 steps pin it to ±0.2 %; 100 take 17 min
    v = steady.verdict(_noise(20, mean=10.0, rel=0.003), target_ci=0.01)
    assert v.stop and v.steps == 20 and v.ci_rel < 0.005


def test_a_drifting_series_does_not_stop_though_its_interval_is_within_the_target():
    r = random.Random(2)
    series = [1 + 1e-4 * i + 1e-3 * r.gauss(0, 1) for i in range(2000)]  # +20 % over the window
    v = steady.verdict(series, target_ci=0.05)
    assert v.ci_rel < 0.05 and v.drifting and not v.stop


def test_noisy_steps_do_not_stop_at_a_tight_target():
    v = steady.verdict(_noise(500, rel=0.5), target_ci=0.001)
    assert not v.stop and v.ci_rel > 0.001


def test_too_few_steps_give_no_interval():
    assert steady.verdict([], 0.01).ci_rel is None and steady.verdict([0.1], 0.01).ci_rel is None


def test_students_t_quantiles():
    assert steady.t_975(1) == pytest.approx(12.706) and steady.t_975(19) == pytest.approx(2.093, abs=1e-3)
    assert steady.t_975(30) == pytest.approx(2.042, abs=1e-3) and steady.t_975(10**6) == pytest.approx(1.960, abs=1e-3)


def test_a_cap_reached_before_the_target_is_one_warning_with_the_achieved_interval():
    window = steady.window_record("until-steady", 150, 3.0, _noise(150, rel=0.5), 0.001, "max_steps")
    line = steady.cap_warning(window, "measure_max_steps=150")
    assert "measure_max_steps=150" in line and "150 steps" in line and f"±{100 * window['ci_rel']:.2f} %" in line
    assert steady.cap_warning({**window, "stopped_by": "interval"}, "") is None
    assert steady.cap_warning({**window, "mode": "fixed", "stopped_by": "steps"}, "") is None


def test_checks_come_at_the_same_steps_on_every_rank_and_rarer_in_long_windows():
    assert steady.check_every(10) == 10 and steady.check_every(999) == 10 and steady.check_every(5000) == 50
    assert steady.check_every(10, slow=True) == 1  # slow steps: after each, so the time cap overshoots by one


def test_a_cap_with_a_narrow_but_moving_window_says_the_halves_disagree():
    window = steady.window_record("until-steady", 150, 3.0, _noise(150, rel=0.01), 0.05, "max_seconds")
    assert "halves disagree" in steady.cap_warning(window, "measure_max_seconds=3")


def test_the_interval_column_reads_plus_minus_percent():
    assert format_value(0.0123, "pm") == "±1.2 %"


def test_a_tiny_cpu_run_until_steady_records_its_window(tmp_path):
    proc = cli(*TINY_GPT, *STEADY, "--results", tmp_path, "--json", check=0)
    record = json.loads(proc.stdout)
    window, m = record["metrics"]["window"], record["metrics"]
    assert record["status"] == "ok" and window["mode"] == "until-steady" and window["target_ci"] == 0.05
    assert window["stopped_by"] in ("interval", "max_steps") and 20 <= window["steps"] <= 150
    assert window["steps"] == m["measured_steps"] and window["ci_rel"] > 0
    if window["stopped_by"] == "interval":
        assert window["ci_rel"] <= 0.05
    if window["stopped_by"] == "max_steps":  # the cap came first: one line says so, with what was reached
        assert proc.stderr.count("caraml: warning: the measured window stopped at measure_max_steps=150") == 1
    # measurement settings, not identity: a fixed run of the same configuration has the same id
    fixed = json.loads(cli(*TINY_GPT, "--results", tmp_path, "--json", check=0).stdout)
    assert fixed["id"] == record["id"] and fixed["metrics"]["window"]["mode"] == "fixed"
    assert fixed["metrics"]["window"]["stopped_by"] == "steps" and fixed["metrics"]["window"]["target_ci"] is None
    shown = cli("show", record["run_id"], "--results", tmp_path, check=0).stdout
    line = next(la for la in shown.splitlines() if la.startswith("  window "))
    assert f"until-steady: {window['steps']} steps in " in line and "(target ±5.00 %)" in line, shown
    table = cli("result", "--results", tmp_path, "--workload", "llm_training", "--columns",
                "id,interval", "--format", "csv", check=0).stdout
    assert "Interval" in table.splitlines()[0]


def test_a_window_length_given_with_until_steady_is_refused_in_one_line(tmp_path):
    for given in ("measure_steps=20", "measure_seconds=5"):
        proc = cli(*TINY, "measure=until-steady", given, "--results", tmp_path, check=2)
        key = given.partition("=")[0]
        assert proc.stderr.count("\n") == 1 and f"{key}=" in proc.stderr and "measure=until-steady" in proc.stderr
    assert not (tmp_path / "runs").exists() or not records_in(tmp_path)


def test_a_caps_own_step_count_stops_it_with_the_warning(tmp_path):
    proc = cli(*TINY_GPT, "measure=until-steady", "measure_ci=0.0001", "measure_max_steps=20", "--results", tmp_path,
               "--json", check=0)
    window = json.loads(proc.stdout)["metrics"]["window"]
    assert window["stopped_by"] == "max_steps" and window["steps"] == 20
    assert "warning: the measured window stopped at measure_max_steps=20 after 20 steps" in proc.stderr


@pytest.mark.subprocess
@pytest.mark.multiprocess
def test_two_ranks_stop_on_the_same_step(results):
    cmd = [*torchrun(), "-m", "caraml", *TINY_GPT, *STEADY, "--results", str(results), "--json"]
    proc = run(cmd, env=cli_env(), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    m = record["metrics"]
    assert record["status"] == "ok" and m["window"]["stopped_by"] in ("interval", "max_steps")
    # both ranks ran the window's steps: the units are both replicas' tokens of that many steps
    assert m["units"] == 2 * TOKENS_PER_STEP * m["window"]["steps"] and m["measured_steps"] == m["window"]["steps"]



def _suite(tmp_path, params: str):
    from caraml.campaign import suite as suite_mod

    path = tmp_path / "s.yaml"
    path.write_text(f"workload: image_classification\npreset: smoke\nparams:\n{params}")
    return suite_mod.load(str(path))


def test_a_sweep_of_until_steady_points_writes_no_window_length_and_refuses_one_set_with_it(tmp_path):
    from caraml.campaign.expand import expand
    from caraml.campaign.launchers import caraml_run_args
    from caraml.errors import BadInput

    (point,) = expand(_suite(tmp_path, "  measure: until-steady\n  measure_ci: 0.02\n"), set(), "CPU")
    args = caraml_run_args(point, "r")
    assert "measure=until-steady" in args and "measure_ci=0.02" in args
    assert not any(a.startswith(("measure_steps=", "measure_seconds=")) for a in args), args
    (fixed,) = expand(_suite(tmp_path, "  batch_size: 4\n"), set(), "CPU")
    assert not any(a.startswith(("measure=", "measure_ci=", "measure_max")) for a in caraml_run_args(fixed, "r"))
    with pytest.raises(BadInput, match="measure_steps=9 conflicts with measure=until-steady"):
        expand(_suite(tmp_path, "  measure: until-steady\n  measure_steps: 9\n"), set(), "CPU")


def test_the_window_lasts_its_minimum_seconds_even_when_the_interval_is_narrow_sooner(tmp_path):
    """A data path or a clock that changes over seconds shows only in a window that long: the interval alone does not
    end the window before measure_min_seconds."""
    proc = cli(*TINY_GPT, "measure=until-steady", "measure_ci=0.5", "measure_min_seconds=8", "--results", tmp_path,
               "--json", check=0)
    window = json.loads(proc.stdout)["metrics"]["window"]
    # at ±50 % the interval is there after the minimum 20 steps (milliseconds each); the window runs on to 8 s
    assert window["stopped_by"] == "interval" and window["seconds"] >= 8.0, window


def test_a_minimum_above_the_cap_is_refused_in_one_line(tmp_path):
    proc = cli(*TINY_GPT, "measure=until-steady", "measure_min_seconds=30", "measure_max_seconds=10", "--results",
               tmp_path, check=2)
    assert proc.stderr.count("\n") == 1 and "measure_min_seconds=30 is above measure_max_seconds=10" in proc.stderr


def test_repeated_points_run_round_after_round_and_their_spread_is_one_row_each():
    from caraml.compare import steady_window as sw

    points = sw.repeated([p for p in sw.group().points if p.name in ("ic_fixed", "ic_steady")], 2)
    assert [p.name for p in points] == ["ic_fixed.1", "ic_steady.1", "ic_fixed.2", "ic_steady.2"]
    assert sw.repeated(points[:1], 1) == points[:1]
    rows = [{"name": "ic_fixed.1", "status": "ok", "throughput": 100.0, "ci_rel": 0.02, "wall_s": 50.0},
            {"name": "ic_steady.1", "status": "ok", "throughput": 90.0, "ci_rel": 0.01, "wall_s": 70.0},
            {"name": "ic_fixed.2", "status": "ok", "throughput": 110.0, "ci_rel": 0.04, "wall_s": 52.0},
            {"name": "ic_steady.2", "status": "failed", "throughput": None, "wall_s": 3.0}]
    sw.agreement(rows)
    assert rows[1]["vs_fixed"] == pytest.approx(0.9) and "vs_fixed" not in rows[3]
    fixed, steady = sw.spread(rows)
    assert (fixed["name"], fixed["n"], fixed["min"], fixed["max"]) == ("ic_fixed", 2, 100.0, 110.0)
    assert fixed["median"] == 105.0 and fixed["range_rel"] == pytest.approx(10 / 105)
    assert fixed["ci_rel"] == pytest.approx(0.03) and fixed["vs_fixed"] is None
    assert (steady["n"], steady["vs_fixed"]) == (1, pytest.approx(90 / 105))


def test_a_long_capped_point_is_set_against_its_workloads_fixed_window():
    from caraml.compare import steady_window as sw

    rows = [{"name": "fno_fixed", "status": "ok", "throughput": 700.0, "wall_s": 60.0},
            {"name": "fno_steady_long", "status": "ok", "throughput": 770.0, "ci_rel": 0.015, "wall_s": 190.0},
            {"name": "icdev_steady", "status": "ok", "throughput": 50.0, "wall_s": 70.0}]
    by_name = {s["name"]: s for s in sw.spread(rows)}
    assert by_name["fno_steady_long"]["vs_fixed"] == pytest.approx(1.1)
    assert by_name["icdev_steady"]["vs_fixed"] is None  # no icdev_fixed among the rows


def test_a_warm_up_bounded_in_seconds_ends_after_three_steps_at_the_least(tmp_path):
    """warmup_max_seconds ends a long warm-up early (steps of minutes), never before the compiling first step and two
    more; the record says how many ran, and the bound is a measurement setting: the id does not change."""
    slow = json.loads(cli(*GPT_NO_WARMUP, "warmup_steps=100000", "warmup_max_seconds=0.5", "measure_steps=3",
                          "--results", tmp_path, "--json", check=0).stdout)
    warm = slow["metrics"]["warmup"]
    assert 3 <= warm["steps"] < 100000 and warm["time_s"] >= 0.5 and slow["status"] == "ok"
    at_least = json.loads(cli(*GPT_NO_WARMUP, "warmup_steps=10", "warmup_max_seconds=0.000001", "measure_steps=3",
                              "--results", tmp_path, "--json", check=0).stdout)
    assert at_least["metrics"]["warmup"]["steps"] == 3 and at_least["id"] == slow["id"]
    plain = json.loads(cli(*GPT_NO_WARMUP, "warmup_steps=4", "measure_steps=3", "--results", tmp_path, "--json",
                           check=0).stdout)
    assert plain["metrics"]["warmup"]["steps"] == 4 and plain["id"] == slow["id"]


def test_an_interval_exactly_at_the_target_stops():
    times = _noise(100)
    assert steady.verdict(times, target_ci=steady.verdict(times, 1.0).ci_rel).stop


def test_a_minimum_equal_to_the_cap_is_accepted():
    from caraml.settings import check_window

    check_window({"measure": "until-steady", "measure_min_seconds": 10.0, "measure_max_seconds": 10.0}, {}, "run")


def test_the_time_share_is_the_steady_runs_time_over_the_fixed_runs():
    from caraml.compare import steady_window as sw

    rows = [{"name": "ic_fixed", "status": "ok", "throughput": 100.0, "wall_s": 50.0},
            {"name": "ic_steady", "status": "ok", "throughput": 90.0, "wall_s": 75.0}]
    sw.agreement(rows)
    assert rows[1]["time_share"] == pytest.approx(1.5)


def test_batch_means_leave_out_the_earliest_steps_not_the_latest():
    assert steady._batch_means([100.0] + [1.0] * 40, 20) == [1.0] * 20


def test_the_spread_counts_only_runs_that_ended_ok():
    from caraml.compare import steady_window as sw

    rows = [{"name": "gpt_fixed.1", "status": "ok", "throughput": 100.0, "wall_s": 50.0},
            {"name": "gpt_fixed.2", "status": "interrupted", "throughput": 10.0, "wall_s": 5.0}]
    (only,) = sw.spread(rows)
    assert (only["n"], only["min"], only["max"]) == (1, 100.0, 100.0)


def test_a_time_cap_names_itself_in_its_warning(tmp_path):
    proc = cli(*TINY_GPT, "measure=until-steady", "measure_ci=0.0001", "measure_min_seconds=0.5",
               "measure_max_seconds=1", "--results", tmp_path, "--json", check=0)
    window = json.loads(proc.stdout)["metrics"]["window"]
    assert window["stopped_by"] == "max_seconds" and window["seconds"] >= 1.0
    assert f"warning: the measured window stopped at measure_max_seconds=1 after {window['steps']} steps" \
        in proc.stderr, proc.stderr


def test_the_interval_is_students_t_over_the_batch_means_standard_error():
    mean, half = steady.interval([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5 and half == pytest.approx(3.182 * 1.2909944 / 2, rel=1e-4)


def test_halves_that_differ_by_more_than_their_interval_are_a_trend():
    first = [0.0, 1.0] * 5  # each half's variance 0.278: the difference's 95 % interval is ±0.495
    assert steady._halves_differ(first + [m + 0.7 for m in first])
    assert not steady._halves_differ(first + [m + 0.3 for m in first])


def test_a_cap_reached_with_the_interval_exactly_at_its_target_blames_the_trend():
    window = {"mode": "until-steady", "steps": 40, "ci_rel": 0.01, "target_ci": 0.01, "stopped_by": "max_seconds"}
    assert "halves disagree" in steady.cap_warning(window, "measure_max_seconds=60")


class _OtherRank:
    """A world of two: this rank's value reduced with the other rank's."""

    world_size = 2

    def __init__(self, other: float):
        self.other = other

    def all_reduce(self, value: float, op: str = "sum") -> float:
        return max(value, self.other) if op == "max" else value + self.other


class _Clock:
    def __init__(self, elapsed: float, times: list):
        import time

        self.wall_start, self._times = time.perf_counter() - elapsed, times

    def completed_times(self):
        return self._times


def test_the_interval_stops_a_window_only_when_every_rank_has_it_and_wins_over_a_cap_reached_with_it():
    from caraml.measure.harness import _steady_agreed
    from caraml.settings import MeasureSettings

    settings = MeasureSettings(measure="until-steady", measure_min_seconds=20, measure_max_seconds=100)
    steady_times = _noise(400, rel=0.01)
    assert _steady_agreed(_Clock(30, steady_times), settings, _OtherRank(0.0), 400, slow=True) is None
    assert _steady_agreed(_Clock(30, steady_times), settings, _OtherRank(1.0), 400, slow=True) == "interval"
    # the cap and the interval at the same check: the window did reach its interval, and says so
    assert _steady_agreed(_Clock(120, steady_times), settings, _OtherRank(1.0), 400, slow=True) == "interval"
    assert _steady_agreed(_Clock(120, steady_times), settings, _OtherRank(0.0), 400, slow=True) == "max_seconds"


def test_an_until_steady_eta_is_the_nearer_of_its_two_caps():
    from types import SimpleNamespace

    from caraml.measure.harness import _Lines
    from caraml.settings import MeasureSettings

    lines = object.__new__(_Lines)  # only its ETA: no run needed
    lines.total, lines.clock = None, SimpleNamespace(wall_start=100.0)
    lines.settings = MeasureSettings(measure="until-steady", measure_max_steps=1000, measure_max_seconds=600)
    assert lines._eta(900, 0.5, now=110.0) == pytest.approx(50.0)  # 100 steps left at 0.5 s
    assert lines._eta(100, 0.5, now=110.0) == pytest.approx(450.0)  # 900 steps left: 450 s, before the 590 s cap
    assert lines._eta(100, 1.0, now=110.0) == pytest.approx(590.0)  # the time cap comes first
    lines.total = 200
    assert lines._eta(150, 0.5, now=110.0) == pytest.approx(25.0)  # a fixed window: the steps left
