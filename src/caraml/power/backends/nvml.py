"""NVIDIA GPUs through NVML (nvidia-ml-py, import name pynvml).

Per device, keyed by UUID: the total-energy counter (mJ since the driver loaded; Volta and newer) and
the power reading. The power reading is the instantaneous field NVML_FI_DEV_POWER_INSTANT where the
driver has it (nvmlDeviceGetPowerUsage averages over about a second on recent GPUs), else
nvmlDeviceGetPowerUsage. Power limit, clocks and temperature go into the record.
Only the GPUs in CUDA_VISIBLE_DEVICES are covered when it is set (a shared node's other GPUs are not ours).
"""

from __future__ import annotations

import os

from caraml.power.backends import Backend, Device, Unavailable


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def visible(uuids: list[str], spec: str | None) -> list[int]:
    """Indices (into NVML's order) of the GPUs CUDA_VISIBLE_DEVICES names; all when unset or unparseable."""
    if spec is None or not spec.strip():
        return list(range(len(uuids)))
    chosen = []
    for item in (s.strip() for s in spec.split(",")):
        if item.isdigit():
            i = int(item)
            if i >= len(uuids):
                break  # CUDA stops at the first invalid entry
            chosen.append(i)
        elif item.startswith("GPU-"):
            match = [i for i, u in enumerate(uuids) if u.startswith(item)]
            if len(match) != 1:
                break
            chosen.append(match[0])
        else:  # MIG-... or something we cannot map: measure the whole node rather than guess
            return list(range(len(uuids)))
    return list(dict.fromkeys(chosen))


class Nvml(Backend):
    name = "nvml"

    def __init__(self, root: str):
        self.handles: dict[str, object] = {}
        self.instant: dict[str, bool] = {}
        self.with_counter: set[str] = set()
        self.nv = None

    def open(self) -> list[Device]:
        try:
            import pynvml as nv
        except ImportError:
            raise Unavailable("nvidia-ml-py (pynvml) is not installed") from None
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise Unavailable(f"NVML cannot start: {exc} (no NVIDIA driver on this machine?)") from None
        self.nv = nv
        count = nv.nvmlDeviceGetCount()
        if count == 0:
            raise Unavailable("NVML sees no GPU")
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        uuids = [_text(nv.nvmlDeviceGetUUID(h)) for h in handles]
        devices = []
        for i in visible(uuids, os.environ.get("CUDA_VISIBLE_DEVICES")):
            h, uuid = handles[i], uuids[i]
            key = f"nvml:{uuid}"
            counter = self._optional(nv.nvmlDeviceGetTotalEnergyConsumption, h) is not None
            self.instant[key] = self._instant_mw(h) is not None
            self.handles[key] = h
            if counter:
                self.with_counter.add(key)
            info = {"index": i, "power_reading": "instant" if self.instant[key] else "nvmlDeviceGetPowerUsage"}
            info.update(self._snapshot(h))
            limit = self._optional(nv.nvmlDeviceGetEnforcedPowerLimit, h)
            info["power_limit_w"] = limit / 1000 if limit is not None else None
            devices.append(Device(key=key, backend=self.name, name=_text(nv.nvmlDeviceGetName(h)), uuid=uuid,
                                  scope="GPU board (as NVML reports it)", kind="accelerator", counter=counter,
                                  info=info))
        if not devices:
            raise Unavailable(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')} names none of the "
                              f"{count} GPUs NVML sees")
        return devices

    def _optional(self, fn, *args):
        try:
            return fn(*args)
        except self.nv.NVMLError:
            return None

    def _instant_mw(self, h) -> float | None:
        nv = self.nv
        field_id = getattr(nv, "NVML_FI_DEV_POWER_INSTANT", None)
        if field_id is None:
            return None
        try:
            value = nv.nvmlDeviceGetFieldValues(h, [field_id])[0]
        except nv.NVMLError:
            return None
        if value.nvmlReturn != nv.NVML_SUCCESS:
            return None
        kind = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}.get(
            int(value.valueType), "uiVal")
        return float(getattr(value.value, kind))

    def _snapshot(self, h) -> dict:
        nv = self.nv
        sm = self._optional(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
        mem = self._optional(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)
        temp = self._optional(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        return {"sm_clock_mhz": sm, "mem_clock_mhz": mem, "temperature_c": temp}

    def read(self):
        nv, out = self.nv, {}
        for key, h in self.handles.items():
            mw = self._instant_mw(h) if self.instant[key] else None
            if mw is None:
                mw = nv.nvmlDeviceGetPowerUsage(h)
            energy = None
            if key in self.with_counter:
                energy = nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0
            out[key] = (mw / 1000.0, energy)
        return out

    def info(self):
        return {key: self._snapshot(h) for key, h in self.handles.items()}

    def close(self):
        if self.nv is not None:
            try:
                self.nv.nvmlShutdown()
            except self.nv.NVMLError:
                pass


def make(root: str) -> Nvml:
    return Nvml(root)
