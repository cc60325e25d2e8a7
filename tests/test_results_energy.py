"""Reading energy as the power monitor really writes it: combine() output, a real `caraml run` record with a
generated RAPL tree whose counter moves, `caraml plot power` on it, per-device power lines, harness keys."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from conftest import caraml, cli, cli_env
from handmade import image, write_power_csv
from power_trees import moving_counter, rapl_tree

from caraml.power import energy as E
from caraml.results.aggregate import Point
from caraml.results.energy import energy_of, read_timeseries
from caraml.results.plots import device_lines
from caraml.settings import MEASUREMENT_KEYS


def _summary(host, watts, seconds=10.0):
    ts = [i * 0.5 for i in range(int(seconds / 0.5) + 1)]
    spans = E.windows([("setup", 0.0), ("warmup", 2.0), ("measure", 4.0), ("done", 9.0)], ts[-1])
    dev = {"key": "nvml:g0", "backend": "nvml", "name": "GPU", "uuid": "g0", "scope": "s", "kind": "accelerator",
           "counter": True, "power": True, "note": "", "info": {}}
    return {"available": True, "host": host, "phases": spans, "timeseries": f"run.power.{host}.csv",
            "devices": [E.device_summary(dev, ts, [watts] * len(ts), [watts * t for t in ts], spans)]}


def test_energy_of_reads_combine_output(tmp_path):
    raw = E.combine([_summary("n1", 100.0), _summary("n2", 200.0)], units=900.0, unit="images")
    record = {"metrics": {"units": 900.0, "energy": raw}, "path": str(tmp_path / "runs" / "r.json")}
    energy = energy_of(record)
    measured = 300 * 5 / 3600                                   # both nodes, 5 s measured window
    assert energy.available and energy.window == "measure"
    assert energy.total_wh == pytest.approx(measured) and energy.measure_wh == pytest.approx(measured)
    assert energy.run_wh == pytest.approx(300 * 10 / 3600)      # the whole run is run_wh, not total_wh
    assert energy.units_per_wh == pytest.approx(900.0 / measured)
    assert energy.timeseries == (tmp_path / "runs" / "run.power.n1.csv", tmp_path / "runs" / "run.power.n2.csv")
    assert energy.per_device_wh(2) == pytest.approx(measured / 2)


@pytest.mark.subprocess
def test_real_run_record_reads_and_plots_power(tmp_path, results):
    base = rapl_tree(tmp_path / "sys")
    stop = threading.Event()
    ticker = threading.Thread(target=moving_counter, args=(base, stop), daemon=True)
    ticker.start()
    try:
        proc = caraml("run", "image_classification", "power=rapl", "power_interval_ms=50", "--preset", "smoke",
                      "--results", results, "--json", env=cli_env(CARAML_SYSFS_ROOT=tmp_path / "sys"), check=0)
    finally:
        stop.set()
        ticker.join()
    record = json.loads(proc.stdout)
    energy = energy_of(record)
    assert energy.available and energy.source == "counter", energy.reason
    assert energy.measure_wh is not None and energy.measure_wh > 0 and energy.measure_wh == energy.total_wh
    assert energy.run_wh > energy.total_wh
    assert energy.units_per_wh == pytest.approx(record["metrics"]["units"] / energy.measure_wh)
    assert len(energy.timeseries) == 1 and energy.timeseries[0].is_file()
    rows = read_timeseries(energy.timeseries[0])             # RAPL has counters only: power from their steps
    package = [r for r in rows if r["uuid"] == "package-0"]
    assert package and max(r["power_w"] for r in package) > 0
    assert {r["phase"] for r in rows} >= {"warmup", "measure"}

    out = tmp_path / "plots"
    listed = cli("plot", "power", "--results", results, "--out", out, check=0).stdout.split()  # reads: in-process
    assert [Path(p).name for p in listed] == [f"power-{record['run_id']}.png", f"power-{record['run_id']}.svg"]
    assert Path(listed[0]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_two_devices_of_one_name_are_two_lines(tmp_path):
    path = tmp_path / "p.csv"
    write_power_csv(path, devices=("GPU-6a1e0b2c-aaaa", "GPU-93c2d4e5-bbbb"))
    lines = device_lines(read_timeseries(path))
    assert sorted(lines) == ["node1 NVIDIA H100 GPU-6a1e0b2c", "node1 NVIDIA H100 GPU-93c2d4e5"]
    for series in lines.values():
        times = [r["time_s"] for r in series]
        assert times == sorted(times) and len(times) == len(set(times)) == 60   # one sample per time: no zig-zag


def test_harness_keys_follow_the_harness_params_but_not_device():
    assert {"warmup_steps", "measure_steps", "power", "power_interval_ms", "idle_baseline_s"} <= set(MEASUREMENT_KEYS)
    assert "device" not in MEASUREMENT_KEYS
    base = Point("x", "image_classification", [image("H100", 64, "bf16", 1.0)]).config()
    assert "device" in base and "power" not in base
    rec = image("H100", 64, "bf16", 1.0)
    rec["params"].update(power="off", power_interval_ms=10.0, idle_baseline_s=5.0)
    assert Point("x", "image_classification", [rec]).config() == base       # measurement settings only
    rec["params"]["device"] = "cpu"
    assert Point("x", "image_classification", [rec]).config() != base      # a cpu run is another configuration
