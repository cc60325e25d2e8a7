"""The workload contract and the arithmetic every figure depends on, in process and fast.

Each test here pins down one way a number can be wrong that a whole-run test cannot see: a fake Bench,
a fake process group whose ranks disagree, repeats that are not symmetric, a baseline of several devices.
"""

from __future__ import annotations

import pytest
from handmade import record

from caraml.contract import BenchInfo, RunContext
from caraml.errors import BadInput
from caraml.measure.harness import Measurement, metrics
from caraml.parallel_dims import ParallelDims
from caraml.settings import RUN_PARAMS


class FakeDist:
    """A process group of `world` ranks seen from `rank`: all_reduce combines this rank's value with what the
    other ranks hold for the same call, given in order as `peers` (one list of values per call)."""

    def __init__(self, rank: int, world: int, peers: list[list[float]]):
        self.rank, self.world_size, self.local_rank = rank, world, rank
        self.peers = list(peers)
        self.calls: list[str] = []

    is_main = property(lambda self: self.rank == 0)

    def all_reduce(self, value: float, op: str = "sum") -> float:
        self.calls.append(op)
        values = [value, *self.peers.pop(0)]
        return max(values) if op == "max" else sum(values)

    def barrier(self) -> None:
        pass


def _info(**kw) -> BenchInfo:
    return BenchInfo(**{"units_per_step": 10, "unit": "tokens", "flops_per_unit": 1e9, "flops_convention": "test",
                        "precision": "bf16", **kw})


def _measured(steps=4, wall=2.0) -> Measurement:
    return Measurement(phase="done", warmup_times=[5.0, 0.6, 0.5], step_times=[0.5] * steps, wall_s=wall, steps=steps)


def test_throughput_uses_the_slowest_ranks_window_and_every_replicas_units():
    # 2 ranks: this one measured 2 s, the other 4 s; both did 4 steps of 10 units
    dist = FakeDist(0, 2, peers=[[4.0], [40.0]])
    out = metrics(_info(), ParallelDims(dp=2), dist, _measured(), peak_tflops=None, interrupted=False)
    assert out["measured_time_s"] == 4.0
    assert out["units"] == 80.0
    assert out["throughput"] == {"value": 20.0, "unit": "tokens/s"}


def test_tensor_and_pipeline_ranks_count_their_replica_once():
    dims = ParallelDims.split(8, tp=2, pp=2)  # dp = 2
    assert dims.dp == 2 and dims.world == 8
    counting = [r for r in range(8) if dims.counts_units(r)]
    assert len(counting) == dims.dp
    assert {dims.coords(r)[0] for r in counting} == {0, 1}  # one per data-parallel replica
    assert all(dims.coords(r)[1] == 0 and dims.coords(r)[2] == 1 for r in counting)  # tp 0 of the last stage
    # rank 0 is tp 0 of the first stage: it does not count; the sum over ranks is dp x units
    dist = FakeDist(0, 8, peers=[[2.0] * 7, [0.0, 0.0, 0.0, 0.0, 40.0, 0.0, 40.0]])
    out = metrics(_info(), dims, dist, _measured(), None, interrupted=False)
    assert out["units"] == 80.0 and out["throughput"]["value"] == 40.0


def test_rank_layout_is_tp_innermost_then_dp_then_pp():
    dims = ParallelDims(dp=2, tp=2, pp=2)
    assert [dims.coords(r) for r in range(8)] == [
        (0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0), (0, 0, 1), (0, 1, 1), (1, 0, 1), (1, 1, 1)]


def test_layout_that_does_not_divide_is_bad_input():
    with pytest.raises(BadInput, match=r"tp\*pp = 2\*4 = 8 does not divide the 12 processes"):
        ParallelDims.split(12, tp=2, pp=4)


def test_tflops_are_per_device_and_mfu_is_a_fraction():
    dist = FakeDist(0, 4, peers=[[2.0] * 3, [40.0] * 3])
    out = metrics(_info(flops_per_unit=1e12), ParallelDims(dp=4), dist, _measured(), peak_tflops=100.0,
                  interrupted=False)
    assert out["throughput"]["value"] == 80.0  # 160 units / 2 s
    assert out["tflops_per_device"] == pytest.approx(80.0 * 1e12 / 4 / 1e12)  # 20 per device, not 80
    assert out["mfu"] == pytest.approx(0.2)  # a fraction of the peak, not a percentage
    assert out["peak_tflops"] == 100.0 and out["precision_in_use"] == "bf16"


def test_interrupted_run_counts_every_data_parallel_replica_without_collectives():
    dist = FakeDist(0, 4, peers=[])  # any collective would fail: no peer values
    out = metrics(_info(), ParallelDims(dp=2, tp=2), dist, _measured(steps=3, wall=1.5), None, interrupted=True)
    assert dist.calls == []
    assert out["units"] == 10 * 3 * 2  # this rank's steps x data-parallel size, not tp x pp times more
    assert out["throughput"]["value"] == pytest.approx(60 / 1.5)
    assert "interrupted" in out["throughput_source"]


def test_compile_time_comes_from_the_bench_info_not_a_parameter_name():
    m = _measured()
    single = FakeDist(0, 1, peers=[])
    single.all_reduce = lambda v, op="sum": v
    eager = metrics(_info(compiled=False), ParallelDims(), single, m, None, False)
    compiled = metrics(_info(compiled=True, compile_setup_s=1.0), ParallelDims(), single, m, None, False)
    assert eager["warmup"]["compile_s"] is None
    assert compiled["warmup"]["compile_s"] == pytest.approx(5.0 - 0.5 + 1.0)


class FakeBench:
    def __init__(self, params, ctx: RunContext):
        self.ctx, self.steps = ctx, 0
        self.info = BenchInfo(units_per_step=params["batch"], unit="things", flops_per_unit=None,
                              flops_convention="none", precision="fp32")

    def step(self):
        self.steps += 1

    def details(self):
        return {"fake_steps": self.steps}

    def close(self):
        pass


def test_a_registered_workload_runs_through_the_runner_without_torch_specific_code(tmp_path, monkeypatch):
    from caraml import workloads
    from caraml.params import Param
    from caraml.runner import RunSpec, execute
    from caraml.workloads import Col, Workload, register

    register(Workload(name="fake_things", unit="things", params=[Param("batch", int, 3, minimum=1)], presets={},
                      build=FakeBench, columns=("system", Col("batch", "Batch", "param:batch", "int"), "throughput",
                                                Col("fake_steps", "FakeSteps", "metric:fake_steps", "int")),
                      metrics=("fake_steps",)))
    try:
        rec = execute(RunSpec("fake_things", {"batch": "5", "warmup_steps": "2", "measure_steps": "7",
                                              "power": "off", "device": "cpu"}, system="CPU",
                              results=str(tmp_path)))
        assert rec["status"] == "ok" and rec["metrics"]["units"] == 35 and rec["metrics"]["fake_steps"] == 9
        assert rec["metrics"]["throughput"]["unit"] == "things/s"
        from caraml.results.aggregate import group
        from caraml.results.select import result_table

        table = result_table("fake_things", group([rec]), None)
        assert "FakeSteps" in table.headers and 9 in table.rows[0]
    finally:
        workloads._REGISTERED.pop("fake_things")


def test_every_declared_metric_column_reads_a_key_its_workload_emits():
    """results/columns.py must not read metrics no code produces."""
    from caraml import workloads
    from caraml.results.columns import columns_for

    harness_keys = {"throughput", "units", "measured_steps", "measured_time_s", "step_time_s", "warmup",
                    "flops_per_unit", "flops_convention", "precision_in_use", "tflops_per_device", "peak_tflops",
                    "mfu", "parallel", "throughput_source", "peak_memory_bytes", "peak_host_rss_bytes", "energy"}
    for name in workloads.names():
        wl = workloads.get(name)
        for col in wl.columns:
            # a source may name a fallback: "metric:A|param:B" reads A, else B
            for source in ([] if isinstance(col, str) else col.source.split("|")):
                if source.startswith("metric:"):
                    key = source.split(":", 1)[1].split(".")[0]
                    assert key in set(wl.metrics) | harness_keys, f"{name}: column {col.key} reads {key}, never emitted"
        assert columns_for(name)  # every declaration builds


def test_config_id_ignores_measurement_settings_only():
    from handmade import config_id_of

    from caraml.settings import MEASUREMENT_KEYS

    assert {"warmup_steps", "measure_steps", "measure_seconds", "seed", "power"} <= MEASUREMENT_KEYS
    assert "device" not in MEASUREMENT_KEYS
    base = {"batch_size": 64, "measure_steps": 50, "seed": 0, "power": "auto", "device": "auto"}
    same = {**base, "measure_steps": 7, "seed": 3, "power": "off"}
    assert config_id_of("w", base, "H100", 4, 1) == config_id_of("w", same, "H100", 4, 1)
    assert config_id_of("w", base, "H100", 4, 1) != config_id_of("w", {**base, "batch_size": 32}, "H100", 4, 1)
    assert config_id_of("w", base, "H100", 4, 1) != config_id_of("w", {**base, "device": "cpu"}, "H100", 4, 1)
    assert config_id_of("w", base, "H100", 4, 1) != config_id_of("w", base, "H100", 8, 2)


def test_run_record_is_the_one_record_shape():
    from handmade import record_for

    from caraml.results.record import validate

    r = record_for("w", {"a": 1}, {"tag": "CPU"}, {"world_size": 1, "nodes": 1}, status="ok",
                   metrics={"throughput": {"value": 1.0, "unit": "x/s"}}).to_dict()
    assert validate(r) == [] and r["run_id"].endswith(r["id"]) and "traceback" not in r
    with pytest.raises(ValueError, match="status 'fine'"):
        record_for("w", {}, {"tag": "CPU"}, {"world_size": 1, "nodes": 1}, status="fine")


# --- results arithmetic ---------------------------------------------------------------------------

def test_repeats_are_summarised_by_the_median_not_the_mean():
    from caraml.results.aggregate import group

    runs = [record("image_classification", "H100", {"batch_size": 64}, t,
                   started=f"2026-01-0{i + 1}T00:00:00.000+00:00")
            for i, t in enumerate([100.0, 110.0, 400.0])]  # one slow outlier the other way would pull a mean
    [point] = group(runs)
    assert point.throughput == 110.0


def test_scaling_efficiency_is_against_a_baseline_of_several_devices():
    from caraml.results.aggregate import group
    from caraml.results.compare import compare

    four = record("image_classification", "H100", {"batch_size": 64}, 4000.0, devices=4)
    eight = record("image_classification", "H100", {"batch_size": 64}, 7200.0, devices=8, nodes=2)
    cmp = compare("image_classification", group([four, eight]), "devices")
    [(cfg, row)] = cmp.rows
    assert cmp.baseline == 4
    assert cmp.speedup(row, 8) == pytest.approx(1.8)
    assert cmp.efficiency(row, 8) == pytest.approx(1.8 / 2)  # 8 devices are 2x the baseline's 4, not 8x


def test_counter_energy_is_used_when_the_record_says_counter():
    from caraml.power.energy import device_summary

    ts = [0.0, 1.0, 2.0, 3.0]
    power = [100.0, 100.0, 100.0, 100.0]  # integrates to 300 J
    counter = [0.0, 150.0, 300.0, 450.0]  # says 450 J: the two disagree, as on real GPUs
    out = device_summary({"name": "gpu", "counter": True}, ts, power, counter, [("measure", 0.0, 3.0)])
    assert out["source"] == "counter"
    assert out["phases"]["measure"]["energy_j"] == pytest.approx(450.0)
    assert out["phases"]["measure"]["integrated_j"] == pytest.approx(300.0)
    only_power = device_summary({"name": "gpu", "counter": False}, ts, power, [None] * 4, [("measure", 0.0, 3.0)])
    assert only_power["source"] == "integrated" and only_power["energy_j"] == pytest.approx(300.0)


def test_mfu_uses_the_profile_peak_for_the_precision_in_use():
    from caraml import systems

    h100 = systems.get("H100")
    assert systems.peak_tflops(h100, "bf16") > systems.peak_tflops(h100, "fp32")
    assert systems.peak_tflops(h100, "fp16") == systems.peak_tflops(h100, "bf16")


@pytest.mark.parametrize("name", sorted({p.name for p in RUN_PARAMS if p.minimum is not None}))
def test_harness_minimums_are_enforced(name):
    from caraml.params import resolve

    p = next(p for p in RUN_PARAMS if p.name == name)
    below = p.minimum - 1 if p.type is int else p.minimum - 0.5
    with pytest.raises(BadInput, match=f"{name}=.* must be >= "):
        resolve(RUN_PARAMS, {name: str(below)}, "w")
    resolve(RUN_PARAMS, {name: str(p.type(p.minimum))}, "w")  # the minimum itself is fine


@pytest.mark.parametrize("key, value", [("workers", "-1"), ("lr", "-0.1"), ("momentum", "-1"), ("batch_size", "0"),
                                        ("weight_decay", "-1e-4"), ("seed", "-5")])
def test_workload_minimums_are_enforced(key, value):
    from caraml.runner import RunSpec, resolve_params

    with pytest.raises(BadInput, match=f"{key}={value} .*must be >= "):
        resolve_params(RunSpec("image_classification", {key: value}))
