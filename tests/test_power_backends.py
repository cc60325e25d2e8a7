"""File-based backends on generated sysfs trees, and the pure logic of the backends that need hardware."""

from __future__ import annotations

import pytest
from conftest import HAS_NVML
from power_trees import grace_tree, rapl_tree, set_energy

from caraml.power.backends import Unavailable, amd, grace, ipu, nvml, rapl


def test_rapl_keeps_package_and_dram_only(tmp_path):
    rapl_tree(tmp_path)
    devices = rapl.make(str(tmp_path)).open()
    assert sorted(d.key for d in devices) == ["rapl:dram-0", "rapl:package-0", "rapl:package-1"]
    assert {d.kind for d in devices} == {"cpu", "dram"} and all(d.counter and not d.power for d in devices)


def test_rapl_counter_wraps_around(tmp_path):
    base = rapl_tree(tmp_path, energy_uj=990_000, max_uj=1_000_000)
    backend = rapl.make(str(tmp_path))
    backend.open()
    assert backend.read()["rapl:package-0"] == (None, 0.0)
    set_energy(base, "intel-rapl:0", 999_000)
    assert backend.read()["rapl:package-0"][1] == pytest.approx(0.009)
    set_energy(base, "intel-rapl:0", 4_000)           # wrapped: 1_000 to the top, then 4_000
    assert backend.read()["rapl:package-0"][1] == pytest.approx(0.014)
    set_energy(base, "intel-rapl:0", 504_000)
    assert backend.read()["rapl:package-0"][1] == pytest.approx(0.514)


def test_rapl_absent_or_unreadable(tmp_path):
    with pytest.raises(Unavailable, match="no RAPL zones"):
        rapl.make(str(tmp_path)).open()
    base = rapl_tree(tmp_path)
    (base / "intel-rapl:0" / "energy_uj").chmod(0)
    import os

    if os.geteuid() != 0:
        with pytest.raises(Unavailable, match="root only"):
            rapl.make(str(tmp_path)).open()


def test_grace_channels_named_and_scoped(tmp_path):
    grace_tree(tmp_path, sockets=2)
    backend = grace.make(str(tmp_path))
    devices = {d.name: d for d in backend.open()}
    assert len(devices) == 8
    assert (devices["Module Power Socket 1"].kind == "module"
            and "includes the GPU" in devices["Module Power Socket 1"].scope)
    assert devices["Grace Power Socket 0"].kind == "cpu"
    assert devices["SysIO Power Socket 0"].kind == "cpu-part"
    assert backend.read()["grace:Module Power Socket 0"] == (600.0, None)
    with pytest.raises(Unavailable, match="not a Grace system"):
        grace.make(str(tmp_path / "nothing")).open()


def test_nvml_visible_devices_parsing():
    uuids = ["GPU-aaaa-1", "GPU-bbbb-2", "GPU-cccc-3"]
    assert nvml.visible(uuids, None) == [0, 1, 2]
    assert nvml.visible(uuids, "2,0") == [2, 0]
    assert nvml.visible(uuids, "GPU-bbbb") == [1]
    assert nvml.visible(uuids, "1,7,2") == [1]          # CUDA stops at the first invalid entry
    assert nvml.visible(uuids, "MIG-xyz") == [0, 1, 2]


@pytest.mark.skipif(HAS_NVML, reason="this machine has an NVIDIA driver")
def test_nvml_without_driver_is_unavailable():
    with pytest.raises(Unavailable, match="NVML"):
        nvml.make("/sys").open()



def test_amd_counter_units_and_secondary_die_logic_only():
    assert amd.counter_uj({"energy_accumulator": 1000, "counter_resolution": 15.3}) == pytest.approx(15300)
    assert amd.counter_uj({"power": 2000, "counter_resolution": 15.3}) == pytest.approx(30600)  # ROCm < 6.2 key
    assert amd.is_secondary_die(0.0, None) and amd.is_secondary_die(0.0, 0.0)
    assert not amd.is_secondary_die(15300.0, 512.0)
    assert amd._number("N/A") is None and amd._number(512) == 512.0


def test_ipu_power_text():
    assert ipu.watts("123.45W") == pytest.approx(123.45)
    assert ipu.watts("N/A") is None


def test_amd_and_ipu_unavailable_here():
    with pytest.raises(Unavailable):
        amd.make("/sys").open()
    with pytest.raises(Unavailable, match="gcipuinfo"):
        ipu.make("/sys").open()
