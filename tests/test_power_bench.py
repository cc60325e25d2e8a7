"""The GPU power comparison's analysis (caraml.compare.power_check, which bench/power_bench.py runs), on records
shaped like `caraml run --json` output (the runs need a GPU)."""

from __future__ import annotations

import pytest

from caraml.compare import power_check as power_bench


def _record(images_s, energy=None, window=35.0):
    return {"status": "ok", "metrics": {"throughput": {"value": images_s, "unit": "images/s"},
                                        "measured_time_s": window, "energy": energy or {}}}


def test_analysis_of_three_points():
    gpu = {"backend": "nvml", "in_total": True, "name": "NVIDIA H200", "uuid": "GPU-1", "counter_wh": 6.0,
           "integrated_wh": 5.7, "avg_power_w": 617.0, "peak_power_w": 690.0, "info": {"power_reading": "instant"}}
    a = power_bench.analyse({
        "eager_monitor_off": _record(4700.0),
        "eager_monitor_on": _record(4653.0, {"devices": [gpu], "units_per_wh": 27400.0, "total_wh": 6.0}),
        "compiled": _record(6800.0, {"units_per_wh": 37000.0}, window=20.0),
    })
    assert a["monitor_throughput_ratio"] == pytest.approx(0.99)
    assert a["window_long_enough"]
    assert a["counter_vs_integrated"][0]["difference_pct"] == pytest.approx(-5.0)
    assert a["images_per_wh_compiled"] == 37000.0
    text = power_bench.render(a)
    assert "integrated vs counter (%)" in text and "-5.00" in text and "0.9900" in text


def test_analysis_of_failed_points_says_so():
    a = power_bench.analyse({"eager_monitor_off": {"status": "failed", "error": "exit 2: no GPU"},
                             "eager_monitor_on": {"status": "timeout", "error": "no result within 150 s"}})
    assert a["monitor_throughput_ratio"] is None and not a["window_long_enough"]
    assert "eager_monitor_off: exit 2: no GPU" in power_bench.render(a)
