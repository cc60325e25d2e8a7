"""PowerSettings: the one reader of the power parameters, importable without torch or a backend."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from conftest import cli_env

from caraml.params import resolve
from caraml.power.run_monitor import monitor_for_run
from caraml.power.settings import POWER_PARAMS, PowerSettings


@pytest.mark.subprocess
def test_settings_import_loads_no_torch_numpy_or_backend():
    code = ("import caraml.power.settings, sys; "
            "heavy = [m for m in sys.modules if m in ('torch', 'numpy') or m.startswith('caraml.power.backends.')]; "
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True, env=cli_env())


def test_from_params_reads_the_resolved_power_parameters():
    values = resolve(POWER_PARAMS, {"power": "rapl,nvml", "power_interval_ms": "20", "idle_baseline_s": "1.5",
                                    "energy_files": "caraml"}, "w")
    settings = PowerSettings.from_params(dict(values, batch_size=8))  # other owners' keys are ignored
    assert settings == PowerSettings(power="rapl,nvml", power_interval_ms=20.0, idle_baseline_s=1.5,
                                     energy_files="caraml")
    assert settings.enabled
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.power = "off"


def test_from_params_defaults_are_the_declarations():
    assert PowerSettings.from_params({}) == PowerSettings.from_params(resolve(POWER_PARAMS, {}, "w"))
    assert PowerSettings.from_params({}) == PowerSettings(power="auto", power_interval_ms=100.0,
                                                          idle_baseline_s=0.0, energy_files="none")


def test_power_off_means_no_monitor():
    settings = PowerSettings.from_params({"power": "off"})
    assert not settings.enabled
    assert monitor_for_run(settings, {"power_methods": ["rapl"]}, "run-1", "cpu", None) is None


class _Bench:
    def __init__(self, params, ctx):
        from caraml.bench import BenchInfo

        self.info = BenchInfo(units_per_step=1, unit="things", flops_per_unit=None, flops_convention="none",
                              precision="fp32")

    def step(self):
        pass

    def details(self):
        return {}

    def close(self):
        pass


class _Monitor:
    def __init__(self):
        self.phases = []

    def start(self):
        pass

    def mark(self, phase):
        self.phases.append(phase)

    def stop(self):
        pass

    def finish(self, metrics, dist, gather):
        return {"available": False, "total_wh": None, "reason": "a test monitor"}


def test_the_runner_hands_an_injected_factory_the_settings_profile_run_id_and_system(tmp_path):
    from caraml import systems, workloads
    from caraml.params import Param
    from caraml.runner import RunSpec, execute

    calls = []

    def factory(settings, profile, run_id, system_tag, runs_dir):
        calls.append((settings, profile, run_id, system_tag, runs_dir))
        return _Monitor()

    workloads.register(workloads.Workload(name="power_settings_probe", unit="things", params=[Param("n", int, 1)],
                                          presets={}, build=_Bench))
    try:
        rec = execute(RunSpec("power_settings_probe", {"warmup_steps": "1", "measure_steps": "2", "device": "cpu",
                                                       "power_interval_ms": "25", "energy_files": "caraml"},
                              system="CPU", results=str(tmp_path)), monitor_factory=factory)
    finally:
        workloads._REGISTERED.pop("power_settings_probe")
    [(settings, profile, run_id, system_tag, runs_dir)] = calls
    assert settings == PowerSettings(power="auto", power_interval_ms=25.0, idle_baseline_s=0.0, energy_files="caraml")
    assert profile == systems.get("CPU") and system_tag == "CPU"
    assert run_id == rec["run_id"] and str(runs_dir) == str(tmp_path / "runs")
    assert rec["metrics"]["energy"] == {"available": False, "total_wh": None, "reason": "a test monitor"}
