"""Energy arithmetic on synthetic series with known integrals, and the combine step (no double counting)."""

from __future__ import annotations

import math

import pytest

from caraml.power import energy as E


def test_trapezoid_exact_for_linear_power():
    ts = [i * 0.1 for i in range(101)]          # 0..10 s
    ps = [100 + 10 * t for t in ts]             # P = 100 + 10 t  ->  ∫0^10 = 1000 + 500 = 1500 J
    assert E.integrate(ts, ps, 0, 10) == pytest.approx(1500)
    # a window whose edges fall between samples is interpolated: ∫2.05^7.33 (100 + 10t) dt
    a, b = 2.05, 7.33
    assert E.integrate(ts, ps, a, b) == pytest.approx(100 * (b - a) + 5 * (b * b - a * a))


def test_trapezoid_vs_counter_on_a_sine():
    # P(t) = 300 + 100 sin(t); E(t) = 300 t + 100 (1 - cos t), both known exactly
    ts = [i * 0.01 for i in range(2001)]
    ps = [300 + 100 * math.sin(t) for t in ts]
    es = [300 * t + 100 * (1 - math.cos(t)) for t in ts]
    exact = 300 * 15 + 100 * (math.cos(5) - math.cos(20))
    assert E.counter_delta(ts, es, 5, 20) == pytest.approx(exact, rel=1e-9)
    assert E.integrate(ts, ps, 5, 20) == pytest.approx(exact, rel=1e-4)
    coarse = ts[::100], ps[::100]              # 1 s samples: the trapezoid's error shows, still small
    assert 1e-2 < abs(E.integrate(*coarse, 5, 20) - exact) < 0.01 * exact


def test_integrate_edges():
    assert E.integrate([0.0], [5.0], 0, 1) is None
    assert E.integrate([0.0, 1.0], [5.0, None], 0, 1) is None
    assert E.integrate([0.0, 1.0], [5.0, 5.0], 3, 4) is None
    assert E.integrate([0.0, 1.0], [5.0, 5.0], 0.5, 0.5) == 0.0


def _device(uuid, backend="nvml", kind="accelerator", counter=True):
    return {"key": f"{backend}:{uuid}", "backend": backend, "name": uuid, "uuid": uuid, "scope": "s", "kind": kind,
            "counter": counter, "power": True, "note": "", "info": {}}


def _node(host, uuids, watts=100.0, seconds=10.0):
    """A node summary as the monitor writes it: each GPU at constant power, counter and samples agree."""
    ts = [i * 0.5 for i in range(int(seconds / 0.5) + 1)]
    spans = E.windows([("setup", 0.0), ("warmup", 2.0), ("measure", 4.0), ("done", 9.0)], ts[-1])
    devices = [E.device_summary(_device(u), ts, [watts] * len(ts), [watts * t for t in ts], spans) for u in uuids]
    return {"available": True, "host": host, "phases": spans, "devices": devices}


def test_two_ranks_on_one_node_are_not_double_counted():
    node = _node("n1", ["GPU-a", "GPU-b"])
    # jpwr's combine summed one row per rank, each holding all GPUs of its node: 2x the energy
    twice = E.combine([node, node], units=1000, unit="images")
    once = E.combine([node], units=1000, unit="images")
    assert twice["duplicates_dropped"] == 2
    assert twice["total_wh"] == pytest.approx(once["total_wh"])
    assert once["total_wh"] == pytest.approx(2 * 100 * 5 / 3600)      # 2 GPUs x 100 W x 5 s measured
    assert once["units_per_wh"] == pytest.approx(1000 / once["total_wh"])
    assert once["source"] == "counter"


def test_two_nodes_add_up_keyed_by_host_and_uuid():
    both = E.combine([_node("n1", ["GPU-a", "GPU-b"]), _node("n2", ["GPU-c", "GPU-d"]),
                      _node("n2", ["GPU-c", "GPU-d"])])
    assert len(both["devices"]) == 4 and both["duplicates_dropped"] == 2
    assert both["total_wh"] == pytest.approx(4 * 100 * 5 / 3600)
    assert both["phases"]["warmup"]["wh"] == pytest.approx(4 * 100 * 2 / 3600)
    # the same UUID on two hosts is two devices (UUIDs are unique, but the key says host too)
    same = E.combine([_node("n1", ["GPU-a"]), _node("n2", ["GPU-a"])])
    assert len(same["devices"]) == 2


def test_grace_module_includes_gpu_so_gpu_not_added():
    ts = [0.0, 1.0, 2.0]
    spans = E.windows([("measure", 0.0)], 2.0)
    gpu = E.device_summary(_device("GPU-a"), ts, [300] * 3, [0, 300, 600], spans)
    module = E.device_summary(_device("Module Power Socket 0", "grace", "module", False), ts, [500] * 3, [None] * 3,
                              spans)
    grace = E.device_summary(_device("Grace Power Socket 0", "grace", "cpu", False), ts, [150] * 3, [None] * 3, spans)
    rail = E.device_summary(_device("CPU Power Socket 0", "grace", "cpu-part", False), ts, [80] * 3, [None] * 3, spans)
    out = E.combine([{"host": "gh", "phases": spans, "devices": [gpu, module, grace, rail]}])
    assert out["total_wh"] == pytest.approx(500 * 2 / 3600)
    counted = {d["uuid"]: d["in_total"] for d in out["devices"]}
    assert counted == {"GPU-a": False, "Module Power Socket 0": True, "Grace Power Socket 0": False,
                       "CPU Power Socket 0": False}
    assert out["source"].startswith("integrated")
    # without module channels the GPU and the Grace channel are disjoint: both count, the rail does not
    out = E.combine([{"host": "gh", "phases": spans, "devices": [gpu, grace, rail]}])
    assert out["total_wh"] == pytest.approx((300 + 150) * 2 / 3600)
    assert out["source"].startswith("mixed")


def test_a_failed_node_makes_energy_unavailable_with_its_reason():
    out = E.combine([_node("n1", ["GPU-a"]), {"available": False, "host": "n2", "reason": "monitor hung"}])
    assert out["available"] is False and out["total_wh"] is None
    assert out["reason"] == "energy unavailable: n2: monitor hung"


def test_interrupted_multi_node_run_sets_this_nodes_energy_against_its_share_of_the_units():
    from caraml.power.run_monitor import run_energy

    metrics = {"units": 8000.0, "throughput": {"value": 1600.0, "unit": "images/s"}}
    node = _node("n1", ["g0", "g1", "g2", "g3"])          # 4 GPUs x 100 W x 5 s measured
    node_wh = 4 * 100 * 5 / 3600
    # 2 nodes x 4 GPUs, stopped before gathering: only this node's energy, so only its half of the units
    partial = run_energy([node], metrics, world_size=8, local_world_size=4, gathered=False)
    assert partial["total_wh"] == pytest.approx(node_wh)
    assert partial["units_per_wh"] == pytest.approx(4000.0 / node_wh)
    assert "this node's share of the units (4/8)" in partial["partial"]
    # finished and gathered: both nodes' energy against all units, the same per-Wh figure
    both = run_energy([node, _node("n2", ["g0", "g1", "g2", "g3"])], metrics, 8, 4, gathered=True)
    assert "partial" not in both and both["units_per_wh"] == pytest.approx(partial["units_per_wh"])
    # one node holds every rank: its energy is the run's, all units count
    single = run_energy([node], metrics, world_size=4, local_world_size=4, gathered=False)
    assert single["units_per_wh"] == pytest.approx(8000.0 / node_wh) and "share" not in single["partial"]
