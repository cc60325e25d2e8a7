"""Energy files, energy sources and the scaling plot's efficiency, pinned where a changed formula would still pass
looser tests. The fixtures avoid the symmetric cases that hid them: nodes listed out of rank order, a counter
that disagrees with the power samples, a baseline of more than one device.
"""

from __future__ import annotations

import csv

import handmade
import pytest

from caraml.power import energy as E


# jpwr's files are named by node rank, not by list position ---------------------------------------------------------
def test_jpwr_files_are_named_by_node_rank_not_list_position(tmp_path):
    from caraml.power import jpwr

    nodes = []
    for rank, host in ((1, "jwb0002"), (0, "jwb0001"), (3, "jwb0004")):  # out of order, rank 2 absent
        path = tmp_path / f"run.power.{host}.csv"
        handmade.write_power_csv(path)
        nodes.append({"host": host, "timeseries": str(path), "started_wall": 1.7e9, "node_rank": rank,
                      "devices": [{"backend": "nvml", "uuid": "GPU-6a1e-0", "name": "NVIDIA H100"}]})
    out = jpwr.write_run(nodes, tmp_path, "RUN", "JUPITER")
    folder = tmp_path / "RUN.caraml-energy"
    assert sorted(p.name for p in folder.glob("JUPITER_power.?.csv")) == [
        "JUPITER_power.0.csv", "JUPITER_power.1.csv", "JUPITER_power.3.csv"]
    for rank, host in ((1, "jwb0002"), (0, "jwb0001"), (3, "jwb0004")):
        with open(folder / f"JUPITER_power.{rank}.csv", newline="") as f:
            rows = list(csv.reader(f))
        assert rows[1][-2:] == [host, str(rank)]
        with open(folder / f"JUPITER_power.{rank}.energy.csv", newline="") as f:
            energy = dict(csv.reader(f))
        assert (energy["nodename"], energy["rank"]) == (host, str(rank))
    assert [(n["host"], n["rank"]) for n in out["nodes"]] == [("jwb0002", 1), ("jwb0001", 0), ("jwb0004", 3)]
    with open(folder / "combined_energy.csv", newline="") as f:
        combined = list(csv.reader(f))
    assert [row[1:3] for row in combined[1:]] == [["jwb0002", "1"], ["jwb0001", "0"], ["jwb0004", "3"]]


def test_jpwr_missing_node_is_named_by_its_rank(tmp_path):
    from caraml.power import jpwr

    out = jpwr.write_run([{"host": "jwb0009", "available": False, "reason": "monitor died", "node_rank": 5}],
                         tmp_path, "RUN", "JUPITER")
    assert out["missing"] == ["node rank 5 (jwb0009): no CSV time series (monitor died)"]


# a device without a trusted counter integrates its power ----------------------------------------------------------
def _device(counter: bool):
    return {"key": "nvml:GPU-a", "backend": "nvml", "name": "GPU-a", "uuid": "GPU-a", "scope": "s",
            "kind": "accelerator", "counter": counter, "power": True, "note": "", "info": {}}


def test_device_without_a_trusted_counter_integrates_power_even_with_energy_readings():
    ts = [i * 0.5 for i in range(21)]  # 0..10 s
    ps = [100.0] * len(ts)  # 100 W: 1000 J
    es = [300.0 * t for t in ts]  # a counter that says 300 W, not to be trusted
    spans = E.windows([("warmup", 0.0), ("measure", 4.0)], ts[-1])
    untrusted = E.device_summary(_device(counter=False), ts, ps, es, spans)
    assert untrusted["source"] == "integrated"
    assert untrusted["energy_j"] == pytest.approx(1000.0)
    assert untrusted["phases"]["measure"]["energy_j"] == pytest.approx(600.0)
    assert untrusted["phases"]["measure"]["counter_j"] is None
    trusted = E.device_summary(_device(counter=True), ts, ps, es, spans)
    assert trusted["source"] == "counter" and trusted["energy_j"] == pytest.approx(3000.0)
    assert trusted["phases"]["measure"]["energy_j"] == pytest.approx(1800.0)


# the scaling plot's efficiency against a baseline of several devices ----------------------------------------------
def test_scaling_efficiency_divides_by_the_baselines_device_count():
    from caraml.results.aggregate import Point
    from caraml.results.plots import scaling_lines

    points = [Point(f"p{n}", "image_classification", [handmade.image("H100", 64, "bf16", rate, devices=n)])
              for n, rate in ((2, 2000.0), (4, 3600.0), (8, 6000.0))]
    lines = scaling_lines(points)
    assert len(lines) == 1
    (rows,) = lines.values()
    assert [(d, t) for d, t, _ in rows] == [(2, 2000.0), (4, 3600.0), (8, 6000.0)]
    assert [e for _, _, e in rows] == pytest.approx([1.0, 0.9, 0.75])


# the run's total: power in watts, peaks summed over devices, a device that stopped reading spoils the total ---------
def _two_gpu_node(failure: str | None = None):
    ts = [i * 0.5 for i in range(21)]  # 0..10 s
    spans = E.windows([("setup", 0.0), ("warmup", 2.0), ("measure", 4.0), ("done", 9.0)], ts[-1])
    devices = [E.device_summary(_device(counter=True) | {"uuid": uuid, "name": uuid, "key": f"nvml:{uuid}"}, ts,
                                [watts] * len(ts), [watts * t for t in ts], spans, failure if uuid == "GPU-b" else None)
               for uuid, watts in (("GPU-a", 100.0), ("GPU-b", 300.0))]
    return {"available": True, "host": "n1", "phases": spans, "devices": devices}


def test_window_total_gives_watts_and_the_sum_of_device_peaks():
    out = E.combine([_two_gpu_node()], units=1000, unit="images")
    assert out["total_wh"] == pytest.approx(400 * 5 / 3600)  # 100 W + 300 W over the 5 s measured
    assert out["avg_power_w"] == pytest.approx(400.0)
    assert out["peak_power_w"] == pytest.approx(400.0)  # each device's peak added, not the largest one
    assert out["units_per_wh"] == pytest.approx(1000 / (400 * 5 / 3600))


def test_a_device_that_stopped_reading_leaves_no_total():
    out = E.combine([_two_gpu_node(failure="NVML read failed after 3 s")], units=1000, unit="images")
    assert out["total_wh"] is None and out["units_per_wh"] is None and out["run_wh"] is None
    assert "GPU-b" in out["reason"] and "NVML read failed" in out["reason"]
