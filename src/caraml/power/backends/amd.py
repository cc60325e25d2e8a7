"""AMD GPUs through AMD SMI (amdsmi), with the older rocm_smi bindings (rsmiBindings) as fallback.

Energy = accumulator x counter_resolution (µJ per tick). On MI250/MI250X each package has two dies
(GCDs) that show up as two devices, but only the first carries the energy counter and power value; the
second reads 0. Such a device is reported as a secondary die (no own reading), never as 0 W.
"""

from __future__ import annotations

import os
import sys
from ctypes import byref, c_float, c_uint32, c_uint64, create_string_buffer

from caraml.power.backends import Backend, Device, Unavailable

SECONDARY_NOTE = "secondary die: its energy counter reads 0; the package's energy is on its primary die"


def _number(value) -> float | None:
    """amdsmi gives numbers, or 'N/A' strings where a value does not exist."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def counter_uj(energy: dict) -> float:
    """µJ from amdsmi_get_energy_count's dict: 'energy_accumulator' (ROCm >= 6.2) or 'power' (older)."""
    ticks = energy.get("energy_accumulator", energy.get("power", 0))
    return float(ticks) * float(energy.get("counter_resolution", 0.0))


def is_secondary_die(first_uj: float, power_w: float | None) -> bool:
    """A die whose counter reads 0 at start and has no power value is the passive half of a package."""
    return first_uj == 0 and not power_w


class AmdSmi(Backend):
    """AMD SMI: amdsmi_init, amdsmi_get_processor_handles, amdsmi_get_energy_count, amdsmi_get_power_info."""

    name = "amd"

    def __init__(self, smi):
        self.smi = smi
        self.handles: dict[str, object] = {}

    def open(self) -> list[Device]:
        smi = self.smi
        try:
            smi.amdsmi_init()
            handles = smi.amdsmi_get_processor_handles()
        except smi.AmdSmiException as exc:
            raise Unavailable(f"AMD SMI cannot start: {exc}") from None
        if not handles:
            raise Unavailable("AMD SMI sees no GPU")
        devices = []
        for i, h in enumerate(handles):
            uuid = str(smi.amdsmi_get_gpu_device_uuid(h))
            try:
                name = smi.amdsmi_get_gpu_asic_info(h).get("market_name") or f"AMD GPU {i}"
            except smi.AmdSmiException:
                name = f"AMD GPU {i}"
            first = counter_uj(smi.amdsmi_get_energy_count(h))
            power = self._power(h)
            secondary = is_secondary_die(first, power)
            key = f"amd:{uuid}"
            if not secondary:
                self.handles[key] = h
            info = {"index": i}
            try:
                info["power_limit_w"] = _number(smi.amdsmi_get_power_info(h).get("power_limit"))
            except smi.AmdSmiException:
                pass
            devices.append(Device(key=key, backend=self.name, name=name, uuid=uuid,
                                  scope="GPU package (OAM module) as AMD SMI reports it", kind="accelerator",
                                  counter=not secondary, power=not secondary,
                                  note=SECONDARY_NOTE if secondary else "", info=info))
        return devices

    def _power(self, h) -> float | None:
        info = self.smi.amdsmi_get_power_info(h)
        for key in ("socket_power", "current_socket_power", "average_socket_power"):
            value = _number(info.get(key))
            if value:
                return value
        return None

    def read(self):
        return {key: (self._power(h), counter_uj(self.smi.amdsmi_get_energy_count(h)) * 1e-6)
                for key, h in self.handles.items()}

    def close(self):
        try:
            self.smi.amdsmi_shut_down()
        except Exception:  # noqa: BLE001 - closing must not fail a run
            pass


class RocmSmi(Backend):
    """The older ROCm SMI library through its ctypes bindings (rsmiBindings in /opt/rocm/libexec/rocm_smi)."""

    name = "amd"

    def __init__(self, bindings):
        self.b = bindings
        self.lib = None
        self.indices: dict[str, int] = {}

    def _ok(self, ret, what: str):
        if ret != self.b.rsmi_status_t.RSMI_STATUS_SUCCESS:
            raise RuntimeError(f"rocm_smi {what} failed with status {ret}")

    def _energy_uj(self, i: int) -> float:
        energy, resolution, stamp = c_uint64(), c_float(), c_uint64()
        self._ok(self.lib.rsmi_dev_energy_count_get(i, byref(energy), byref(resolution), byref(stamp)),
                 "rsmi_dev_energy_count_get")
        return energy.value * resolution.value

    def _power_w(self, i: int) -> float | None:
        power = c_uint64()
        if self.lib.rsmi_dev_power_ave_get(i, 0, byref(power)) != self.b.rsmi_status_t.RSMI_STATUS_SUCCESS:
            return None
        return power.value * 1e-6  # µW

    def open(self) -> list[Device]:
        self.lib = self.b.initRsmiBindings(silent=True)
        try:
            self._ok(self.lib.rsmi_init(0), "rsmi_init")
        except RuntimeError as exc:
            raise Unavailable(str(exc)) from None
        count = c_uint32(0)
        self._ok(self.lib.rsmi_num_monitor_devices(byref(count)), "rsmi_num_monitor_devices")
        if count.value == 0:
            raise Unavailable("ROCm SMI sees no GPU")
        devices = []
        for i in range(count.value):
            uid = c_uint64()
            uuid = f"{uid.value:016x}" if self.lib.rsmi_dev_unique_id_get(i, byref(uid)) == 0 else f"rocm-{i}"
            buf = create_string_buffer(256)
            name = buf.value.decode() if self.lib.rsmi_dev_name_get(i, buf, 256) == 0 else f"AMD GPU {i}"
            secondary = is_secondary_die(self._energy_uj(i), self._power_w(i))
            key = f"amd:{uuid}"
            if not secondary:
                self.indices[key] = i
            devices.append(Device(key=key, backend=self.name, name=name or f"AMD GPU {i}", uuid=uuid,
                                  scope="GPU package (OAM module) as ROCm SMI reports it", kind="accelerator",
                                  counter=not secondary, power=not secondary,
                                  note=SECONDARY_NOTE if secondary else "", info={"index": i, "library": "rocm_smi"}))
        return devices

    def read(self):
        return {key: (self._power_w(i), self._energy_uj(i) * 1e-6) for key, i in self.indices.items()}

    def close(self):
        if self.lib is not None:
            self.lib.rsmi_shut_down()


def make(root: str) -> Backend:
    try:
        import amdsmi

        return AmdSmi(amdsmi)
    except ImportError:
        pass
    rocm = os.environ.get("ROCM_PATH", "/opt/rocm")
    for folder in (os.path.join(rocm, "libexec", "rocm_smi"), os.path.join(rocm, "bin")):
        if os.path.isdir(folder) and folder not in sys.path:
            sys.path.append(folder)
    try:
        import rsmiBindings
    except ImportError:
        raise Unavailable(f"neither amdsmi nor rocm_smi (rsmiBindings under {rocm}) can be imported") from None
    return RocmSmi(rsmiBindings)
